#!/bin/bash
# Collectives on device buffers through the communicator, on the emulated
# GPU (libcudaemu.so through $GCOLL_CUDA_DRIVER), with real processes under
# gcollrun: the CUDA executor chosen by the buffers' memory type, its kernel
# driving the transports' FIFOs (shm inside a virtual node, net/socket and
# the proxy between two), checked element by element by gcoll-perf against
# the serial reference; alltoall, gather and scatter (send/recv staged by
# the calling thread) on device buffers too; collectives captured into CUDA
# graphs and replayed; then a dead peer and an abort while kernels wait, and
# buffers of mixed memory refused.
set -u
. "$(dirname "$0")/emu_lib.sh"

perf "1 rank, every collective/type/op" -n 1 -- -o all -t all -r all -b 1 -e 40K -f 13
perf "2 ranks, every collective/type/op" -n 2 -- -o all -t all -r all -b 1 -e 40K -f 13
perf "3 ranks, every collective/type/op" -n 3 -- -o all -t all -r all -b 1 -e 40K -f 13
perf "4 ranks on 2 virtual nodes (shm + net/socket), every collective/type/op" \
  -n 4 --nodes 2 -- -o all -t all -r all -b 1 -e 40K -f 13
for algo in ring tree; do
  for proto in simple ll; do
    perf "3 ranks, allreduce $algo/$proto, every type and op, sizes to 97 KB" \
      -n 3 -- -o allreduce -t all -r all -b 3 -e 97K -f 11 -a "$algo" -p "$proto"
  done
done
perf "8 ranks on 2 virtual nodes, allreduce" -n 8 --nodes 2 -- \
  -o allreduce -t float -b 8 -e 64K -f 8
perf "8 ranks on 2 virtual nodes, allgather" -n 8 --nodes 2 -- -o allgather -t int8 -b 8 -e 64K -f 8
# alltoall, gather and scatter on device buffers: 4 KiB FIFO slots (many
# steps), the last rank as root, shm and net/socket.
GCOLL_SLOT_BYTES=4096 perf "4 ranks on 2 virtual nodes, alltoall/gather/scatter, every type, root 3" \
  -n 4 --nodes 2 -- -o alltoall,gather,scatter -t all -b 1 -e 40K -f 13 -R 3
# The same calls grouped with a device allreduce, in place, NULL unused
# buffers, every type, counts 0 to 65537 (p2p_check --device colls).
P2P=$top_builddir/tests/integration/p2p_check
start=$(date +%s)
GCOLL_SLOT_BYTES=4096 timeout 300 "$RUN" -n 3 "$P2P" --device colls >"$tmp/out" 2>&1
if [ $? -eq 0 ] && [ "$(grep -c '^rank [0-2]: device: .* calls, 0 wrong bytes' "$tmp/out")" -eq 3 ]; then
  ok "device alltoall/gather/scatter, in place and grouped: $(grep '^rank 0: device:' "$tmp/out") ($(($(date +%s) - start)) s)"
else
  bad "device alltoall/gather/scatter (p2p_check --device colls)"
  tail -20 "$tmp/out"
fi

# Calls on device buffers return once queued: 100 of them (more than the
# executor's 32 launch slots) back to back, one wait, every result right.
timeout 120 "$RUN" -n 3 "$CHECK" --device queue 100 >"$tmp/out" 2>&1
if [ $? -eq 0 ] && [ "$(grep -c ' 100 allreduces queued in .*, 0 wrong after one wait' "$tmp/out")" -eq 3 ]; then
  ok "queued device collectives: $(grep '^rank 0' "$tmp/out")"
else
  bad "queued device collectives"
  cat "$tmp/out"
fi

# Collectives captured into a CUDA graph, replayed with new inputs and
# eager calls between replays: one rank (a captured copy), shm, and
# net/socket with the proxy following each replay; device send/recv under
# capture refused in one line.
for layout in "-n 1" "-n 3" "-n 4 --nodes 2"; do
  # shellcheck disable=SC2086 # the layout is several words on purpose
  n=$(set -- $layout; echo "$2")
  timeout 180 "$RUN" $layout "$CHECK" --device graph 4 >"$tmp/out" 2>&1
  rc=$?
  good=$(grep -c "^rank [0-9]*: 4 collectives captured into a CUDA graph, 4 replays .*, 0 wrong" "$tmp/out")
  refused=$(grep -c "^rank [0-9]*: captured device send/recv refused: .*cannot be captured into a CUDA graph" "$tmp/out")
  if [ $rc -eq 0 ] && [ "$good" -eq "$n" ] && { [ "$n" -eq 1 ] || [ "$refused" -eq "$n" ]; }; then
    ok "CUDA graph capture and replay ($layout): $(grep '^rank 0: 4 collectives' "$tmp/out")"
  else
    bad "CUDA graph capture and replay ($layout): exit $rc, $good of $n ranks right, $refused refusals"
    tail -20 "$tmp/out"
  fi
done

# Channels: host calls are capped by the CPUs the ranks have (one CPU
# here, by taskset: 1 channel), device calls take the plan's channels (GPU
# blocks: 4 for 2 ranks of cpu-only at 4 MB), unless GCOLL_MAX_NCHANNELS
# caps them too. GCOLL_DEBUG=TRACE prints one line per collective.
channels_of() {  # channels_of MEM [ENV...]: channels of rank 0's 4 MB allreduce
  local mem=$1; shift
  env "$@" GCOLL_DEBUG=TRACE timeout 120 taskset -c 0 "$RUN" -n 2 "$PERF" -M "$mem" -o allreduce \
    -b 4M -e 4M -w 0 -n 1 2>&1 | sed -n 's/.*rank 0: gcollAllReduce: 4194304 bytes, .* on \([0-9]*\) channels, .*/\1/p' | head -1
}
host_ch=$(channels_of host) dev_ch=$(channels_of cuda) capped_ch=$(channels_of cuda GCOLL_MAX_NCHANNELS=2)
if [ "$host_ch" = 1 ] && [ "$dev_ch" = 4 ] && [ "$capped_ch" = 2 ]; then
  ok "channels on one CPU: host calls $host_ch, device calls the plan's $dev_ch, GCOLL_MAX_NCHANNELS=2 gives $capped_ch"
else
  bad "channels on one CPU: host '$host_ch' (want 1), device '$dev_ch' (want 4), capped '$capped_ch' (want 2)"
fi
# NCCL's channel bounds (GPU blocks) bound device calls only; rank 0's win.
nccl_max=$(channels_of cuda NCCL_MAX_NCHANNELS=3) nccl_host=$(channels_of host NCCL_MAX_CTAS=3)
if [ "$nccl_max" = 3 ] && [ "$nccl_host" = 1 ]; then
  ok "NCCL_MAX_NCHANNELS=3: device calls on 3 channels, host calls still 1"
else
  bad "NCCL_MAX_NCHANNELS=3: device '$nccl_max' (want 3), host '$nccl_host' (want 1)"
fi
GCOLL_DEBUG=TRACE NCCL_MIN_NCHANNELS=4 timeout 120 "$RUN" -n 3 "$PERF" -M cuda -o all -t float \
  -b 1 -e 64K -f 7 -w 0 -n 1 >"$tmp/out" 2>"$tmp/err"
rc=$?
small=$(grep -c "rank 0: gcollAllReduce: 4 bytes, .* on 4 channels" "$tmp/err")
if [ $rc -eq 0 ] && [ "$small" -gt 0 ] && grep -q "^# Out of bounds values : 0 OK" "$tmp/out"; then
  ok "NCCL_MIN_NCHANNELS=4: a 4-byte device allreduce on 4 channels, every collective 0 wrong"
else
  bad "NCCL_MIN_NCHANNELS=4 ($small small calls on 4 channels)"
  tail -5 "$tmp/out"
fi

# A rank dies while the others' kernels wait on it: they fail, naming it.
start=$(date +%s)
timeout 120 "$RUN" -n 3 --kill-wait 20 "$CHECK" --device die 1 3 >"$tmp/out" 2>&1
named=$(grep -c "^rank [02]: iteration .*rank 1 " "$tmp/out")
survivors=$(grep -c "^rank [02]: iteration" "$tmp/out")
if [ "$survivors" -eq 2 ] && [ "$named" -eq 2 ] && [ $(($(date +%s) - start)) -lt 60 ]; then
  ok "dead peer under device collectives: both survivors fail naming rank 1 ($(($(date +%s) - start)) s)"
else
  bad "dead peer under device collectives ($survivors survivors reported, $named remote errors)"
  cat "$tmp/out"
fi

# gcollCommAbort from another thread stops a kernel waiting on peers that
# never join.
timeout 120 "$RUN" -n 2 "$CHECK" --device abort >"$tmp/out" 2>&1
if [ $? -eq 0 ] && grep -q "^rank 0: allreduce queued" "$tmp/out"; then
  ok "abort stops a waiting kernel: $(grep '^rank 0: allreduce' "$tmp/out")"
else
  bad "abort of a waiting kernel"
  cat "$tmp/out"
fi

# A kernel whose peers join only after its deadline (three calls in; 2 s,
# so that loaded CI machines finish the first three well within it): it
# fails with the deadline, and the message says what the FIFOs it waited
# on hold now: one of them has tail == head == the step it waited for (the
# step never came), over shm and net/socket.
for algo in ring tree; do
  GCOLL_ALGO=$algo GCOLL_TIMEOUT=2 timeout 120 "$RUN" -n 4 --nodes 2 "$CHECK" --device stall \
    >"$tmp/out" 2>&1
  line=$(grep '^rank 0: allreduce: ' "$tmp/out")
  re="deadline passed while waiting for data from receive peer [0-9]+ at step ([0-9]+); channel [0-9]+'s receive FIFOs now \(tail/head\): (.*)$"
  step=-1 fifos=""
  if [[ $line =~ $re ]]; then step=${BASH_REMATCH[1]} fifos=${BASH_REMATCH[2]}; fi
  if [ "$(grep -c '^rank [1-3]: done' "$tmp/out")" -eq 3 ] && [ "$step" -gt 0 ] &&
     [[ ", $fifos" =~ ,\ from\ [a-z0-9\ ]+\ $step/$step(,|$) ]]; then
    ok "$algo: a kernel past its deadline names its FIFOs' state: ${line#*GPU): }"
  else
    bad "$algo: a kernel past its deadline (coll_check --device stall)"
    cat "$tmp/out"
  fi
done

# Refusals, device buffers included: one line each, nothing moved.
timeout 120 "$RUN" -n 2 "$CHECK" --device badargs >"$tmp/out" 2>&1
if [ $? -eq 0 ] && [ "$(grep -c 'device sendbuff with host recvbuff refused: .*device memory and recvbuff host memory' "$tmp/out")" -eq 2 ]; then
  ok "mixed host and device buffers refused in one line"
else
  bad "mixed host and device buffers"
  cat "$tmp/out"
fi

finish
