#!/bin/bash
# Issue 13, attack 2: another user squats the job's shared-memory names.
#
# The attacker (a second throw-away user) watches /dev/shm; from the first
# name of a job it predicts the others (gcoll-<hash>-SENDER-RECEIVER-ID, and
# the trailing number of whatever name it sees, varied) and creates them
# first, mode 0666; it opens, reads and overwrites (with 666s) any segment
# of the victim it can open.
#
# The victim runs gcollrun -n 4 --nodes 2 with checked allreduces (the plan's
# communicator and a gcollCommInitRank one), and once more on one node,
# where its allreduces of 1 KiB also share the one-shot board
# (kernels/host_oneshot.h), a segment every rank maps. Asserts, for every run: exit 0,
# every element right, and the attacker opened none of the victim's
# segments. With names that follow from a public hash, the victim's
# O_EXCL create meets the attacker's file and the job fails to start.
. "$(dirname "$0")/lib.sh"
runs=${GCOLL_SEC_RUNS:-3}
fail=0
start_attacker squat $(((runs + 1) * 20 + 10))
for i in $(seq 1 $((runs + 1))); do
  # The last run on one node.
  VICTIM_NODES=$((i > runs ? 1 : 2)) victim_run 60 --second-comm --iters 5 --pause-ms 100
  if victim_ok 8; then
    echo "ok: run $i (on $((i > runs ? 1 : 2)) node(s)): the job ran right with the squatter watching (${vsecs} s)"
  else
    fail=$((fail + 1))
    echo "FAIL: run $i: exit $vrc after ${vsecs} s"
    grep -v ' right$' "$tmp/victim.out" | head -6 | sed 's/^/    /'
  fi
done
stop_attacker
if ! grep -q 'opened read-write 0, read-only 0,' "$tmp/attacker.out"; then
  echo "FAIL: the attacker opened a segment of the victim's"
  fail=$((fail + 1))
fi
[ "$fail" -eq 0 ] && echo "test_shm_squat: $((runs + 1)) runs, nothing squatted or opened" && exit 0
echo "test_shm_squat: $fail failures"
exit 1
