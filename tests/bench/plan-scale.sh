#!/bin/bash
# Plan scaling benchmark: how long `gcoll-plan generate` takes and how big the
# plan gets for 1 .. 12500 DGX-H100 nodes, and how long one rank needs to
# load its view (`show --rank LAST`, which goes through the runtime's
# streaming gcoll_plan_load_rank_view).
#
#   tests/bench/plan-scale.sh [PATH/TO/gcoll-plan]   (or $GCOLL_PLAN_BIN)
#
# Runs on one core (taskset -c 0) when taskset exists, takes the best of
# $REPEAT runs (default 3), and prints a markdown table. Rows that miss a
# target (generate <= 1000 ms, plan <= 2 MB, view load <= 20 ms) are marked
# with "!". Exit status 0 when all targets are met, 1 otherwise.
set -u

BIN=${1:-${GCOLL_PLAN_BIN:-./gcoll-plan}}
TOPO=${TOPO:-dgx-h100}
NODES=${NODES:-"1 16 256 4096 12500"}
REPEAT=${REPEAT:-3}
GEN_MS_MAX=1000
SIZE_KB_MAX=2048
VIEW_MS_MAX=20

if [ ! -x "$BIN" ]; then
  echo "plan-scale: no executable gcoll-plan at '$BIN' (pass it as argument or set GCOLL_PLAN_BIN)" >&2
  exit 2
fi
if [ -z "${GCOLL_TOPO_DIR:-}" ]; then
  srcdir=$(cd "$(dirname "$0")/../.." && pwd)
  [ -d "$srcdir/etc/topologies" ] && export GCOLL_TOPO_DIR="$srcdir/etc/topologies"
fi

PIN=()
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then
  PIN=(taskset -c 0)
  cores="1 core (taskset -c 0)"
else
  cores="all cores (no taskset)"
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-bench.XXXXXX") || exit 2
trap 'rm -rf "$tmp"' EXIT

now_ns() { date +%s%N; }

# best_ms CMD...: the fastest of $REPEAT runs, in ms (3 decimals); fails if
# the command fails.
best_ms() {
  local best="" t0 t1 ms i
  for i in $(seq 1 "$REPEAT"); do
    t0=$(now_ns)
    "${PIN[@]}" "$@" >/dev/null 2>"$tmp/err" || return 1
    t1=$(now_ns)
    ms=$(( (t1 - t0) / 1000 ))
    if [ -z "$best" ] || [ "$ms" -lt "$best" ]; then best=$ms; fi
  done
  awk -v us="$best" 'BEGIN { printf "%.1f", us / 1000 }'
}

over() { awk -v v="$1" -v max="$2" 'BEGIN { exit !(v > max) }'; }

echo "gcoll-plan scaling, topology $TOPO, $cores, best of $REPEAT"
echo "(view load includes process start-up; targets: generate <= ${GEN_MS_MAX} ms, size <= $((SIZE_KB_MAX / 1024)) MB, view <= ${VIEW_MS_MAX} ms)"
echo
echo "| nodes | ranks | generate (ms) | size (KB) | view load (ms) |"
echo "|------:|------:|--------------:|----------:|---------------:|"
status=0
for n in $NODES; do
  plan="$tmp/plan-$n.yaml"
  if ! gen=$(best_ms "$BIN" generate --topo "$TOPO" --nodes "$n" -q -o "$plan"); then
    echo "plan-scale: generate for $n nodes failed: $(head -c 300 "$tmp/err")" >&2
    status=1
    continue
  fi
  ranks=$("$BIN" verify "$plan" 2>/dev/null | sed -n 's/.*OK (\([0-9]*\) rank.*/\1/p')
  if [ -z "$ranks" ]; then
    echo "plan-scale: the $n-node plan does not verify: $("$BIN" verify "$plan" 2>&1 | head -c 300)" >&2
    status=1
    continue
  fi
  bytes=$(wc -c <"$plan")
  size_kb=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1024 }')
  if ! view=$(best_ms "$BIN" show "$plan" --rank $((ranks - 1))); then
    echo "plan-scale: show --rank $((ranks - 1)) failed: $(head -c 300 "$tmp/err")" >&2
    status=1
    continue
  fi
  mark_gen="" mark_size="" mark_view=""
  over "$gen" "$GEN_MS_MAX" && mark_gen=" !" && status=1
  over "$size_kb" "$SIZE_KB_MAX" && mark_size=" !" && status=1
  over "$view" "$VIEW_MS_MAX" && mark_view=" !" && status=1
  echo "| $n | $ranks | $gen$mark_gen | $size_kb$mark_size | $view$mark_view |"
done
exit $status
