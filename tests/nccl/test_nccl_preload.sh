#!/bin/bash
# Deployment the way PyTorch needs it: its wheels load libnccl.so.2 from
# their own nvidia/nccl/lib through an RPATH, so putting gcoll's first on
# LD_LIBRARY_PATH is not enough; LD_PRELOAD is. A program built against the
# real nccl.h and linked (with an RPATH) to "the wheel's" libnccl.so.2 - a
# copy of the library in another directory, standing in for NVIDIA's - must
# get gcoll's when gcoll's is preloaded: nccl_host_check finds with dladdr
# which file defines ncclAllReduce and refuses any other than
# $NCCL_SHIM_LIB. The link uses DT_RPATH (not RUNPATH): the case where
# LD_LIBRARY_PATH cannot win, whichever the wheel has. Without the preload
# the same run must report the wheel's copy, which proves the check can
# fail. Skips when nccl.h is missing (77).
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ ! -f "$inc/nccl.h" ] || [ ! -f "$inc/cuda_runtime.h" ]; then
  echo "skipped: nccl.h not found (looked in $inc; set CUDA_HOME)"
  exit 77
fi
libdir=$(cd "$top_builddir/.libs" && pwd)
LIB=$libdir/libnccl.so.2
RUN=$top_builddir/gcollrun
for f in "$LIB" "$libdir/libgcoll.so" "$RUN"; do
  [ -e "$f" ] || { echo "test_nccl_preload: $f is not built" >&2; exit 99; }
done
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-preload.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
mkvar() { sed -n "s/^$1 = //p" "$top_builddir/Makefile" | head -1; }
CC=$(mkvar CC)
[ -n "$CC" ] || CC=cc

wheel=$tmp/site-packages/nvidia/nccl/lib
mkdir -p "$wheel"
cp "$(readlink -f "$LIB")" "$wheel/libnccl.so.2"
PROG=$tmp/nccl_host_check
if ! $CC -std=gnu11 $(mkvar WARN_CFLAGS) $(mkvar SAN_CFLAGS) -pthread -I"$inc" \
     -I"$top_srcdir/include" -I"$top_srcdir/src" -I"$top_srcdir/tests/integration" \
     "$top_srcdir/tests/nccl/nccl_host_check.c" -o "$PROG" "$wheel/libnccl.so.2" \
     "$libdir/libgcoll.so" -Wl,--disable-new-dtags -Wl,-rpath,"$wheel" -Wl,-rpath,"$libdir" \
     -ldl -rdynamic \
     2>"$tmp/cc.out"; then
  bad "nccl_host_check does not compile"; head -20 "$tmp/cc.out"
  echo "$pass passed, $fail failed"; exit 1
fi
export NCCL_SHIM_LIB=$LIB

timeout 120 "$RUN" -n 2 "$PROG" matrix >"$tmp/out" 2>&1
if [ $? -ne 0 ] && grep -q "ncclAllReduce comes from $wheel/libnccl.so.2, not from \$NCCL_SHIM_LIB" "$tmp/out"; then
  ok "without LD_PRELOAD the RPATH's libnccl.so.2 is used (and the check says so)"
else
  bad "without LD_PRELOAD"; tail -5 "$tmp/out"
fi
# A sanitizer build's library needs its runtime loaded before it.
preload=$LIB
if [[ " $(mkvar SAN_CFLAGS) " == *-fsanitize=address* ]]; then
  preload="$($CC -print-file-name=libasan.so) $LIB"
fi
LD_PRELOAD=$preload timeout 120 "$RUN" -n 2 "$PROG" matrix >"$tmp/out" 2>&1
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c ' 0 wrong' "$tmp/out")" -ge 2 ]; then
  ok "LD_PRELOAD=gcoll's libnccl.so.2 wins over the RPATH: the matrix runs on gcoll, 0 wrong"
else
  bad "with LD_PRELOAD (exit $rc)"; tail -5 "$tmp/out"
fi
echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
