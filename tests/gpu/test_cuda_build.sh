#!/bin/bash
# What the CUDA build produced, checked without a GPU:
#  1. the fatbin embedded in libgcoll holds sm_80 and sm_90 cubins and
#     compute_90 PTX (listed by libgcoll's own fatbin parser, since CUDA 13
#     has no cuobjdump), and is byte for byte the file nvcc wrote;
#  2. libgcoll.so needs no libcuda and no libcudart (readelf -d and ldd);
#  3. with no driver loadable, the loader's probe says "no CUDA driver",
#     creating a CUDA executor fails with that line, and a 2-rank collective
#     still runs on the host path (gcollrun + gcoll-perf);
#  4. with the toolkit's stub libcuda (every entry point, no GPU behind it)
#     the loader resolves all its symbols and reports "no GPU" from cuInit.
set -u
top_builddir=${top_builddir:-.}
PROBE=$top_builddir/tests/gpu/cuda_probe
LIB=$top_builddir/.libs/libgcoll.so
FATBIN=$top_builddir/src/kernels/coll_kernels.fatbin
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

for f in "$PROBE" "$LIB" "$FATBIN"; do
  [ -e "$f" ] || { echo "test_cuda_build: missing $f" >&2; exit 1; }
done
# A LD_LIBRARY_PATH without the toolkit's directories (stubs included).
clean_path=$(printf '%s' "${LD_LIBRARY_PATH:-}" | tr ':' '\n' | grep -v -e cuda -e '^$' | paste -sd: -)

# 1. Images.
images=$(env LD_LIBRARY_PATH="$clean_path" "$PROBE" images) || bad "cuda_probe images failed"
for want in "cubin sm_80" "cubin sm_90" "ptx compute_90"; do
  if printf '%s\n' "$images" | grep -q "^$want "; then ok; else bad "fatbin lacks $want: $images"; fi
done
n=$(printf '%s\n' "$images" | grep -c .)
[ "$n" -eq 3 ] && ok || bad "expected 3 images, found $n: $images"
# Independent of the parser: the file holds exactly two ELF images.
elf=$(grep -c -a -o -P '\x7fELF' "$FATBIN")
[ "$elf" -eq 2 ] && ok || bad "$FATBIN holds $elf ELF images, expected 2"
# The listed payload sizes add up to at most the file (headers make up the rest).
total=$(printf '%s\n' "$images" | awk '{s += $3} END {print s}')
size=$(stat -c %s "$FATBIN")
[ "$total" -gt 0 ] && [ "$total" -lt "$size" ] && ok || bad "image bytes $total vs file $size"

# 2. No CUDA library among libgcoll's dependencies.
if readelf -d "$LIB" | grep NEEDED | grep -q -i -e libcuda -e libcudart; then
  bad "libgcoll.so NEEDs a CUDA library: $(readelf -d "$LIB" | grep NEEDED | tr -s ' ')"
else ok; fi
if env LD_LIBRARY_PATH="$clean_path" ldd "$LIB" | grep -q -i -e libcuda -e libcudart; then
  bad "ldd libgcoll.so shows a CUDA library"
else ok; fi

# 3. No driver at all.
nodrv="$top_builddir/no-such-dir/libcuda.so.1"
out=$(env LD_LIBRARY_PATH="$clean_path" GCOLL_CUDA_DRIVER="$nodrv" "$PROBE" driver)
rc=$?
[ $rc -eq 3 ] && ok || bad "probe without a driver exited $rc: $out"
case $out in "no CUDA driver: "*) ok ;; *) bad "probe line without a driver: $out" ;; esac
out=$(env LD_LIBRARY_PATH="$clean_path" GCOLL_CUDA_DRIVER="$nodrv" "$PROBE" exec)
rc=$?
[ $rc -eq 5 ] && ok || bad "executor without a driver: exit $rc: $out"
case $out in "no CUDA driver: "*) ok ;; *) bad "executor error without a driver: $out" ;; esac
echo "probe without a driver: $out"
RUN=$top_builddir/gcollrun
PERF=$top_builddir/gcoll-perf
if [ -x "$RUN" ] && [ -x "$PERF" ]; then
  if perf=$(env LD_LIBRARY_PATH="$clean_path" GCOLL_CUDA_DRIVER="$nodrv" \
      timeout 120 "$RUN" -n 2 "$PERF" -b 8 -e 1K 2>&1); then
    if printf '%s\n' "$perf" | grep -q -E '^ +1024 '; then ok; else bad "gcoll-perf printed no 1K row: $perf"; fi
  else
    bad "gcollrun -n 2 gcoll-perf failed without a CUDA driver: $perf"
  fi
else
  echo "note: gcollrun/gcoll-perf not built, host collective not run"
fi

# 4. The stub driver: loads, resolves everything, has no GPU.
stub=$CUDA_HOME/lib64/stubs/libcuda.so
if [ -e "$stub" ]; then
  out=$(env LD_LIBRARY_PATH="$clean_path" GCOLL_CUDA_DRIVER="$stub" "$PROBE" driver)
  rc=$?
  [ $rc -eq 4 ] && ok || bad "probe on the stub driver exited $rc: $out"
  case $out in "no GPU: cuInit: CUDA_ERROR_STUB_LIBRARY"*) ok ;; *) bad "stub probe line: $out" ;; esac
  echo "probe on the stub driver: $out"
else
  echo "note: no $stub, stub driver not checked"
fi

echo "test_cuda_build: $pass passed, $fail failed"
[ $fail -eq 0 ]
