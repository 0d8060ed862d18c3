#!/bin/bash
# The pmi2 bootstrap under a real Slurm (contrib/slurm/up: nodes n1..n4 on this host), with real
# processes started by srun --mpi=pmi2 and nothing but GCOLL_PLAN set:
#   - pmi2_probe: the bootstrap contract through PMI2 and rank 0's store (values of 0..64 KiB,
#     long keys with odd characters, a key nobody put, the lost-rank key, barrier, no second
#     open after PMI2_Finalize), one job key shared by all ranks of a step and another for the
#     next;
#   - p2p_check: send/recv between every pair of ranks, connections made on first use, which
#     PMI2 alone cannot serve;
#   - gcoll-perf: allreduce on 2 nodes x 2 ranks and 4 nodes x 2 ranks (8 B .. 1 MiB), and every
#     other collective on 2 x 2, with zero wrong elements on every row;
#   - srun without --mpi=pmi2: every rank fails at once with the one line saying what to add;
#   - a rank that never reaches the fence (exits, or sleeps past GCOLL_TIMEOUT=2): the others
#     fail after ~2 s with one line each, the step ends;
#   - GCOLL_RANK set but not the PMI2 rank: one line per rank naming both.
# Skips (77) unless root, GCOLL_TEST_SLURM=1, Slurm can be brought up, and gcoll has PMI2.
# Run by `make check`, or by hand:
#   GCOLL_TEST_SLURM=1 top_srcdir=/path/to/src top_builddir=/path/to/build tests/slurm/test_pmi2.sh

# ok never fails, so "check && ok || bad" is safe; bash -c strings expand in the task.
# shellcheck disable=SC2015,SC2016
set -u -o pipefail

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
top_builddir=$(cd "$top_builddir" && pwd)
PERF=$top_builddir/gcoll-perf
PLANTOOL=$top_builddir/gcoll-plan
PROBE=$top_builddir/tests/slurm/pmi2_probe
P2P=$top_builddir/tests/integration/p2p_check
export GCOLL_TOPO_DIR="${GCOLL_TOPO_DIR:-$top_srcdir/etc/topologies}"
# srun passes our environment on: nothing but GCOLL_PLAN may tell the ranks who they are.
unset GCOLL_RANK GCOLL_NRANKS GCOLL_JOB_KEY GCOLL_KVS_ADDR GCOLL_BOOTSTRAP GCOLL_NODE \
  GCOLL_TIMEOUT GCOLL_ALGO GCOLL_PROTO GCOLL_TRANSPORT GCOLL_PERF_INJECT_ERROR GCOLL_PLAN

if [[ ! -x $PROBE ]]; then
  echo "skipped: gcoll built without PMI2 (no $PROBE)"
  exit 77
fi
for exe in "$PERF" "$PLANTOOL" "$P2P"; do
  [[ -x $exe ]] || { echo "test_pmi2: no executable $exe" >&2; exit 1; }
done

# shellcheck source=tests/slurm/lib.sh
. "$top_srcdir/tests/slurm/lib.sh"
slurm_require

tmp=$(mktemp -d /tmp/gcoll-pmi2-test.XXXXXX) || exit 1
trap 'rm -rf "$tmp"' EXIT

failures=0
ok() { echo "ok: $*"; }
bad() {
  echo "FAIL: $*"
  failures=$((failures + 1))
}
now_ms() { echo $(($(date +%s%N) / 1000000)); }
# run_srun, and in sanitizer builds a leak or error report fails the test even where the ranks
# are meant to fail (their exit status then proves nothing).
srun_checked() {
  run_srun "$@"
  local rc=$?
  ! grep -q 'Sanitizer\|runtime error:' <<<"$srun_out" ||
    bad "sanitizer report in srun $*: $(grep -m3 'Sanitizer\|runtime error:' <<<"$srun_out")" >&2
  return "$rc"
}

# The ranks must be laid out as the plan says: K per node, in node order;
# and on the plan's nodes: Slurm may place a 2-node step on any two idle
# ones (here it often skips n1 right after a step ended on it), so steps
# with the 2-node plan name theirs with -w.
plan_for() {
  "$PLANTOOL" generate -q -t cpu-only -H "$1" -k "$2" -o "$3" ||
    { echo "test_pmi2: gcoll-plan generate -H $1 -k $2 failed" >&2; exit 1; }
}
plan_for 'n[1-2]' 2 "$tmp/n2.yaml"
plan_for 'n[1-4]' 2 "$tmp/n4.yaml"

# --- the contract over real PMI2 ------------------------------------------------------------
probe_keys() {
  sed -n 's/^pmi2_probe: rank [0-9]* of 4 ok: backend pmi2, job key \([0-9a-f]\{16\}\),.*/\1/p' \
    <<<"$srun_out" | sort -u
}
srun_checked 60 --mpi=pmi2 -N2 -n4 --ntasks-per-node=2 "$PROBE" >"$tmp/probe1"
rc=$?
nok=$(grep -c '^pmi2_probe: rank [0-3] of 4 ok: backend pmi2, ' "$tmp/probe1")
key1=$(probe_keys)
missing="missing-key error after [0-9]* ms: bootstrap(tcp): get 'probe/nobody-puts-this': "
missing+="no rank put this key within"
missing_line=$(grep -c "$missing" "$tmp/probe1")
reopen="^pmi2_probe: rank [0-3]: second open refused: "
reopen+="bootstrap(pmi2): PMI2 was already opened in this process"
reopen=$(grep -c "$reopen" "$tmp/probe1")
((rc == 0 && nok == 4 && missing_line == 4 && reopen == 4)) &&
  ok "pmi2_probe on 2 nodes x 2: values up to 64 KiB, odd keys, missing key, barrier, reopen" ||
  bad "pmi2_probe: srun exit $rc, $nok of 4 ranks ok, $missing_line missing-key lines," \
    "$reopen refused reopens: $(head -c 600 "$tmp/probe1")"
[[ $key1 =~ ^[0-9a-f]{16}$ ]] && ok "all ranks derived one job key ($key1)" ||
  bad "job keys of the ranks: '$key1'"
# Timings, for the log: open is PMI2_Init, PMI2_Job_GetId, one PMI2 fence and joining rank 0's
# store; gets read 8 values from the store.
sed -n 's/^pmi2_probe: rank \([0-9]*\) of 4 ok: [^,]*, [^,]*, \(.*\), missing.*/  rank \1: \2/p' \
  "$tmp/probe1" | sort
srun_checked 60 --mpi=pmi2 -N2 -n4 --ntasks-per-node=2 "$PROBE" >/dev/null
key2=$(probe_keys)
[[ $key2 =~ ^[0-9a-f]{16}$ && $key2 != "$key1" ]] &&
  ok "the next step has another job key ($key2)" ||
  bad "job key of the next step: '$key2' (first: $key1)"

# --- gcoll-perf ------------------------------------------------------------------------------
# Every data row must have #wrong 0 (out-of-place and in-place) and the run the expected rows.
check_perf() {
  local what=$1 want_rows=$2 file=$3 rc=$4 rows
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 13 && $9 == "0" && $13 == "0" { n++ }
              $1 ~ /^[0-9]+$/ && !(NF == 13 && $9 == "0" && $13 == "0") { bad++ }
              END { print (bad ? -1 : n + 0) }' "$file")
  if ((rc == 0 && rows == want_rows)) && grep -q '^# Out of bounds values : 0 OK$' "$file"; then
    ok "$what: $rows rows, 0 wrong"
  else
    bad "$what: srun exit $rc, $rows good rows of $want_rows: $(grep -v '^#' "$file" | head -c 800)"
  fi
}

# 8 B .. 1 MiB by 4: 9 sizes.
GCOLL_PLAN=$tmp/n2.yaml srun_checked 120 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 \
  "$PERF" -o allreduce -b 8 -e 1M -f 4 -w 2 -n 5 >"$tmp/perf"
check_perf "allreduce, srun --mpi=pmi2 -N2 -n4" 9 "$tmp/perf" $?

# The job key (shm names, connection hellos) must not follow from the job and step ids
# alone: every rank mixes in rank 0's random secret, and the ranks' keys agree (else the
# collective could not connect). On the cluster's network, not loopback, by default.
GCOLL_PLAN=$tmp/n2.yaml GCOLL_DEBUG=INFO srun_checked 60 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 \
  --ntasks-per-node=2 "$PERF" -o allreduce -b 64 -e 64 -w 1 -n 1 >"$tmp/perf"
rc=$?
mixed=$(grep -c "joined .*job key mixed with the bootstrap's secret" "$tmp/perf")
lo=$(grep -c 'net/socket listens on 127\.' "$tmp/perf")
ifs=$(ip -o -4 addr show up scope global 2>/dev/null | grep -cv ' \(docker\|virbr\|veth\|cni\|podman\|lxcbr\)')
((rc == 0 && mixed == 4)) && ok "every rank's job key has the PMI2 secret mixed in" ||
  bad "job key secret: srun exit $rc, $mixed of 4 ranks mixed: $(head -c 600 "$tmp/perf")"
# The init timings line tells the PMI2 calls to slurmstepd and the requests to rank 0's
# store apart (rank 0: PMI2_Init, a put, the fence, a get; the others skip the put).
timed=$(grep -Ec "init timings: total .*; bootstrap requests [0-9]+: [34] to slurmstepd \(PMI2\), [0-9]+ to rank 0's store at [0-9.]+:[0-9]+(; proxy thread [0-9]+ rounds, [0-9]+ asleep)?$" "$tmp/perf")
((rc == 0 && timed == 4)) && ok "every rank's init timings line counts PMI2 and rank 0's store apart" ||
  bad "init timings under PMI2: $timed of 4 lines: $(grep 'init timings' "$tmp/perf" | head -2)"
if ((ifs > 0)); then
  ((lo == 0)) && ok "net/socket listens on a network interface, not loopback" ||
    bad "net/socket on loopback with $ifs global IPv4 interfaces: $(grep listens "$tmp/perf" | head -4)"
fi

GCOLL_PLAN=$tmp/n4.yaml srun_checked 120 --mpi=pmi2 -N4 -n8 --ntasks-per-node=2 \
  "$PERF" -o allreduce -b 8 -e 1M -f 4 -w 2 -n 5 >"$tmp/perf"
check_perf "allreduce, srun --mpi=pmi2 -N4 -n8" 9 "$tmp/perf" $?

# 64 B .. 64 KiB by 8: 4 sizes.
for coll in broadcast reduce allgather reducescatter; do
  GCOLL_PLAN=$tmp/n2.yaml srun_checked 120 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 \
    "$PERF" -o "$coll" -b 64 -e 64K -f 8 -w 2 -n 5 >"$tmp/perf"
  check_perf "$coll, srun --mpi=pmi2 -N2 -n4" 4 "$tmp/perf" $?
done

# --- send/recv: every pair, connections made on first use (keys put after init) ---------------
# p2p_check exchange: ring and all-to-all in groups, blocking pairs, self, and a group of
# collectives with send/recv; every rank prints "rank R: N exchanges, 0 wrong bytes".
for spec in "n2 2 4" "n4 4 8"; do
  set -- $spec
  GCOLL_PLAN=$tmp/$1.yaml srun_checked 180 --mpi=pmi2 -w "n[1-$2]" -N"$2" -n"$3" --ntasks-per-node=2 \
    "$P2P" exchange >"$tmp/p2p"
  rc=$?
  good=$(grep -c '^rank [0-9]*: [0-9]* exchanges, 0 wrong bytes' "$tmp/p2p")
  ((rc == 0 && good == $3)) && ok "send/recv between all pairs, srun --mpi=pmi2 -N$2 -n$3" ||
    bad "send/recv -N$2 -n$3: srun exit $rc, $good of $3 ranks clean: $(head -c 800 "$tmp/p2p")"
done

# --- no GCOLL_PLAN: the ranks plan the job themselves (no plugin) -------------------------------
# A node's first rank describes its topology (detection), rank 0 builds the plan, all read it.
GCOLL_DEBUG=INFO srun_checked 120 --mpi=pmi2 -w 'n[1-3]' -N3 -n5 \
  "$PERF" -o allreduce -b 8 -e 64K -f 8 -w 2 -n 5 >"$tmp/perf"
rc=$?
check_perf "no plan at all: the ranks plan the job, srun --mpi=pmi2 -N3 -n5 (2+2+1)" 5 "$tmp/perf" $rc
n=$(grep -c "no GCOLL_PLAN: the ranks planned the job themselves" "$tmp/perf")
((n == 5)) && ok "no plan: every rank says where its plan came from" ||
  bad "no plan: $n of 5 ranks said where their plan came from"
srun_checked 120 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 -m cyclic "$PERF" -o allreduce -b 8 -e 64K -f 8 \
  -w 2 -n 5 >"$tmp/perf"
check_perf "no plan, -m cyclic: the ranks plan an interleaved layout" 5 "$tmp/perf" $?

# p2p_check colls: gcollAlltoAll, gcollGather, gcollScatter against a serial reference, in
# and out of groups; every rank prints "rank R: N alltoall/gather/scatter calls, 0 wrong bytes".
GCOLL_PLAN=$tmp/n2.yaml srun_checked 180 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 \
  "$P2P" colls >"$tmp/p2p"
rc=$?
good=$(grep -c '^rank [0-9]*: [0-9]* alltoall/gather/scatter calls, 0 wrong bytes' "$tmp/p2p")
((rc == 0 && good == 4)) && ok "alltoall, gather, scatter, srun --mpi=pmi2 -N2 -n4" ||
  bad "alltoall/gather/scatter -N2 -n4: srun exit $rc, $good of 4 ranks clean: $(head -c 800 "$tmp/p2p")"

# --- without --mpi=pmi2 ----------------------------------------------------------------------
no_pmi2='bootstrap: running under srun without PMI2: use srun --mpi=pmi2 '
no_pmi2+='(or MpiDefault=pmi2 in slurm.conf)'
t0=$(now_ms)
GCOLL_PLAN=$tmp/n2.yaml srun_checked 60 --mpi=none -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 \
  "$PERF" -o allreduce -b 8 -e 64 >"$tmp/out"
rc=$?
took=$(($(now_ms) - t0))
n=$(grep -cF "$no_pmi2" "$tmp/out")
((rc != 0 && rc != 124 && n == 4 && took < 20000)) &&
  ok "without --mpi=pmi2 every rank says what to add, in $took ms" ||
  bad "without --mpi=pmi2: srun exit $rc after $took ms, $n of 4 ranks said it:" \
    "$(head -c 600 "$tmp/out")"

# --- a rank that never reaches the fence ------------------------------------------------------
# The others must give up after GCOLL_TIMEOUT=2 (the deadline of their first fence), each with
# one line, and srun must end (it waits for every task: the sleeper ends by itself).
timed_out='^gcoll-perf: gcollCommInitFromPlan: '
timed_out+='bootstrap: PMI2 fence timed out after \([0-9.]*\)s (a rank did not arrive)'
for absent in 'exit 0' 'sleep 5'; do
  t0=$(now_ms)
  GCOLL_PLAN=$tmp/n2.yaml srun_checked 40 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 bash -c \
    "if [ \"\$PMI_RANK\" = 1 ]; then $absent; exit 0; fi
     GCOLL_TIMEOUT=2 exec \"$PERF\" -o allreduce -b 8 -e 64" >"$tmp/out"
  rc=$?
  took=$(($(now_ms) - t0))
  waits=$(sed -n "s/$timed_out.*/\\1/p" "$tmp/out")
  n=$(grep -c . <<<"$waits")
  in_bounds=$(awk '$1 >= 1.9 && $1 < 6 { n++ } END { print n + 0 }' <<<"$waits")
  others=$(grep -c '^gcoll-perf' "$tmp/out")
  ((rc != 0 && rc != 124 && n == 3 && in_bounds == 3 && others == 3 && took < 30000)) &&
    ok "rank 1 '$absent' before init: the 3 others failed after $(tr '\n' ' ' <<<"$waits")s" \
      "(step took $took ms)" ||
    bad "rank 1 '$absent': srun exit $rc after $took ms, $n timed-out lines ($in_bounds in" \
      "1.9..6 s), $others gcoll-perf lines: $(head -c 800 "$tmp/out")"
done

# --- GCOLL_RANK that is not the PMI2 rank ------------------------------------------------------
GCOLL_PLAN=$tmp/n2.yaml srun_checked 60 --mpi=pmi2 -w 'n[1-2]' -N2 -n4 --ntasks-per-node=2 bash -c \
  "GCOLL_RANK=\$(( (PMI_RANK + 1) % 4 )) exec \"$PERF\" -o allreduce -b 8 -e 64" >"$tmp/out"
rc=$?
n=0
for r in 0 1 2 3; do
  line="gcoll-perf: gcollCommInitFromPlan: bootstrap(pmi2): GCOLL_RANK=$(((r + 1) % 4)), "
  line+="but srun started this process as rank $r of 4.*"
  grep -qx "$line" "$tmp/out" && n=$((n + 1))
done
((rc != 0 && rc != 124 && n == 4)) && ok "GCOLL_RANK != PMI2 rank: each rank names both" ||
  bad "GCOLL_RANK mismatch: srun exit $rc, $n of 4 ranks explained it: $(head -c 600 "$tmp/out")"

if ((failures > 0)); then
  echo "test_pmi2: $failures failure(s)"
  exit 1
fi
echo "test_pmi2: all passed"
