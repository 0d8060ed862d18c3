# Shared by the emulated-GPU test scripts: the emulator, the programs, a
# scratch directory, ok/bad counting and a checked gcoll-perf run.
# Source it with top_builddir set; it exits 1 when the emulator is missing.
top_builddir=${top_builddir:-.}
EMU=$top_builddir/tests/cudaemu/.libs/libcudaemu.so
RUN=$top_builddir/gcollrun
PERF=$top_builddir/gcoll-perf
CHECK=$top_builddir/tests/integration/coll_check
# GCOLL_TEST_REAL_GPU=1 runs the same checks on the machine's real driver
# (tests/gpu/device_run.sh, on a lent GPU); the checks that need several
# emulated GPUs then fail on a one-GPU machine, as they should.
if [ "${GCOLL_TEST_REAL_GPU:-0}" = 1 ]; then
  unset GCOLL_CUDA_DRIVER
else
  [ -f "$EMU" ] || { echo "$(basename "$0"): no $EMU (make check builds it)" >&2; exit 1; }
  export GCOLL_CUDA_DRIVER=$EMU
fi
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# perf NAME RUN-ARGS -- PERF-ARGS: a checked gcoll-perf -M cuda sweep must
# report 0 wrong, and every rank must have used the CUDA executor. Its
# stdout and GCOLL_DEBUG=INFO stderr stay in $tmp/out and $tmp/err.
perf() {
  local name=$1; shift
  local run=() ; while [ "$1" != "--" ]; do run+=("$1"); shift; done; shift
  local start=$(date +%s)
  GCOLL_DEBUG=INFO timeout 600 "$RUN" "${run[@]}" "$PERF" -M cuda -w 1 -n 2 "$@" \
    >"$tmp/out" 2>"$tmp/err"
  local rc=$? n=${run[1]}
  local wrong=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13 && ($9 != 0 || $13 != 0)' "$tmp/out" | wc -l)
  local rows=$(awk '$1 ~ /^[0-9]+$/ && NF >= 13' "$tmp/out" | wc -l)
  local cuda=$(grep -c "cuda executor ready" "$tmp/err")
  if [ $rc -eq 0 ] && [ "$wrong" -eq 0 ] && [ "$rows" -gt 0 ] && [ "$cuda" -eq "$n" ] &&
     grep -q "device CUDA device memory" "$tmp/out" &&
     grep -q "^# Out of bounds values : 0 OK" "$tmp/out"; then
    ok "$name: $rows rows, 0 wrong, CUDA executor on $cuda ranks ($(($(date +%s) - start)) s)"
    return 0
  fi
  bad "$name: exit $rc, $wrong wrong rows of $rows, CUDA executor on $cuda of $n ranks"
  tail -n 20 "$tmp/out" "$tmp/err"
  return 1
}

finish() {
  echo "$pass passed, $fail failed"
  [ "$fail" -eq 0 ]
}
