#!/bin/bash
# Every GPU check and GPU figure, in one run, on a machine with a real GPU
# (the lent H100/H200 of this project's sessions; nothing here runs in CI).
#
#   tests/gpu/device_run.sh BUILD OUTDIR [STEP...]
#
# BUILD is a top_builddir whose programs are real executables (not libtool
# wrappers) with libgcoll and its libraries in BUILD/lib: stage_device.sh
# makes one from a build tree. Steps (default: all, in this order):
#   probe    what the driver and GPU are
#   check    tests/gpu/gpu_coll_check.sh: every collective/algorithm/protocol/
#            type/op, 2/3/4/8 ranks on the one GPU, device and pinned FIFOs
#   perf     gcoll-perf -M cuda allreduce, 2/4/8 ranks on one GPU, 8 B - 1 GB
#   perfp2p  the same over the p2p transport (FIFOs in GPU memory, CUDA IPC)
#   sendrecv gcoll-perf -M cuda sendrecv (a ring of device send/recv moved by
#            the GPU), 2 and 4 ranks, then the same staged by the host
#            (GCOLL_P2P_KERNEL=0), same run
#   nccl     nccl_bench: gcoll's libnccl.so.2 beside the NCCL PyTorch ships,
#            1 rank, same program, same run; then gcoll alone on 2 and 4
#            ranks (NCCL refuses several ranks on one GPU)
#   torch    torch_check.py: torch.distributed's NCCL backend on gcoll's
#            libnccl.so.2 (LD_PRELOAD), 2 processes sharing the GPU
#   nccltests  NVIDIA's nccl-tests (if staged): all_reduce_perf on gcoll's
#            libnccl.so.2 and on PyTorch's NCCL, 1 GPU, then gcoll in CUDA
#            graph mode (-G); nccl-tests itself refuses more ranks (threads
#            or GPUs per process) than the machine has GPUs
#   graph    coll_check --device graph: collectives captured into a CUDA
#            graph and replayed, 1 rank, 3 ranks (shm), 3 ranks (p2p)
#   ddp      torch_ddp_check.py: DDP training and a column-parallel layer,
#            2 processes on gcoll against 1 process on PyTorch's NCCL
#   torchrun the same script under torchrun (environment rendezvous), 4
#            processes on gcoll with tensor-parallel pairs from
#            dist.new_group, against 1 process on PyTorch's NCCL
#   nccldevice nccl_host_check device (the ABI matrix on device buffers:
#            every type/op, pre-mul-sum, in and out of place), 1-3 ranks
#   groups   nccl_groups_check --device: PyTorch's calls replayed on device
#            buffers, world x2 and a 2x2 mesh from fresh ids, splits, abort
#   copy     bench_reduce_copy: reduceCopy against cudaMemcpy DtoD, 256 MB
#   emu      the emulated-GPU suites (tests/cudaemu) on the real driver
#   streamorder p2p_check --device exchange on 3 and 4 ranks, 6 runs each,
#            on the GPU path (the stream-order case failed now and then)
#   stall    coll_check --device stall over shm and p2p, ring and tree: a
#            kernel past its deadline names the FIFOs it waited on (tail/
#            head read from registered host memory; "in GPU memory" for p2p)
#   mps      starts the CUDA MPS daemon for the steps after it: without it
#            the kernels of several processes on one GPU take turns in time
#            slices, and a collective between them waits a slice per step
# Each step's output goes to OUTDIR/STEP.log and its last lines to stdout;
# every step has its own time limit. Exit status: the number of failed steps.
set -u
B=$(cd "$1" && pwd) OUTDIR=$2
shift 2
steps=${*:-probe check perf nccl torch copy emu}
src=$(cd "$(dirname "$0")/../.." && pwd)
export LD_LIBRARY_PATH=$B/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
export GCOLL_TOPO_DIR=$src/etc/topologies GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
export top_builddir=$B
mkdir -p "$OUTDIR"
failed=0

step() {  # step NAME SECONDS CMD...
  local name=$1 limit=$2 start=$SECONDS rc
  shift 2
  echo "=== $name (limit ${limit}s)"
  timeout -k 5 "$limit" bash -c '"$@"' _ "$@" >"$OUTDIR/$name.log" 2>&1
  rc=$?
  tail -n 25 "$OUTDIR/$name.log"
  echo "=== $name: exit $rc after $((SECONDS - start)) s"
  [ $rc -eq 0 ] || failed=$((failed + 1))
}

real_nccl() {  # the libnccl.so.2 of the python3 that holds PyTorch
  python3 - <<'EOF' 2>/dev/null
import glob, os, sys
for p in sys.path:
    for f in glob.glob(os.path.join(p, "nvidia", "nccl", "lib", "libnccl.so.2")):
        print(f); sys.exit(0)
EOF
}

perf_sweeps() {
  for n in 2 4 8; do
    echo "## gcoll-perf allreduce, $n ranks on GPU 0"
    "$B/gcollrun" -n "$n" "$B/gcoll-perf" -M cuda -o allreduce -t float -b 8 -e 1G -f 4 \
      -w 2 -n 5 || return 1
  done
}

sendrecv_sweeps() {
  for n in 2 4; do
    echo "## gcoll-perf sendrecv, $n ranks on GPU 0, moved by the GPU"
    GCOLL_P2P_KERNEL=1 "$B/gcollrun" -n "$n" "$B/gcoll-perf" -M cuda -o sendrecv -t float -b 8 -e 256M -f 4 \
      -w 2 -n 5 || return 1
    echo "## the same staged by the calling thread (GCOLL_P2P_KERNEL=0)"
    GCOLL_P2P_KERNEL=0 "$B/gcollrun" -n "$n" "$B/gcoll-perf" -M cuda -o sendrecv -t float \
      -b 8 -e 256M -f 4 -w 2 -n 5 || return 1
  done
}

stream_order() {  # repeated device exchanges on the GPU path: wrong bytes come now and then
  local n i bad=0
  for n in 3 4; do
    for i in 1 2 3 4 5 6; do
      if ! GCOLL_P2P_KERNEL=1 GCOLL_SLOT_BYTES=4096 "$B/gcollrun" -n "$n" \
           "$B/tests/integration/p2p_check" --device exchange >"$OUTDIR/so.$n.$i" 2>&1; then
        bad=$((bad + 1))
        grep -E 'wrong|FAIL|error' "$OUTDIR/so.$n.$i" | head -8
      fi
    done
    echo "$n ranks: $bad failing runs of 6 so far"
  done
  [ "$bad" -eq 0 ]
}

nccl_compare() {
  local real
  real=$(real_nccl)
  echo "## 1 rank: gcoll's libnccl.so.2, then PyTorch's NCCL ($real)"
  "$B/tests/gpu/nccl_bench" -b 8 -e 1G -f 4 -w 5 -i 20 "$B/lib/libnccl.so.2" ${real:+"$real"} || return 1
  for n in 2 4; do
    echo "## $n ranks on GPU 0: gcoll's libnccl.so.2"
    "$B/tests/gpu/nccl_bench" -n "$n" -b 8 -e 1G -f 4 -w 5 -i 20 "$B/lib/libnccl.so.2" || return 1
  done
}

ddp_compare() {
  local d
  d=$(mktemp -d) || return 1
  echo "## gcoll's libnccl.so.2, 2 processes"
  LD_PRELOAD=$B/lib/libnccl.so.2 python3 "$src/tests/gpu/torch_ddp_check.py" train 2 "$d/gcoll.pt" || return 1
  echo "## PyTorch's NCCL, 1 process, whole batches"
  python3 "$src/tests/gpu/torch_ddp_check.py" train 1 "$d/nccl.pt" || return 1
  python3 "$src/tests/gpu/torch_ddp_check.py" compare "$d/gcoll.pt" "$d/nccl.pt"
}

graph_replays() {
  local rc=0 l
  for l in "-n 1" "-n 3" "-n 3 p2p"; do
    echo "## coll_check --device graph, $l"
    # shellcheck disable=SC2086 # several words on purpose
    GCOLL_TRANSPORT=$([ "${l#*p2p}" != "$l" ] && echo p2p) "$B/gcollrun" ${l% p2p} \
      "$B/tests/integration/coll_check" --device graph 4 || rc=1
  done
  return $rc
}

nccl_tests() {
  local t=$B/nccl-tests real
  [ -x "$t/all_reduce_perf" ] || { echo "no nccl-tests staged"; return 1; }
  real=$(dirname "$(real_nccl)")
  echo "## all_reduce_perf, gcoll's libnccl.so.2"
  LD_LIBRARY_PATH=$B/lib:$t "$t/all_reduce_perf" -b 8 -e 1G -f 4 -g 1 || return 1
  echo "## all_reduce_perf, PyTorch's NCCL ($real)"
  LD_LIBRARY_PATH=$real:$t "$t/all_reduce_perf" -b 8 -e 1G -f 4 -g 1 || return 1
  echo "## all_reduce_perf -G 2 (CUDA graphs), gcoll"
  LD_LIBRARY_PATH=$B/lib:$t timeout 30 "$t/all_reduce_perf" -b 8 -e 1G -f 32 -g 1 -G 2 || return 1
  echo "## all_reduce_perf -G 2 (CUDA graphs), PyTorch's NCCL"
  LD_LIBRARY_PATH=$real:$t timeout 30 "$t/all_reduce_perf" -b 8 -e 1G -f 32 -g 1 -G 2
}

emu_suites() {
  local rc=0 t
  for t in test_emu_comm:150 test_emu_p2p:120 test_emu_sendrecv:100; do
    echo "## ${t%:*} on the real driver"
    GCOLL_TEST_REAL_GPU=1 timeout "${t#*:}" bash "$src/tests/cudaemu/${t%:*}.sh" || rc=1
  done
  return $rc
}

torchrun_compare() {  # torchrun as people launch it: env rendezvous, new_group
  local d
  d=$(mktemp -d) || return 1
  echo "## torchrun --nproc-per-node 4, gcoll's libnccl.so.2 preloaded"
  LD_PRELOAD=$B/lib/libnccl.so.2 python3 -m torch.distributed.run --standalone --nproc-per-node 4 \
    "$src/tests/gpu/torch_ddp_check.py" torchrun "$d/gcoll.pt" || return 1
  echo "## torchrun --nproc-per-node 1, PyTorch's NCCL"
  python3 -m torch.distributed.run --standalone --nproc-per-node 1 \
    "$src/tests/gpu/torch_ddp_check.py" torchrun "$d/nccl.pt" || return 1
  python3 "$src/tests/gpu/torch_ddp_check.py" compare "$d/gcoll.pt" "$d/nccl.pt"
}

stall_notes() {  # a kernel past its deadline: its message names its FIFOs' state
  local transport algo line rc=0
  for transport in shm p2p; do
    for algo in ring tree; do
      line=$(GCOLL_TRANSPORT=$transport GCOLL_ALGO=$algo GCOLL_TIMEOUT=1 timeout 60 \
             "$B/gcollrun" -n 3 "$B/tests/integration/coll_check" --device stall 2>&1 |
             grep '^rank 0: allreduce: ')
      echo "$transport/$algo: ${line:-no line from rank 0}"
      case $transport:$line in
        shm:*"receive FIFOs now (tail/head): from "*/*) ;;
        p2p:*"in GPU memory"*) ;;
        *) rc=1 ;;
      esac
    done
  done
  return $rc
}

nccl_device() {  # nccl_host_check's device matrix (premul ops included) on the GPU
  local spec
  for spec in 1 2 3; do
    echo "## nccl_host_check device, $spec rank(s)"
    GCOLL_CUDA_DRIVER=${GCOLL_CUDA_DRIVER:-libcuda.so.1} NCCL_SHIM_LIB=$B/lib/libnccl.so.2 \
      "$B/gcollrun" -n "$spec" "$B/tests/nccl/nccl_host_check" device || return 1
  done
  echo "## nccl_host_check device, 3 ranks, tree and LL"
  GCOLL_CUDA_DRIVER=${GCOLL_CUDA_DRIVER:-libcuda.so.1} NCCL_SHIM_LIB=$B/lib/libnccl.so.2 \
    GCOLL_ALGO=tree GCOLL_PROTO=ll "$B/gcollrun" -n 3 \
    "$B/tests/nccl/nccl_host_check" device
}

groups_device() {  # PyTorch's calls replayed on device buffers: 2-D mesh from fresh ids
  local d
  d=$(mktemp -d) || return 1
  "$B/gcoll-plan" generate -q --topo cpu-only --hosts "$(hostname -s)" -k 4 -o "$d/plan.yaml" || return 1
  "$B/gcollrun" -n 4 --plan "$d/plan.yaml" "$B/tests/nccl/nccl_groups_check" "$d" 2 --device
}

export -f stall_notes nccl_device groups_device torchrun_compare real_nccl perf_sweeps sendrecv_sweeps stream_order nccl_compare graph_replays nccl_tests ddp_compare emu_suites
export B src
for s in $steps; do
  case $s in
    probe) step probe 30 bash -c "nvidia-smi; '$B/tests/gpu/cuda_probe' driver; '$B/tests/gpu/cuda_probe' exec" ;;
    check) step check 120 sh "$src/tests/gpu/gpu_coll_check.sh" ;;
    perf) step perf 120 perf_sweeps ;;
    perfp2p) step perfp2p 120 env GCOLL_TRANSPORT=p2p bash -c perf_sweeps ;;
    sendrecv) step sendrecv 150 sendrecv_sweeps ;;
    streamorder) step streamorder 150 stream_order ;;
    nccl) step nccl 90 nccl_compare ;;
    torch) lib=$(python3 -c 'import torch, os; print(os.path.join(os.path.dirname(torch.__file__), "lib", "libtorch_cuda.so"))')
           nm -D --undefined-only "$lib" | awk '$2 ~ /^nccl/ {print $2}' | sort -u >"$OUTDIR/torch-nccl-symbols"
           nm -D --defined-only "$B/lib/libnccl.so.2" | awk '{print $3}' | sort -u |
             comm -23 "$OUTDIR/torch-nccl-symbols" - | sed 's/^/torch needs, gcoll lacks: /'
           step torch 100 env LD_PRELOAD="$B/lib/libnccl.so.2" PYTHONUNBUFFERED=1 \
             python3 "$src/tests/gpu/torch_check.py" 2 ;;
    graph) step graph 60 graph_replays ;;
    stall) step stall 120 stall_notes ;;
    nccltests) step nccltests 120 nccl_tests ;;
    ddp) step ddp 150 env PYTHONUNBUFFERED=1 bash -c ddp_compare ;;
    nccldevice) step nccldevice 200 nccl_device ;;
    groups) step groups 120 groups_device ;;
    torchrun) step torchrun 180 env PYTHONUNBUFFERED=1 bash -c torchrun_compare ;;
    copy) step copy 40 "$B/tests/gpu/bench_reduce_copy" 256 20 ;;
    emu) step emu 300 emu_suites ;;
    mps) export CUDA_MPS_PIPE_DIRECTORY=/tmp/gcoll-mps CUDA_MPS_LOG_DIRECTORY=/tmp/gcoll-mps-log
         mkdir -p "$CUDA_MPS_PIPE_DIRECTORY" "$CUDA_MPS_LOG_DIRECTORY"
         step mps 30 nvidia-cuda-mps-control -d ;;
    *) echo "device_run.sh: unknown step '$s'" >&2; exit 2 ;;
  esac
done
echo "device_run.sh: $failed step(s) failed"
exit $failed
