#!/bin/bash
# The p2p transport on the emulated GPU: FIFOs in the receiver's GPU memory,
# opened by the sender through CUDA IPC (the emulator backs device memory
# with memfds, so two processes really share the pages), driven by kernels
# only. Forced with GCOLL_TRANSPORT=p2p, and chosen by a GPU topology's
# plan for the GPU-to-GPU edges (net/socket between virtual nodes); shm
# when GCOLL_P2P_DISABLE=1 or without a GPU at init; the failures: forced
# without a GPU, host buffers on a p2p communicator, a dead peer, an abort.
set -u
. "$(dirname "$0")/emu_lib.sh"

# over TRANSPORT: connections of the last perf run over it (GCOLL_DEBUG=INFO)
over() { grep -c "(.* edge, id [0-9]*) over $1\$" "$tmp/err"; }

# only_over NAME TRANSPORT...: every connection of the last run went over
# one of these transports, and over each of them at least once.
only_over() {
  local name=$1; shift
  local all=$(grep -c ") over " "$tmp/err") sum=0 t n counts=""
  for t in "$@"; do
    n=$(over "$t"); sum=$((sum + n)); counts="$counts $t:$n"
    [ "$n" -gt 0 ] || { bad "$name: no connection over $t ($counts)"; return; }
  done
  if [ "$all" -gt 0 ] && [ "$sum" -eq "$all" ]; then ok "$name:$counts"
  else bad "$name: $sum of $all connections over $*"; fi
}

export GCOLL_TRANSPORT=p2p
perf "p2p forced, 2 ranks, every collective/type/op" -n 2 -- \
  -o all -t all -r all -b 1 -e 40K -f 13 && only_over "... all over p2p" p2p
for algo in ring tree; do
  for proto in simple ll; do
    perf "p2p forced, 3 ranks, allreduce $algo/$proto, every type and op" -n 3 -- \
      -o allreduce -t all -r all -b 3 -e 97K -f 11 -a "$algo" -p "$proto"
  done
done
GCOLL_CUDAEMU_DEVICES=3 perf "p2p forced, 3 ranks on 3 emulated GPUs (IPC between GPUs), every collective" \
  -n 3 -- -o all -t float -b 8 -e 64K -f 8
unset GCOLL_TRANSPORT

# A GPU node's plan: ranks of a node are GPU to GPU (p2p), nodes talk TCP.
perf "GPU topology, 8 ranks on 2 virtual nodes, allreduce" -n 8 --nodes 2 --topo pcie-2s-4gpu -- \
  -o allreduce -t float -b 8 -e 64K -f 8 && only_over "... p2p inside a node, net/socket across" p2p net/socket
GCOLL_CUDAEMU_DEVICES=4 perf "GPU topology, 4 emulated GPUs, 8 ranks on 2 virtual nodes, allgather" \
  -n 8 --nodes 2 --topo pcie-2s-4gpu -- -o allgather -t int8 -b 8 -e 64K -f 8 &&
  only_over "... p2p inside a node" p2p net/socket
gpus=$(grep -o "p2p: FIFOs in the memory of GPU [0-9]*" "$tmp/err" | sort -u | wc -l)
want=4  # a real machine (GCOLL_TEST_REAL_GPU=1) spreads them over the GPUs it has
if [ "${GCOLL_TEST_REAL_GPU:-0}" = 1 ]; then
  want=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')
  [ "$want" -le 4 ] || want=4
fi
if [ "$gpus" -eq "$want" ]; then ok "... the ranks of a node on $want different GPUs"
else bad "... FIFOs on $gpus distinct GPUs, expected $want"; fi
GCOLL_P2P_DISABLE=1 perf "GPU topology, GCOLL_P2P_DISABLE=1" -n 4 --nodes 2 --topo pcie-2s-4gpu -- \
  -o allreduce -t float -b 8 -e 64K -f 8 && only_over "... shm inside a node" shm net/socket

# Captured into a CUDA graph over GPU-memory FIFOs, replayed.
GCOLL_TRANSPORT=p2p timeout 180 "$RUN" -n 3 "$CHECK" --device graph 4 >"$tmp/out" 2>&1
if [ $? -eq 0 ] && [ "$(grep -c "^rank [0-2]: 4 collectives captured into a CUDA graph, 4 replays .*, 0 wrong" "$tmp/out")" -eq 3 ]; then
  ok "p2p: CUDA graph capture and replay: $(grep '^rank 0: 4 collectives' "$tmp/out")"
else
  bad "p2p: CUDA graph capture and replay"
  tail -20 "$tmp/out"
fi

# Host buffers and no GPU at init: the GPU edges fall back to shm.
GCOLL_DEBUG=INFO timeout 120 "$RUN" -n 4 --topo pcie-2s-4gpu "$PERF" -M host -o allreduce \
  -b 8 -e 64K -f 8 -w 1 -n 2 >"$tmp/out" 2>"$tmp/err"
rc=$?
if [ $rc -eq 0 ] && grep -q "^# Out of bounds values : 0 OK" "$tmp/out" &&
   [ "$(grep -c "p2p unavailable (no CUDA context is current" "$tmp/err")" -eq 4 ]; then
  only_over "GPU topology, no GPU at init: 0 wrong, the GPU edges over" shm
else
  bad "GPU topology, no GPU at init (exit $rc)"; tail -5 "$tmp/out" "$tmp/err"
fi

# Forced without a GPU at init: init fails in one line on every rank.
GCOLL_TRANSPORT=p2p timeout 120 "$RUN" -n 2 "$PERF" -M host -b 8 -e 8 -n 1 >"$tmp/out" 2>&1
rc=$?
n=$(grep -c "gcollCommInitFromPlan: GCOLL_TRANSPORT=p2p: no CUDA context is current on this thread (call cudaSetDevice" "$tmp/out")
if [ $rc -ne 0 ] && [ "$n" -ge 1 ]; then ok "p2p forced without a GPU: init fails saying why"
else bad "p2p forced without a GPU (exit $rc, $n lines)"; cat "$tmp/out"; fi

export GCOLL_TRANSPORT=p2p
# Host buffers on a communicator whose FIFOs are in GPU memory: refused.
timeout 120 "$RUN" -n 3 "$CHECK" --device hostcall >"$tmp/out" 2>&1
if [ $? -eq 0 ] && [ "$(grep -c "host allreduce refused: gcollAllReduce: host buffers, but this communicator's connections are in GPU 0's memory (p2p transport)" "$tmp/out")" -eq 3 ]; then
  ok "host buffers on a p2p communicator refused in one line"
else
  bad "host buffers on a p2p communicator"; cat "$tmp/out"
fi

# 100 calls queued, one wait, every result right.
timeout 120 "$RUN" -n 3 "$CHECK" --device queue 100 >"$tmp/out" 2>&1
if [ $? -eq 0 ] && [ "$(grep -c ' 100 allreduces queued in .*, 0 wrong after one wait' "$tmp/out")" -eq 3 ]; then
  ok "p2p: queued device collectives: $(grep '^rank 0' "$tmp/out")"
else
  bad "p2p: queued device collectives"; cat "$tmp/out"
fi

# A rank dies while kernels wait on its GPU FIFOs: the survivors fail
# naming it (the proxy watches the peer's process, the kernel the abort word).
start=$(date +%s)
timeout 120 "$RUN" -n 3 --kill-wait 20 "$CHECK" --device die 1 3 >"$tmp/out" 2>&1
named=$(grep -c "^rank [02]: iteration .*rank 1 " "$tmp/out")
if [ "$named" -eq 2 ] && [ $(($(date +%s) - start)) -lt 60 ]; then
  ok "p2p: dead peer: both survivors fail naming rank 1 ($(($(date +%s) - start)) s)"
else
  bad "p2p: dead peer ($named survivors named rank 1)"; cat "$tmp/out"
fi

timeout 120 "$RUN" -n 2 "$CHECK" --device abort >"$tmp/out" 2>&1
if [ $? -eq 0 ] && grep -q "^rank 0: allreduce queued" "$tmp/out"; then
  ok "p2p: abort stops a waiting kernel: $(grep '^rank 0: allreduce' "$tmp/out")"
else
  bad "p2p: abort of a waiting kernel"; cat "$tmp/out"
fi
unset GCOLL_TRANSPORT

finish
