# shellcheck shell=bash
# Helpers for tests that need a real Slurm cluster: the throw-away one of contrib/slurm/up
# (virtual nodes n1..n4 on this host). Source it, then call slurm_require.
#
#   slurm_require            skip (exit 77) unless root and the cluster is (or can be brought) up
#   run_srun SECONDS ARGS…   srun ARGS under a deadline (timeout); prints its stdout+stderr and
#                            keeps them in $srun_out; returns srun's status (124: deadline)
#   plugstack_set NAME LINE  make every later step load the SPANK line LINE (no restart needed)
#   plugstack_clear NAME     undo plugstack_set NAME
#   slurm_state_dir          the cluster's state directory (logs in <dir>/log)
#   slurm_release            stop holding the cluster (only before contrib/slurm/down)
#
# The cluster stays up after a test: tests share it, and CI runs contrib/slurm/down at the end.
# While a test runs, it holds a shared lock that makes contrib/slurm/down wait for it.

if [[ -n ${top_srcdir:-} && -x $top_srcdir/contrib/slurm/up ]]; then
  slurm_top=$(cd "$top_srcdir" && pwd)
else
  slurm_top=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
fi
GCOLL_SLURM_DIR=${GCOLL_SLURM_DIR:-/var/tmp/gcoll-slurm}
export GCOLL_SLURM_DIR
export SLURM_CONF=${GCOLL_SLURM_CONF:-/etc/slurm/slurm.conf}
srun_out=

slurm_state_dir() { echo "$GCOLL_SLURM_DIR"; }

slurm_require() {
  # They install packages and start daemons as root: only when asked (CI's Slurm step does).
  if [[ ${GCOLL_TEST_SLURM:-0} != 1 ]]; then
    echo "skipped: Slurm tests run with GCOLL_TEST_SLURM=1 (as root: they start a throw-away Slurm)"
    exit 77
  fi
  if ((EUID != 0)); then
    echo "skipped: Slurm tests need root (they start slurmd)"
    exit 77
  fi
  local users=$GCOLL_SLURM_DIR.users up_err
  # Held until this script exits; closed for the daemons up may start, or they would keep it.
  exec {slurm_users_fd}>>"$users" || { echo "skipped: cannot open $users"; exit 77; }
  if ! flock -s -w 120 "$slurm_users_fd"; then
    echo "skipped: contrib/slurm/down held $users for over 120 s"
    exit 77
  fi
  if ! up_err=$("$slurm_top/contrib/slurm/up" {slurm_users_fd}>&- 2>&1 >/dev/null); then
    echo "skipped: contrib/slurm/up failed: ${up_err%%$'\n'*}"
    printf '%s\n' "$up_err" >&2
    exit 77
  fi
}

slurm_release() {
  if [[ -n ${slurm_users_fd:-} ]]; then
    exec {slurm_users_fd}>&-
    slurm_users_fd=
  fi
}

# srun exits 0 even when a SPANK user_init fails ("task 0 launch failed"): check $srun_out too.
run_srun() {
  local seconds=$1 rc
  shift
  srun_out=$(timeout -k 5 "$seconds" srun "$@" 2>&1)
  rc=$?
  # When the nodes are still busy with the previous step srun says so on
  # stderr; that is scheduling, not the step's output.
  srun_out=$(grep -Ev '^srun: job [0-9]+ (queued and waiting for resources|has been allocated resources)$' \
    <<<"$srun_out")
  ((rc == 124)) && srun_out+=$'\n'"run_srun: srun $* killed after $seconds s"
  [[ -n $srun_out ]] && printf '%s\n' "$srun_out"
  return "$rc"
}

# slurmstepd and srun read plugstack.conf afresh for every step, so the next srun sees the change.
plugstack_set() {
  local name=$1 line=$2 conf_d=$GCOLL_SLURM_DIR/plugstack.conf.d
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "plugstack_set: bad name '$name'" >&2; return 1; }
  printf '%s\n' "$line" >"$conf_d/.$name.conf.$$" && mv -f "$conf_d/.$name.conf.$$" "$conf_d/$name.conf"
}

# A test that changes a plugstack line puts the cluster's own back when it
# ends (contrib/slurm/up --spank wrote it): plugstack_save NAME DIR keeps a
# copy in DIR, plugstack_restore NAME DIR puts it back, or clears the line
# when there was none. The copy keeps its time stamp, which up compares with
# slurmd's start.
plugstack_save() {
  local name=$1 dir=$2 conf=$GCOLL_SLURM_DIR/plugstack.conf.d/$1.conf
  rm -f -- "$dir/saved-$name.conf"
  if [[ -s $conf ]]; then cp -p "$conf" "$dir/saved-$name.conf"; fi
}

plugstack_restore() {
  local name=$1 dir=$2 conf_d=$GCOLL_SLURM_DIR/plugstack.conf.d
  if [[ -f $dir/saved-$name.conf ]]; then
    cp -p "$dir/saved-$name.conf" "$conf_d/.$name.restore" && mv -f "$conf_d/.$name.restore" "$conf_d/$name.conf"
  else
    plugstack_clear "$name"
  fi
}

plugstack_clear() {
  local name=$1
  [[ $name =~ ^[A-Za-z0-9_.-]+$ ]] || { echo "plugstack_clear: bad name '$name'" >&2; return 1; }
  rm -f -- "$GCOLL_SLURM_DIR/plugstack.conf.d/$name.conf"
}
