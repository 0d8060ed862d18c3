#!/bin/bash
# gcollSend/gcollRecv on device buffers, on the emulated GPU (libcudaemu.so
# through $GCOLL_CUDA_DRIVER), with real processes under gcollrun: groups of
# device buffers only are queued on the stream and moved by the GPU
# (gcoll_cuda_p2p); groups mixing host and device memory, and
# GCOLL_P2P_KERNEL=0, are staged by the calling thread through the host
# FIFOs with the driver's copies. `p2p_check --device exchange` compares every received
# byte with what the sender generated (a function of sender, receiver,
# message and seed): every datatype, sizes 0, 1, primes and messages of
# many FIFO slots (GCOLL_SLOT_BYTES=4096), ring and all-pairs in groups,
# self send/recv, device send to host receive and back, stream order
# against work queued just before and after, the result of a queued device
# allreduce, and a host buffer with a stream refused; over shm, and over
# net/socket and the proxy between virtual nodes; with two emulated GPUs, a
# call on GPU 0's buffers while GPU 1's context is current. `--device
# async` checks the queued side: a send returns before its late receiver
# took it, a size mismatch, a dead peer and an abort reported while the GPU
# waits.
set -u
top_builddir=${top_builddir:-.}
EMU=$top_builddir/tests/cudaemu/.libs/libcudaemu.so
RUN=$top_builddir/gcollrun
CHECK=$top_builddir/tests/integration/p2p_check
if [ "${GCOLL_TEST_REAL_GPU:-0}" != 1 ] && [ ! -f "$EMU" ]; then
  echo "skipped: no $EMU (built by make check in builds with the CUDA toolkit)"
  exit 77
fi
for f in "$RUN" "$CHECK"; do
  [ -x "$f" ] || { echo "test_emu_sendrecv.sh: $f is not built" >&2; exit 99; }
done
# GCOLL_TEST_REAL_GPU=1: the machine's real driver (tests/gpu/device_run.sh).
if [ "${GCOLL_TEST_REAL_GPU:-0}" = 1 ]; then unset GCOLL_CUDA_DRIVER; else export GCOLL_CUDA_DRIVER=$EMU; fi
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
# The GPU path is the default (comm_p2p_gpu.c); the staged path runs where
# a case sets GCOLL_P2P_KERNEL=0.
unset GCOLL_P2P_KERNEL
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-emu-sr.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# device NAME SLOT-BYTES GCOLLRUN-ARGS...: every rank reports 0 wrong bytes
# and the refusals, and exits 0.
device() {
  local name=$1 slot=$2; shift 2
  local n=$2 start=$SECONDS
  GCOLL_SLOT_BYTES=$slot timeout 120 "$RUN" "$@" "$CHECK" --device exchange >"$tmp/out" 2>&1
  local rc=$?
  local good=$(grep -c '^rank [0-9]*: device: [0-9]* exchanges, 0 wrong bytes' "$tmp/out")
  local refused=$(grep -c '^rank [0-9]*: host send buffer with a stream: invalid usage.*a stream with a host buffer' "$tmp/out")
  if [ $rc -eq 0 ] && [ "$good" -eq "$n" ] && [ "$refused" -eq "$n" ]; then
    ok "$name: $(grep -m1 '^rank 0: device:' "$tmp/out") ($((SECONDS - start)) s)"
  else
    bad "$name: exit $rc, $good of $n ranks right, $refused refusals"
    tail -30 "$tmp/out"
  fi
}

device "1 rank (self only)" 4096 -n 1
device "2 ranks, 4 KiB slots" 4096 -n 2
device "3 ranks, 4 KiB slots" 4096 -n 3
device "4 ranks, 4 KiB slots" 4096 -n 4
device "4 ranks on 2 virtual nodes (shm + net/socket), 4 KiB slots" 4096 -n 4 --nodes 2
device "3 ranks, each its own node (net/socket only), 4 KiB slots" 4096 -n 3 --nodes 3
device "2 ranks, default slots" 131072 -n 2
GCOLL_CUDAEMU_DEVICES=2 device "3 ranks, 2 GPUs" 4096 -n 3
if [ "${GCOLL_TEST_REAL_GPU:-0}" = 1 ] && [ "$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')" -lt 2 ]; then
  echo "skipped: ... calls on GPU 0's buffers with GPU 1's context current (this machine has one GPU)"
elif [ "$(grep -c "^rank [0-9]*: ring on GPU 0 with GPU 1's context current: ok" "$tmp/out")" -eq 3 ]; then
  ok "... GPU 1's context still current after calls on GPU 0's buffers, on every rank"
else
  bad "... calls on GPU 0's buffers with GPU 1's context current"
fi

# The same exchanges staged by the calling thread (GCOLL_P2P_KERNEL=0), the
# path mixed host/device groups always take.
GCOLL_P2P_KERNEL=0 device "2 ranks staged by the host (GCOLL_P2P_KERNEL=0)" 4096 -n 2
GCOLL_P2P_KERNEL=0 device "4 ranks on 2 virtual nodes staged by the host" 4096 -n 4 --nodes 2
# Device-only groups are the GPU's (an INFO line says so once per communicator).
GCOLL_DEBUG=INFO GCOLL_SLOT_BYTES=4096 timeout 120 "$RUN" -n 2 "$CHECK" --device exchange \
  >"$tmp/out" 2>&1
if [ "$(grep -c 'send/recv on device buffers: the GPU moves them' "$tmp/out")" -eq 2 ]; then
  ok "device-only groups run on the GPU (gcoll_cuda_p2p), by the INFO line of each rank"
else
  bad "no INFO line saying the GPU moves device send/recv"; tail -5 "$tmp/out"
fi

# async MODE LINE GCOLLRUN-ARGS...: p2p_check --device async MODE prints LINE
# (a regex). die exits with the killed rank's status, as gcollrun reports it.
async() {
  local mode=$1 want=$2; shift 2
  local start=$SECONDS
  GCOLL_SLOT_BYTES=4096 timeout 60 "$RUN" "$@" "$CHECK" --device async "$mode" >"$tmp/out" 2>&1
  local rc=$?
  if { [ $rc -eq 0 ] || [ "$mode" = die ]; } && grep -qE "$want" "$tmp/out"; then
    ok "async $mode ($*): $(grep -m1 -E "$want" "$tmp/out") ($((SECONDS - start)) s)"
  else
    # All of it: a failure seen once in a hundred CI runs (2026-11-28,
    # mismatch under ASan, its cause not in the last lines) must be
    # readable from the log the next time.
    bad "async $mode ($*): exit $rc"; cat "$tmp/out"
  fi
}
async queue "^rank 0: a 32 MiB device send returned no error after 0\.[0-9]+ s" -n 2
async queue "^rank 0: a 32 MiB device send returned no error after 0\.[0-9]+ s" -n 2 --nodes 2
async mismatch "^rank 1: call no error, then async error invalid usage.*met a send of 100 bytes" -n 2
async die "^rank 0: a device receive from a dead rank: call no error, async error remote.*rank 1" -n 2
async die "^rank 0: a device receive from a dead rank: call no error, async error remote.*rank 1" \
  -n 2 --nodes 2
async abort "^rank 0: a device receive nobody sends to, aborted: call no error, stream done \(0\)" -n 2

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
