#!/bin/bash
# gcoll vs Open MPI: runs `gcollrun -n NP gcoll-perf` and
# `mpirun -np NP tests/bench/mpi_allreduce` on the same sizes, one after
# the other in this invocation, and prints per size both times, both bus
# bandwidths and the ratio gcoll/MPI (>1: gcoll is faster), for np=2,
# np=4, and np=4 split into 2 virtual nodes.
#
#   top_builddir=/path/to/build tests/bench/compare-mpi.sh [options]
#     -b MIN -e MAX -f F   sizes (default -b 8 -e 128M -f 4)
#     -o COLL              allreduce (default), broadcast, reduce, allgather,
#                          reducescatter
#     -t TYPE -r OP        default float sum
#     -w W -n N            warmup and timed iterations (default 5 and 20)
#     -c 0|1               check results (default 1)
#     -B DIR               build directory with gcollrun and gcoll-perf
#                          (default $top_builddir, else .)
#
# With --nodes 2, gcoll ranks on different virtual nodes talk TCP over
# loopback; the MPI run of that configuration uses `--mca btl tcp,self`
# (set MPI_SPLIT_ARGS to change it) so both sides pay for sockets.
# A benchmark: slow numbers never make it fail. It exits 1 only when a run
# fails or reports wrong results, and 0 with a "skipped" line when Open MPI
# (mpicc, mpirun) is not installed.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$(cd "$here/../.." && pwd)}
builddir=${top_builddir:-.}
min=8 max=128M factor=4 coll=allreduce type=float op=sum warmup=5 iters=20 check=1
split_args=${MPI_SPLIT_ARGS---mca btl tcp,self}

usage() {
  sed -n '2,/^set -u/p' "$0" | sed -e '/^set -u/d' -e 's/^# \{0,1\}//' >&2
  exit 2
}

while getopts "b:e:f:o:t:r:w:n:c:B:h" opt; do
  case $opt in
  b) min=$OPTARG ;;
  e) max=$OPTARG ;;
  f) factor=$OPTARG ;;
  o) coll=$OPTARG ;;
  t) type=$OPTARG ;;
  r) op=$OPTARG ;;
  w) warmup=$OPTARG ;;
  n) iters=$OPTARG ;;
  c) check=$OPTARG ;;
  B) builddir=$OPTARG ;;
  *) usage ;;
  esac
done
shift $((OPTIND - 1))
[ $# -eq 0 ] || usage

if ! command -v mpicc >/dev/null || ! command -v mpirun >/dev/null; then
  echo "compare-mpi: skipped: mpicc/mpirun not found (apt-get install libopenmpi-dev openmpi-bin)"
  exit 0
fi
RUN=$builddir/gcollrun
PERF=$builddir/gcoll-perf
for b in "$RUN" "$PERF"; do
  if [ ! -x "$b" ]; then
    echo "compare-mpi: no executable $b (build gcoll first, or pass -B BUILDDIR)" >&2
    exit 1
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/compare-mpi.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

MPIBIN=$builddir/tests/bench/mpi_allreduce
mkdir -p "$(dirname "$MPIBIN")" 2>/dev/null || MPIBIN=$tmp/mpi_allreduce
if ! mpicc -std=gnu11 -O2 -o "$MPIBIN" "$here/mpi_allreduce.c" 2>"$tmp/cc.err"; then
  echo "compare-mpi: mpicc failed:" >&2
  cat "$tmp/cc.err" >&2
  exit 1
fi

args=(-o "$coll" -t "$type" -r "$op" -b "$min" -e "$max" -f "$factor" -w "$warmup" -n "$iters"
  -c "$check")
status=0

echo "# compare-mpi: $(mpirun --version 2>/dev/null | head -n 1) ($(mpicc --showme:version 2>&1 | head -n 1))"
echo "# $coll $type $op, sizes -b $min -e $max -f $factor, warmup $warmup, iters $iters, check $check"
echo "# ratio = gcoll busbw / MPI busbw (= MPI time / gcoll time; > 1: gcoll faster)"

# table GCOLL_OUT MPI_OUT TARGETS: joins the two nccl-tests tables by size.
# TARGETS=1 adds the np=2 goals of the runtime issue (not a pass/fail).
table() {
  awk -v targets="$3" '
    function ratio(g, m) { return g > 0 ? sprintf("%.2f", m / g) : "-" }
    FNR == 1 { file++ }
    /^#/ || NF != 13 { next }
    file == 1 { gt[$1] = $6; gb[$1] = $8; gti[$1] = $10; gw[$1] = $9 + $13; order[++n] = $1 }
    file == 2 { mt[$1] = $6; mb[$1] = $8; mti[$1] = $10; mw[$1] = $9 + $13 }
    END {
      printf "%12s  %10s  %10s  %9s  %9s  %7s  %7s  %s\n", "size(B)", "gcoll(us)", "MPI(us)",
             "gcoll-bw", "MPI-bw", "ratio", "ratio-ip", targets ? "np=2 goal" : ""
      for (i = 1; i <= n; i++) {
        s = order[i]
        if (!(s in mt)) { printf "%12s  %10s  %10s  (no MPI row)\n", s, gt[s], "-"; continue }
        goal = ""
        if (targets) {
          if (s <= 2048) goal = gt[s] <= 2 ? "<=2us met" : "<=2us missed"
          else if (s >= 65536) {
            goal = gb[s] >= mb[s] ? ">=MPI met" : ">=MPI missed"
            if (s >= 8388608) goal = goal (gb[s] >= 7.5 ? ", >=7.5 met" : ", >=7.5 missed")
          }
        }
        printf "%12s  %10s  %10s  %9s  %9s  %7s  %7s  %s\n", s, gt[s], mt[s], gb[s], mb[s],
               ratio(gt[s], mt[s]), ratio(gti[s], mti[s]), goal
        if (gw[s] != 0 || mw[s] != 0) bad = 1
      }
      if (bad) print "compare-mpi: WRONG RESULTS reported (see #wrong in the raw output)"
      exit bad
    }' "$1" "$2"
}

for cfg in "2 1" "4 1" "4 2"; do
  read -r np nodes <<<"$cfg"
  mpi_extra=()
  label="np=$np, 1 node"
  if [ "$nodes" -gt 1 ]; then
    read -r -a mpi_extra <<<"$split_args"
    label="np=$np, gcollrun --nodes $nodes; MPI with ${split_args}"
  fi
  echo
  echo "## $label"
  if ! "$RUN" -n "$np" --nodes "$nodes" "$PERF" "${args[@]}" >"$tmp/g.out" 2>"$tmp/g.err"; then
    echo "compare-mpi: gcoll run failed (np=$np nodes=$nodes):"
    tail -n 5 "$tmp/g.err"
    status=1
  fi
  if ! mpirun -np "$np" --oversubscribe --allow-run-as-root "${mpi_extra[@]}" "$MPIBIN" \
    "${args[@]}" >"$tmp/m.out" 2>"$tmp/m.err"; then
    echo "compare-mpi: MPI run failed (np=$np):"
    tail -n 5 "$tmp/m.err"
    status=1
  fi
  targets=0
  [ "$np" -eq 2 ] && [ "$nodes" -eq 1 ] && [ "$coll" = allreduce ] && targets=1
  head -n 1 "$tmp/g.out"
  head -n 1 "$tmp/m.out"
  table "$tmp/g.out" "$tmp/m.out" "$targets" || status=1
  grep '^# Avg bus bandwidth' "$tmp/g.out" | sed 's/^#/# gcoll:/'
  grep '^# Avg bus bandwidth' "$tmp/m.out" | sed 's/^#/# MPI:  /'
done
exit $status
