#!/bin/sh
# Builds the libFuzzer targets (topology YAML, NCCL topology XML, plan YAML,
# endpoints YAML)
# with clang (ASan + UBSan) straight from the sources and fuzzes them for
# 2 x SECONDS in all (default 60), shared equally: the budget the two YAML
# targets had before the XML one joined. Everything happens in
# a temporary directory: the seed corpus is copied there, so the repository
# is never written. Exits non-zero when a target produced a crash, leak,
# timeout or out-of-memory artifact, printing where it is and how to
# reproduce it.
#
#   tests/fuzz/run-fuzz.sh [SECONDS]
#   CC=clang-14 TMPDIR=/scratch tests/fuzz/run-fuzz.sh 300
set -eu

seconds=${1:-60}
case $seconds in
  ''|*[!0-9]*) echo "usage: $0 [SECONDS]" >&2; exit 2 ;;
esac

src=$(cd "$(dirname "$0")/../.." && pwd)
CC=${CC:-clang}
command -v "$CC" >/dev/null 2>&1 || { echo "run-fuzz.sh: $CC not found (set CC)" >&2; exit 2; }
work=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-fuzz.XXXXXX")

san="-fsanitize=address,undefined -fno-sanitize-recover=all"
cflags="-std=gnu11 -g -O1 -fno-omit-frame-pointer $san -I$src/include -I$src/src"
cflags="$cflags -DGCOLL_SRC_TOPO_DIR=\"$src/etc/topologies\" -DGCOLL_TOPO_DIR=\"$src/etc/topologies\""
deps="yaml-0.1 libxml-2.0"
if pkg-config --exists hwloc 2>/dev/null; then
  deps="$deps hwloc"
  cflags="$cflags -DHAVE_HWLOC=1"
fi
cflags="$cflags $(pkg-config --cflags $deps)"
libs="$(pkg-config --libs $deps) -ldl -lm"

# The library once, instrumented for coverage but without libFuzzer's main.
echo "== building in $work"
mkdir -p "$work/obj"
# The graph layer and the part of the common layer it uses (GRAPH_SOURCES
# in Makefile.am: the collective names, the driver libraries' loader).
for c in "$src"/src/graph/*.c "$src"/src/common/coll_names.c "$src"/src/common/driver_libs.c; do
  $CC $cflags -fsanitize=fuzzer-no-link -c "$c" -o "$work/obj/$(basename "$c" .c).o"
done
targets="topo topo_xml plan endpoints"
for t in $targets; do
  $CC $cflags -fsanitize=fuzzer "$src/tests/fuzz/fuzz_$t.c" "$work"/obj/*.o $libs \
    -o "$work/fuzz_$t"
done
# The total stays 2 x SECONDS whatever the number of targets (at least 1 s each).
ntargets=$(echo $targets | wc -w)
each=$(( 2 * seconds / ntargets ))
[ "$each" -ge 1 ] || each=1

status=0
for t in $targets; do
  corpus_dir=$(echo "$t" | tr _ -)
  mkdir -p "$work/corpus/$t" "$work/artifacts/$t"
  cp -R "$src/tests/fuzz/corpus/$corpus_dir/." "$work/corpus/$t/"
  seeds="$work/corpus/$t"
  if [ "$t" = topo_xml ]; then
    # IBM Cloud's NCCL dump lives in the workspace only (no licence stated).
    cp "$src"/../shared/topologies/nccl/*.xml "$seeds/" 2>/dev/null || true
  else
    # Valid topologies are good plan-reader food too (and the topology seeds).
    [ -d "$src/etc/topologies" ] && cp "$src"/etc/topologies/*.yaml "$seeds/" 2>/dev/null || true
  fi
  echo "== fuzz_$t for ${each}s ($(ls "$seeds" | wc -l) seeds)"
  rc=0
  "$work/fuzz_$t" -max_total_time="$each" -dict="$src/tests/fuzz/$t.dict" \
    -max_len=65536 -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
    -artifact_prefix="$work/artifacts/$t/" "$seeds" >"$work/fuzz_$t.log" 2>&1 || rc=$?
  tail -n 25 "$work/fuzz_$t.log"
  found=$(find "$work/artifacts/$t" -type f \( -name 'crash-*' -o -name 'leak-*' \
          -o -name 'timeout-*' -o -name 'oom-*' \) | sort)
  if [ -n "$found" ] || [ $rc -ne 0 ]; then
    status=1
    echo "!! fuzz_$t failed (status $rc); full log: $work/fuzz_$t.log"
    for a in $found; do
      echo "!! artifact: $a"
      echo "   reproduce: $work/fuzz_$t $a"
      echo "   or, in a build tree: tests/fuzz/fuzz_${t}_replay $a"
      echo "   keep it as a regression seed: cp $a $src/tests/fuzz/corpus/$corpus_dir/crash-WHAT"
    done
  fi
done

if [ $status -eq 0 ]; then
  echo "== no crashes; removing $work"
  rm -rf "$work"
else
  echo "== kept $work for the artifacts and logs"
fi
exit $status
