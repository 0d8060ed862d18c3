#!/bin/bash
# gcollSend/gcollRecv and groups through real processes: gcollrun starts the
# ranks; connections are made on first use, shm inside a (virtual) node and
# net/socket between nodes. p2p_check compares every received byte with what
# the sender must have sent (a function of sender, receiver, message and
# seed), and checks size mismatches, a receive that never comes, a dead
# peer, an abort from another thread and refused arguments.
set -u
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
CHECK=$top_builddir/tests/integration/p2p_check
for f in "$RUN" "$CHECK"; do
  [ -x "$f" ] || { echo "test_p2p: $f is not built" >&2; exit 99; }
done
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-p2p.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# run NAME GCOLLRUN-ARGS...: must exit 0.
run() {
  local name=$1; shift
  local t0=$SECONDS
  if timeout 300 "$RUN" "$@" >"$tmp/out" 2>&1; then
    ok; echo "ok: $name ($((SECONDS - t0)) s)"
  else
    bad "$name: exit $?"; tail -20 "$tmp/out"
  fi
}

# Every rank count on one node; the even ones also over two nodes, odd
# ones with every rank its own node (net/socket only).
for n in 1 2 3 4 5; do
  run "exchange n=$n nodes=1" -n "$n" "$CHECK" exchange
  if [ "$n" -gt 1 ]; then
    nodes=2; [ $((n % 2)) -ne 0 ] && nodes=$n
    run "exchange n=$n nodes=$nodes" -n "$n" --nodes "$nodes" "$CHECK" exchange
  fi
done

for nodes in 1 2; do
  if timeout 60 "$RUN" -n 2 --nodes "$nodes" "$CHECK" mismatch >"$tmp/out" 2>&1 \
     && [ "$(grep -c 'rank 1: receive of .*invalid usage.*counts and types must agree' "$tmp/out")" -eq 2 ]; then
    ok; echo "ok: size mismatch ($nodes nodes): $(grep -m1 'rank 1: receive' "$tmp/out")"
  else
    bad "size mismatch ($nodes nodes)"; cat "$tmp/out"
  fi
done

# A send nobody receives fails within GCOLL_TIMEOUT (2 s here) + 1 s.
for spec in "fresh 1" "big 1" "big 2"; do
  set -- $spec
  mode=$1 nodes=$2
  GCOLL_TIMEOUT=2 timeout 60 "$RUN" -n 2 --nodes "$nodes" "$CHECK" norecv "$mode" >"$tmp/out" 2>&1
  rc=$?
  line=$(grep 'rank 0: send nobody receives' "$tmp/out")
  secs=$(sed -n 's/.* after \([0-9.]*\) s:.*/\1/p' <<<"$line")
  if [ "$rc" -eq 0 ] && [ -n "$secs" ] && awk -v s="$secs" 'BEGIN { exit !(s >= 1.5 && s < 3.0) }'; then
    ok; echo "ok: unreceived send ($mode, $nodes nodes): $line"
  else
    bad "unreceived send ($mode, $nodes nodes): rc $rc"; cat "$tmp/out"
  fi
done

# A dead peer surfaces as gcollRemoteError naming it, long before the deadline.
for nodes in 1 2; do
  GCOLL_TIMEOUT=20 timeout 60 "$RUN" -n 2 --nodes "$nodes" --kill-wait 20 "$CHECK" die >"$tmp/out" 2>&1
  line=$(grep 'rank 0: receive from a dead rank' "$tmp/out")
  secs=$(sed -n 's/.* after \([0-9.]*\) s:.*/\1/p' <<<"$line")
  if grep -q 'remote process exited.*rank 1 ' <<<"$line" && [ -n "$secs" ] \
     && awk -v s="$secs" 'BEGIN { exit !(s < 5.0) }'; then
    ok; echo "ok: dead peer ($nodes nodes): $line"
  else
    bad "dead peer ($nodes nodes)"; cat "$tmp/out"
  fi
done

if timeout 60 "$RUN" -n 2 "$CHECK" abort >"$tmp/out" 2>&1 && grep -q "rank 0: recv returned invalid usage" "$tmp/out"; then
  ok; echo "ok: abort unblocks a waiting receive"
else
  bad "abort"; cat "$tmp/out"
fi

if timeout 60 "$RUN" -n 3 "$CHECK" badargs >"$tmp/out" 2>&1 && [ "$(grep -c ': ok$' "$tmp/out")" -eq 3 ]; then
  ok; echo "ok: bad arguments and group misuse refused"
else
  bad "badargs"; cat "$tmp/out"
fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
