#!/bin/bash
# NCCL 2.28's ncclCommShrink, ncclCommRevoke, ncclCommInitRankScalable,
# ncclCommWindowRegister/Deregister and ncclGroupSimulateEnd through gcoll's
# libnccl.so.2 (nccl_shrink_check.c, compiled against the real nccl.h), as
# real processes under gcollrun: a shrink after rank 1's NCCL process is
# killed with SIGKILL (in a child of the process gcollrun started, which
# exits 0: gcollrun tears the whole job down when a rank fails), a shrink
# without a failure, revoke then shrink and destroy, a scalable init from 2
# ids, window refusals, simulated groups. Skips when nccl.h is missing (77).
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
for f in "$LIB" "$RUN"; do
  [ -e "$f" ] || { echo "test_nccl_shrink: $f is not built" >&2; exit 99; }
done
# An allreduce in flight must end by the abort, in less than half of this
# (the deadline would end it at all of it).
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-shrink.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

mkvar() { sed -n "s/^$1 = //p" "$top_builddir/Makefile" | head -1; }
CC=$(mkvar CC)
[ -n "$CC" ] || CC=cc
PROG=$tmp/nccl_shrink_check
if ! $CC -std=gnu11 $(mkvar WARN_CFLAGS) $(mkvar SAN_CFLAGS) -pthread -I"$inc" \
     "$top_srcdir/tests/nccl/nccl_shrink_check.c" -o "$PROG" "$LIB" \
     -Wl,-rpath,"$(cd "$top_builddir/.libs" && pwd)" 2>"$tmp/cc.out"; then
  bad "nccl_shrink_check does not compile or link against $LIB"; head -20 "$tmp/cc.out"
  echo "$pass passed, $fail failed"; exit 1
fi

# case NAME MODE RANKS GCOLLRUN-OPTIONS...: every rank must end in ", 0 wrong".
case_run() {
  local name=$1 mode=$2 n=$3; shift 3
  local dir=$tmp/store-$mode-$pass-$fail t0=$SECONDS
  mkdir -p "$dir"
  timeout 300 "$RUN" -n "$n" "$@" "$PROG" "$mode" "$dir" >"$tmp/out" 2>"$tmp/err"
  local rc=$? good
  good=$(grep -c ", 0 wrong$" "$tmp/out")
  if [ $rc -eq 0 ] && [ "$good" -eq "$n" ]; then
    ok "$name ($((SECONDS - t0)) s)"; sed 's/^/    /' "$tmp/out"
  else
    bad "$name: exit $rc, $good of $n ranks right"; tail -n 20 "$tmp/out" "$tmp/err"
  fi
}

case_run "shrink after rank 1 is SIGKILLed, NCCL_SHRINK_ABORT" kill 4
case_run "the same on 2 virtual nodes" kill 4 --nodes 2
case_run "shrink without rank 0 (alive), then again, then a shrink of the shrink" exclude0 4
case_run "revoke with an allreduce in flight, then shrink and destroy" revoke 3
case_run "ncclCommInitRankScalable with 2 ids" scalable 4
case_run "window register/deregister and refusals" window 2
case_run "ncclGroupSimulateEnd" simulate 2

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
