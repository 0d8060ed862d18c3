#!/bin/bash
# srun --gcoll=... on a real Slurm (contrib/slurm: slurmctld and four slurmd
# on this host): plans computed at step start and used by gcoll-perf over
# PMI2, plans reused by later steps, topology files, the failure rules of
# plan and plan:strict, and what it does with planted links and other
# users' directories (tests/security/test_plandir.sh runs a real attacker). srun exits 0 even when a SPANK callback failed,
# so every case checks what the tasks printed, not only exit codes.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
slurm_require

builddir=$(cd "${top_builddir:-.}" && pwd)
srcdir=$(cd "${top_srcdir:-$here/../..}" && pwd)
so=$builddir/.libs/spank_gcoll.so
if [[ ! -f $so ]]; then
  echo "skipped: spank_gcoll.so not built (configure found no slurm/spank.h)"
  exit 77
fi
perf=$builddir/gcoll-perf
plan_tool=$builddir/gcoll-plan
state=$(slurm_state_dir)
log_n1=$state/log/slurmd-n1.log

# slurmstepd loads the plugin from a stable path; a new build is renamed
# over it, never written into a file a running step has mapped.
mkdir -p "$state/lib"
cp "$so" "$state/lib/.spank_gcoll.so.$$" && mv -f "$state/lib/.spank_gcoll.so.$$" "$state/lib/spank_gcoll.so"

tmp=$(mktemp -d /var/tmp/gcoll-spank-test.XXXXXX)
plandir=$tmp/plans
# As README recommends: root's, 0755; the plugin makes plandir/<uid>.
mkdir -m 755 "$plandir"
chmod 755 "$tmp"
# The cluster's own gcoll line (contrib/slurm/up --spank) comes back afterwards.
saved_line=$(cat "$state/plugstack.conf.d/gcoll.conf" 2>/dev/null)
# Whether slurmd started with the plugin in place (contrib/slurm/up --spank): only then does
# it run the plugin's job epilog.
epilog_known=0
[[ -n $saved_line && $state/plugstack.conf.d/gcoll.conf -ot $state/run/slurmd-n1.pid ]] &&
  epilog_known=1
plugstack_save gcoll "$tmp"
trap 'plugstack_restore gcoll "$tmp"; rm -rf "$tmp"' EXIT

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }

use_plugin() {  # use_plugin [key=value...]: the gcoll line of plugstack.conf
  plugstack_set gcoll "optional $state/lib/spank_gcoll.so plandir=$plandir timeout=10 $*"
}

# Every data row of gcoll-perf output has #wrong 0 in both halves, and there is at least one.
perf_clean() {
  awk '/^ *[0-9]/ { rows++; if ($9 != "0" || $13 != "0") bad++ }
       END { exit !(rows > 0 && bad == 0) }' <<<"$1"
}
count() { grep -c -- "$1" <<<"$2"; }

# sbatch --hold: the job id is known before the job runs, so a test can plant
# things under its name in plandir first. Prints the job's output.
held_job() {  # held_job SECONDS PLANT_FN SBATCH_ARGS... -- SCRIPT
  local seconds=$1 plant=$2 job out=$tmp/job.out
  shift 2
  local args=()
  while [[ $1 != -- ]]; do args+=("$1"); shift; done
  shift
  rm -f "$out"
  job=$(sbatch --parsable --hold -o "$out" "${args[@]}" --wrap "$1") || return 1
  "$plant" "$job"
  scontrol release "$job" >/dev/null
  local t=0
  until grep -q '^job-done' "$out" 2>/dev/null; do
    sleep 0.5
    t=$((t + 1))
    if ((t > seconds * 2)); then
      scancel "$job"
      echo "held_job: job $job not done after $seconds s"
      break
    fi
  done
  cat "$out" 2>/dev/null
}

# --- --gcoll=off and no option: the job is untouched -----------------------
use_plugin
export GCOLL_PLAN=/user/own/plan.yaml
mine=$(env | grep ^GCOLL_ | sort | md5sum)
for opt in "" "--gcoll=off"; do
  out=$(run_srun 60 $opt -N2 -n2 bash -c 'echo "gcoll-env $(env | grep ^GCOLL_ | sort | md5sum)"')
  check "'${opt:-no option}' leaves the environment alone (GCOLL_* as srun's own)" \
    test "$(count "^gcoll-env $mine$" "$out")" = 2
done
unset GCOLL_PLAN

# --- --gcoll=plan: the plan is made, verified, and used over PMI2 ------------
for shape in "2 4" "4 8"; do
  read -r nn nt <<<"$shape"
  out=$(run_srun 120 --mpi=pmi2 --gcoll=plan -N"$nn" -n"$nt" --ntasks-per-node=2 bash -c \
    '"$0" verify "$GCOLL_PLAN" >/dev/null && echo "verified rank=$GCOLL_RANK procid=$SLURM_PROCID";
     if [ "$SLURM_PROCID" = 0 ]; then
       echo "plan-nodes $("$0" show "$GCOLL_PLAN" | sed -n "s/^  nodes [0-9-]*: \([^ ]*\), .*/\1/p")"
       echo "step-nodes $SLURM_STEP_NODELIST"
     fi' "$plan_tool")
  check "-N$nn -n$nt: every task has a plan that gcoll-plan verify accepts" \
    test "$(grep -c '^verified rank=\([0-9]*\) procid=\1$' <<<"$out")" = "$nt"
  pn=$(sed -n 's/^plan-nodes //p' <<<"$out")
  sn=$(sed -n 's/^step-nodes //p' <<<"$out")
  # A host list has commas of its own (n[1,4]): the fields end at ", ".
  check "-N$nn -n$nt: the plan's nodes ($pn) are the step's ($sn)" test -n "$pn" -a "$pn" = "$sn"
  for coll in allreduce broadcast reduce allgather reducescatter; do
    out=$(run_srun 180 --mpi=pmi2 --gcoll=plan -N"$nn" -n"$nt" --ntasks-per-node=2 \
      "$perf" -o "$coll" -b 8 -e 1M -f 16 -w 1 -n 3)
    if perf_clean "$out"; then ok "-N$nn -n$nt gcoll-perf -o $coll: 0 wrong"
    else bad "-N$nn -n$nt gcoll-perf -o $coll"; printf '%s\n' "$out" | tail -15; fi
  done
done

# --- uneven block placement: nodes of different task counts get one plan ---
# -N3 -n5 is 2+2+1 on these 2-CPU nodes; every collective, 0 wrong.
out=$(run_srun 120 --mpi=pmi2 --gcoll=plan -w 'n[1-3]' -N3 -n5 bash -c \
  '"$0" verify "$GCOLL_PLAN" >/dev/null && echo "verified rank=$GCOLL_RANK";
   [ "$SLURM_PROCID" != 0 ] || "$0" show "$GCOLL_PLAN" | sed -n "s/^  \(node[s]* [0-9-]*: .*\)/plan \1/p"' \
  "$plan_tool")
check "-N3 -n5 (2+2+1): every task has a plan gcoll-plan verify accepts" \
  test "$(grep -c '^verified rank=' <<<"$out")" = 5
check "-N3 -n5: the plan gives the last node one rank" grep -q '^plan node 2: .*, ranks 4-4$' <<<"$out"
for coll in allreduce broadcast reduce allgather reducescatter; do
  out=$(run_srun 180 --mpi=pmi2 --gcoll=plan -w 'n[1-3]' -N3 -n5 "$perf" -o "$coll" -b 8 -e 256K -f 16 -w 1 -n 3)
  if perf_clean "$out"; then ok "-N3 -n5 gcoll-perf -o $coll: 0 wrong"
  else bad "-N3 -n5 gcoll-perf -o $coll"; printf '%s\n' "$out" | tail -15; fi
done
# Any layout: -m cyclic interleaves the nodes' ranks (and -N2 -n3 gives
# node 0 ranks 0 and 2, node 1 rank 1); the plan lists each node's ranks,
# and every collective runs 0 wrong.
for spec in "3 6 0,3" "2 3 0,2"; do
  read -r nn nt want <<<"$spec"
  out=$(run_srun 120 --mpi=pmi2 --gcoll=plan -w "n[1-$nn]" -N"$nn" -n"$nt" -m cyclic bash -c \
    '"$0" verify "$GCOLL_PLAN" >/dev/null && echo "verified rank=$GCOLL_RANK";
     [ "$SLURM_PROCID" != 0 ] || "$0" show "$GCOLL_PLAN" | sed -n "s/^  \(node [0-9]*: .*\)/plan \1/p"' \
    "$plan_tool")
  check "-m cyclic -N$nn -n$nt: every task has a plan gcoll-plan verify accepts" \
    test "$(grep -c '^verified rank=' <<<"$out")" = "$nt"
  check "-m cyclic -N$nn -n$nt: node 0 holds the ranks Slurm gave it ($want)" \
    grep -q "^plan node 0: .*, ranks $want\$" <<<"$out"
  for coll in allreduce broadcast reduce allgather reducescatter; do
    out=$(run_srun 180 --mpi=pmi2 --gcoll=plan -w "n[1-$nn]" -N"$nn" -n"$nt" -m cyclic "$perf" \
      -o "$coll" -b 8 -e 256K -f 16 -w 1 -n 3)
    if perf_clean "$out"; then ok "-m cyclic -N$nn -n$nt gcoll-perf -o $coll: 0 wrong"
    else bad "-m cyclic -N$nn -n$nt gcoll-perf -o $coll"; printf '%s\n' "$out" | tail -15; fi
  done
done

# Issue 15's layouts, every collective (gcoll-perf -o all), with the
# plugin's plan and with the ranks planning the step themselves (no
# --gcoll). -O lets 2-CPU test nodes take more tasks; arbitrary takes
# SLURM_HOSTFILE's order (rank 0 on n2, ranks 1-2 on n1, 3 on n3, 4 on n2).
printf 'n2\nn1\nn1\nn3\nn2\n' >"$tmp/hostfile"
chmod 644 "$tmp/hostfile"
for layout in "-N2 -n3" "-O -N3 -n7" "-N4 -n8 -m cyclic" "-O -N2 -n6 -m plane=2" \
              "-N3 -n5 -m arbitrary"; do
  for mode in "--gcoll=plan" "--gcoll=off"; do
    if [[ $layout == *arbitrary* ]]; then export SLURM_HOSTFILE=$tmp/hostfile; fi
    # shellcheck disable=SC2086
    out=$(run_srun 300 --mpi=pmi2 $mode $layout "$perf" -o all -b 8 -e 64K -f 32 -w 1 -n 2)
    unset SLURM_HOSTFILE
    if perf_clean "$out"; then ok "$layout $mode: every collective 0 wrong"
    else bad "$layout $mode"; printf '%s\n' "$out" | tail -15; fi
  done
done
# A step over two components of a heterogeneous job: the plugin sees one
# component at a time, so it gives no plan (one line says why) and the
# ranks plan the whole step themselves; plan:strict fails the step.
out=$(run_srun 120 --mpi=pmi2 --gcoll=plan -N1 -n2 "$perf" -o allreduce -b 8 -e 64K -f 8 -w 1 -n 2 \
  : -N1 -n1 "$perf" -o allreduce -b 8 -e 64K -f 8 -w 1 -n 2)
check "heterogeneous step: no plugin plan, one line says why" \
  eval 'grep -q "gcoll: no plan for this step, running without GCOLL_PLAN: the step spans several components of a heterogeneous job (3 tasks; this component has [12])" <<<"$out"'
check "heterogeneous step: the ranks plan it themselves, 0 wrong" perf_clean "$out"
out=$(run_srun 60 --mpi=pmi2 --gcoll=plan:strict -N1 -n1 true : -N1 -n1 true); rc=$?
check "heterogeneous step, plan:strict: srun fails ($rc)" test "$rc" != 0

# One allocation, steps of different layouts: each gets its own plan.
out=$(timeout 300 salloc -w 'n[1-3]' -N3 -n6 -O bash -c \
  'for l in "-n3" "-n6 -m cyclic" "-n5 -m block"; do
     srun --mpi=pmi2 --gcoll=plan $l "$0" -o allreduce -b 8 -e 4K -f 8 -w 1 -n 2 || echo "step $l failed"
   done' "$perf" 2>&1)
check "salloc: steps -n3, -n6 -m cyclic, -n5 in one allocation, each on its plan, 0 wrong" \
  eval 'perf_clean "$out" && ! grep -q "failed" <<<"$out" && [ "$(grep -c "Out of bounds values : 0 OK" <<<"$out")" -eq 3 ]'

# --- topo=FILE: the plan describes the nodes the file describes --------------
use_plugin "topo=$srcdir/etc/topologies/dgx-h100.yaml"
out=$(run_srun 60 --gcoll=plan -N2 -n4 --ntasks-per-node=2 bash -c \
  '[ "$SLURM_PROCID" = 0 ] && "$0" show "$GCOLL_PLAN"' "$plan_tool")
check "topo=dgx-h100.yaml: the plan's nodes are DGX-H100 class" \
  grep -q '^  dgx-h100: .*2 nodes, 2 local ranks' <<<"$out"
check "topo=dgx-h100.yaml: rings run over NVLink-switch GPUs and the nodes' NICs" \
  grep -q 'ring  0: .*nic in mlx5_' <<<"$out"

# A step that owns GPUs 5 and 6 of each node (SLURM_STEP_GPUS, as Slurm's
# GPU gres sets it; given here by hand, the test nodes have no gres): the
# plan drives those GPUs, with their NICs.
out=$(SLURM_STEP_GPUS=5,6 run_srun 60 --gcoll=plan -N2 -n4 --ntasks-per-node=2 bash -c \
  '[ "$SLURM_PROCID" = 0 ] && "$0" show "$GCOLL_PLAN"' "$plan_tool")
check "SLURM_STEP_GPUS=5,6: the plan's ranks drive GPUs 5 and 6" \
  grep -q 'GPUs driven by local ranks 0..1: \[5 6\]' <<<"$out"
# Rail-aligned (issue 23): the ring enters by GPU 5's NIC and leaves by
# the same rail, GPU 6 sending through GPU 5 (PXN).
check "SLURM_STEP_GPUS=5,6: its rings enter and leave by their GPUs' rail" \
  grep -q 'ring  0: \[0 1\]  nic in mlx5_5 out mlx5_5 (rails 5/5) last sends via local rank 0 (PXN)' <<<"$out"

# --- NCCL_TOPO_FILE (issue 21): the file a job names is merged on each node
# with what detection finds there, the file winning where both speak, and
# that merged node is what the plan was made from (the step's plan
# directory keeps it). A CPU-only override: the test nodes have no GPU for
# a cloud file's GPUs to match (their merge is refused, as it should be).
use_plugin
cat >"$tmp/cpu-override.xml" <<'XML'
<system version="1">
  <cpu numaid="0" affinity="ffffffff" arch="x86_64" vendor="AuthenticAMD" familyid="25" modelid="1"/>
</system>
XML
chmod 644 "$tmp/cpu-override.xml"
out=$(NCCL_TOPO_FILE=$tmp/cpu-override.xml GCOLL_DEBUG=INFO run_srun 60 --gcoll=plan -N2 -n2 \
  bash -c '[ "$SLURM_PROCID" = 0 ] && cat "$(dirname "$GCOLL_PLAN")/topo/1.yaml"')
check "NCCL_TOPO_FILE: node 1's topology in the plan directory is the file merged with detection" \
  eval 'grep -q "^name: cpu-override$" <<<"$out" && grep -q "name: cpu0, cores: 32" <<<"$out"'
sleep 0.5 # slurmd's log line may trail the step's end
check "NCCL_TOPO_FILE: the plugin says on each node which file it merged" \
  test "$(cat "$state"/log/slurmd-n*.log | grep -c "node [01]: .*cpu-override.xml.*(file from NCCL_TOPO_FILE)")" -ge 2

# --- the switch fabric (issue 23 part 2): Slurm's topology.conf syntax, from
# the job (GCOLL_FABRIC_FILE) or the administrator (fabric=); the ring visits
# the nodes leaf by leaf, started at node 0: n1 n3 under one leaf, n2 n4
# under the other, so the node order 0 1 2 3 becomes 0 2 1 3.
cat >"$tmp/fabric.conf" <<'CONF'
SwitchName=spine Switches=leaf[0-1]
SwitchName=leaf0 Nodes=n[2,4]
SwitchName=leaf1 Nodes=n[1,3]
CONF
chmod 644 "$tmp/fabric.conf"
fabric_step() {
  run_srun 60 --gcoll=plan -w 'n[1-4]' -N4 -n4 bash -c \
    '[ "$SLURM_PROCID" = 0 ] && grep "node_order" "$GCOLL_PLAN"; echo "task plan=${GCOLL_PLAN:-unset}"'
}
out=$(GCOLL_FABRIC_FILE=$tmp/fabric.conf fabric_step)
check "GCOLL_FABRIC_FILE: the ring visits the nodes leaf by leaf" \
  grep -q "node_order: '0,2,1,3'" <<<"$out"
use_plugin "fabric=$tmp/fabric.conf"
out=$(fabric_step)
check "plugstack fabric=: the same order for a job that names none" \
  grep -q "node_order: '0,2,1,3'" <<<"$out"
printf 'SwitchName=leaf0 Switches=nope\n' >"$tmp/bad-fabric.conf"
chmod 644 "$tmp/bad-fabric.conf"
out=$(GCOLL_FABRIC_FILE=$tmp/bad-fabric.conf fabric_step)
check "a malformed fabric file: the step runs without a plan, one line says where" \
  eval 'grep -q "bad-fabric.conf:1: switch nope is not defined" <<<"$out" &&
        [ "$(grep -c "^task plan=unset$" <<<"$out")" = 4 ]'

# --- a later step of the same job reuses the plan ----------------------------
use_plugin
out=$(timeout 120 salloc -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 bash -c \
  'srun --gcoll=plan true && srun --gcoll=plan true && echo "job=$SLURM_JOB_ID"' 2>&1)
job=$(sed -n 's/^job=//p' <<<"$out")
sleep 0.5 # slurmd's log line may trail the step's end
check "first step of job $job computes its plan" \
  grep -q "step $job\.0: plan phase .* (computed," "$log_n1"
check "second step of job $job takes it from the cache" \
  grep -q "step $job\.1: plan phase .* (from cache," "$log_n1"
# Node 0 parses each distinct topology file once; identical nodes share it.
check "node 0 parsed the two identical nodes' topology once" \
  grep -q "step $job\.0: plan phase .* (computed, 2 nodes, 4 tasks, 1 distinct node topologies)" "$log_n1"

# A node's multi-node NVLink domain is outside its topology's hash, and it
# can change (the fabric's registration) while the hardware stays: a step
# whose nodes moved to another domain gets a new plan, not the cached one.
for clique in 1 2; do
  { echo 'gcoll-topo: 1'; echo 'name: cpu-only'
    echo "nvlink_domain: {cluster: 4f1c2d3e-0000-4000-8000-00000000002a, clique: $clique}"
    echo 'cpus:'; echo '  - {name: cpu0, cores: 2, numa: 0}'; } >"$tmp/domain-$clique.yaml"
  chmod 644 "$tmp/domain-$clique.yaml"
done
out=$(timeout 120 salloc -w 'n[1-2]' -N2 -n2 --ntasks-per-node=1 bash -c \
  "NCCL_TOPO_FILE=$tmp/domain-1.yaml srun --gcoll=plan true &&
   NCCL_TOPO_FILE=$tmp/domain-1.yaml srun --gcoll=plan true &&
   NCCL_TOPO_FILE=$tmp/domain-2.yaml srun --gcoll=plan true && echo job=\$SLURM_JOB_ID" 2>&1)
djob=$(sed -n 's/^job=//p' <<<"$out")
sleep 0.5
check "NVLink domain: the same domain again comes from the cache (job $djob)" \
  eval 'grep -q "step $djob\.0: plan phase .* (computed," "$log_n1" &&
        grep -q "step $djob\.1: plan phase .* (from cache," "$log_n1"'
check "NVLink domain: nodes in another domain get a new plan, not the cached one" \
  grep -q "step $djob\.2: plan phase .* (computed," "$log_n1"

# slurmd runs a plugin's job epilog only if the plugin was in plugstack.conf
# when slurmd started (contrib/slurm/up --spank, as CI does).
if ((epilog_known)); then
  t=0
  while compgen -G "$plandir/0/$job.*" >/dev/null && ((t < 40)); do sleep 0.25; t=$((t + 1)); done
  check "the job epilog removed job $job's directories" eval '! compgen -G "$plandir/0/$job.*" >/dev/null'
else
  echo "skipped: epilog check (slurmd was started without the plugin; use contrib/slurm/up --spank)"
fi

# --gcoll given to salloc reaches the steps of the allocation.
out=$(timeout 120 salloc --gcoll=plan -N2 -n4 --ntasks-per-node=2 \
  srun bash -c 'echo "task plan=${GCOLL_PLAN:-unset}"' 2>&1)
check "salloc --gcoll=plan: every step task gets a plan" \
  test "$(grep -c '^task plan=/.*/plan.yaml$' <<<"$out")" = 4

# --- failures: plan warns and runs without, plan:strict fails ---------------
use_plugin  # plandir exists, but:
plugstack_set gcoll "optional $state/lib/spank_gcoll.so plandir=$tmp/no-such-dir timeout=5"
out=$(run_srun 60 --gcoll=plan -N2 -n2 bash -c 'echo "task plan=${GCOLL_PLAN:-unset}"')
check "plan, missing plandir: tasks run without GCOLL_PLAN" test "$(count '^task plan=unset$' "$out")" = 2
check "plan, missing plandir: one line per node says why" \
  test "$(count "gcoll: no plan for this step, running without GCOLL_PLAN: plandir $tmp/no-such-dir: No such file or directory" "$out")" = 2
out=$(run_srun 60 --gcoll=plan:strict -N2 -n2 bash -c 'echo "task plan=${GCOLL_PLAN:-unset}"'); rc=$?
check "plan:strict, missing plandir: srun fails ($rc), no task runs" \
  test "$rc" != 0 -a "$(count '^task plan=' "$out")" = 0
check "plan:strict, missing plandir: the reason is on stderr" \
  grep -q "gcoll: no plan for this step (--gcoll=plan:strict fails it): plandir $tmp/no-such-dir" <<<"$out"

use_plugin "timeout=3"
# A node that never delivers its topology in time: n2's slurmd is stopped
# until node 0 has given up on it (its tasks, on n1, start without a plan
# and say why while n2 is still stopped), so node 0 waits for it in vain
# however long the scheduler takes. Resumed after 60 s at the latest.
n2_pid=$(cat "$state/run/slurmd-n2.pid")
trap 'kill -CONT "$n2_pid" 2>/dev/null; plugstack_restore gcoll "$tmp"; rm -rf "$tmp"' EXIT
plant_stuck_node() {
  # Not while n2 still finishes the previous job: the job would then only
  # start after n2 is back.
  local t=0
  while [[ $(sinfo -h -n 'n[1-2]' -o %T | sort -u) != idle ]] && ((t < 40)); do
    sleep 0.25
    t=$((t + 1))
  done
  kill -STOP "$n2_pid"
  (
    t=0
    until grep -q "did not write its topology in time\|no plan for this step" "$tmp/job.out" \
        2>/dev/null || ((t >= 240)); do
      sleep 0.25
      t=$((t + 1))
    done
    kill -CONT "$n2_pid"
  ) &
}
out=$(held_job 60 plant_stuck_node -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 -- \
  'srun --gcoll=plan bash -c "echo task plan=\${GCOLL_PLAN:-unset}"; echo job-done')
check "plan, a node never writes its topology: the step runs without a plan" \
  test "$(count '^task plan=unset$' "$out")" = 4
check "plan, a node never writes its topology: node 0 says which" \
  grep -q "node 1 of 2 did not write its topology in time" <<<"$out"
out=$(held_job 60 plant_stuck_node -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 -- \
  'srun --gcoll=plan:strict bash -c "echo task plan=\${GCOLL_PLAN:-unset}"; echo "srun-rc=$?"; echo job-done')
check "plan:strict, a node never writes its topology: the step fails" \
  grep -q '^srun-rc=[1-9]' <<<"$out"

# --- security: planted links and other users' directories -------------------
use_plugin
mkdir -m 700 "$tmp/victim"
# Left under the step's name in the job user's own directory (only root or
# the user can put it there): a leftover, removed, never followed.
plant_link() { ln -s "$tmp/victim" "$plandir/0/$1.0"; }
# --gcoll given to sbatch reaches the job's steps.
out=$(held_job 60 plant_link --gcoll=plan -N2 -n2 -- \
  'srun bash -c "echo task plan=\${GCOLL_PLAN:-unset}"; echo job-done')
check "a symlink left as the step's directory is replaced, not followed" \
  test "$(count "^task plan=$plandir/0/[0-9]*\.0/plan.yaml$" "$out")" = 2
check "... and nothing is written where it points" test -z "$(ls -A "$tmp/victim")"

# Another user's directory under the name job directories had before they
# moved under plandir/<uid>: ignored, neither read nor replaced.
plant_foreign() {
  mkdir -m 700 "$plandir/$1.0"
  echo "their data" >"$plandir/$1.0/plan.yaml"
  chown -R 65534:65534 "$plandir/$1.0"
}
out=$(held_job 60 plant_foreign -N2 -n2 -- \
  'srun --gcoll=plan bash -c "echo task plan=\${GCOLL_PLAN:-unset}";
   echo "after the step: $(cat '"$plandir"'/$SLURM_JOB_ID.0/plan.yaml)"; echo job-done')
check "another user's directory under the step's old name is ignored: the tasks get a plan" \
  test "$(count "^task plan=$plandir/0/[0-9]*\.0/plan.yaml$" "$out")" = 2
check "... and its content is neither read as a plan nor replaced" \
  grep -q '^after the step: their data$' <<<"$out"

# --- NCCL communicators as PyTorch makes them, under the plugin's plan --------
# nccl_groups_check (tests/nccl) replays torch.distributed on libnccl.so.2:
# two world communicators, then a 2-D mesh of groups from fresh ids, each
# id passed through a directory the tasks share (PyTorch's store).
inc=${CUDA_HOME:-/usr/local/cuda}/include
if [[ -f $inc/nccl.h ]] &&
   cc -std=gnu11 -pthread -I"$inc" "$srcdir/tests/nccl/nccl_groups_check.c" -o "$tmp/groups" \
     "$builddir/.libs/libnccl.so.2" -Wl,-rpath,"$builddir/.libs" 2>"$tmp/cc.out"; then
  use_plugin
  mkdir -m 755 "$tmp/store1" "$tmp/store2"
  out=$(run_srun 120 --gcoll=plan -N2 -n4 --ntasks-per-node=2 "$tmp/groups" "$tmp/store1" 2)
  check "srun --gcoll=plan: world x2 and a 2x2 mesh of NCCL communicators, 0 wrong" \
    test "$(count ', 0 wrong; finalize+destroy ok; abort ok; splits ok' "$out")" = 4
  # torchrun inside srun: one task per node starts the ranks (RANK and
  # WORLD_SIZE as torchrun sets them); the Slurm tasks are not the ranks,
  # so every communicator gets a plan computed for its members.
  spawn='for i in 0 1 2; do RANK=$((SLURM_PROCID * 3 + i)) WORLD_SIZE=$((SLURM_NTASKS * 3)) \
    LOCAL_RANK=$i "$0" "$1" 3 & done; wait'
  out=$(run_srun 120 --gcoll=plan -N2 --ntasks-per-node=1 bash -c "$spawn" "$tmp/groups" \
    "$tmp/store2")
  check "torchrun-style (3 ranks per srun task, 2 nodes): world x2 and a 3x2 mesh, 0 wrong" \
    test "$(count ', 0 wrong; finalize+destroy ok; abort ok; splits ok' "$out")" = 6
  # On DGX H100 nodes the groups run on plans derived from the plugin's:
  # each member drives the GPU its Slurm task was planned on (task t is
  # local rank t % 2 of node t / 2, so GPU t % 2), and none computes a plan.
  use_plugin "topo=$srcdir/etc/topologies/dgx-h100.yaml"
  mkdir -m 755 "$tmp/store3"
  out=$(GCOLL_DEBUG=INFO run_srun 120 --gcoll=plan -N2 -n4 --ntasks-per-node=2 "$tmp/groups" \
    "$tmp/store3" 2)
  check "srun --gcoll=plan on DGX nodes: the 2x2 mesh, 0 wrong" \
    test "$(count ', 0 wrong; finalize+destroy ok; abort ok; splits ok' "$out")" = 4
  derived=$(grep "plan derived from the launcher's plan .* drives GPU " <<<"$out")
  wrong_gpu=0
  while IFS= read -r line; do
    r=${line#gcoll rank }; r=${r%%:*}
    list=${line#*for its ranks }; list=${list%%;*}
    gpu=${line#*drives GPU }; gpu=${gpu%% *}
    members=(); for item in ${list//,/ }; do
      step=1; [[ $item == *:* ]] && { step=${item#*:}; item=${item%%:*}; }
      members+=($(seq "${item%%-*}" "$step" "${item#*-}"))
    done
    [[ $gpu == $((members[r] % 2)) ]] || { wrong_gpu=$((wrong_gpu + 1)); echo "wrong GPU: $line"; }
  done <<<"$derived"
  check "srun --gcoll=plan on DGX nodes: groups derive their plans from the plugin's ($(grep -c . <<<"$derived") joins), each member on its task's GPU" \
    test -n "$derived" -a "$wrong_gpu" = 0 -a "$(count "plan computed for the members' nodes" "$out")" = 0
  # ncclCommShrink after a rank is SIGKILLed, under the plugin's plan: the
  # world is the plugin's plan, the shrunk communicator one derived from it.
  if cc -std=gnu11 -pthread -I"$inc" "$srcdir/tests/nccl/nccl_shrink_check.c" -o "$tmp/shrink" \
       "$builddir/.libs/libnccl.so.2" -Wl,-rpath,"$builddir/.libs" 2>"$tmp/cc.out"; then
    mkdir -m 755 "$tmp/store4"
    out=$(GCOLL_DEBUG=INFO GCOLL_TIMEOUT=20 run_srun 120 --gcoll=plan -N2 -n4 --ntasks-per-node=2 \
      bash -c 'GCOLL_NRANKS=$SLURM_NTASKS exec "$0" kill "$1"' "$tmp/shrink" "$tmp/store4")
    check "srun --gcoll=plan: ncclCommShrink after rank 1 is SIGKILLed, survivors 0 wrong on a derived plan" \
      test "$(count ', 0 wrong$' "$out")" = 4 -a "$(count "plan derived from the launcher's plan .* for its ranks 0,2-3" "$out")" = 3
  else
    bad "nccl_shrink_check does not compile: $(head -c 300 "$tmp/cc.out")"
  fi
else
  echo "skipped: NCCL communicator cases (no $inc/nccl.h)"
fi

# --- without --gcoll the ranks plan the step themselves: the same plan -------
# (Job and step ids differ between two steps; everything else must not.)
use_plugin
out=$(run_srun 60 --gcoll=plan -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 bash -c \
  '[ "$SLURM_PROCID" != 0 ] || sed "/^job:/d" "$GCOLL_PLAN" >"$0"' "$tmp/by-plugin.yaml")
out=$(GCOLL_PLAN_SAVE="$tmp/by-ranks.yaml" run_srun 120 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 \
  --ntasks-per-node=2 "$perf" -o allreduce -b 8 -e 64K -f 16 -w 1 -n 3)
if perf_clean "$out" && [[ -f $tmp/by-ranks.yaml ]]; then
  ok "no --gcoll: the ranks plan the step themselves, gcoll-perf 0 wrong"
  sed -i '/^job:/d' "$tmp/by-ranks.yaml"
  check "no --gcoll: the ranks' plan is the plugin's (gcoll-plan diff)" \
    "$plan_tool" diff "$tmp/by-plugin.yaml" "$tmp/by-ranks.yaml"
else
  bad "no --gcoll: gcoll-perf without a plan"; printf '%s\n' "$out" | tail -10
fi

# --- --gcoll=FILE: a given plan, checked against the step --------------------
"$plan_tool" generate -q --topo cpu-only --hosts 'n[1-2]' -k 2 -o "$tmp/given.yaml"
"$plan_tool" generate -q --topo cpu-only --hosts 'n[3-4]' -k 2 -o "$tmp/other.yaml"
chmod 644 "$tmp"/*.yaml
out=$(run_srun 120 --mpi=pmi2 --gcoll="$tmp/given.yaml" -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 \
  "$perf" -o allreduce -b 8 -e 64K -f 16 -w 1 -n 3)
if perf_clean "$out"; then ok "--gcoll=FILE: gcoll-perf runs on the given plan, 0 wrong"
else bad "--gcoll=FILE"; printf '%s\n' "$out" | tail -10; fi
out=$(run_srun 60 --gcoll="$tmp/other.yaml" -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 true); rc=$?
check "--gcoll=FILE for other nodes: srun fails ($rc) saying why" \
  eval 'test "$rc" != 0 && grep -q "plan puts node 0 on '"'"'n3'"'"', the step runs it on '"'"'n1'"'"'" <<<"$out"'
head -c 300 "$tmp/given.yaml" >"$tmp/truncated.yaml"
chmod 644 "$tmp/truncated.yaml"
out=$(run_srun 60 --gcoll="$tmp/truncated.yaml" -N2 -n4 --ntasks-per-node=2 true); rc=$?
check "--gcoll=FILE, a truncated plan: srun fails ($rc) with one line per node" \
  eval 'test "$rc" != 0 && test "$(grep -c "gcoll: no plan for this step (--gcoll=$tmp/truncated.yaml fails it): $tmp/truncated.yaml:" <<<"$out")" = 2'
out=$(run_srun 60 --gcoll=relative.yaml -N1 true); rc=$?
check "--gcoll with a relative path is refused by srun ($rc)" \
  eval 'test "$rc" != 0 && grep -q "expected off, plan, plan:strict or an absolute path" <<<"$out"'

# --- the plan phase's cost, from the plugin's own log -----------------------
echo "plan phase on node 0 (slurmd log):"
grep -ho "step [0-9.]*: plan phase [0-9.]* ms on node 0 ([a-z ]*, [0-9]* nodes, [0-9]* tasks)" \
  "$state"/log/slurmd-n*.log | sort -V | tail -6 | sed 's/^/  /'

echo "$passed passed, $failed failed"
((failed == 0))
