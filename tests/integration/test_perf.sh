#!/bin/bash
# Functional test of gcoll-perf through gcollrun: every collective, several
# types and ops, 1-4 ranks on 1 or 2 virtual nodes (shm and TCP paths);
# alltoall, gather and scatter also with 4 KiB FIFO slots (many steps),
# roots 0 and last, up to 8 ranks and 3 virtual nodes. Each
# run must report zero wrong elements on every row, print the nccl-tests
# format (checked field by field: sizes, counts, bandwidth arithmetic, row
# count, summary), and a corrupted result must be counted exactly.
# Run by `make check`, or by hand:
#   top_srcdir=/path/to/src top_builddir=/path/to/build tests/integration/test_perf.sh
set -u

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
PERF=$top_builddir/gcoll-perf
export GCOLL_TOPO_DIR="${GCOLL_TOPO_DIR:-$top_srcdir/etc/topologies}"
unset GCOLL_ALGO GCOLL_PROTO GCOLL_TRANSPORT GCOLL_PERF_INJECT_ERROR GCOLL_PLAN GCOLL_RANK

if [ ! -x "$RUN" ]; then
  echo "skipped: gcollrun not built"
  exit 77
fi
if [ ! -x "$PERF" ]; then
  echo "test_perf: no executable $PERF" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/perf-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

rc=0
run() { timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
errtext() { head -c 600 "$tmp/err"; }

# The sizes gcoll-perf visits for -b MIN -e MAX -f F (F > 1), one per line.
sizes() {
  local s=$1 max=$2 f=$3
  while [ "$s" -le "$max" ]; do
    echo "$s"
    s=$((s * f))
  done
}

# check_table NAME NRANKS ROWS CHECKED [COLL]: validates $tmp/out. COLL is the
# collective of a single-collective run; with -o all the "# Collective:"
# lines say. CHECKED=1 wants #wrong == 0 everywhere, 0 wants N/A.
check_table() {
  local name=$1 n=$2 rows=$3 checked=$4 coll=${5:-}
  local msg
  msg=$(awk -v n="$n" -v rows="$rows" -v checked="$checked" -v coll="$coll" '
    function fail(m) { if (!err) err = m " (line " NR ": " $0 ")"; }
    function isint(s) { return s ~ /^[0-9]+$/ }
    function isnum(s) { return s ~ /^[0-9]+(\.[0-9]+)?$/ }
    function tsize(t) {
      if (t ~ /^u?int8$/) return 1;
      if (t == "half" || t == "bfloat16") return 2;
      if (t ~ /^u?int32$/ || t == "float") return 4;
      if (t ~ /^u?int64$/ || t == "double") return 8;
      return 0;
    }
    function blocked(c) {
      return c == "allgather" || c == "reducescatter" || c == "alltoall" || c == "gather" ||
             c == "scatter";
    }
    function factor(c) {
      if (c == "allreduce") return 2 * (n - 1) / n;
      if (blocked(c)) return (n - 1) / n;
      return 1;
    }
    function abs(x) { return x < 0 ? -x : x }
    function check_bw(size, t, alg, bus, c) {
      if (abs(bus - alg * factor(c)) > 0.011 + 0.005 * factor(c)) fail("busbw is not algbw x factor");
      # Printed values are rounded: compare only where they carry 3 digits.
      if (t >= 1 && alg >= 1 && abs(size / t / 1000 - alg) > 0.02 * alg) fail("algbw is not size/time");
      sum += bus; nbw++;
    }
    NR == 1 && !/^# gcoll-perf: gcoll [0-9]+\.[0-9]+\.[0-9]+ nranks [0-9]+ / { fail("first line") }
    NR == 1 && $6 != n { fail("nranks " $6 ", expected " n) }
    /^# Using devices$/ { devices = 1 }
    /^#  Rank  0 Pid +[0-9]+ on / { rank0 = 1 }
    /^# Collective: / { coll = $3 }
    { line = $0; sub(/[ \t]+$/, "", line) } # nccl-tests pads these lines
    line == "#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw #wrong" { head++ }
    line == "#        (B)    (elements)                               (us)  (GB/s)  (GB/s)            (us)  (GB/s)  (GB/s)" { units++ }
    /^# Out of bounds values : / { oob = $7 " " $8 }
    /^# Avg bus bandwidth    : / { avg = $6; have_avg = 1 }
    /^#/ { next }
    {
      nrows++;
      if (NF != 13) { fail("row has " NF " fields"); next }
      ts = tsize($3);
      if (!isint($1) || !isint($2) || ts == 0) fail("size/count/type");
      blocks = blocked(coll) ? n : 1;
      if ($1 != $2 * ts * blocks) fail("size is not count x " ts " x " blocks " for " coll);
      hasop = (coll == "allreduce" || coll == "reduce" || coll == "reducescatter");
      if (hasop != ($4 != "none")) fail("redop column for " coll);
      rooted = (coll == "broadcast" || coll == "reduce" || coll == "gather" || coll == "scatter");
      if (rooted ? !($5 >= 0 && $5 < n) : $5 != -1) fail("root column for " coll);
      # alltoall has no in-place form: that half only checks the refusal;
      # sendrecv has none either, and runs nothing there.
      refused = coll == "alltoall" || coll == "sendrecv";
      for (i = 6; i <= 12; i++) if (i != 9 && !(refused && i >= 10) && !isnum($i)) fail("field " i " is not a number");
      if (refused && ($10 != "N/A" || $11 != "N/A" || $12 != "N/A")) fail("in-place " coll " is not N/A");
      inplace_wrong = coll == "sendrecv" ? "N/A" : "0";
      if (checked ? ($9 != "0" || $13 != inplace_wrong) : ($9 != "N/A" || $13 != "N/A")) fail("#wrong");
      check_bw($1, $6, $7, $8, coll);
      if (!refused) check_bw($1, $10, $11, $12, coll);
    }
    END {
      if (!err && !devices) err = "no Using devices block";
      if (!err && !rank0) err = "no rank 0 line";
      if (!err && (head < 1 || head != units)) err = "column headers";
      if (!err && nrows != rows) err = nrows " rows, expected " rows;
      if (!err && oob != "0 OK") err = "summary says \"" oob "\"";
      if (!err && (!have_avg || abs(avg - sum / nbw) > 0.01 + 0.01 * avg)) err = "Avg bus bandwidth " avg " vs " sum / nbw;
      print err;
    }' "$tmp/out")
  if [ -n "$msg" ]; then bad "$name: $msg"; else ok; fi
}

# perf NAME N K ROWS COLL ARGS...: one gcoll-perf job that must succeed.
perf() {
  local name=$1 n=$2 k=$3 rows=$4 coll=$5
  shift 5
  run "$RUN" -n "$n" --nodes "$k" "$PERF" -w 1 -n 2 "$@"
  if [ "$rc" -ne 0 ]; then
    bad "$name (-n $n --nodes $k): exit $rc; stderr: $(errtext)"
    return
  fi
  check_table "$name (-n $n --nodes $k)" "$n" "$rows" 1 "$coll"
}

# Sizes with odd element counts, and a zero count for 8-byte allgather at n=3.
SWEEP=(-b 12 -e 100000 -f 9)
nsizes=$(sizes 12 100000 9 | wc -l)
ALL_COLLS_ONE_TYPE_ALL_OPS=$(((5 + 1 + 5 + 1 + 5 + 1 + 1 + 1) * nsizes))
ALL_COLLS_ALL_TYPES_ONE_OP=$((10 * 8 * nsizes))

for nk in "1 1" "2 1" "2 2" "3 1" "4 2"; do
  read -r n k <<<"$nk"
  perf "every collective, float, every op" "$n" "$k" "$ALL_COLLS_ONE_TYPE_ALL_OPS" "" \
    -o all -t float -r all "${SWEEP[@]}"
  perf "every collective, every type, sum" "$n" "$k" "$ALL_COLLS_ALL_TYPES_ONE_OP" "" \
    -o all -t all -r sum "${SWEEP[@]}"
done

# Every type x op of allreduce once, and the forced algorithms/protocols.
perf "allreduce, every type and op" 3 1 $((10 * 5 * nsizes)) allreduce \
  -o allreduce -t all -r all "${SWEEP[@]}"
for ap in "ring simple" "ring ll" "tree simple" "tree ll"; do
  read -r algo proto <<<"$ap"
  perf "allreduce -a $algo -p $proto" 4 2 $((5 * nsizes)) allreduce \
    -o allreduce -t bfloat16 -r all -a "$algo" -p "$proto" "${SWEEP[@]}"
  grep -q "^# algo: $algo  proto: $proto " "$tmp/out" ||
    bad "-a $algo -p $proto: header does not show the forced choice"
done

# alltoall, gather and scatter in 4 KiB FIFO slots (a 28 KB block is 7
# steps), every type, sizes 1 B to 28 KB (counts 0, 1 and odd), roots 0
# and last, 1-8 ranks on 1-3 virtual nodes, in place for gather and
# scatter, the in-place alltoall refused.
A2A_SWEEP=(-o alltoall,gather,scatter -t all -b 1 -e 64K -f 13)
a2a_rows=$((3 * 10 * $(sizes 1 65536 13 | wc -l)))
for nkr in "1 1 0" "2 1 1" "3 1 0" "4 2 3" "6 3 5" "8 2 7"; do
  read -r n k root <<<"$nkr"
  GCOLL_SLOT_BYTES=4096 perf "alltoall, gather, scatter -R $root, 4 KiB slots" "$n" "$k" \
    "$a2a_rows" "" "${A2A_SWEEP[@]}" -R "$root"
done
perf "alltoall, every type" 2 1 $((10 * $(sizes 1 65536 13 | wc -l))) alltoall \
  -o alltoall -t all -b 1 -e 64K -f 13

# sendrecv (a ring in groups; not in -o all, as in nccl-tests a program of
# its own): every type, one rank (to itself) to 4 ranks on 2 nodes.
for nk in "1 1" "3 1" "4 2"; do
  read -r n k <<<"$nk"
  perf "sendrecv, every type" "$n" "$k" $((10 * nsizes)) sendrecv -o sendrecv -t all "${SWEEP[@]}"
done

# A root other than 0, additive steps, and check off.
perf "broadcast -R 2" 3 1 "$nsizes" broadcast -o broadcast -t int64 -R 2 "${SWEEP[@]}"
perf "reduce -R 1" 2 2 "$nsizes" reduce -o reduce -t half -r max -R 1 "${SWEEP[@]}"
perf "-i stepbytes" 2 1 4 reducescatter -o reducescatter -t uint8 -r prod -b 1000 -e 4000 -i 1000
run "$RUN" -n 2 "$PERF" -o allgather -b 1K -e 4K -f 2 -c 0 -w 0 -n 1
if [ "$rc" -ne 0 ]; then bad "-c 0: exit $rc; stderr: $(errtext)"; else check_table "-c 0" 2 3 0 allgather; fi
run "$RUN" -n 2 "$PERF" -o alltoall -b 1K -e 4K -f 2 -c 0 -w 0 -n 1
if [ "$rc" -ne 0 ]; then bad "alltoall -c 0: exit $rc; stderr: $(errtext)"; else check_table "alltoall -c 0" 2 3 0 alltoall; fi

# The checker counts a corrupted element exactly: rank 0 flips one element
# of its result per checked call, so every row says 1 and 1, and the job
# fails.
for coll in allreduce broadcast reduce allgather reducescatter alltoall gather scatter sendrecv; do
  run env GCOLL_PERF_INJECT_ERROR=0 "$RUN" -n 3 "$PERF" -o "$coll" -t int32 -r sum -b 96 -e 1536 -f 4 -w 0 -n 1
  rows=$(grep -vc '^#' "$tmp/out")
  # sendrecv checks its out-of-place half only (no in-place form).
  if [ "$coll" = sendrecv ]; then want_in=N/A total=3; else want_in=1 total=6; fi
  ones=$(awk -v w="$want_in" '!/^#/ && $9 == 1 && $13 == w' "$tmp/out" | wc -l)
  if [ "$rc" -ne 1 ] || [ "$rows" -ne 3 ] || [ "$ones" -ne 3 ] ||
    ! grep -q "^# Out of bounds values : $total FAILED\$" "$tmp/out"; then
    bad "injected error in $coll: exit $rc, $ones of $rows rows report exactly 1 wrong; $(grep 'Out of bounds' "$tmp/out")"
  else
    ok
  fi
done

# Usage errors: one line on stderr, exit 2, before any communicator exists.
for args in "-o alltoallv" "-o gather,bogus" "-o gather," "-t float8" "-r xor" "-b 1K -e 1" "-f 0" "-n 0" "-c 2" "-a nvls" \
  "-p ll128" "-b 12Q" "-e" "--bogus" "-f 1 -i 0 -b 1 -e 2" "extra"; do
  # shellcheck disable=SC2086
  run "$PERF" $args
  if [ "$rc" -ne 2 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q '^gcoll-perf: ' "$tmp/err"; then
    bad "'gcoll-perf $args': exit $rc, stderr '$(errtext)'"
  else
    ok
  fi
done
run "$RUN" -n 2 "$PERF" -o reduce -R 2 -b 8 -e 8
if [ "$rc" -ne 2 ] || [ "$(grep -c 'root must be below nranks 2' "$tmp/err")" -ne 1 ]; then
  bad "-R 2 with 2 ranks: exit $rc, stderr '$(errtext)'"
else
  ok
fi
run "$PERF" -h
if [ "$rc" -ne 0 ] || ! grep -q '^usage: ' "$tmp/out"; then bad "-h: exit $rc"; else ok; fi
run "$PERF" -b 8 -e 8
if [ "$rc" -ne 1 ] || [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -q 'gcollrun' "$tmp/err"; then
  bad "without gcollrun: exit $rc, stderr '$(errtext)'"
else
  ok
fi

echo "test_perf: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
