#!/bin/bash
# gcoll's libnccl.so.2 against the system's real nccl.h: soname and exports,
# the ABI (values, layouts and every signature, at compile time), then an
# NCCL program built against that header and linked to our library (never
# to libcudart or a real NCCL) run as real processes: every collective
# through gcollrun with 1-4 ranks and two virtual nodes, refusals, plan=auto
# (ncclGetUniqueId + ncclCommInitRank without a launcher) and
# ncclCommInitAll. Skips when nccl.h is missing (77).
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ ! -f "$inc/nccl.h" ] || [ ! -f "$inc/cuda_runtime.h" ]; then
  echo "skipped: nccl.h not found (looked in $inc; set CUDA_HOME)"
  exit 77
fi
LIB=$top_builddir/.libs/libnccl.so.2
GCOLL_LIB=$top_builddir/.libs/libgcoll.so
RUN=$top_builddir/gcollrun
for f in "$LIB" "$GCOLL_LIB" "$RUN"; do
  [ -e "$f" ] || { echo "test_nccl_abi: $f is not built" >&2; exit 99; }
done
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-nccl.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# The compiler and sanitizer flags of this build: an ASan library needs an
# ASan program (its runtime must be loaded first).
mkvar() { sed -n "s/^$1 = //p" "$top_builddir/Makefile" | head -1; }
CC=$(mkvar CC)
SAN=$(mkvar SAN_CFLAGS)
WARN=$(mkvar WARN_CFLAGS)
[ -n "$CC" ] || CC=cc

# --- the library -----------------------------------------------------------
soname=$(readelf -d "$LIB" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
if [ "$soname" = libnccl.so.2 ]; then ok "soname $soname"; else bad "soname is '$soname'"; fi

api="GetVersion GetUniqueId CommInitRank CommInitRankConfig CommInitAll CommFinalize CommSplit
  CommDestroy CommAbort CommGetAsyncError CommCount CommCuDevice CommUserRank AllReduce
  Broadcast Bcast Reduce AllGather ReduceScatter Send Recv GroupStart GroupEnd GetErrorString
  GetLastError RedOpCreatePreMulSum RedOpDestroy MemAlloc MemFree CommRegister CommDeregister
  AlltoAll Gather Scatter"
nm -D --defined-only "$LIB" | awk '$2 ~ /^[TtWi]$/ {print $3}' | sort >"$tmp/exports"
missing=""
for f in $api; do
  for name in "nccl$f" "pnccl$f"; do
    grep -qx "$name" "$tmp/exports" || missing="$missing $name"
  done
done
if [ -z "$missing" ]; then ok "exports all $(echo $api | wc -w) functions and their pnccl aliases"
else bad "not exported:$missing"; fi
others=$(grep -v -E '^p?nccl[A-Z]' "$tmp/exports" | tr '\n' ' ')
if [ -z "$others" ]; then ok "exports nothing but nccl*/pnccl*"; else bad "also exports: $others"; fi

# --- the ABI against nccl.h, at compile time -----------------------------------
if $CC -std=gnu11 $WARN -I"$inc" -I"$top_srcdir/include" -I"$top_srcdir/src" \
     -c "$top_srcdir/tests/nccl/nccl_abi_layout.c" -o "$tmp/layout.o" 2>"$tmp/cc.out"; then
  ok "ABI matches $inc/nccl.h (values, ncclConfig_t layout, every signature)"
else
  bad "ABI differs from $inc/nccl.h"; head -20 "$tmp/cc.out"
fi

# --- the NCCL program ---------------------------------------------------------
PROG=$tmp/nccl_host_check
if $CC -std=gnu11 $WARN $SAN -pthread -I"$inc" -I"$top_srcdir/include" -I"$top_srcdir/src" \
     -I"$top_srcdir/tests/integration" "$top_srcdir/tests/nccl/nccl_host_check.c" -o "$PROG" \
     "$LIB" "$GCOLL_LIB" -Wl,-rpath,"$(cd "$top_builddir/.libs" && pwd)" -ldl \
     -rdynamic \
     2>"$tmp/cc.out"; then
  ok "nccl_host_check compiled against nccl.h"
else
  bad "nccl_host_check does not compile"; head -20 "$tmp/cc.out"
  echo "$pass passed, $fail failed"; exit 1
fi
needed=$(readelf -d "$PROG" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
if echo "$needed" | grep -qw libnccl.so.2 && ! echo "$needed" | grep -q libcuda; then
  ok "program needs $needed(no libcudart, no libcuda)"
else
  bad "program needs: $needed"
fi
# The program checks with dladdr that ncclAllReduce comes from this file.
export NCCL_SHIM_LIB=$LIB

# case NAME TIMEOUT COMMAND...: one run, its output shown on failure.
case_run() {
  local name=$1 limit=$2; shift 2
  local t0=$SECONDS
  if timeout "$limit" "$@" >"$tmp/out" 2>&1; then
    ok "$name ($((SECONDS - t0)) s): $(tail -1 "$tmp/out")"
  else
    bad "$name: exit $?"; tail -20 "$tmp/out"
  fi
}

for n in 1 2 3 4; do
  case_run "matrix n=$n" 120 "$RUN" -n "$n" "$PROG" matrix
done
case_run "matrix n=4 on 2 virtual nodes" 120 "$RUN" -n 4 --nodes 2 "$PROG" matrix
# The other algorithm and protocol (the tree serves allreduce only).
case_run "matrix n=3, tree and LL" 120 env GCOLL_ALGO=tree GCOLL_PROTO=ll "$RUN" -n 3 "$PROG" matrix
# Device buffers and a stream, as CUDA programs call NCCL, on the emulated
# GPU (built with the CUDA toolkit only).
EMU=$top_builddir/tests/cudaemu/.libs/libcudaemu.so
if [ -f "$EMU" ]; then
  for spec in "1" "3" "4 --nodes 2"; do
    # shellcheck disable=SC2086
    case_run "device buffers on the emulated GPU, n=$spec" 300 env GCOLL_CUDA_DRIVER="$EMU" \
      "$RUN" -n $spec "$PROG" device
  done
  case_run "device buffers on the emulated GPU, n=3, tree and LL" 300 env GCOLL_ALGO=tree \
    GCOLL_PROTO=ll GCOLL_CUDA_DRIVER="$EMU" "$RUN" -n 3 "$PROG" device
fi
# GPU identity by PCI bus id (issue 22 part 4): a DGX H100 plan puts local
# rank l on GPU l; each rank's emulated device reports the bus id the test
# gives it, as CUDA_VISIBLE_DEVICES or a cgroup would leave it.
#   identity_run NAME BUSID0 BUSID1 WANT: local rank l drives BUSIDl; WANT is
#   "derived LIST" (the world's plan derived for launcher ranks LIST) or
#   "launcher" (the launcher's plan as it is).
identity_run() {
  local name=$1 b0=$2 b1=$3 want=$4 t0=$SECONDS
  "$top_builddir/gcoll-plan" generate -q --topo dgx-h100 --hosts "$(hostname -s)-v[0-1]" -k 2 \
    -o "$tmp/dgx.yaml" || { bad "$name: gcoll-plan generate"; return; }
  GCOLL_DEBUG=INFO GCOLL_P2P_DISABLE=1 GCOLL_CUDA_DRIVER="$EMU" timeout 120 \
    "$RUN" -n 4 --nodes 2 --plan "$tmp/dgx.yaml" bash -c \
    'if [ $((GCOLL_RANK % 2)) = 0 ]; then b=$1; else b=$2; fi; GCOLL_CUDAEMU_BUSIDS=$b exec "$0" identity' \
    "$PROG" "$b0" "$b1" >"$tmp/out" 2>"$tmp/err"
  local rc=$? good world
  good=$(grep -c "identity: 10 calls on device buffers, 0 wrong; split ok" "$tmp/out")
  case $want in
  launcher) world=$(grep -c "plan the launcher's plan; drives GPU" "$tmp/err") ;;
  *) world=$(grep -c "plan derived from the launcher's plan $tmp/dgx.yaml for its ranks ${want#derived } *;" "$tmp/err") ;;
  esac
  if [ $rc -eq 0 ] && [ "$good" -eq 4 ] && [ "$world" -ge 4 ]; then
    ok "$name ($((SECONDS - t0)) s)"
  else
    bad "$name: exit $rc, $good of 4 ranks right, $world world joins on the expected plan"
    tail -n 15 "$tmp/out" "$tmp/err"
  fi
}
if [ -f "$EMU" ]; then
  # GPUs 0 and 1 of a DGX H100 are 0000:1b:00.0 and 0000:43:00.0.
  identity_run "GPU identity: each node's two ranks drive each other's GPU" \
    0000:43:00.0 0000:1b:00.0 "derived 1,0,3,2"
  check_line() { if grep -q "$2" "$tmp/err"; then ok "$1"; else bad "$1: no '$2' in the log"; fi; }
  check_line "GPU identity: the swap is logged" \
    "launcher rank 0 drives GPU 0000:43:00.0, which the plan gives rank 1 of $(hostname -s)-v0"
  check_line "GPU identity: rank 0 of the world drives GPU 1" \
    "gcoll rank 0: plan derived from .* for its ranks 1,0,3,2; drives GPU 1 of $(hostname -s)-v0"
  check_line "GPU identity: the split's plans follow the GPUs too" \
    "plan derived from .* for its ranks 1,3; drives GPU 1 of $(hostname -s)-v1"
  identity_run "GPU identity: a GPU the plan does not have keeps the launcher's numbering" \
    0000:d1:00.0 0000:43:00.0 launcher
  check_line "GPU identity: the unplanned GPU is logged" \
    "launcher rank 2 drives GPU 0000:d1:00.0, which the plan does not place on $(hostname -s)-v1 (it planned GPU 0000:1b:00.0 there)"
  identity_run "GPU identity: both ranks of a node on one GPU keep the launcher's numbering" \
    0000:1b:00.0 0000:1b:00.0 launcher
fi
# ncclConfig_t's fields that mean something in gcoll (issue 22 part 3).
# GCOLL_MAX_NCHANNELS=4 lifts the CPU cap, so "at most 1" is maxCTAs's doing.
GCOLL_MAX_NCHANNELS=4 GCOLL_DEBUG=INFO timeout 120 "$RUN" -n 4 --nodes 2 "$PROG" config >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && [ "$(grep -c "config: [0-9]* calls, 0 wrong" "$tmp/out")" -eq 4 ] &&
   [ "$(grep -c "^gcoll rank [0-3] (tp): joined .* (at most 1 at once)" "$tmp/err")" -eq 4 ] &&
   [ "$(grep -c "^gcoll rank [0-3] (tp): net/ib not started (netName Socket)" "$tmp/err")" -eq 4 ]; then
  ok "ncclConfig_t: maxCTAs 1, netName Socket, commName tp honoured on 4 ranks of 2 nodes, 0 wrong"
else
  bad "ncclConfig_t fields: exit $rc"; tail -n 8 "$tmp/out" "$tmp/err"
fi
case_run "refusals n=2" 60 "$RUN" -n 2 "$PROG" refusals
case_run "ncclCommAbort from another thread" 60 "$RUN" -n 2 "$PROG" abort
case_run "plan=auto, 3 processes" 60 env -u GCOLL_PLAN "$PROG" auto 3
case_run "plan=auto, 4 processes on 2 virtual nodes" 60 env -u GCOLL_PLAN GCOLL_NODES=2 \
  "$PROG" auto 4
case_run "ncclCommInitAll, 4 comms on 4 threads" 60 env -u GCOLL_PLAN "$PROG" initall 4
case_run "ncclCommInitAll, 3 comms grouped on one thread" 60 env -u GCOLL_PLAN "$PROG" initall-grouped 3

# The device-memory probe and the current-device lookup, with a fake driver
# (libcuda.so.1 from fake_libcuda.c) and the program's own cudaGetDevice.
mkdir -p "$tmp/fakecuda"
if $CC -std=gnu11 $WARN -shared -fPIC "$top_srcdir/tests/nccl/fake_libcuda.c" \
     -o "$tmp/fakecuda/libcuda.so.1" 2>"$tmp/cc.out"; then
  case_run "\"device\" buffers refused, managed ones used" 60 env -u GCOLL_PLAN \
    LD_LIBRARY_PATH="$tmp/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PROG" devmem refuse
  case_run "all host memory when cuInit fails" 60 env -u GCOLL_PLAN FAKE_CUDA_INIT_FAILS=1 \
    LD_LIBRARY_PATH="$tmp/fakecuda${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$PROG" devmem host
else
  bad "fake libcuda does not compile"; head -20 "$tmp/cc.out"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
