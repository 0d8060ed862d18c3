# Shared by the tests of tests/security (sourced): two throw-away users,
# a victim job run by one, an attacker run by the other.
#
# As root it creates users gcv<pid> (victim) and gca<pid> (attacker), each
# with its own group, removed on exit with everything they left in
# /dev/shm; without root, useradd or setpriv it skips (exit 77). The
# build's binaries are copied, with libgcoll, into a private directory both
# users can read (the build tree may not be, and libtool wrappers want to
# write next to themselves), so the tests run the real executables with
# LD_LIBRARY_PATH.
#
# After sourcing: $tmp, $BIN (gcollrun victim attacker), $vuid, $auid,
# as_victim CMD..., as_attacker CMD..., start_attacker MODE SECONDS ARGS...
# (sets $apid, output in $tmp/attacker.out), stop_attacker, victim_run
# LABEL TIMEOUT ARGS... (one checked job; sets $vrc, $vsecs, output in
# $tmp/victim.out).
set -u
sec_test=${0##*/}
sec_test=${sec_test%.sh}
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}

sec_skip() { echo "$sec_test: SKIP: $*"; exit 77; }
[ "$(id -u)" -eq 0 ] || sec_skip "needs root to create throw-away users"
for c in useradd userdel setpriv timeout; do
  command -v "$c" >/dev/null 2>&1 || sec_skip "no $c"
done
[ -d /dev/shm ] && [ -r /proc/net/tcp ] || sec_skip "no /dev/shm or /proc/net/tcp"

# The executable behind a libtool wrapper (or the file itself).
sec_real_exe() {
  local f=$1 d b
  d=$(dirname "$f") b=$(basename "$f")
  if [ "$(head -c 2 "$f" 2>/dev/null)" = "#!" ]; then
    for cand in "$d/.libs/$b" "$d/.libs/lt-$b"; do
      [ -x "$cand" ] && { echo "$cand"; return 0; }
    done
    return 1
  fi
  echo "$f"
}

vuser=gcv$$ auser=gca$$ apid= vuid= auid= created=
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-sec.XXXXXX") || exit 99
sec_cleanup() {
  [ -n "$apid" ] && { kill "$apid" 2>/dev/null; wait "$apid" 2>/dev/null; }
  local u
  for u in "$vuid" "$auid"; do
    [ -n "$u" ] && find /dev/shm -maxdepth 1 -uid "$u" -delete 2>/dev/null
  done
  for u in $created; do
    local try
    for try in 1 2 3 4 5 6 7 8 9 10; do
      id "$u" >/dev/null 2>&1 || break
      userdel "$u" >/dev/null 2>&1 || sleep 0.$((RANDOM % 5 + 1))
    done
    for try in 1 2 3 4 5; do
      getent group "$u" >/dev/null 2>&1 || break
      groupdel "$u" >/dev/null 2>&1 || sleep 0.$((RANDOM % 5 + 1))
    done
  done
  rm -rf "$tmp"
}
trap sec_cleanup EXIT
trap 'exit 99' INT TERM HUP

BIN=$tmp/bin
mkdir -p "$BIN" "$tmp/lib" || exit 99
for p in gcollrun tests/security/victim tests/security/attacker; do
  exe=$(sec_real_exe "$top_builddir/$p") && [ -x "$exe" ] ||
    { echo "$sec_test: $top_builddir/$p is not built" >&2; exit 99; }
  cp "$exe" "$BIN/$(basename "$p")" || exit 99
done
cp -a "$top_builddir"/.libs/libgcoll.so* "$tmp/lib/" 2>/dev/null
cp -r "$top_srcdir/etc/topologies" "$tmp/topologies" 2>/dev/null
chmod -R a+rX "$tmp"
export LD_LIBRARY_PATH=$tmp/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GCOLL_TOPO_DIR=$tmp/topologies
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-15}

# useradd fails while another one holds the lock on /etc/passwd (parallel
# make check): try again a few times.
sec_useradd() {
  local try
  for try in 1 2 3 4 5 6 7 8 9 10; do
    useradd -M -U -d /nonexistent -s /usr/sbin/nologin "$1" >/dev/null 2>&1 && return 0
    sleep 0.$((RANDOM % 5 + 1))
  done
  return 1
}
for u in "$vuser" "$auser"; do
  id "$u" >/dev/null 2>&1 && sec_skip "user $u exists already"
  sec_useradd "$u" || sec_skip "useradd $u failed"
  created="$created $u"
done
vuid=$(id -u "$vuser") auid=$(id -u "$auser")
vgid=$(id -g "$vuser") agid=$(id -g "$auser")
# The victim's own temporary directory (gcollrun writes its plan there).
mkdir -p "$tmp/vtmp" && chown "$vuid:$vgid" "$tmp/vtmp" && chmod 700 "$tmp/vtmp" || exit 99

as_victim() { TMPDIR=$tmp/vtmp setpriv --reuid="$vuid" --regid="$vgid" --clear-groups -- "$@"; }
as_attacker() { setpriv --reuid="$auid" --regid="$agid" --clear-groups -- "$@"; }

# start_attacker MODE SECONDS [ARGS...]: in the background, against the
# victim's uid; bounded by SECONDS (and killed on exit).
start_attacker() {
  local mode=$1 secs=$2
  shift 2
  # setpriv execs the attacker, so $! is the attacker itself.
  setpriv --reuid="$auid" --regid="$agid" --clear-groups -- \
    "$BIN/attacker" "$mode" -t "$secs" -u "$vuid" -v "$@" >"$tmp/attacker.out" \
    2>"$tmp/attacker.log" &
  apid=$!
  # Let it watch /dev/shm and read the ports before the job starts.
  sleep 0.3
}

stop_attacker() {
  [ -n "$apid" ] || return 0
  kill "$apid" 2>/dev/null
  wait "$apid" 2>/dev/null
  apid=
  echo "  $(cat "$tmp/attacker.out")"
}

# victim_run TIMEOUT [VICTIM ARGS...]: gcollrun -n 4 --nodes 2 victim, as
# the victim user; $vrc its exit status (124: timed out), $vsecs its time.
victim_run() {
  local limit=$1 t0
  shift
  t0=$(date +%s%N)
  as_victim timeout -k 5 "$limit" "$BIN/gcollrun" -n 4 --nodes "${VICTIM_NODES:-2}" "$BIN/victim" "$@" \
    >"$tmp/victim.out" 2>&1
  vrc=$?
  vsecs=$(( ($(date +%s%N) - t0) / 1000000 ))
  vsecs=$((vsecs / 1000)).$(printf '%03d' $((vsecs % 1000)))
}

# victim_ok NLINES: the job exited 0 and every rank printed its "right"
# lines, none WRONG.
victim_ok() {
  [ "$vrc" -eq 0 ] && ! grep -q WRONG "$tmp/victim.out" &&
    [ "$(grep -c ' right$' "$tmp/victim.out")" -eq "$1" ]
}
