#!/bin/bash
# Plan scaling benchmark: build time, write time, file size and one rank's
# view-load time for 1 .. 12500 DGX-H100 nodes (tests/bench/plan_bench.c),
# then the whole `gcoll-plan generate` command for the largest job, start-up
# included, as a user sees it.
#
#   tests/bench/plan-scale.sh [BUILDDIR]      (default: .)
#
# Targets (from issue 3): build <= 1000 ms and plan <= 2 MB at 12500 nodes,
# view load <= 20 ms. Rows that miss one are marked "!" for a person to read;
# the exit status reports only failures, since timings on shared machines
# are noise-prone and must not gate CI.
set -u

builddir=${1:-.}
srcdir=$(cd "$(dirname "$0")/../.." && pwd)
bench=$builddir/tests/bench/plan_bench
cli=$builddir/gcoll-plan
topo=${TOPO:-$srcdir/etc/topologies/dgx-h100.yaml}
nodes=${NODES:-"1 16 256 4096 12500"}

for f in "$bench" "$cli"; do
  if [ ! -x "$f" ]; then
    echo "plan-scale: $f is not built (make, then pass the build directory)" >&2
    exit 2
  fi
done

PIN=()
if command -v taskset >/dev/null 2>&1 && taskset -c 0 true 2>/dev/null; then
  PIN=(taskset -c 0)
fi

# shellcheck disable=SC2086
"${PIN[@]}" "$bench" "$topo" $nodes | tee /tmp/plan-scale.$$ || { rm -f /tmp/plan-scale.$$; exit 1; }
awk -F'|' 'NR > 4 && ($4 + 0 > 1000 || $6 + 0 > 2048 || $7 + 0 > 20 || $8 + 0 > 20) {
  print "plan-scale: ! row " $2 "nodes misses a target (build <= 1000 ms, size <= 2048 KB, view <= 20 ms)" }' /tmp/plan-scale.$$
rm -f /tmp/plan-scale.$$

last=${nodes##* }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-bench.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
t0=$(date +%s%N)
if ! "${PIN[@]}" "$cli" generate --topo "$topo" --nodes "$last" -q -o "$tmp/plan.yaml"; then
  echo "plan-scale: gcoll-plan generate for $last nodes failed" >&2
  exit 1
fi
t1=$(date +%s%N)
echo
echo "gcoll-plan generate --nodes $last (whole command, start-up included): $(( (t1 - t0) / 1000000 )) ms"
