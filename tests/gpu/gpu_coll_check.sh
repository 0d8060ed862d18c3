#!/bin/sh
# The GPU correctness test: gpu_coll_check with 2, 3, 4 and 8 ranks sharing
# the one GPU, FIFOs in device memory and (2 and 4 ranks) in host-pinned
# memory. Skips (77, "skipped: no GPU") where the CUDA driver or a GPU is
# missing. tests/cudaemu/test_emu_gpu_check.sh runs it on the emulated GPU
# (GCOLL_CUDA_DRIVER=libcudaemu.so); it has never run on a real one.
set -u
top_builddir=${top_builddir:-.}
CHECK=$top_builddir/tests/gpu/gpu_coll_check
if [ ! -x "$CHECK" ]; then
  echo "gpu_coll_check.sh: no executable $CHECK" >&2
  exit 1
fi
for run in "2 device" "3 device" "4 device" "8 device" "2 host" "4 host"; do
  # shellcheck disable=SC2086 # two words on purpose
  timeout 600 "$CHECK" $run
  rc=$?
  [ $rc -eq 77 ] && exit 77
  [ $rc -ne 0 ] && { echo "FAIL: gpu_coll_check $run (exit $rc)" >&2; exit 1; }
done
exit 0
