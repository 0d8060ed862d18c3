#!/bin/sh
# tests/gpu/gpu_coll_check.sh on the emulated GPU (libcudaemu.so through
# $GCOLL_CUDA_DRIVER): the executor, the kernel body, device and host-pinned
# FIFOs, deadline and abort, all ranks sharing one emulated device. Here a
# skip is a failure: the emulator is always there.
#
# Sizes: the emulator runs each block as GCOLL_CUDAEMU_BLOCK_THREADS host
# threads on a CI machine's few cores, so the matrix uses smaller counts
# (GCOLL_GPU_CHECK_QUICK, see gpu_coll_check.c); every collective,
# algorithm, protocol, type and op still runs, with multi-step sizes.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
EMU=$top_builddir/tests/cudaemu/.libs/libcudaemu.so
if [ ! -f "$EMU" ]; then
  echo "test_emu_gpu_check.sh: no $EMU (make check builds it)" >&2
  exit 1
fi
# The emulator must stand alone: no CUDA library behind it.
if readelf -d "$EMU" | grep NEEDED | grep -E 'libcuda|libcudart'; then
  echo "FAIL: $EMU depends on a CUDA library" >&2
  exit 1
fi
GCOLL_CUDA_DRIVER=$EMU
GCOLL_GPU_CHECK_QUICK=${GCOLL_GPU_CHECK_QUICK:-1}
export GCOLL_CUDA_DRIVER GCOLL_GPU_CHECK_QUICK top_builddir
out=$(mktemp) || exit 1
trap 'rm -f "$out"' EXIT
start=$(date +%s)
sh "$top_srcdir/tests/gpu/gpu_coll_check.sh" >"$out" 2>&1
rc=$?
cat "$out"
echo "test_emu_gpu_check.sh: $(($(date +%s) - start)) s"
if [ $rc -eq 77 ] || grep -q 'skipped: no GPU' "$out"; then
  echo "FAIL: gpu_coll_check skipped on the emulator" >&2
  exit 1
fi
exit $rc
