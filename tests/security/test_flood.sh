#!/bin/bash
# Issue 13, attack 3: another user floods a job's listeners.
#
# The attacker (a second throw-away user) finds every listening port of
# the victim's uid (the ranks' net/socket listeners, gcollrun's store, the
# store gcollGetUniqueId starts) and holds up to 1000 connections to each,
# silent or sending garbage, reopening whatever the server closes.
#
# The victim runs gcollrun -n 4 --nodes 2 with checked allreduces; between
# its two communicators rank 0 starts a gcollGetUniqueId store and every
# rank waits half a second, so the flood is on that store before anyone
# joins it. Asserts, for every run: exit 0, every element right, within
# GCOLL_SEC_FLOOD_LIMIT seconds (default 45); and that the attacker did
# hold many connections at once (a flood that never happened proves
# nothing).
. "$(dirname "$0")/lib.sh"
runs=${GCOLL_SEC_RUNS:-3}
limit=${GCOLL_SEC_FLOOD_LIMIT:-45}
fail=0
start_attacker flood $((runs * (limit + 5) + 10)) --conns 1000
for i in $(seq 1 "$runs"); do
  victim_run "$limit" --second-comm --iters 5 --pause-ms 500
  if victim_ok 8; then
    echo "ok: run $i: the job finished right under the flood in ${vsecs} s"
  else
    fail=$((fail + 1))
    echo "FAIL: run $i: exit $vrc after ${vsecs} s$([ "$vrc" -eq 124 ] && echo ' (timed out)')"
    grep -v ' right$' "$tmp/victim.out" | head -6 | sed 's/^/    /'
  fi
done
stop_attacker
most=$(sed -n 's/.*most open at once \([0-9]*\).*/\1/p' "$tmp/attacker.out")
if [ "${most:-0}" -lt 100 ]; then
  echo "FAIL: the attacker held only ${most:-0} connections at once"
  fail=$((fail + 1))
fi
[ "$fail" -eq 0 ] && echo "test_flood: $runs runs finished under the flood" && exit 0
echo "test_flood: $fail failures"
exit 1
