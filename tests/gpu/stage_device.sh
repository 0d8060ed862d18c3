#!/bin/bash
# Stages what tests/gpu/device_run.sh needs from a CUDA build tree into a
# small folder that can be copied to a GPU machine which has the driver but
# not this machine's libraries: the real executables (not libtool's
# wrappers) at the paths the test scripts expect, libgcoll, libnccl.so.2 and
# the libraries they load in lib/, and the two GPU benchmarks (make check
# builds them).
#
#   tests/gpu/stage_device.sh BUILD STAGE [NCCL_TESTS_BUILD]
#
# NCCL_TESTS_BUILD: a build folder of NVIDIA's nccl-tests (built by hand
# beside the project, never part of it); its all_reduce_perf and the CUDA
# runtime it links go to STAGE/nccl-tests.
set -eu
B=$(cd "$1" && pwd) S=$2
src=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$S" && mkdir -p "$S/lib" "$S/tests/gpu" "$S/tests/integration"
for p in gcollrun gcoll-perf gcoll-plan; do cp "$B/.libs/$p" "$S/"; done
for p in coll_check p2p_check; do cp "$B/tests/integration/.libs/$p" "$S/tests/integration/"; done
# These two link libgcoll's objects statically (libgcoll_internal.la): no
# wrapper, the executable is where make put it.
for p in cuda_probe gpu_coll_check; do cp "$B/tests/gpu/$p" "$S/tests/gpu/"; done
cp -P "$B"/.libs/libgcoll.so* "$B"/.libs/libnccl.so* "$S/lib/"
# The libraries libgcoll needs that a CUDA image may lack (libc's own stay).
ldd "$B/.libs/libgcoll.so" "$B/.libs/libnccl.so.2" |
  awk '$3 ~ /^\// {print $3}' | sort -u |
  grep -Ev '/(libc|libm|libdl|libpthread|librt|ld-linux[^/]*)\.so' |
  while read -r l; do cp -L "$l" "$S/lib/"; done
for p in nccl_bench bench_reduce_copy; do cp "$B/tests/gpu/$p" "$S/tests/gpu/"; done
# The NCCL-API programs the nccl tests compile on the fly (against the
# toolkit's nccl.h): the ABI matrix with device buffers, and the replay of
# PyTorch's calls.
inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ -f "$inc/nccl.h" ]; then
  mkdir -p "$S/tests/nccl"
  ${CC:-cc} -std=gnu11 -O2 -pthread -I"$inc" -I"$src/include" -I"$src/src" -I"$src/tests/integration" \
    "$src/tests/nccl/nccl_host_check.c" -o "$S/tests/nccl/nccl_host_check" "$B/.libs/libnccl.so.2" \
    "$B/.libs/libgcoll.so" -Wl,-rpath,'$ORIGIN/../../lib' -ldl -rdynamic
  ${CC:-cc} -std=gnu11 -O2 -pthread -I"$inc" "$src/tests/nccl/nccl_groups_check.c" \
    -o "$S/tests/nccl/nccl_groups_check" "$B/.libs/libnccl.so.2" -Wl,-rpath,'$ORIGIN/../../lib'
fi
if [ $# -ge 3 ]; then
  mkdir -p "$S/nccl-tests"
  cp "$3/all_reduce_perf" "$S/nccl-tests/"
  ldd "$3/all_reduce_perf" | awk '$1 ~ /^libcudart/ {print $3}' | xargs -r -I{} cp -L {} "$S/nccl-tests/"
fi
du -sh "$S"
