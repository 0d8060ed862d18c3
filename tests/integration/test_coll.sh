#!/bin/bash
# Collectives through real processes: gcollrun starts the ranks, shm inside
# a (virtual) node, net/socket between nodes, exactly as the plan says.
# Checks results against the serial reference (coll_check matrix), a rank
# killed mid-loop, an abort from another thread, bad arguments and plans
# that do not fit the job; alltoall, gather and scatter (built on send/recv)
# with p2p_check colls.
#
# make check runs a subset; GCOLL_TEST_FULL=1 runs the whole matrix (every
# rank count x node split x forced algorithm/protocol, sizes up to 17M
# elements), which CI does in its own step.
set -u
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
CHECK=$top_builddir/tests/integration/coll_check
P2P=$top_builddir/tests/integration/p2p_check
PLAN=$top_builddir/gcoll-plan
PERF=$top_builddir/gcoll-perf
for f in "$RUN" "$CHECK" "$P2P" "$PLAN" "$PERF"; do
  [ -x "$f" ] || { echo "test_coll: $f is not built" >&2; exit 99; }
done
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-coll.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# matrix NAME GCOLLRUN-ARGS... -- CHECK-ARGS...: one correctness run.
matrix() {
  local name=$1; shift
  local t0=$SECONDS
  if timeout 600 "$RUN" "$@" >"$tmp/out" 2>&1; then
    ok; echo "ok: $name ($((SECONDS - t0)) s)"
  else
    bad "$name: exit $?"; tail -20 "$tmp/out"
  fi
}

# make check: every rank count and node split with the plan's choices (odd
# counts on 2 nodes are placed in blocks: 3 is 2+1, 5 is 3+2), and every
# forced algorithm/protocol on three shapes, one of them uneven. GCOLL_TEST_FULL=1 (CI):
# forced choices on every shape, and sizes up to 17M elements (1M+3 and 17M
# are not multiples of any chunk) with the plan's choices on every shape up
# to 4 ranks (5 and 8 ranks on 2 cores take minutes each at 17M) and forced
# ones on n=4 over 2 nodes.
full=${GCOLL_TEST_FULL:-0}
for n in 1 2 3 4 5 8; do
  for nodes in 1 2; do
    [ "$n" -lt "$nodes" ] && continue
    sizes=""; [ "$full" = 1 ] && [ "$n" -le 4 ] && sizes=--full
    matrix "n=$n nodes=$nodes plan's choice $sizes" -n "$n" --nodes "$nodes" "$CHECK" matrix $sizes
    if [ "$full" = 1 ] || { [ "$n" -eq 3 ] && [ "$nodes" -le 2 ]; } || { [ "$n" -eq 4 ] && [ "$nodes" -eq 2 ]; }; then
      forced_sizes=""
      [ "$full" = 1 ] && [ "$n" -eq 4 ] && [ "$nodes" -eq 2 ] && forced_sizes=--full
      for algo in ring tree; do
        for proto in simple ll; do
          GCOLL_ALGO=$algo GCOLL_PROTO=$proto matrix "n=$n nodes=$nodes $algo/$proto $forced_sizes" \
            -n "$n" --nodes "$nodes" "$CHECK" matrix $forced_sizes
        done
      done
    fi
  done
done
# Every edge over TCP, even inside a node.
GCOLL_TRANSPORT=net/socket matrix "n=3 all net/socket" -n 3 "$CHECK" matrix
# Nodes of different sizes (block placement): 7 on 3 nodes is 3+2+2, 5 on 4
# is 2+1+1+1: rings and trees through nodes of 1, 2 and 3 ranks.
matrix "n=7 nodes=3 (3+2+2) plan's choice" -n 7 --nodes 3 "$CHECK" matrix
matrix "n=5 nodes=4 (2+1+1+1) plan's choice" -n 5 --nodes 4 "$CHECK" matrix

# Host allreduce's gather form (host_exec.h) up to a limit from the tuning
# model: counts just below, at and above the limit for 1-, 2-, 4- and 8-byte
# types, in both protocols, on the limits each shape reports at init; each
# count follows larger ones of the previous type, so small calls run after
# big ones on the same FIFOs.
gather_limit() {  # PROTO GCOLLRUN-ARGS...: the limit in bytes the ranks report
  local proto=$1; shift
  GCOLL_DEBUG=INFO GCOLL_PROTO=$proto timeout 60 "$RUN" "$@" "$CHECK" init 2>&1 |
    sed -n "s/.*gathers whole vectors up to \([0-9]*\) B (simple), \([0-9]*\) B (ll).*/\1 \2/p" |
    head -n 1 | awk -v p="$proto" '{ print p == "ll" ? $2 : $1 }'
}
# Between two nodes (comm_init.c) the limit is at most 8 KiB: above that the
# ring measured faster over TCP; 3 ranks on 2 nodes is the uneven split.
# There the ring is forced: the node form (below) takes small allreduces
# otherwise.
for nk in "2 1" "3 1" "4 1" "5 1" "8 1" "4 2" "3 2"; do
  read -r n k <<<"$nk"
  for proto in simple ll; do
    lim=$(gather_limit "$proto" -n "$n" --nodes "$k")
    if [ -z "$lim" ]; then
      bad "n=$n nodes=$k $proto: no gather limit reported at init"; continue
    fi
    if [ "$k" -gt 1 ] && { [ "$lim" -eq 0 ] || [ "$lim" -gt 8192 ]; }; then
      bad "n=$n nodes=$k $proto: gather limit $lim B over TCP edges, expected 1 to 8192"; continue
    fi
    sizes=0,1,2,3,5,7
    for d in 8 4 2 1; do
      c=$((lim / d)); [ "$c" -gt 1 ] && sizes=$sizes,$((c - 1)),$c,$((c + 1))
    done
    algo=; [ "$k" -gt 1 ] && algo=ring
    GCOLL_ALGO=$algo GCOLL_PROTO=$proto matrix "n=$n nodes=$k $proto around the gather limit $lim B" \
      -n "$n" --nodes "$k" "$CHECK" matrix --sizes "$sizes"
  done
done

# The node form of small allreduces between 2 nodes (host_exec.h): every
# rank says so at init, with the same limit, and allreduces of every type
# and op, in and out of place, at counts up to and across that limit for
# 1-, 2-, 4- and 8-byte types (above 64 KiB its step goes through the proxy
# thread), on splits of 1+1, 2+1, 3+2 and 3+3 (a node of one rank has no
# board; a node of 3 has a rank that neither sends nor receives), SIMPLE
# steps between the nodes and, on 2+1 and 3+3, LL ones; and with the ring
# forced, no rank takes it. (The other collectives' matrix on 2 nodes is
# above.)
for nk in "2 2" "3 2" "5 2" "6 2"; do
  read -r n k <<<"$nk"
  lim=$(GCOLL_DEBUG=INFO timeout 60 "$RUN" -n "$n" --nodes "$k" "$CHECK" init 2>&1 |
    sed -n "s/.*host allreduces up to \([0-9]*\) B between the 2 nodes.*/\1/p" | sort -u)
  if [ "$(echo "$lim" | wc -w)" -ne 1 ] || [ "$lim" -lt 64 ]; then
    bad "n=$n nodes=$k: node form limits at init: '$lim'"; continue
  fi
  sizes=0,1,2,3,5,7,1021
  for d in 8 4 2 1; do
    c=$((lim / d)); sizes=$sizes,$((c - 1)),$c,$((c + 1))
  done
  protos=simple; [ "$n" -eq 3 ] || [ "$n" -eq 6 ] && protos="simple ll"
  for proto in $protos; do
    GCOLL_DEBUG=INFO GCOLL_PROTO=$proto matrix "n=$n nodes=$k $proto node form up to $lim B" \
      -n "$n" --nodes "$k" "$CHECK" matrix --sizes "$sizes" --allreduce
    said=$(grep -c "host allreduces up to $lim B between the 2 nodes" "$tmp/out")
    [ "$said" -eq "$n" ] || bad "n=$n nodes=$k: $said of $n ranks took the node form at init"
  done
  GCOLL_DEBUG=TRACE timeout 60 "$RUN" -n "$n" --nodes "$k" "$CHECK" matrix --sizes 1,7 \
    >"$tmp/out" 2>&1 || bad "n=$n nodes=$k: traced run failed"
  took=$(grep -c "gcollAllReduce: 4 bytes, .*, node form" "$tmp/out")
  GCOLL_ALGO=ring GCOLL_DEBUG=TRACE timeout 60 "$RUN" -n "$n" --nodes "$k" "$CHECK" matrix \
    --sizes 1,7 >"$tmp/out" 2>&1 || bad "n=$n nodes=$k: GCOLL_ALGO=ring run failed"
  forced=$(grep -c "gcollAllReduce: .*, node form" "$tmp/out")
  if [ "$took" -gt 0 ] && [ "$forced" -eq 0 ]; then
    ok; echo "ok: n=$n nodes=$k: $took 4-byte allreduces in the node form, none with GCOLL_ALGO=ring"
  else
    bad "n=$n nodes=$k: $took 4-byte allreduces in the node form, $forced with GCOLL_ALGO=ring"
  fi
done

# alltoall, gather and scatter: every type, counts 0 to 65537 in 4 KiB FIFO
# slots (many steps), roots 0 and last, in place, grouped with an allreduce
# and a send/recv ring, refusals; 1, 2, 3, 4 and 8 ranks, 2 and 3 virtual
# nodes.
for nk in "1 1" "2 1" "3 1" "4 2" "8 1" "6 3"; do
  read -r n k <<<"$nk"
  GCOLL_SLOT_BYTES=4096 matrix "alltoall/gather/scatter n=$n nodes=$k, 4 KiB slots" \
    -n "$n" --nodes "$k" "$P2P" colls
done

# gcoll-perf on uneven nodes: every collective and type, sizes 1 B to 28 KB,
# every row checked against the serial reference with 0 wrong elements.
perf_uneven() {
  local n=$1 k=$2 t0=$SECONDS
  timeout 120 "$RUN" -n "$n" --nodes "$k" "$PERF" -o all -t all -b 1 -e 64K -f 13 -w 1 -n 2 \
    >"$tmp/perf.out" 2>&1
  local rc=$?
  # Rows: size count type redop root time algbw busbw #wrong time algbw busbw #wrong.
  local verdict
  verdict=$(awk '/^#/ { if (/^# Out of bounds values : 0 OK/) oob = 1; next }
    NF > 0 { rows++; if (NF != 13 || $9 != "0" || $13 != "0") { wrong++; if (!first) first = $0 } }
    END { if (!oob) print "no \"0 OK\" summary"; else if (wrong) print wrong " bad rows, first: " first;
          else if (rows != 400) print rows " rows, expected 400"; }' "$tmp/perf.out")
  if [ "$rc" -eq 0 ] && [ -z "$verdict" ]; then
    ok; echo "ok: gcoll-perf -o all -t all on -n $n --nodes $k, 0 wrong ($((SECONDS - t0)) s)"
  else
    bad "gcoll-perf on -n $n --nodes $k: exit $rc, ${verdict:-}"; tail -20 "$tmp/perf.out"
  fi
}
perf_uneven 3 2
perf_uneven 7 3
perf_uneven 5 4

# A rank killed in the middle of a loop: every survivor fails with
# gcollRemoteError naming it, within GCOLL_TIMEOUT + 1 s; gcollrun names it too.
# The last spec is calibrated (GCOLL_TUNING) so that the loop's 4 KB
# allreduce takes the gather form.
for spec in "4 1 2" "4 2 1" "5 1 3" "3 2 2" "4 1 1 host.ring.simple.intra_lat=20"; do
  set -- $spec
  n=$1 nodes=$2 victim=$3
  t0=$(date +%s%N)
  GCOLL_TUNING=${4:-} GCOLL_TIMEOUT=2 timeout 60 "$RUN" -n "$n" --nodes "$nodes" --kill-wait 8 "$CHECK" die "$victim" 50 >"$tmp/out" 2>&1
  rc=$? dt=$(( ($(date +%s%N) - t0) / 1000000 ))
  reported=$(grep -c "remote process exited.*rank $victim " "$tmp/out")
  if [ "$rc" -ne 0 ] && [ "$reported" -eq $((n - 1)) ] && grep -q "gcollrun: rank $victim .*SIGKILL" "$tmp/out" \
     && [ "$dt" -lt 10000 ]; then
    ok; echo "ok: rank $victim of $n ($nodes nodes) killed: $reported survivors reported it, ${dt} ms"
  else
    bad "kill rank $victim of $n: rc $rc, $reported of $((n - 1)) survivors reported, ${dt} ms"; cat "$tmp/out"
  fi
done

# Host allreduce, allgather and reducescatter up to 64 KiB between nodes
# move their network steps in the calling thread (proxy.h's inline
# polling), and allreduces up to 8 KiB between nodes take the gather form
# (issue 17). Every collective, type and op, in and out of place, at
# per-rank counts across both limits (16384 floats are 64 KiB, 16385 not;
# 2048 floats are 8 KiB), on an even and an uneven split; the trace must
# show both paths taken, and broadcasts never inline.
for shape in "4 2" "3 2"; do
  set -- $shape
  GCOLL_DEBUG=TRACE matrix "n=$1 nodes=$2 small collectives, network steps inline" -n "$1" --nodes "$2" \
    "$CHECK" matrix --sizes 0,1,2,3,13,31,1021,2047,2048,2049,4099,8191,8192,8193,16383,16384,16385
  inl=$(grep -c "gcollAllReduce: 65536 bytes, .*network steps inline" "$tmp/out")
  outl=$(grep "gcollAllReduce: 65540 bytes, " "$tmp/out" | grep -vc "network steps inline")
  bcast=$(grep "gcollBroadcast: " "$tmp/out" | grep -c "network steps inline")
  if [ "$inl" -gt 0 ] && [ "$outl" -gt 0 ] && [ "$bcast" -eq 0 ]; then
    ok; echo "ok: n=$1 nodes=$2: 64 KiB allreduces inline ($inl), 64 KiB + 4 through the proxy ($outl)"
  else
    bad "n=$1 nodes=$2: inline allreduces at 64 KiB: $inl, not inline at 64 KiB + 4: $outl, inline broadcasts: $bcast"
  fi
done

# A rank killed while the others' small collectives move their network
# steps themselves (1 and 7 floats: the node form, the victim a node's
# sender, receiver, a rank that does neither, or a node of its own;
# 16384 floats: the ring, still inline): reported with its rank, no hang.
for spec in "4 2 1 1" "4 2 2 16384" "3 2 2 7" "6 2 1 1" "6 2 3 1" "5 2 4 7"; do
  set -- $spec
  n=$1 nodes=$2 victim=$3 count=$4
  t0=$(date +%s%N)
  GCOLL_TIMEOUT=2 timeout 60 "$RUN" -n "$n" --nodes "$nodes" --kill-wait 8 "$CHECK" die "$victim" 50 "$count" >"$tmp/out" 2>&1
  rc=$? dt=$(( ($(date +%s%N) - t0) / 1000000 ))
  reported=$(grep -c "remote process exited.*rank $victim " "$tmp/out")
  # A survivor that waited on the board counts calls, not FIFO steps.
  steps=$(grep "remote process exited" "$tmp/out" | grep -c "(one-shot).* at step ")
  if [ "$rc" -ne 0 ] && [ "$reported" -eq $((n - 1)) ] && [ "$dt" -lt 10000 ] && [ "$steps" -eq 0 ]; then
    ok; echo "ok: rank $victim of $n ($nodes nodes) killed in $count-float allreduces: $reported survivors reported it, ${dt} ms"
  else
    bad "kill rank $victim of $n in $count-float allreduces: rc $rc, $reported of $((n - 1)) survivors reported, ${dt} ms"; cat "$tmp/out"
  fi
done

# Single-copy reads (kernels/host_direct.h): allgathers and broadcasts on
# one node read their peers' buffers (process_vm_readv) from
# GCOLL_SINGLE_COPY_BYTES when those are in huge pages and the ring is not
# the faster. With 1 byte, any pages (coll_check's buffers are malloc's)
# and the fixed rules (GCOLL_SINGLE_COPY_TUNE=0: the calls' sizes all fit
# in cache) the matrix's allgathers between 2 ranks and broadcasts among 3
# and 5 read their peers: in and out of place, roots rotating, every type,
# counts 0 to past 64 KiB, checked against the serial reference; every
# rank's count at destroy must show direct calls. Then a rank killed
# during direct allgathers and broadcasts is named by every survivor.
export GCOLL_SINGLE_COPY_TUNE=0
for n in 2 3 5; do
  GCOLL_SINGLE_COPY_BYTES=1 GCOLL_SINGLE_COPY_PAGES=any GCOLL_DEBUG=INFO \
    matrix "n=$n single copy" -n "$n" "$CHECK" matrix --sizes 0,1,2,3,13,1021,4099,16385
  counted=$(grep -c "single copy: [1-9][0-9]* of [0-9]* candidate calls" "$tmp/out")
  if [ "$counted" -eq "$n" ]; then
    ok; echo "ok: n=$n: $(grep -m1 -o "single copy: .*" "$tmp/out")"
  else
    bad "n=$n single copy: $counted of $n ranks read their peers"; grep "single copy" "$tmp/out"
  fi
done
# Broadcasts and reduces of 16 floats on one node go through the one-shot
# board (kernels/host_oneshot.h), where a broadcast's readers wait for the
# root only and a reduce's leaves for nobody, up to 15 calls ahead: a dead
# reader, leaf or root is still named by every survivor, no hang. Spec:
# ranks, victim, collective, count, form (single-copy or one-shot).
for spec in "3 1 broadcast 4096 single-copy" "4 2 broadcast 4096 single-copy" \
            "3 0 broadcast 4096 single-copy" "2 1 allgather 4096 single-copy" \
            "2 0 allgather 4096 single-copy" "2 1 allreduce 65536 single-copy" \
            "4 1 broadcast 16 one-shot" "4 0 broadcast 16 one-shot" \
            "4 2 reduce 16 one-shot" "4 0 reduce 16 one-shot"; do
  set -- $spec
  n=$1 victim=$2 coll=$3 count=$4 form=$5
  copy=0
  [ "$form" = single-copy ] && copy=1
  t0=$(date +%s%N)
  GCOLL_SINGLE_COPY_BYTES=$copy GCOLL_SINGLE_COPY_PAGES=any GCOLL_TIMEOUT=2 \
    timeout 60 "$RUN" -n "$n" --kill-wait 8 "$CHECK" die "$victim" 50 "$count" "$coll" >"$tmp/out" 2>&1
  rc=$? dt=$(( ($(date +%s%N) - t0) / 1000000 ))
  reported=$(grep -c "remote process exited.*rank $victim " "$tmp/out")
  if [ "$rc" -ne 0 ] && [ "$reported" -eq $((n - 1)) ] && [ "$dt" -lt 10000 ]; then
    ok; echo "ok: rank $victim of $n killed in $form ${coll}s: $reported survivors reported it, ${dt} ms"
  else
    bad "kill rank $victim of $n in $form ${coll}s: rc $rc, $reported of $((n - 1)) survivors reported, ${dt} ms, $steps board waits named a step"
    cat "$tmp/out"
  fi
done

unset GCOLL_SINGLE_COPY_TUNE

# Tuned single copy (the default): each size class, in place or not, times
# the ring and the direct form on its first calls and keeps the faster,
# from every rank's figures alike. gcoll-perf's buffers are in huge pages,
# so the direct form really reads its peers; whichever form each class
# keeps, every result is checked (#wrong 0), every rank reports the same
# verdicts, and there are some.
for spec in "2 broadcast" "3 allgather" "2 allreduce"; do
  set -- $spec
  b=128K e=1M
  [ "$2" = allreduce ] && b=2M e=4M
  GCOLL_DEBUG=INFO timeout 120 "$RUN" -n "$1" "$PERF" -o "$2" -b $b -e $e -f 2 -w 2 -n 12 -c 1 \
    >"$tmp/out" 2>&1
  rc=$?
  wrong=$(awk '$1 ~ /^[0-9]+$/ && NF == 13 && ($9 != 0 || $13 != 0)' "$tmp/out" | wc -l)
  rows=$(awk '$1 ~ /^[0-9]+$/ && NF == 13' "$tmp/out" | wc -l)
  verdicts=$(sed -n 's/.*single copy: .*; tuned: //p' "$tmp/out" | sort -u)
  nv=$(grep -c "single copy: .*; tuned: $2 " "$tmp/out")
  if [ "$rc" -eq 0 ] && [ "$wrong" -eq 0 ] && [ "$rows" -gt 0 ] && [ "$nv" -eq "$1" ] &&
     [ "$(printf '%s\n' "$verdicts" | wc -l)" -eq 1 ]; then
    ok; echo "ok: n=$1 tuned single-copy ${2}s, $rows sizes 0 wrong, every rank kept: $verdicts"
  else
    bad "n=$1 tuned single-copy ${2}s: rc $rc, $wrong wrong rows of $rows, $nv of $1 ranks tuned, verdicts: $verdicts"
    tail -20 "$tmp/out"
  fi
done

# A program's start as nccl_host_check's launcher_id makes it: rank 0
# broadcasts 128 bytes on the one-shot board (the root returns at once) and
# destroys the communicator, while the other ranks come late to the board
# (GCOLL_TEST_ONESHOT_LATE_MS): rank 0's init waits until they mapped it,
# so its destroy cannot remove the name before they open it.
for n in 2 3; do
  GCOLL_TEST_ONESHOT_LATE_MS=300 timeout 60 "$RUN" -n "$n" "$CHECK" bcast-destroy >"$tmp/out" 2>&1
  rc=$?
  right=$(grep -c "broadcast right" "$tmp/out")
  if [ "$rc" -eq 0 ] && [ "$right" -eq "$n" ]; then
    ok; echo "ok: n=$n: the root destroys right after its broadcast, ranks late to the board still get it"
  else
    bad "n=$n: broadcast then destroy with late ranks: rc $rc, $right of $n right"; tail -4 "$tmp/out"
  fi
done

# A setting that decides the steps, different on one rank (here single
# copy on rank 0 only): every rank fails in one line that names the likely
# cause, within the timeout, instead of hanging. Both ranks look for a
# dead peer for up to 2 s first (comm_coll.c), and gcollrun sends SIGTERM
# to the rest as soon as one exits: the ranks ignore it here, so that the
# slower one's line is not cut off (under CI load it was, once).
t0=$(date +%s%N)
GCOLL_TIMEOUT=5 timeout 60 "$RUN" -n 2 sh -c 'trap "" TERM; if [ "$GCOLL_RANK" = 0 ]; then
  export GCOLL_SINGLE_COPY_BYTES=1 GCOLL_SINGLE_COPY_PAGES=any; fi; exec "$0" -o allgather -b 64K -e 64K' \
  "$PERF" >"$tmp/out" 2>&1
rc=$? dt=$(( ($(date +%s%N) - t0) / 1000000 ))
named=$(grep -c "different on some rank" "$tmp/out")
if [ "$rc" -ne 0 ] && [ "$named" -eq 2 ] && [ "$dt" -lt 10000 ]; then
  ok; echo "ok: GCOLL_SINGLE_COPY_BYTES on one rank only: both ranks name the mismatch (${dt} ms)"
else
  bad "GCOLL_SINGLE_COPY_BYTES on one rank only: rc $rc, $named of 2 ranks named it, ${dt} ms"; cat "$tmp/out"
fi

# With GCOLL_ALGO=tree, host reduces whose root is the root of channel 0's
# tree go up that tree (comm_coll.c); other roots, and every reduce
# without it, keep the ring. Every collective, type and op, in and out of
# place, roots rotating over every rank, at per-rank counts up to past
# 64 KiB (16384 floats), on even and odd splits over 1, 2 and 3 nodes,
# through the store's init (which carries the tree's root in the channel
# cap) and through the endpoints' wave; the trace must show tree reduces
# (at 64 KiB and above) when forced and none otherwise.
tree_reduce() {  # NAME EXPECT(tree|ring) GCOLLRUN-ARGS...
  local name=$1 want=$2; shift 2
  GCOLL_DEBUG=TRACE matrix "$name: reduce up the tree" "$@" \
    "$CHECK" matrix --sizes 0,1,2,3,13,31,1021,4099,16383,16384,16385
  local at=$(grep -c "gcollReduce: 65536 bytes, tree/" "$tmp/out")
  local above=$(grep -c "gcollReduce: 65540 bytes, tree/" "$tmp/out")
  local any=$(grep -c "gcollReduce: .* tree/" "$tmp/out")
  if { [ "$want" = tree ] && [ "$at" -gt 0 ] && [ "$above" -gt 0 ]; } ||
     { [ "$want" = ring ] && [ "$any" -eq 0 ]; }; then
    ok; echo "ok: $name: tree reduces $any (at 64 KiB: $at, above: $above)"
  else
    bad "$name: expected $want: tree reduces $any, at 64 KiB $at, above $above"
  fi
}
GCOLL_ALGO=tree tree_reduce "n=4 nodes=2, GCOLL_ALGO=tree" tree -n 4 --nodes 2
GCOLL_ALGO=tree tree_reduce "n=3 nodes=2, GCOLL_ALGO=tree, store" tree --no-endpoints -n 3 --nodes 2
GCOLL_ALGO=tree tree_reduce "n=5 nodes=3, GCOLL_ALGO=tree" tree -n 5 --nodes 3
GCOLL_ALGO=tree tree_reduce "n=6 nodes=3, GCOLL_ALGO=tree, store" tree --no-endpoints -n 6 --nodes 3
GCOLL_ALGO=tree GCOLL_PROTO=ll tree_reduce "n=3 nodes=1, GCOLL_ALGO=tree, LL" tree -n 3
tree_reduce "n=4 nodes=2, plan's choice" ring -n 4 --nodes 2

# A rank killed during reduces up the tree: every survivor names it,
# leaves whose parent never stops waiting included.
for spec in "4 2 3" "4 2 1" "5 3 2"; do
  set -- $spec
  n=$1 nodes=$2 victim=$3
  t0=$(date +%s%N)
  GCOLL_ALGO=tree GCOLL_DEBUG=TRACE GCOLL_TIMEOUT=2 timeout 60 "$RUN" -n "$n" --nodes "$nodes" --kill-wait 8 "$CHECK" die "$victim" 50 4 reduce >"$tmp/out" 2>&1
  rc=$? dt=$(( ($(date +%s%N) - t0) / 1000000 ))
  reported=$(grep -c "remote process exited.*rank $victim " "$tmp/out")
  trees=$(grep -c "gcollReduce: 16 bytes, tree/" "$tmp/out")
  if [ "$rc" -ne 0 ] && [ "$reported" -eq $((n - 1)) ] && [ "$trees" -gt 0 ] && [ "$dt" -lt 10000 ]; then
    ok; echo "ok: rank $victim of $n ($nodes nodes) killed in tree reduces: $reported survivors reported it, ${dt} ms"
  else
    bad "kill rank $victim of $n in tree reduces: rc $rc, $reported of $((n - 1)) survivors reported, $trees tree reduces, ${dt} ms"; tail -n 20 "$tmp/out"
  fi
done

# gcollCommAbort from another thread unblocks a collective.
if timeout 60 "$RUN" -n 2 "$CHECK" abort >"$tmp/out" 2>&1 && grep -q "rank 0: allreduce returned invalid usage" "$tmp/out"; then
  ok; echo "ok: abort unblocks a waiting collective"
else
  bad "abort"; cat "$tmp/out"
fi

# Bad arguments are refused one by one and leave the communicator usable.
if timeout 60 "$RUN" -n 3 "$CHECK" badargs >"$tmp/out" 2>&1 && [ "$(grep -c ': ok$' "$tmp/out")" -eq 3 ]; then
  ok; echo "ok: bad arguments refused"
else
  bad "badargs"; cat "$tmp/out"
fi

# Plans that do not fit: wrong rank count, corrupted file. One line, no hang.
"$PLAN" generate --topo cpu-only --nodes 1 --ranks-per-node 4 -q -o "$tmp/four.yaml"
if ! timeout 60 "$RUN" -n 2 --plan "$tmp/four.yaml" "$CHECK" init >"$tmp/out" 2>&1; then
  ok; echo "ok: a 4-rank plan for 2 ranks is refused: $(head -1 "$tmp/out")"
else
  bad "4-rank plan for 2 ranks accepted"
fi
head -c 300 "$tmp/four.yaml" >"$tmp/cut.yaml"
if ! GCOLL_PLAN="$tmp/cut.yaml" GCOLL_RANK=0 GCOLL_JOB_KEY=ab timeout 20 "$CHECK" init >"$tmp/out" 2>&1 \
   && [ "$(wc -l <"$tmp/out")" -eq 1 ] && grep -q "cut.yaml" "$tmp/out"; then
  ok; echo "ok: truncated plan: $(cat "$tmp/out")"
else
  bad "truncated plan"; cat "$tmp/out"
fi
if ! GCOLL_PLAN="$tmp/four.yaml" GCOLL_RANK=7 GCOLL_JOB_KEY=ab timeout 20 "$CHECK" init >"$tmp/out" 2>&1 \
   && grep -q "rank 7 is not in the plan" "$tmp/out"; then
  ok; echo "ok: rank outside the plan: $(cat "$tmp/out")"
else
  bad "rank outside the plan"; cat "$tmp/out"
fi

# ---- communicators whose ranks interleave nodes ---------------------------------
# A communicator from an id whose rank order alternates the launcher's
# nodes (cyclic): its plan is derived from the launcher's with a rank order
# (each node lists its ranks). The whole matrix against the serial
# reference, 0 wrong. MAP is "comm rank of launcher rank 0 1 2 ...".
interleaved() {
  local name=$1 n=$2 nodes=$3 map=$4 dir=$tmp/interleaved-$2-$3
  mkdir -p "$dir"
  GCOLL_DEBUG=INFO timeout 300 "$RUN" -n "$n" --nodes "$nodes" bash -c \
    'map=($1); exec "$2" --uid "$3/uid" "$4" "${map[$GCOLL_RANK]}" matrix' \
    sh "$map" "$CHECK" "$dir" "$n" >"$tmp/out" 2>"$tmp/err"
  local rc=$? good derived
  good=$(grep -c ", 0 wrong" "$tmp/out")
  derived=$(grep -c "plan derived from the launcher's plan" "$tmp/err")
  if [ $rc -eq 0 ] && [ "$good" -eq "$n" ] && [ "$derived" -eq "$n" ]; then
    ok; echo "ok: $name: matrix 0 wrong on every rank, plans derived with a rank order"
  else
    bad "$name: exit $rc, $good of $n ranks 0 wrong, $derived derived plans"
    tail -n 5 "$tmp/out" "$tmp/err"
  fi
}
interleaved "4 ranks on 2 nodes, ranks alternating the nodes" 4 2 "0 2 1 3"
interleaved "6 ranks on 3 nodes, cyclic" 6 3 "0 3 1 4 2 5"
# A cyclic job: gcollrun places rank r on node r mod K (as srun -m cyclic),
# with its own plan and with the ranks planning the job themselves.
for how in "" "--no-plan"; do
  # shellcheck disable=SC2086
  timeout 300 "$RUN" -n 7 --nodes 3 --distribution cyclic $how "$CHECK" matrix >"$tmp/out" 2>&1
  rc=$?
  if [ $rc -eq 0 ] && [ "$(grep -c ", 0 wrong" "$tmp/out")" -eq 7 ]; then
    ok; echo "ok: 7 ranks on 3 nodes, --distribution cyclic ${how:-(the launcher plan)}: matrix 0 wrong"
  else
    bad "7 ranks, cyclic ${how}: exit $rc"; tail -n 5 "$tmp/out"
  fi
done

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
