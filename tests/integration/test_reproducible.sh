#!/bin/bash
# Reproducible reductions (issue 22 part 7): for a given plan, communicator
# size and message size, a floating-point sum gives bitwise the same result
# on every rank, in every run and after a restart, because the algorithm,
# the channel partition and the order of the additions come from the plan
# and the call, never from timing. coll_check digest prints one FNV-1a
# digest per (collective, type, size) of sums of random non-integer values
# (whose rounding depends on the order); two separate launches of the same
# job must print the same lines, every rank the same allreduce digests,
# and a forced tree must differ from the ring (so the digests do see the
# order). The emulated GPU's kernel must give the host's bits on the same
# channel count.
set -u
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
CHECK=$top_builddir/tests/integration/coll_check
EMU=$top_builddir/tests/cudaemu/.libs/libcudaemu.so
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-repro.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# digests NAME OUT GCOLLRUN-ARGS... [-- COLL_CHECK-FLAGS]: sorted digest lines.
digests() {
  local name=$1 out=$2; shift 2
  local run=() flags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do run+=("$1"); shift; done
  [ $# -gt 0 ] && shift && flags=("$@")
  if ! timeout 300 "$RUN" "${run[@]}" "$CHECK" "${flags[@]}" digest >"$out.raw" 2>"$out.err"; then
    bad "$name: the run failed"; tail -5 "$out.err"; return 1
  fi
  grep '^rank [0-9]*: digest ' "$out.raw" | sort >"$out"
  [ -s "$out" ] || { bad "$name: no digests"; return 1; }
}

# same_on_ranks FILE N: every allreduce digest is the same on all N ranks.
same_on_ranks() {
  local odd
  odd=$(grep ' digest allreduce ' "$1" | awk '{print $4, $5, $6, $7}' | sort | uniq -c |
        awk -v n="$2" '$1 != n' | head -3)
  [ -z "$odd" ] || { echo "differing ranks: $odd"; return 1; }
}

for layout in "-n 4" "-n 5 --nodes 2" "-n 3 --nodes 3"; do
  # shellcheck disable=SC2086 # several words on purpose
  n=$(set -- $layout; echo "$2")
  # shellcheck disable=SC2086
  digests "$layout, run 1" "$tmp/a" $layout || continue
  # shellcheck disable=SC2086
  digests "$layout, run 2" "$tmp/b" $layout || continue
  lines=$(wc -l <"$tmp/a")
  if cmp -s "$tmp/a" "$tmp/b" && same_on_ranks "$tmp/a" "$n" && [ "$lines" -eq $((n * 32)) ]; then
    ok "$layout: $lines digests, identical in two launches, allreduce identical on every rank"
  else
    bad "$layout: digests differ between launches or ranks ($lines lines)"
    diff "$tmp/a" "$tmp/b" | head -5
  fi
done

# The tree's order is its own, and just as fixed.
GCOLL_ALGO=tree digests "tree, run 1" "$tmp/t1" -n 4 &&
  GCOLL_ALGO=tree digests "tree, run 2" "$tmp/t2" -n 4 && digests "ring" "$tmp/r" -n 4
if cmp -s "$tmp/t1" "$tmp/t2" && same_on_ranks "$tmp/t1" 4 && ! cmp -s "$tmp/t1" "$tmp/r"; then
  ok "GCOLL_ALGO=tree: identical in two launches, and not the ring's bits (the digests see the order)"
else
  bad "GCOLL_ALGO=tree: not reproducible, or indistinguishable from the ring"
fi

# The host allreduce's gather form (host_exec.h) reduces in the ring's
# blocks and order: one ring channel with the form off (the model's step
# latencies 0) and on up to 128 KB (a step of 20 us), counts 1 and 1000 of
# every type taking it, give the same bits, whether the vectors travel
# on the one-shot board (host_oneshot.h, the default on one host) or
# around the ring (GCOLL_HOST_ONESHOT=0).
for n in 3 4; do
  GCOLL_ALGO=ring GCOLL_PROTO=simple GCOLL_MAX_NCHANNELS=1 \
    GCOLL_TUNING=host.ring.simple.intra_lat=0,shared_lat=0 \
    digests "ring, -n $n" "$tmp/g0" -n "$n" &&
    GCOLL_ALGO=ring GCOLL_PROTO=simple GCOLL_MAX_NCHANNELS=1 GCOLL_TUNING=host.ring.simple.intra_lat=20 \
      GCOLL_DEBUG=INFO digests "gather form on the board, -n $n" "$tmp/g1" -n "$n" &&
    GCOLL_ALGO=ring GCOLL_PROTO=simple GCOLL_MAX_NCHANNELS=1 GCOLL_TUNING=host.ring.simple.intra_lat=20 \
      GCOLL_HOST_ONESHOT=0 GCOLL_DEBUG=INFO digests "gather form on the ring, -n $n" "$tmp/g2" -n "$n" ||
    continue
  boards=$(grep -c "small host collectives on a one-shot board" "$tmp/g1.err")
  rings=$(grep -c "small host collectives on a one-shot board" "$tmp/g2.err")
  if cmp -s "$tmp/g0" "$tmp/g1" && cmp -s "$tmp/g0" "$tmp/g2" && [ "$boards" -eq "$n" ] &&
     [ "$rings" -eq 0 ]; then
    ok "-n $n: the gather form gives the ring's bits on the board and on the ring: $(wc -l <"$tmp/g1") digests"
  else
    bad "-n $n: the gather form's digests differ from the ring's (board on $boards ranks, $rings with it off)"
    diff "$tmp/g0" "$tmp/g1" | head -6
    diff "$tmp/g0" "$tmp/g2" | head -6
  fi
done

# Between 2 ranks of one host, allreduces from 2 MiB (here every size:
# GCOLL_SINGLE_COPY_BYTES=1) run the ring's reduce-scatter half and then
# read the peer's reduced blocks (host_direct.h): the ring's bits, and
# the INFO line says how many calls read.
GCOLL_MAX_NCHANNELS=1 GCOLL_SINGLE_COPY_BYTES=0 digests "ring, -n 2" "$tmp/s0" -n 2 &&
  GCOLL_MAX_NCHANNELS=1 GCOLL_SINGLE_COPY_BYTES=1 GCOLL_SINGLE_COPY_PAGES=any \
    GCOLL_SINGLE_COPY_TUNE=0 GCOLL_DEBUG=INFO \
    digests "single copy, -n 2" "$tmp/s1" -n 2
read_calls=$(grep -c "single copy: [1-9][0-9]* of [0-9]* candidate calls" "$tmp/s1.err")
if cmp -s "$tmp/s0" "$tmp/s1" && [ "$read_calls" -eq 2 ]; then
  ok "-n 2: allreduce reading the peer's reduced blocks gives the ring's bits: $(wc -l <"$tmp/s1") digests, $(grep -m1 -o "single copy: .*" "$tmp/s1.err")"
else
  bad "-n 2: single-copy allreduce: digests differ from the ring's, or $read_calls of 2 ranks read"
  diff "$tmp/s0" "$tmp/s1" | head -6
fi

# The CUDA kernel (on the emulated GPU) adds in the host executor's order
# on the same channels: host calls are capped by the CPUs, device calls
# are not, so both are pinned to the same count here.
if [ -f "$EMU" ]; then
  GCOLL_MAX_NCHANNELS=2 digests "host" "$tmp/h" -n 3 &&
    GCOLL_MAX_NCHANNELS=2 GCOLL_CUDA_DRIVER=$EMU GCOLL_TIMEOUT=60 digests "device" "$tmp/d" -n 3 -- --device
  if cmp -s "$tmp/h" "$tmp/d"; then
    ok "device buffers (emulated GPU) give the host executor's bits on 2 channels: $(wc -l <"$tmp/d") digests"
  else
    bad "device and host digests differ"
    diff "$tmp/h" "$tmp/d" | head -6
  fi
else
  echo "skipped: device digests (no $EMU in this build)"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
