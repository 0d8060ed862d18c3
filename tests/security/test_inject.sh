#!/bin/bash
# Issue 13, attack 1: another user injects data into a job.
#
# The attacker (a second throw-away user) watches /dev/shm for the job's
# names, finds the ranks' listening ports by their uid, and races the real
# senders: hellos as every rank to every rank on every connection id, sent
# at once and retried while refused, each followed by data steps of 666s
# (SIMPLE steps of 512 bytes: what this victim's allreduce moves per step,
# so injected data is accepted as data, as it would be by a real job whose
# message sizes the attacker has guessed); and the same hellos after
# reading the server's challenge, with a forged MAC.
#
# The victim (the first user) runs gcollrun -n 4 --nodes 2 with checked
# allreduces, on the plan's communicator and on one made through
# gcollGetUniqueId/gcollCommInitRank. Asserts, for every run: exit 0 and
# every rank's every element right. Against the unauthenticated hello the
# attacker wins the race in most runs (wrong results such as 666, or a job
# that fails), so GCOLL_SEC_RUNS (default 4) runs make it certain.
. "$(dirname "$0")/lib.sh"
runs=${GCOLL_SEC_RUNS:-4}
fail=0
start_attacker inject $((runs * 20 + 10)) --proto simple --bytes 512
for i in $(seq 1 "$runs"); do
  victim_run 60 --second-comm --iters 10 --pause-ms 200
  if victim_ok 8; then
    echo "ok: run $i: every result right under the injection attack (${vsecs} s)"
  else
    fail=$((fail + 1))
    echo "FAIL: run $i: exit $vrc after ${vsecs} s$(grep -q WRONG "$tmp/victim.out" &&
      echo ': INJECTED DATA ACCEPTED')"
    grep -v ' right$' "$tmp/victim.out" | head -8 | sed 's/^/    /'
  fi
done
stop_attacker
# An attacker that never reached the job would prove nothing.
if ! grep -q 'listeners seen [1-9]' "$tmp/attacker.out" ||
   grep -q 'connections opened 0,' "$tmp/attacker.out"; then
  echo "FAIL: the attacker never found the job's listeners"
  fail=$((fail + 1))
fi
[ "$fail" -eq 0 ] && echo "test_inject: $runs runs, no injection" && exit 0
echo "test_inject: $fail failures"
exit 1
