#!/bin/bash
# Tests contrib/slurm/up and down against the real daemons: nodes, srun across nodes, PMI2,
# idempotence, SPANK plugstack lines picked up without a restart, refusal to touch files that are
# not ours, and a full down/up cycle. Leaves the cluster up for the other tests.

# pass never fails, so "check && pass || fail" is safe; sh -c strings expand in the task.
# shellcheck disable=SC2015,SC2016
set -u -o pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"

failures=0
fail() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
pass() { echo "ok: $*"; }

now_ms() { echo $(($(date +%s%N) / 1000000)); }

slurm_require
up=$slurm_top/contrib/slurm/up
down=$slurm_top/contrib/slurm/down
state=$(slurm_state_dir)
work=$(mktemp -d /tmp/gcoll-slurm-test.XXXXXX)
trap 'plugstack_clear gcoll_probe_test; rm -rf "$work"' EXIT

# Other tests may be running jobs on the shared cluster: busy nodes count as up.
check_nodes() {
  local got
  got=$(timeout 10 sinfo -h -N -o '%N %t' | sort -u | tr '\n' ' ')
  if [[ $got =~ ^n1\ (idle|mix|alloc)\ n2\ (idle|mix|alloc)\ n3\ (idle|mix|alloc)\ n4\ (idle|mix|alloc)\ $ ]]; then
    pass "sinfo shows n1..n4 up ($got)"
  else
    fail "sinfo shows '$got', want n1..n4 idle/mix/alloc"
  fi
}

check_srun_spreads() {
  local got
  got=$(timeout 30 srun -N4 -n4 printenv SLURMD_NODENAME 2>&1 | sort | tr '\n' ' ')
  [[ $got == 'n1 n2 n3 n4 ' ]] && pass "srun -N4 -n4 ran one task on each node" ||
    fail "srun -N4 -n4 printenv SLURMD_NODENAME gave '$got'"
}

check_nodes
check_srun_spreads

# PMI2: the plugin must hand each task its rank; 'true' alone would not show it was there.
run_srun 30 --mpi=pmi2 -N2 -n2 sh -c 'echo "$SLURM_NODEID:$PMI_RANK:$PMI_SIZE:${PMI_FD:+fd}"' >/dev/null
got=$(sort <<<"$srun_out" | tr '\n' ' ')
[[ $got == '0:0:2:fd 1:1:2:fd ' ]] && pass "srun --mpi=pmi2 -N2 -n2 gives PMI2 ranks 0,1" ||
  fail "srun --mpi=pmi2 -N2 -n2 gave '$got'"

# A second up on a healthy cluster only reports: same daemons, well under 2 s.
ctld_pid=$(<"$state/run/slurmctld.pid")
t0=$(now_ms)
line=$("$up" {slurm_users_fd}>&- 2>&1)
rc=$?
elapsed=$(($(now_ms) - t0))
[[ $rc == 0 && $line =~ ^slurm:\ 4\ nodes\ (idle|up)\ \(n\[1-4\]\)$ ]] &&
  pass "second up prints '$line' in $elapsed ms" || fail "second up: rc $rc, output '$line'"
((elapsed < 2000)) || fail "second up took $elapsed ms"
[[ $(<"$state/run/slurmctld.pid") == "$ctld_pid" ]] && kill -0 "$ctld_pid" &&
  pass "second up left slurmctld $ctld_pid running" || fail "second up restarted slurmctld"

# SPANK: a plugin line dropped into plugstack.conf.d reaches the very next step, arguments and
# all, with no daemon restart; removing it takes it away again.
cat >"$work/probe.c" <<'EOF'
#include <slurm/spank.h>
SPANK_PLUGIN(gcoll_probe_test, 1);
/* Remote, per task: exports the plugstack argument so the task can show which line was read. */
int slurm_spank_task_init(spank_t sp, int ac, char **av) {
  return spank_setenv(sp, "GCOLL_PROBE_TEST", ac > 0 ? av[0] : "no-arg", 1) == ESPANK_SUCCESS
             ? 0 : -1;
}
EOF
probe_step() {
  run_srun 30 -N2 -n2 sh -c 'echo "probe=${GCOLL_PROBE_TEST-unset}"' >/dev/null
  sort -u <<<"$srun_out" | tr '\n' ' '
}
slurmd_pids=$(cat "$state"/run/slurmd-*.pid | tr '\n' ' ')
if ! ${CC:-cc} -shared -fPIC -Wall -Werror -o "$work/probe.so" "$work/probe.c" 2>"$work/cc.err"; then
  fail "cannot build the SPANK probe plugin: $(head -n1 "$work/cc.err")"
else
  got=$(probe_step)
  [[ $got == 'probe=unset ' ]] && pass "no probe before plugstack_set" || fail "before: '$got'"
  plugstack_set gcoll_probe_test "required $work/probe.so first"
  got=$(probe_step)
  [[ $got == 'probe=first ' ]] && pass "plugstack_set line loaded by the next step on both nodes" ||
    fail "after plugstack_set: '$got'"
  plugstack_set gcoll_probe_test "required $work/probe.so second"
  got=$(probe_step)
  [[ $got == 'probe=second ' ]] && pass "changed plugstack arguments seen by the next step" ||
    fail "after changing the line: '$got'"
  plugstack_clear gcoll_probe_test
  got=$(probe_step)
  [[ $got == 'probe=unset ' ]] && pass "plugstack_clear removes the plugin" || fail "after clear: '$got'"
  [[ $(cat "$state"/run/slurmd-*.pid | tr '\n' ' ') == "$slurmd_pids" ]] &&
    pass "no slurmd restarted for plugstack changes" || fail "slurmd pids changed"
fi

# Files that are not ours are never replaced or removed (private paths: the cluster is untouched).
foreign_conf=$work/etc/slurm.conf
mkdir -p "$work/etc"
echo 'ClusterName=somebody-else' >"$foreign_conf"
err=$(GCOLL_SLURM_CONF=$foreign_conf GCOLL_SLURM_DIR=$work/state "$up" 2>&1)
rc=$?
[[ $rc == 1 && $err == *'not written by contrib/slurm/up'* && ! -e $work/state &&
  $(<"$foreign_conf") == 'ClusterName=somebody-else' ]] &&
  pass "up refuses a slurm.conf it did not write" || fail "up with foreign conf: rc $rc, '$err'"
GCOLL_SLURM_CONF=$foreign_conf GCOLL_SLURM_DIR=$work/none "$down" && [[ -e $foreign_conf ]] &&
  pass "down keeps a slurm.conf it did not write" || fail "down removed or failed on a foreign conf"
mkdir -p "$work/other"
err=$(GCOLL_SLURM_CONF=$work/etc/new.conf GCOLL_SLURM_DIR=$work/other "$up" 2>&1)
rc=$?
[[ $rc == 1 && $err == *'not created by contrib/slurm/up'* && ! -e $work/etc/new.conf ]] &&
  pass "up refuses a state directory it did not create" || fail "up with foreign dir: rc $rc, '$err'"

# Full cycle. Hold the users lock exclusively so that no other test starts a job, or brings the
# cluster back up, between down and the checks; down --force then does not wait for ourselves.
slurm_release
exec {cycle_fd}>>"$GCOLL_SLURM_DIR.users"
if ! flock -w 90 "$cycle_fd"; then
  fail "other tests held the cluster for 90 s; down/up cycle not run"
else
  declare -A old_pids=()
  for f in "$state"/run/*.pid "$state/munge/munged.pid"; do
    old_pids[$(<"$f")]=$(basename "$f" .pid | sed 's/-n[0-9]*$//')
  done
  ((${#old_pids[@]} == 6)) || fail "expected 6 daemons before down, found ${#old_pids[@]}"
  t0=$(now_ms)
  out=$("$down" --force 2>&1)
  rc=$?
  elapsed=$(($(now_ms) - t0))
  [[ $rc == 0 && -z $out ]] && pass "down is quiet and exits 0 ($elapsed ms)" ||
    fail "down: rc $rc, output '$out'"
  left=
  for pid in "${!old_pids[@]}"; do
    # A zombie has stopped; init reaps it when it gets round to it.
    read -r st comm < <(ps -o stat=,comm= -p "$pid")
    [[ $comm == "${old_pids[$pid]}" && $st != Z* ]] && left+="$pid "
  done
  [[ -z $left ]] && pass "no munged/slurmctld/slurmd of ours left" || fail "still running: $left"
  [[ ! -e $state ]] && pass "state dir removed" || fail "$state still exists"
  [[ ! -e $SLURM_CONF ]] && pass "$SLURM_CONF removed" || fail "$SLURM_CONF still exists"
  out=$("$down" --force 2>&1) && [[ -z $out ]] && pass "down with nothing up is a quiet no-op" ||
    fail "second down: '$out'"
  t0=$(now_ms)
  line=$("$up" {cycle_fd}>&- 2>&1)
  rc=$?
  elapsed=$(($(now_ms) - t0))
  [[ $rc == 0 && $line == 'slurm: 4 nodes idle (n[1-4])' ]] &&
    pass "up after down: '$line' in $elapsed ms" || fail "up after down: rc $rc, '$line'"
  # Half up: a dead slurmd makes up start everything afresh instead of reporting success.
  ctld_pid=$(<"$state/run/slurmctld.pid")
  kill -KILL "$(<"$state/run/slurmd-n3.pid")"
  sleep 0.2
  line=$("$up" {cycle_fd}>&- 2>&1)
  rc=$?
  n3_comm=$(ps -o comm= -p "$(<"$state/run/slurmd-n3.pid")")
  [[ $rc == 0 && $line == 'slurm: 4 nodes idle (n[1-4])' && $n3_comm == slurmd &&
    $(<"$state/run/slurmctld.pid") != "$ctld_pid" ]] && pass "up restarts a half-up cluster" ||
    fail "up after killing slurmd n3: rc $rc, '$line', n3 '$n3_comm'"
  # Nothing we start may hold our descriptors: "up | cat" must end when up does.
  t0=$(now_ms)
  "$down" --force && line=$(timeout 30 "$up" {cycle_fd}>&- | cat)
  rc=$?
  elapsed=$(($(now_ms) - t0))
  [[ $rc == 0 && $line == 'slurm: 4 nodes idle (n[1-4])' ]] &&
    pass "down; up | cat returns with the pipe closed ($elapsed ms)" ||
    fail "down; up | cat: rc $rc, '$line'"
  exec {cycle_fd}>&-
  check_nodes
  check_srun_spreads
fi

# Leave it up for the others whatever happened above.
"$up" >/dev/null || fail "final up failed"
((failures == 0)) || exit 1
echo "all passed"
