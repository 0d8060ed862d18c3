#!/bin/bash
# PyTorch's use of NCCL through gcoll's libnccl.so.2 (nccl_groups_check.c,
# compiled against the real nccl.h): under a launcher plan, communicators
# from fresh unique ids - two over the whole job, then the tensor- and
# data-parallel groups of a 2-D mesh - and the same groups by
# ncclCommSplit, with non-blocking init, a group call over two
# communicators, finalize, and an abort from a second thread.
# The world communicators must run on the launcher's plan, the groups on
# plans derived from it for their members (every member holds a launcher
# rank). Then the same on device buffers on the emulated GPU. Skips when
# nccl.h is missing (77).
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
inc=${CUDA_HOME:-/usr/local/cuda}/include
if [ ! -f "$inc/nccl.h" ]; then
  echo "skipped: nccl.h not found (looked in $inc; set CUDA_HOME)"
  exit 77
fi
LIB=$top_builddir/.libs/libnccl.so.2
RUN=$top_builddir/gcollrun
PLAN=$top_builddir/gcoll-plan
for f in "$LIB" "$RUN" "$PLAN"; do
  [ -e "$f" ] || { echo "test_nccl_groups: $f is not built" >&2; exit 99; }
done
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-groups.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

mkvar() { sed -n "s/^$1 = //p" "$top_builddir/Makefile" | head -1; }
CC=$(mkvar CC)
[ -n "$CC" ] || CC=cc
PROG=$tmp/nccl_groups_check
if ! $CC -std=gnu11 $(mkvar WARN_CFLAGS) $(mkvar SAN_CFLAGS) -pthread -I"$inc" \
     "$top_srcdir/tests/nccl/nccl_groups_check.c" -o "$PROG" "$LIB" \
     -Wl,-rpath,"$(cd "$top_builddir/.libs" && pwd)" 2>"$tmp/cc.out"; then
  bad "nccl_groups_check does not compile"; head -20 "$tmp/cc.out"
  echo "$pass passed, $fail failed"; exit 1
fi

# mesh NAME RANKS NODES TP LAUNCHER: the replay under gcollrun with a plan
# made here, so that which communicators joined it can be told from the
# log: LAUNCHER per rank (the two world ones, the world split back, and a
# group that is the whole job in job order), the others on plans derived
# from the launcher's for them, none on a plan computed without it.
# expand LIST: "0-6:2,9" -> "0 2 4 6 9"
expand() {
  local item a b step out=""
  for item in ${1//,/ }; do
    step=1
    case $item in *:*) step=${item#*:}; item=${item%%:*} ;; esac
    a=${item%%-*} b=${item#*-}
    out="$out $(seq "$a" "$step" "$b" | tr '\n' ' ')"
  done
  echo $out
}

# check_gpus PER_NODE: on a GPU plan, every rank of a derived plan drives
# the GPU and node of the launcher rank it is (launcher rank L is local
# rank L % PER_NODE of virtual node L / PER_NODE).
check_gpus() {
  local per=$1 line r list host gpu want_l bad_lines=0 lines=0
  while IFS= read -r line; do
    r=${line#gcoll rank }; r=${r%%:*}
    list=${line#*for its ranks }; list=${list%%;*}
    gpu=${line#*drives GPU }; gpu=${gpu%% *}
    host=${line##* of }
    set -- $(expand "$list")
    shift "$r"
    want_l=$1
    lines=$((lines + 1))
    if [ "$gpu" != $((want_l % per)) ] || [ "$host" != "$(hostname -s)-v$((want_l / per))" ]; then
      bad_lines=$((bad_lines + 1)); echo "wrong GPU: $line (launcher rank $want_l)"
    fi
  done < <(grep "plan derived from the launcher's plan .* drives GPU " "$tmp/err")
  [ "$lines" -gt 0 ] && [ "$bad_lines" -eq 0 ]
}

mesh() {
  local name=$1 n=$2 nodes=$3 tp=$4 per_rank=$5 topo=${6:-cpu-only} t0=$SECONDS
  local dir=$tmp/store-$n-$nodes-$tp-$topo${MESH_DEVICE:+-device}
  mkdir -p "$dir"
  "$PLAN" generate -q --topo "$topo" --hosts "$(hostname -s)-v[0-$((nodes - 1))]" -k $((n / nodes)) \
    -o "$tmp/plan.yaml" 2>"$tmp/err" || { bad "$name: gcoll-plan generate"; cat "$tmp/err"; return; }
  GCOLL_DEBUG=INFO timeout 300 "$RUN" -n "$n" --nodes "$nodes" --plan "$tmp/plan.yaml" \
    "$PROG" "$dir" "$tp" ${MESH_DEVICE:+"$MESH_DEVICE"} >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local good=$(grep -c "${MESH_DEVICE:+ on device buffers}, 0 wrong; finalize+destroy ok; abort ok; splits ok" "$tmp/out")
  local launcher=$(grep -c "joined $tmp/plan.yaml:" "$tmp/err")
  local derived=$(grep -c "plan derived from the launcher's plan $tmp/plan.yaml for its ranks " "$tmp/err")
  local computed=$(grep -c "plan computed for the members' nodes" "$tmp/err")
  local temp=$(grep -c "joined .*/gcoll-plan\.[A-Za-z0-9]*/plan.yaml:" "$tmp/err")
  # Joins per rank: 2 worlds, tp and dp from ids, tp and dp by split, the
  # world by split, and on even ranks the split of the evens.
  local total=$((7 * n + (n + 1) / 2))
  if [ $rc -eq 0 ] && [ "$good" -eq "$n" ] && [ "$launcher" -eq $((per_rank * n)) ] &&
     [ $((launcher + derived)) -eq "$total" ] && [ "$temp" -eq "$derived" ] && [ "$computed" -eq 0 ]; then
    ok "$name: every rank 0 wrong; $launcher joins on the launcher's plan, $derived on plans derived from it ($((SECONDS - t0)) s)"
    if [ "$topo" != cpu-only ]; then
      if check_gpus $((n / nodes)); then ok "$name: every member of a derived plan drives its launcher rank's GPU"
      else bad "$name: derived plans drive other GPUs than the launcher's ranks"; fi
    fi
  else
    bad "$name: exit $rc, $good of $n ranks right, $launcher launcher-plan, $derived derived-plan ($temp joined) and $computed computed-plan joins"
    tail -n 15 "$tmp/out" "$tmp/err"
  fi
}

mesh "4 ranks, 2x2 mesh" 4 1 2 3
mesh "8 ranks on 2 nodes, tp 2 x dp 4" 8 2 2 3
mesh "8 ranks on 2 nodes, tp 4 x dp 2 (a tp group per node)" 8 2 4 3
mesh "6 ranks on 2 nodes, tp 3 x dp 2" 6 2 3 3
# Data-parallel groups {0,2,4}, {1,3,5}: 2 members on one node, 1 on the other.
mesh "6 ranks on 2 nodes, tp 2 x dp 3 (groups split 2+1 over the nodes)" 6 2 2 3
# tp 1: the data-parallel group is the whole job in order: the launcher's plan.
mesh "3 ranks, tp 1 (single-rank groups) x dp 3" 3 1 1 4
# On a GPU topology (4 of a DGX H100's GPUs per node; no GPU is needed for
# host buffers) the groups' plans name the GPUs their members drive.
mesh "8 ranks of DGX H100 nodes on 2 nodes, tp 2 x dp 4" 8 2 2 3 dgx-h100

# torchrun inside a launcher: each launcher rank starts 3 NCCL ranks, which
# all hold that launcher rank, so no communicator can be the launcher's
# plan or derived from it: every one gets a plan computed for its members.
torchrun_style() {
  local n=6 t0=$SECONDS dir=$tmp/store-torchrun${MESH_DEVICE:+-device}
  mkdir -p "$dir"
  "$PLAN" generate -q --topo cpu-only --hosts "$(hostname -s)-v[0-1]" -k 1 -o "$tmp/plan.yaml" ||
    { bad "torchrun-style: gcoll-plan generate"; return; }
  local spawn='for i in 0 1 2; do RANK=$((GCOLL_RANK * 3 + i)) WORLD_SIZE=6 "$0" "$1" 3 $2 & done; wait'
  GCOLL_DEBUG=INFO timeout 300 "$RUN" -n 2 --nodes 2 --plan "$tmp/plan.yaml" \
    bash -c "$spawn" "$PROG" "$dir" "${MESH_DEVICE:-}" >"$tmp/out" 2>"$tmp/err"
  local rc=$?
  local good=$(grep -c "${MESH_DEVICE:+ on device buffers}, 0 wrong; finalize+destroy ok; abort ok; splits ok" "$tmp/out")
  local computed=$(grep -c "plan computed for the members' nodes" "$tmp/err")
  local other=$(grep -c "plan the launcher's plan\|plan derived from" "$tmp/err")
  if [ $rc -eq 0 ] && [ "$good" -eq "$n" ] && [ "$computed" -eq $((7 * n + n / 2)) ] &&
     [ "$other" -eq 0 ]; then
    ok "torchrun-style (3 ranks per launcher rank, 2 nodes${MESH_DEVICE:+, device buffers}): every rank 0 wrong, $computed joins on computed plans ($((SECONDS - t0)) s)"
  else
    bad "torchrun-style: exit $rc, $good of $n ranks right, $computed computed-plan and $other launcher or derived joins"
    tail -n 15 "$tmp/out" "$tmp/err"
  fi
}
torchrun_style

# The same replay on device buffers (ncclMemAlloc, a non-blocking stream per
# rank), on the emulated GPU: every communicator's collectives queued on
# the stream and run by the CUDA executor.
EMU=$top_builddir/tests/cudaemu/.libs/libcudaemu.so
if [ -f "$EMU" ]; then
  export GCOLL_CUDA_DRIVER=$EMU MESH_DEVICE=--device
  mesh "device buffers: 4 ranks, 2x2 mesh" 4 1 2 3
  mesh "device buffers: 6 ranks on 2 nodes, tp 2 x dp 3" 6 2 2 3
  torchrun_style
  unset GCOLL_CUDA_DRIVER MESH_DEVICE
else
  echo "skipped: device buffers (no $EMU: a build without the CUDA toolkit)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
