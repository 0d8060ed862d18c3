#!/bin/bash
# NCCL's settings through real processes (runtime/settings.h): NCCL_ALGO and
# NCCL_PROTO force the algorithm and protocol gcoll-perf runs and shows in
# its header, GCOLL_* wins over NCCL_*, ~/.nccl.conf and NCCL_CONF_FILE are
# read (HOME is a temporary directory: the user's file is neither read nor
# written), NCCL_BUFFSIZE sets the slot size, NCCL_SOCKET_IFNAME=lo puts the
# socket transport and the unique id's store on 127.0.0.1 where the default
# would pick another interface, a list that names no interface fails the
# init in one line naming the NCCL variable, GCOLL_SOCKET_IFADDR wins over
# it, and NCCL_IB_DISABLE keeps net/ib from starting. GCOLL_DEBUG=INFO
# names each NCCL setting once per process.
set -u
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
PERF=$top_builddir/gcoll-perf
CHECK=$top_builddir/tests/integration/coll_check
for f in "$RUN" "$PERF" "$CHECK"; do
  [ -x "$f" ] || { echo "test_nccl_settings: $f is not built" >&2; exit 99; }
done
for v in $(env | sed -n 's/^\(\(GCOLL\|NCCL\)_[A-Za-z0-9_]*\)=.*/\1/p'); do unset "$v"; done
export GCOLL_TIMEOUT=30
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-nccl-settings.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
mkdir "$tmp/home"
export HOME=$tmp/home
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
if [ -e /etc/nccl.conf ]; then
  echo "note: /etc/nccl.conf exists; only settings it cannot override are checked"
  sysconf=1
else
  sysconf=0
fi

# perf NAME NRANKS [gcollrun options --] PERF-ARGS: runs gcoll-perf, checks
# every row is right; the header is in $tmp/out, stderr in $tmp/err.
perf() {
  local name=$1 n=$2
  shift 2
  timeout 120 "$RUN" -n "$n" "$@" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local rows wrong
  rows=$(awk '!/^#/ && NF == 13' "$tmp/out" | wc -l)
  wrong=$(awk '!/^#/ && NF == 13 && ($9 != 0 || $13 != 0)' "$tmp/out" | wc -l)
  if [ "$rc" -ne 0 ] || [ "$rows" -eq 0 ] || [ "$wrong" -ne 0 ]; then
    bad "$name: rc $rc, $rows rows, $wrong wrong"
    tail -5 "$tmp/err"
    return 1
  fi
  return 0
}
header() { grep -m1 '^# algo: ' "$tmp/out"; }

# NCCL_ALGO / NCCL_PROTO from the environment, named once by each rank.
sweep=(-o allreduce -b 8 -e 256K -f 8)
if NCCL_ALGO=Tree NCCL_PROTO=LL GCOLL_DEBUG=INFO perf "NCCL_ALGO=Tree NCCL_PROTO=LL" 3 \
    "$PERF" "${sweep[@]}"; then
  [[ $(header) == "# algo: tree  proto: ll  "* ]] && ok "NCCL_ALGO=Tree NCCL_PROTO=LL: $(header)" ||
    bad "NCCL_ALGO=Tree NCCL_PROTO=LL: header '$(header)'"
  lines=$(grep -c '^gcoll pid [0-9]*: NCCL_ALGO=Tree (environment) gives GCOLL_ALGO=tree$' "$tmp/err")
  pids=$(grep 'NCCL_ALGO=Tree (environment) gives' "$tmp/err" | awk '{print $3}' | sort -u | wc -l)
  proto=$(grep -c ': NCCL_PROTO=LL (environment) gives GCOLL_PROTO=ll$' "$tmp/err")
  [ "$lines" -eq 3 ] && [ "$pids" -eq 3 ] && [ "$proto" -eq 3 ] &&
    ok "each of 3 ranks names NCCL_ALGO and NCCL_PROTO once" ||
    bad "NCCL_ALGO lines $lines from $pids pids, NCCL_PROTO lines $proto (want 3, 3, 3)"
fi

# GCOLL_* wins, and the NCCL variable it shadows is named.
if GCOLL_ALGO=ring GCOLL_PROTO=simple NCCL_ALGO=Tree NCCL_PROTO=LL GCOLL_DEBUG=INFO \
    perf "GCOLL_* over NCCL_*" 3 "$PERF" "${sweep[@]}"; then
  [[ $(header) == "# algo: ring  proto: simple  "* ]] &&
    [ "$(grep -c ': NCCL_ALGO=Tree (environment) ignored: GCOLL_ALGO is set$' "$tmp/err")" -eq 3 ] &&
    ok "GCOLL_ALGO=ring GCOLL_PROTO=simple win over NCCL_*: $(header)" ||
    bad "GCOLL_* over NCCL_*: header '$(header)'; $(grep -m1 NCCL_ALGO "$tmp/err")"
fi

# ~/.nccl.conf, then NCCL_CONF_FILE in its place; NCCL_BUFFSIZE's slot.
printf '# site defaults\nNCCL_ALGO = Tree\nNCCL_PROTO=LL\nNCCL_BUFFSIZE=4194304\n' \
  >"$HOME/.nccl.conf"
if GCOLL_DEBUG=INFO perf "~/.nccl.conf" 2 "$PERF" "${sweep[@]}"; then
  slots=$(grep -c '^gcoll rank [01]: joined .*, slot 524288 B,' "$tmp/err")
  from=$(grep -c ": NCCL_ALGO=Tree ($HOME/.nccl.conf:2) gives GCOLL_ALGO=tree$" "$tmp/err")
  [[ $(header) == "# algo: tree  proto: ll  "* ]] && [ "$slots" -eq 2 ] && [ "$from" -eq 2 ] &&
    ok "~/.nccl.conf: $(header); NCCL_BUFFSIZE=4194304 gives 512 KiB slots" ||
    bad "~/.nccl.conf: header '$(header)', $slots ranks with 512 KiB slots, $from lines naming the file"
fi
printf 'NCCL_ALGO=Ring\n' >"$tmp/site.conf"
if NCCL_CONF_FILE=$tmp/site.conf perf "NCCL_CONF_FILE" 2 "$PERF" "${sweep[@]}"; then
  want="# algo: ring  proto: plan  "
  [ "$sysconf" -eq 1 ] && want="# algo: ring  proto: "
  [[ $(header) == "$want"* ]] && ok "NCCL_CONF_FILE replaces ~/.nccl.conf: $(header)" ||
    bad "NCCL_CONF_FILE: header '$(header)', want '$want...'"
fi
rm -f "$HOME/.nccl.conf"

# Ranks joined through a unique id, without a launcher (which would set
# GCOLL_SOCKET_IFADDR): 2 nodes, so the store and net/socket listen on the
# interface the settings choose. uid_job NAME VAR=VALUE...: $tmp/u.0 and u.1.
uid_job() {
  local name=$1
  shift
  rm -f "$tmp/uid" "$tmp/u".*
  for r in 0 1; do
    env "$@" GCOLL_NODES=2 GCOLL_DEBUG=INFO timeout 120 "$CHECK" --uid "$tmp/uid" 2 "$r" hostcall \
      >"$tmp/u.$r" 2>&1 &
    pids[$r]=$!
  done
  local failed=0
  for r in 0 1; do wait "${pids[$r]}" || failed=1; done
  if [ "$failed" -ne 0 ] || [ "$(cat "$tmp"/u.* | grep -c 'host allreduce right')" -ne 2 ]; then
    bad "$name: a rank failed: $(grep -h -m2 -v '^gcoll rank' "$tmp"/u.* | head -2)"
    return 1
  fi
  return 0
}
listeners() { cat "$tmp"/u.* | grep -o 'net/socket listens on [^ ]*' | sed 's/.* on //; s/:[0-9]*$//' | sort -u | tr '\n' ' '; }
uid_host() { tr -d '\0' <"$tmp/uid" | awk '{print $2}' | sed 's/:[0-9]*$//'; }

if uid_job "default interface" GCOLL_TIMEOUT=30; then
  default=$(listeners)
  echo "note: the default interface here is ${default:-none} (the id names $(uid_host))"
  [ "$default" = "127.0.0.1 " ] &&
    echo "note: this host has no other interface, so NCCL_SOCKET_IFNAME=lo changes nothing here"
fi
if uid_job "NCCL_SOCKET_IFNAME=lo" NCCL_SOCKET_IFNAME=lo; then
  [ "$(listeners)" = "127.0.0.1 " ] && [ "$(uid_host)" = 127.0.0.1 ] &&
    [ "$(cat "$tmp"/u.* | grep -c ': NCCL_SOCKET_IFNAME=lo (environment) gives GCOLL_SOCKET_IFNAME=lo$')" -eq 2 ] &&
    ok "NCCL_SOCKET_IFNAME=lo: store and net/socket on 127.0.0.1 ($(uid_host), $(listeners))" ||
    bad "NCCL_SOCKET_IFNAME=lo: id names $(uid_host), listeners $(listeners)"
fi
if uid_job "GCOLL_SOCKET_IFADDR over NCCL_SOCKET_IFNAME" GCOLL_SOCKET_IFADDR=127.0.0.1 \
    NCCL_SOCKET_IFNAME==gcoll-none0; then
  [ "$(listeners)" = "127.0.0.1 " ] &&
    ok "GCOLL_SOCKET_IFADDR=127.0.0.1 wins over NCCL_SOCKET_IFNAME==gcoll-none0" ||
    bad "GCOLL_SOCKET_IFADDR over NCCL_SOCKET_IFNAME: listeners $(listeners)"
fi
# A list that matches no interface: rank 0 cannot even make the id.
rm -f "$tmp/uid"
GCOLL_TIMEOUT=3 GCOLL_NODES=2 NCCL_SOCKET_IFNAME==gcoll-none0 timeout 60 \
  "$CHECK" --uid "$tmp/uid" 2 0 init >"$tmp/u.0" 2>&1
rc=$?
[ "$rc" -ne 0 ] && grep -q 'NCCL_SOCKET_IFNAME==gcoll-none0 (environment): no interface' "$tmp/u.0" &&
  ok "NCCL_SOCKET_IFNAME==gcoll-none0 refused: $(grep -m1 gcoll-none0 "$tmp/u.0")" ||
  bad "NCCL_SOCKET_IFNAME==gcoll-none0: rc $rc: $(head -2 "$tmp/u.0")"

# NCCL_IB_DISABLE=1: net/ib is not started across nodes (in builds with it).
GCOLL_DEBUG=INFO perf "2 nodes" 2 --nodes 2 "$PERF" -o allreduce -b 8 -e 8 || true
ib=$(grep -c 'net/ib unavailable\|net/ib side channel' "$tmp/err")
if NCCL_IB_DISABLE=1 GCOLL_DEBUG=INFO perf "NCCL_IB_DISABLE=1" 2 --nodes 2 "$PERF" \
    -o allreduce -b 8 -e 8; then
  tried=$(grep -c 'net/ib unavailable\|net/ib side channel' "$tmp/err")
  off=$(grep -c '^gcoll rank [01]: net/ib not started (NCCL_IB_DISABLE=1 (environment)); cross-node edges use net/socket$' "$tmp/err")
  sock=$(grep -c '(net edge, id [0-9]*) over net/socket$' "$tmp/err")
  if [ "$ib" -eq 0 ]; then
    [ "$tried" -eq 0 ] && [ "$sock" -gt 0 ] && ok "NCCL_IB_DISABLE=1 (a build without net/ib)" ||
      bad "NCCL_IB_DISABLE=1: $tried net/ib lines, $sock net/socket edges"
  else
    [ "$tried" -eq 0 ] && [ "$off" -eq 2 ] && [ "$sock" -gt 0 ] &&
      ok "NCCL_IB_DISABLE=1: net/ib not started on either rank, $sock edge ends over net/socket" ||
      bad "NCCL_IB_DISABLE=1: $tried net/ib lines, $off 'not started' lines, $sock net/socket edges"
  fi
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
