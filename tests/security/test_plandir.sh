#!/bin/bash
# Issue 13, part 4: the plan directory is not a playground for other users.
# On the throw-away Slurm of contrib/slurm, as root: a throw-away attacker
# learns the next job's id (ids are sequential) and, in a world-writable
# plandir (the old recommended setup, the worst case), squats both the
# step's old directory name and the victim's per-user directory with a
# planted plan for other nodes. A throw-away victim's `srun --gcoll=plan`
# job must still get a correct plan for its own step and succeed. Then the
# requeue case: an earlier run's complete directory under the same job id
# must be replaced, never used. srun exits 0 even when a SPANK callback
# failed, so every case checks what the tasks printed.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=../slurm/lib.sh
. "$here/../slurm/lib.sh"
slurm_require

builddir=$(cd "${top_builddir:-.}" && pwd)
so=$builddir/.libs/spank_gcoll.so
plan_tool=$builddir/gcoll-plan
if [[ ! -f $so ]]; then
  echo "skipped: spank_gcoll.so not built (configure found no slurm/spank.h)"
  exit 77
fi
state=$(slurm_state_dir)
mkdir -p "$state/lib"
cp "$so" "$state/lib/.spank_gcoll.so.$$" && mv -f "$state/lib/.spank_gcoll.so.$$" "$state/lib/spank_gcoll.so"

tmp=$(mktemp -d /var/tmp/gcoll-plandir-test.XXXXXX)
chmod 755 "$tmp"
plandir=$tmp/plans
mkdir "$plandir" && chmod 1777 "$plandir"
attacker=gcatk$$
victim=gcvic$$
plugstack_save gcoll "$tmp"
held=()
cleanup() {
  for j in "${held[@]}"; do scancel "$j" 2>/dev/null; done
  plugstack_restore gcoll "$tmp"
  userdel "$attacker" 2>/dev/null
  userdel "$victim" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
useradd -M -d /nonexistent -s /bin/bash "$attacker" || { echo "FAIL: useradd $attacker"; exit 1; }
useradd -M -d /nonexistent -s /bin/bash "$victim" || { echo "FAIL: useradd $victim"; exit 1; }
auid=$(id -u "$attacker")
vuid=$(id -u "$victim")
as() { local who=$1; shift; runuser -u "$who" -- env SLURM_CONF="$SLURM_CONF" "$@"; }
vhome=$tmp/victim
mkdir -m 700 "$vhome" && chown "$victim:" "$vhome"

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

plugstack_set gcoll "optional $state/lib/spank_gcoll.so plandir=$plandir timeout=10"

# A plan that is valid but for other nodes: what an attacker (or a stale
# run) would like the victim's tasks to use.
"$plan_tool" generate -q --topo cpu-only --hosts 'n[3-4]' -k 2 -o "$tmp/wrong.yaml"
chmod 644 "$tmp/wrong.yaml"

# The victim's job, held so that its id is known before it runs (the
# attacker needs no such help: ids are sequential). Each task says which
# plan it got and whether gcoll-plan accepts it; rank 0 lists its nodes.
job_script='srun --gcoll=plan -w "n[1-2]" -N2 -n4 --ntasks-per-node=2 bash -c '"'"'
  "$0" verify "$GCOLL_PLAN" >/dev/null && echo "verified rank=$GCOLL_RANK procid=$SLURM_PROCID plan=$GCOLL_PLAN"
  if [ "$SLURM_PROCID" = 0 ]; then
    echo "plan-nodes $("$0" show "$GCOLL_PLAN" | sed -n "s/^  nodes [0-9-]*: \([^,]*\),.*/\1/p")"
    echo "step-nodes $SLURM_STEP_NODELIST"
  fi'"'"' '"$plan_tool"'; echo "srun-rc=$?"; echo job-done'
submit() {  # prints the held job's id
  as "$victim" sbatch --parsable --hold -D "$vhome" -o "$vhome/job.out" -w 'n[1-2]' -N2 -n4 \
    --ntasks-per-node=2 --wrap "$job_script"
}
run_held() {  # run_held JOB: releases it, prints its output once done
  local job=$1 t=0
  rm -f "$vhome/job.out"
  scontrol release "$job" >/dev/null
  until grep -q '^job-done' "$vhome/job.out" 2>/dev/null; do
    sleep 0.5
    t=$((t + 1))
    if ((t > 120)); then
      scancel "$job"
      echo "run_held: job $job not done after 60 s"
      break
    fi
  done
  cat "$vhome/job.out" 2>/dev/null
}
count() { grep -c -- "$1" <<<"$2"; }
got_correct_plan() {  # got_correct_plan OUTPUT JOB
  local out=$1 job=$2
  [[ $(grep -c "^verified rank=\([0-9]*\) procid=\1 plan=$plandir/$vuid/$job.0/plan.yaml$" <<<"$out") == 4 ]] &&
    [[ $(sed -n 's/^plan-nodes //p' <<<"$out") == n\[1-2\] ]] &&
    [[ $(sed -n 's/^step-nodes //p' <<<"$out") == n\[1-2\] ]] &&
    grep -q '^srun-rc=0$' <<<"$out" && ! grep -q 'gcoll: no plan' <<<"$out"
}

# --- 1. another user squats the next job's names in plandir -----------------
job=$(submit) || { bad "sbatch as $victim"; exit 1; }
held+=("$job")
# The step's directory under the name the plugin used to give it, and the
# victim's own directory, holding a complete planted step with a plan for
# other nodes. Open to all, so the victim could read it.
as "$attacker" bash -c '
  set -e
  umask 022
  mkdir "$1/$2.0" "$1/$2.cache"
  mkdir -p "$1/$3/$2.0/topo" "$1/$3/$2.0/nodes"
  cp "$4" "$1/$3/$2.0/plan.yaml"
  echo 0123456789abcdef0123456789abcdef >"$1/$3/$2.0/key"
  printf %s 0123456789abcdef0123456789abcdef >"$1/$3/$2.0/nonce"
  chmod -R a+rwX "$1/$3"' _ "$plandir" "$job" "$vuid" "$tmp/wrong.yaml" ||
  bad "the attacker could not plant (test setup)"
out=$(run_held "$job")
check "squatted plandir: the victim's job $job gets a correct plan for its own step" \
  got_correct_plan "$out" "$job"
[[ $failed == 0 ]] || printf '%s\n' "$out" | tail -20
check "... in its own directory: plandir/$vuid is the victim's, mode 0700" \
  test "$(stat -c '%U %a' "$plandir/$vuid")" = "$victim 700"
check "... the attacker's squat was moved aside, not used and not deleted" \
  eval 'test "$(stat -c %U "$plandir"/."$vuid".refused.*/"$job".0/plan.yaml)" = "$attacker"'
check "... and the administrator hears of it" \
  eval 'grep -q "gcoll: $plandir/$vuid was not uid $vuid'"'"'s own directory; moved it aside" \
    "$state"/log/slurmd-n*.log <(printf "%s\n" "$out")'
check "the attacker cannot write into the victim's directory" \
  eval '! as "$attacker" mkdir "$plandir/$vuid/x" 2>/dev/null'

# --- 2. an earlier run under the same job id left a complete step -----------
# (a requeue, or an epilog that never ran): a valid plan for other nodes,
# with a nonce. Only the victim (or root) can write there now.
job=$(submit) || { bad "sbatch as $victim"; exit 1; }
held+=("$job")
as "$victim" bash -c '
  set -e
  mkdir -p -m 700 "$1/$2.0/topo" "$1/$2.0/nodes"
  cp "$3" "$1/$2.0/plan.yaml"
  echo 0123456789abcdef0123456789abcdef >"$1/$2.0/key"
  printf %s 0123456789abcdef0123456789abcdef >"$1/$2.0/nonce"
  echo "node: \"n2\"" >"$1/$2.0/nodes/1.yaml"' _ "$plandir/$vuid" "$job" "$tmp/wrong.yaml" ||
  bad "the stale run could not be planted (test setup)"
out=$(run_held "$job")
check "an earlier run's plan under job $job is replaced: the step gets its own plan" \
  got_correct_plan "$out" "$job"
[[ $failed == 0 ]] || printf '%s\n' "$out" | tail -20

echo "$passed passed, $failed failed"
((failed == 0))
