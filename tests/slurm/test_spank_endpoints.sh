#!/bin/bash
# Endpoints with the plugin's plan (issue 16 part 1, the Slurm path), on a
# real Slurm (contrib/slurm): under srun --gcoll=plan each node binds one
# listening socket per task in slurmstepd, node 0 merges them into the
# step's endpoints.yaml, and every task inherits its own socket
# (GCOLL_LISTEN_FD) and the file (GCOLL_ENDPOINTS):
#   - -N2 -n4 (block), -N2 -n4 -m cyclic and -N4 -n8: every rank's init
#     sends 0 requests to any store (its INFO line), coll_check matrix 0
#     wrong bytes; the file is 0600 in the step's private directory; each
#     task holds exactly one listening socket, its own;
#   - without --mpi=pmi2 the endpoints alone start the job; several
#     communicators share the inherited socket; a split, with or without
#     PMI2, goes through the store the plan tree's root serves (its address
#     came with init's closing wave), and so does a shrink by the survivors
#     of a task that died;
#   - a later step of the job takes the plan from the cache but gets
#     endpoints of its own (0 requests again);
#   - --gcoll=FILE: node 0 publishes its copy of the given plan with the
#     endpoints (0 requests, no PMI2 needed; the copy differs from the
#     file only in the job id and step);
#   - the fallbacks, each with the collectives still right through the
#     PMI2 store: plugstack endpoints=no (no GCOLL_ENDPOINTS; the store's
#     request counts, the "before" figure; --gcoll=FILE runs the file
#     itself), an endpoints file of another
#     job (the INFO line says why); nodes that cannot bind their sockets
#     keep the plan and say why, one line per node.
# srun exits 0 even when a SPANK callback failed, so every case checks what
# the tasks printed.
set -u -o pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=lib.sh
. "$here/lib.sh"
slurm_require

builddir=$(cd "${top_builddir:-.}" && pwd)
so=$builddir/.libs/spank_gcoll.so
if [[ ! -f $so ]]; then
  echo "skipped: spank_gcoll.so not built (configure found no slurm/spank.h)"
  exit 77
fi
check_bin=$builddir/tests/integration/coll_check
[[ -x $check_bin ]] || { echo "test_spank_endpoints: no $check_bin (make check builds it)"; exit 1; }
state=$(slurm_state_dir)
unset GCOLL_ENDPOINTS GCOLL_LISTEN_FD GCOLL_KVS_ADDR GCOLL_BOOTSTRAP GCOLL_SOCKET_IFADDR \
  GCOLL_SOCKET_IFNAME NCCL_SOCKET_IFNAME

mkdir -p "$state/lib"
cp "$so" "$state/lib/.spank_gcoll.so.$$" && mv -f "$state/lib/.spank_gcoll.so.$$" "$state/lib/spank_gcoll.so"

tmp=$(mktemp -d /var/tmp/gcoll-spank-ep-test.XXXXXX)
plandir=$tmp/plans
mkdir -m 755 "$plandir"
chmod 755 "$tmp"
plugstack_save gcoll "$tmp"
trap 'plugstack_restore gcoll "$tmp"; rm -rf "$tmp"' EXIT

passed=0 failed=0
ok() { passed=$((passed + 1)); echo "ok: $*"; }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }
check() { local what=$1; shift; if "$@"; then ok "$what"; else bad "$what"; fi; }
count() { grep -c -- "$1" <<<"$2"; }
use_plugin() {
  plugstack_set gcoll "optional $state/lib/spank_gcoll.so plandir=$plandir timeout=10 $*"
}
timings() { grep '^gcoll rank [0-9]*: init timings: ' <<<"$1"; }
# "min/max" of every rank's bootstrap requests at init.
requests() {
  timings "$1" | sed -n 's/.*; bootstrap requests \([0-9]*\): .*/\1/p' | sort -n |
    awk 'NR == 1 { lo = $1 } { hi = $1 } END { printf "%s/%s", lo, hi }'
}
zero_re='; bootstrap requests 0: 0 to (the plan tree root.s store at [0-9.]+:[0-9]+ \(opened only when needed\)|PMI2 \(opened only when needed\)); endpoints from the plan.s endpoints file: [0-9]+ messages to [0-9]+ plan neighbours(; proxy thread [0-9]+ rounds, [0-9]+ asleep)?$'
wrong0() { grep -Ec '^rank [0-9]+: [0-9]+ calls, 0 wrong bytes$' <<<"$1"; }

use_plugin
mkdir -m 777 "$tmp/copies"
declare -A before after
# --- 0 store requests at init, collectives right ------------------------------
for layout in "-N2 -n4" "-N2 -n4 -m cyclic" "-N4 -n8"; do
  n=${layout#*-n}; n=${n%% *}
  # shellcheck disable=SC2086
  out=$(GCOLL_DEBUG=INFO run_srun 180 --mpi=pmi2 --gcoll=plan $layout "$check_bin" matrix)
  check "$layout: coll_check matrix, 0 wrong bytes on all $n ranks" test "$(wrong0 "$out")" = "$n"
  check "$layout: every rank's init sent 0 requests to a store: $(timings "$out" | head -1 | sed 's/.*; bootstrap/bootstrap/')" \
    test "$(timings "$out" | grep -Ec "$zero_re")" = "$n"
  [[ $layout == *cyclic* ]] || after[$layout]=$(requests "$out")
done
sleep 0.5 # slurmd's log line may trail the step's end
check "node 0's log says the plan came with endpoints" \
  grep -q "plan phase .* on node 0 (computed, 2 nodes, 4 tasks, [0-9]* distinct node topologies): .*/plan.yaml with endpoints.yaml$" \
  "$state"/log/slurmd-n*.log

# The file: private, the step's; each task holds one listening socket, its own.
listeners='n=0; mine=no
  for f in /proc/$$/fd/*; do
    l=$(readlink "$f") || continue
    case $l in socket:*) ;; *) continue;; esac
    ino=${l#socket:[}; ino=${ino%]}
    if awk -v i="$ino" "\$10 == i && \$4 == \"0A\" { hit = 1 } END { exit !hit }" /proc/net/tcp /proc/net/tcp6; then
      n=$((n + 1)); [ "${f##*/}" = "$GCOLL_LISTEN_FD" ] && mine=yes
    fi
  done
  echo "task $SLURM_PROCID listening $n own $mine mode $(stat -c %a "$GCOLL_ENDPOINTS") nranks $GCOLL_NRANKS"'
out=$(run_srun 60 --mpi=pmi2 --gcoll=plan -N2 -n4 bash -c "$listeners")
check "each task holds exactly one listening socket, its own; the file is 0600; GCOLL_NRANKS=4" \
  test "$(grep -Ec '^task [0-3] listening 1 own yes mode 600 nranks 4$' <<<"$out")" = 4

# Without PMI2 the endpoints alone bootstrap the step.
out=$(GCOLL_DEBUG=INFO run_srun 120 --gcoll=plan -N2 -n4 "$check_bin" matrix)
check "no --mpi=pmi2: coll_check matrix runs on the endpoints alone, 0 wrong" \
  eval 'test "$(wrong0 "$out")" = 4 && test "$(timings "$out" | grep -Ec "0 to the plan tree root.s store at [0-9.]+:[0-9]+ \(opened only when needed\); endpoints from the plan")" = 4'

# Several communicators on one inherited socket, and a split: the world's
# init sends the store nothing, the split goes through the plan tree
# root's store (its first use) and its communicator inits through the
# leader's id.
bench=$builddir/tests/bench/init_bench
out=$(GCOLL_DEBUG=INFO run_srun 120 --mpi=pmi2 --gcoll=plan -N2 -n4 "$bench" --more 3)
check "4 communicators at once, then one more: all checked, all 20 inits with 0 store requests" \
  eval 'test "$(grep -c "^init_bench rank [0-3]: 4 more communicators checked$" <<<"$out")" = 4 &&
        test "$(timings "$out" | grep -Ec "$zero_re")" = 20'
out=$(GCOLL_DEBUG=INFO run_srun 120 --mpi=pmi2 --gcoll=plan -N2 -n4 "$bench" --split)
check "a split: checked on every rank; the world's inits 0 requests, the split's through its id's store" \
  eval 'test "$(grep -c "^init_bench rank [0-3]: split into 2 ranks checked$" <<<"$out")" = 4 &&
        test "$(timings "$out" | grep -Ec "$zero_re")" = 4 &&
        test "$(timings "$out" | grep -Ec "bootstrap requests [1-9][0-9]*: [0-9]+ to the store at ")" = 4'

# Without PMI2 there is no store but the one the plan tree's root serves: a
# split (every rank) and a shrink by the survivors of a task that left with
# no goodbye (a subset, which a store opened by PMI2's fence could not
# serve) both go through it.
out=$(GCOLL_DEBUG=INFO run_srun 120 --gcoll=plan -N2 -n4 "$bench" --split)
check "no --mpi=pmi2: a split, checked on every rank, through the plan tree root's store" \
  eval 'test "$(grep -c "^init_bench rank [0-3]: split into 2 ranks checked$" <<<"$out")" = 4 &&
        test "$(timings "$out" | grep -Ec "$zero_re")" = 4'
out=$(GCOLL_DEBUG=INFO run_srun 120 --gcoll=plan -N2 -n4 "$bench" --shrink)
check "no --mpi=pmi2: the 3 survivors of a task that left shrink the world and check it" \
  test "$(grep -c "^init_bench rank [0-2]: shrink to 3 ranks checked$" <<<"$out")" = 3
out=$(GCOLL_DEBUG=INFO run_srun 120 --mpi=pmi2 --gcoll=plan -N2 -n4 "$bench" --shrink)
check "with --mpi=pmi2: the same shrink" \
  test "$(grep -c "^init_bench rank [0-2]: shrink to 3 ranks checked$" <<<"$out")" = 3

# --- a later step: plan from the cache, endpoints of its own -------------------
out=$(GCOLL_DEBUG=INFO timeout 180 salloc -N2 -n4 bash -c \
  'srun --mpi=pmi2 --gcoll=plan "$0" matrix && srun --mpi=pmi2 --gcoll=plan "$0" matrix &&
   echo "job=$SLURM_JOB_ID"' "$check_bin" 2>&1)
job=$(sed -n 's/^job=//p' <<<"$out")
sleep 0.5
check "two steps of job $job: the second's plan from the cache, both with endpoints" \
  eval 'grep -q "step $job\.0: plan phase .* (computed, .*/plan.yaml with endpoints.yaml$" "$state"/log/slurmd-n*.log &&
        grep -q "step $job\.1: plan phase .* (from cache, .*/plan.yaml with endpoints.yaml$" "$state"/log/slurmd-n*.log'
check "... both steps: 8 inits with 0 store requests, 0 wrong" \
  eval 'test "$(timings "$out" | grep -Ec "$zero_re")" = 8 && test "$(wrong0 "$out")" = 8'

# --- --gcoll=FILE: a given plan gets endpoints too ---------------------------
# Node 0 publishes its copy of the file (stamped with the step) beside the
# endpoints; without PMI2 the endpoints alone start the step.
"$builddir/gcoll-plan" generate -q --topo cpu-only --hosts 'n[1-2]' -k 2 -o "$tmp/given.yaml"
chmod 644 "$tmp/given.yaml"
show_plan='echo "task plan=$GCOLL_PLAN"; [ "$SLURM_PROCID" != 0 ] || cp "$GCOLL_PLAN" "$1/copy.yaml"
  exec "$0" matrix'
out=$(GCOLL_DEBUG=INFO run_srun 180 --gcoll="$tmp/given.yaml" -w 'n[1-2]' -N2 -n4 \
  --ntasks-per-node=2 bash -c "$show_plan" "$check_bin" "$tmp/copies")
sleep 0.5
check "--gcoll=FILE, no PMI2: coll_check matrix 0 wrong; every init 0 store requests" \
  eval 'test "$(wrong0 "$out")" = 4 && test "$(timings "$out" | grep -Ec "$zero_re")" = 4'
check "... every task runs the step's copy of the file, not the file" \
  test "$(grep -Ec "^task plan=$plandir/[0-9]+/[0-9]+\.[0-9]+/plan.yaml$" <<<"$out")" = 4
diff_out=$("$builddir/gcoll-plan" diff "$tmp/given.yaml" "$tmp/copies/copy.yaml")
check "... the copy is the given plan but for the job id and step (gcoll-plan diff)" \
  eval 'test "$(grep -vc "^---\|^+++\|^job id: -1 -> [0-9]*$\|^job step: -1 -> [0-9]*$" <<<"$diff_out")" = 0 &&
        test "$(grep -c "^job " <<<"$diff_out")" = 2'
check "... node 0's log: given file, with endpoints.yaml" \
  grep -q "plan phase .* on node 0 (given file, 2 nodes, 4 tasks, 0 distinct node topologies): .*/plan.yaml with endpoints.yaml$" \
  "$state"/log/slurmd-n*.log

# --- fallbacks: the store, right results, the reason said once ----------------
use_plugin endpoints=no
out=$(run_srun 120 --mpi=pmi2 --gcoll="$tmp/given.yaml" -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 \
  bash -c 'echo "task plan=$GCOLL_PLAN endpoints=${GCOLL_ENDPOINTS:-unset}"; exec "$0" matrix' \
  "$check_bin")
check "endpoints=no, --gcoll=FILE: the tasks run the file itself through the store, 0 wrong" \
  eval 'test "$(count "^task plan=$tmp/given.yaml endpoints=unset$" "$out")" = 4 &&
        test "$(wrong0 "$out")" = 4'
for layout in "-N2 -n4" "-N4 -n8"; do
  n=${layout#*-n}
  # shellcheck disable=SC2086
  out=$(GCOLL_DEBUG=INFO run_srun 180 --mpi=pmi2 --gcoll=plan $layout bash -c \
    'echo "task endpoints=${GCOLL_ENDPOINTS:-unset}"; exec "$0" matrix' "$check_bin")
  check "endpoints=no $layout: no GCOLL_ENDPOINTS, the store, 0 wrong" \
    eval 'test "$(count "^task endpoints=unset$" "$out")" = "$n" && test "$(wrong0 "$out")" = "$n" &&
          test "$(timings "$out" | grep -c "to slurmstepd (PMI2), [0-9]* to rank 0.s store")" = "$n"'
  before[$layout]=$(requests "$out")
done

use_plugin
# Every task points GCOLL_ENDPOINTS at a copy naming another job.
other='sed "s/^job: .*/job: 00ff00ff00ff00ff/" "$GCOLL_ENDPOINTS" >"$1/other.$SLURM_PROCID.yaml" &&
  GCOLL_ENDPOINTS=$1/other.$SLURM_PROCID.yaml exec "$0" matrix'
out=$(GCOLL_DEBUG=INFO run_srun 120 --mpi=pmi2 --gcoll=plan -N2 -n4 bash -c "$other" \
  "$check_bin" "$tmp/copies")
check "an endpoints file of another job: the store, 0 wrong, the INFO line says why" \
  eval 'test "$(wrong0 "$out")" = 4 &&
        test "$(timings "$out" | grep -c "; endpoints from the store (.*other\.[0-3]\.yaml: endpoints of another job (job 00ff00ff00ff00ff..., this step.s [0-9a-f]*...))\(; proxy thread [0-9]* rounds, [0-9]* asleep\)\{0,1\}$")" = 4'

# Nodes that cannot bind (the job names an address no interface has; the
# transports would fail on it too, so the tasks only report): the step
# keeps its plan, the tasks get no endpoints, each node says why once.
out=$(GCOLL_SOCKET_IFADDR=203.0.113.7 run_srun 60 --gcoll=plan -N2 -n4 \
  bash -c 'echo "task endpoints=${GCOLL_ENDPOINTS:-unset} fd=${GCOLL_LISTEN_FD:-unset} plan=${GCOLL_PLAN:-unset}"')
check "sockets that cannot be bound: one line per node says why; the tasks have the plan, no endpoints" \
  eval 'test "$(count "gcoll: step [0-9.]* node [01]: no endpoints, the tasks find each other through the store: local task 0 on 203.0.113.7: listen on 203.0.113.7:0: Cannot assign requested address$" "$out")" = 2 &&
        test "$(grep -c "^task endpoints=unset fd=unset plan=/.*/plan.yaml$" <<<"$out")" = 4 &&
        test "$(grep -c "gcoll:" <<<"$out")" = 2'

echo "store requests per rank at init, min/max (coll_check matrix, srun --mpi=pmi2 --gcoll=plan):"
for layout in "-N2 -n4" "-N4 -n8"; do
  echo "  $layout: endpoints=no ${before[$layout]:-?}, with endpoints ${after[$layout]:-?}"
done
echo "$passed passed, $failed failed"
((failed == 0))
