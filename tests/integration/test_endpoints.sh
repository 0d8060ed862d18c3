#!/bin/bash
# Endpoints that come with the plan (issue 16 part 1), end to end under
# gcollrun with real processes on virtual nodes:
#   - 4 and 8 ranks on 2 nodes: every rank's init sends 0 requests to the
#     store (its INFO line says so and gcollrun's store served 0), the
#     ranks' messages to each other are exactly one per receiving edge plus
#     the closing wave (2 (N - 1) over the plan's tree), plus each node's
#     board of the node form (host_exec.h: its name to each member but the
#     first, an ack back), and the collectives are right (coll_check
#     matrix: 0 wrong bytes);
#   - the fallback: an endpoints file that is missing, of another job, for
#     another rank count, or a listener that is not the rank's, sends the
#     job to the store (its connections + 4 requests, as before, + 4 for
#     its node's board), the INFO
#     line says why, and the results are still right; a rank alone whose
#     listener does not match fails the job at GCOLL_TIMEOUT, in one line,
#     instead of hanging;
#   - several communicators from the plan at once and after each other, a
#     split (the store, opened only then), and each rank holding only its
#     own listening socket.
set -u

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
BENCH=$top_builddir/tests/bench/init_bench
CHECK=$top_builddir/tests/integration/coll_check
PLAN=$top_builddir/gcoll-plan
export GCOLL_TOPO_DIR="${GCOLL_TOPO_DIR:-$top_srcdir/etc/topologies}"
unset GCOLL_TIMEOUT GCOLL_KVS_ADDR GCOLL_JOB_KEY GCOLL_BOOTSTRAP GCOLL_ENDPOINTS GCOLL_LISTEN_FD

for b in "$RUN" "$BENCH" "$CHECK" "$PLAN"; do
  [ -x "$b" ] || { echo "test_endpoints: no executable $b" >&2; exit 1; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/endpoints-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
export TMPDIR=$tmp/tmpdir
mkdir -p "$TMPDIR"

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }
check() {
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}
rc=0
run() { timeout 120 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
errtext() { grep -v '^gcoll rank [0-9]*: \(recv\|send\) ' "$tmp/err" | head -c 800; }

# field N: per rank, from the init timings lines.
timings() { grep '^gcoll rank [0-9]*: init timings: ' "$tmp/err"; }

# ---- 0 store requests at init ------------------------------------------------
for n in 4 8; do
  GCOLL_DEBUG=INFO run "$RUN" -n "$n" --nodes 2 "$CHECK" matrix
  check "$n ranks: coll_check runs with endpoints (exit $rc: $(errtext))" [ "$rc" -eq 0 ]
  check "$n ranks: 0 wrong bytes on every rank" \
    [ "$(grep -Ec '^rank [0-9]+: [0-9]+ calls, 0 wrong bytes$' "$tmp/out")" -eq "$n" ]
  zero_re="init timings: .*; bootstrap requests 0: 0 to the store at 127\.0\.0\.1:[0-9]+; endpoints from the plan's endpoints file: [0-9]+ messages to [0-9]+ plan neighbours(; proxy thread [0-9]+ rounds, [0-9]+ asleep)?$"
  check "$n ranks: every rank's init sent 0 requests to the store: $(timings | head -1)" \
    [ "$(timings | grep -Ec "$zero_re")" -eq "$n" ]
  check "$n ranks: gcollrun's store served 0 requests" \
    grep -Eq "^gcollrun: the store served 0 requests for $n ranks \(0 keys\)" "$tmp/err"
  # One message per receiving edge (half the connections), the wave's
  # 2 (n - 1) over channel 0's tree, and the node boards' name and ack for
  # each rank but a node's first, 2 (n - 2) on 2 nodes: exact, summed over
  # the ranks.
  conns=$(sed -n 's/^gcoll rank [0-9]*: joined .* \([0-9]*\) connections,.*/\1/p' "$tmp/err" |
          awk '{ s += $1 } END { print s + 0 }')
  msgs=$(timings | sed -n 's/.* endpoints from the plan.s endpoints file: \([0-9]*\) messages.*/\1/p' |
         awk '{ s += $1 } END { print s + 0 }')
  check "$n ranks: messages ($msgs) = connections / 2 ($conns / 2) + 2 (n - 1) + 2 (n - 2)" \
    [ "$msgs" -eq $((conns / 2 + 2 * (n - 1) + 2 * (n - 2))) ]
  check "$n ranks: gcollrun removed the endpoints file and its plan dir" \
    [ -z "$(ls -A "$TMPDIR")" ]
done

# ---- --plan FILE: the endpoints go to a private directory -------------------
"$PLAN" generate --topo cpu-only --nodes 2 --ranks-per-node 3 -q \
  -o "$tmp/given.yaml"
GCOLL_DEBUG=INFO run "$RUN" -n 6 --plan "$tmp/given.yaml" "$BENCH"
check "--plan FILE: init_bench runs with endpoints (exit $rc: $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(timings | grep -c "; bootstrap requests 0: .*endpoints from the plan")" -eq 6 ]'
check "--plan FILE: the endpoints file was written in a private dir, now removed" \
  eval 'grep -Eq "^gcollrun: endpoints of 6 ranks bound and written in [0-9.]+ ms: $TMPDIR/gcollrun-endpoints\.[^/]+/endpoints\.yaml$" "$tmp/err" &&
        [ -z "$(ls -A "$TMPDIR")" ] && [ "$(ls "$tmp" | grep -c endpoints)" -eq 0 ]'

# ---- the store's path, for comparison ---------------------------------------
GCOLL_DEBUG=INFO run "$RUN" --no-endpoints -n 8 --nodes 2 "$BENCH"
check "--no-endpoints: init_bench runs (exit $rc: $(errtext))" [ "$rc" -eq 0 ]
check "--no-endpoints: the INFO line is the store's, with no endpoints note" \
  [ "$(timings | grep -Ec '; bootstrap requests [0-9]+: [0-9]+ to the store at 127\.0\.0\.1:[0-9]+(; proxy thread [0-9]+ rounds, [0-9]+ asleep)?$')" -eq 8 ]

# ---- fallback: the endpoints do not match the step ---------------------------
# fallback NAME REASON-REGEX WRAPPER-SCRIPT: every rank runs coll_check
# through the wrapper (which spoils what the rank was given), falls back to
# the store, and says why.
fallback() {
  local name=$1 why=$2 wrapper=$3
  printf '#!/bin/bash\n%s\nexec "$@"\n' "$wrapper" >"$tmp/wrap.sh"
  chmod +x "$tmp/wrap.sh"
  GCOLL_DEBUG=INFO run "$RUN" -n 4 --nodes 2 "$tmp/wrap.sh" "$CHECK" matrix --sizes 1,4096
  check "fallback ($name): the job runs (exit $rc: $(errtext))" [ "$rc" -eq 0 ]
  check "fallback ($name): 0 wrong bytes on every rank" \
    [ "$(grep -Ec '^rank [0-9]+: [0-9]+ calls, 0 wrong bytes$' "$tmp/out")" -eq 4 ]
  check "fallback ($name): every INFO line says the store and why: $(timings | head -1)" \
    [ "$(timings | grep -Ec "; endpoints from the store \($why\)(; proxy thread [0-9]+ rounds, [0-9]+ asleep)?$")" -eq 4 ]
  local per_rank_ok=1
  for ((r = 0; r < 4; r++)); do
    conns=$(sed -n "s/^gcoll rank $r: joined .* \([0-9]*\) connections,.*/\1/p" "$tmp/err")
    reqs=$(sed -n "s/^gcoll rank $r: init timings: .*; bootstrap requests \([0-9]*\): .*/\1/p" "$tmp/err")
    # + 4 for the node's board, 2 ranks a node: a name put or got, an ack
    # got or put, 2 fences.
    [ -n "$conns" ] && [ -n "$reqs" ] && [ "$reqs" -eq $((conns + 8)) ] || per_rank_ok=0
  done
  check "fallback ($name): each rank sent the store its connections + 4 + 4 requests" \
    [ "$per_rank_ok" -eq 1 ]
}
fallback "no file" ".*/missing\.yaml: .*" 'export GCOLL_ENDPOINTS=$(dirname "$GCOLL_ENDPOINTS")/missing.yaml'
fallback "another job" ".*: endpoints of another job .*" \
  'sed "s/^job: .*/job: 00ff00ff00ff00ff00ff00ff00ff00ff/" "$GCOLL_ENDPOINTS" >"$TMPDIR/ep.$GCOLL_RANK.yaml"
export GCOLL_ENDPOINTS=$TMPDIR/ep.$GCOLL_RANK.yaml'
fallback "another rank count" ".*: endpoints for 2 ranks, but this step has 4" \
  'sed -e "s/^ranks: 4/ranks: 2/" -e "/rank: [23],/d" "$GCOLL_ENDPOINTS" >"$TMPDIR/ep.$GCOLL_RANK.yaml"
export GCOLL_ENDPOINTS=$TMPDIR/ep.$GCOLL_RANK.yaml'
# Rank r gets rank r+1's port: a well-formed file, but not these sockets.
cat >"$tmp/rotate.awk" <<'EOF'
/- \{rank:/ { k = n++; match($0, /port: [0-9]+/); p[k] = substr($0, RSTART + 6, RLENGTH - 6); l[k] = $0; next }
{ print }
END { for (i = 0; i < n; i++) { s = l[i]; sub(/port: [0-9]+/, "port: " p[(i + 1) % n], s); print s } }
EOF
fallback "not the rank's listener" ".*: GCOLL_LISTEN_FD=[0-9]+ listens on port [0-9]+, the endpoints file says [0-9]+" \
  "awk -f $tmp/rotate.awk \"\$GCOLL_ENDPOINTS\" >\"\$TMPDIR/ep.\$GCOLL_RANK.yaml\"
export GCOLL_ENDPOINTS=\$TMPDIR/ep.\$GCOLL_RANK.yaml"
fallback "no listener" "bootstrap: GCOLL_LISTEN_FD is not set" 'unset GCOLL_LISTEN_FD'
fallback "a malformed file" ".*:4: field 'endpoints': .*" \
  'printf "gcoll-endpoints: 1\njob: ab\nranks: 4\nendpoints: x\n" >"$TMPDIR/ep.$GCOLL_RANK.yaml"
export GCOLL_ENDPOINTS=$TMPDIR/ep.$GCOLL_RANK.yaml'

# One rank alone without its endpoints: the others wait for it at their
# neighbours (its inherited socket takes their connections into a backlog
# nobody serves, or it never sends its values), it waits at the store; the
# job must end at GCOLL_TIMEOUT with a reason naming it, not hang.
# Rank 2's own deadline is later, so that its neighbours' reasons are the
# ones that end the job (the bootstrap's wait, or, when a neighbour reached
# its connect first, the connect's lookup of rank 2's address).
printf '#!/bin/bash\nif [ "$GCOLL_RANK" = 2 ]; then unset GCOLL_LISTEN_FD; export GCOLL_TIMEOUT=20; fi\nexec "$@"\n' >"$tmp/wrap.sh"
chmod +x "$tmp/wrap.sh"
start=$(date +%s)
GCOLL_TIMEOUT=3 run "$RUN" -n 4 --nodes 2 "$tmp/wrap.sh" "$BENCH"
took=$(( $(date +%s) - start ))
check "one rank on the store, the others on endpoints: the job fails (exit $rc)" [ "$rc" -ne 0 ]
check "... within 30 s ($took s), not hanging" [ "$took" -le 30 ]
check "... saying which rank did not send its endpoints: $(errtext)" \
  grep -Eq "(bootstrap\(endpoints\)|address of rank 2: endpoints): rank 2 (sent no '[^']*' before the deadline \(it is late, gone, or did not take its endpoints from the plan's file|at [0-9.]+:[0-9]+: .*(challenge|refused))" "$tmp/err"

# ---- several communicators, a split, one socket per rank --------------------
GCOLL_DEBUG=INFO run "$RUN" -n 4 --nodes 2 "$BENCH" --more 3
check "4 communicators at once, then one more: all checked (exit $rc: $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-3]: 4 more communicators checked$" "$tmp/out")" -eq 4 ]'
check "... every one of the 5 inits on every rank sent the store 0 requests" \
  [ "$(timings | grep -c '; bootstrap requests 0: .*; endpoints from the plan.s endpoints file: ')" -eq 20 ]
GCOLL_DEBUG=INFO run "$RUN" -n 4 --nodes 2 "$BENCH" --split
check "a split of a communicator with endpoints (exit $rc: $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-3]: split into 2 ranks checked$" "$tmp/out")" -eq 4 ]'
check "... the world's init sent the store nothing; the split used it" \
  eval '[ "$(timings | grep -c "; bootstrap requests 0: .*endpoints from the plan")" -eq 4 ] &&
        grep -Eq "^gcollrun: the store served [1-9][0-9]* requests for 4 ranks" "$tmp/err"'
# No launcher's store (as under srun --gcoll=plan, whose plugin hands out
# endpoints but hosts no store): the plan tree's root serves one, and init's
# closing wave says where. A split (every rank) and a shrink by the
# survivors of a rank that left with no goodbye (a subset) go through it.
nostore='unset GCOLL_KVS_ADDR; exec "$0" "$1"'
GCOLL_DEBUG=INFO run "$RUN" -n 4 --nodes 2 bash -c "$nostore" "$BENCH" --split
check "no launcher's store: a split through the plan tree root's store (exit $rc: $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-3]: split into 2 ranks checked$" "$tmp/out")" -eq 4 ] &&
        [ "$(timings | grep -Ec "; bootstrap requests 0: 0 to the plan tree root.s store at 127\.0\.0\.1:[0-9]+ \(opened only when needed\); endpoints from the plan")" -eq 4 ]'
GCOLL_DEBUG=INFO run "$RUN" -n 4 --nodes 2 bash -c "$nostore" "$BENCH" --shrink
check "no launcher's store: the 3 survivors of a rank that left shrink the world (exit $rc: $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-2]: shrink to 3 ranks checked$" "$tmp/out")" -eq 3 ]'
run "$RUN" -n 3 bash -c 'n=0; for f in /proc/$$/fd/*; do [ "$(readlink "$f")" = "${f##*/}" ] && continue
  case $(readlink "$f") in socket:*) n=$((n + 1));; esac; done; echo "rank $GCOLL_RANK sockets $n fd $GCOLL_LISTEN_FD"'
check "each rank inherits exactly one socket, its own listener: $(cat "$tmp/out" | tr '\n' ' ')" \
  [ "$(grep -Ec '^rank [0-2] sockets 1 fd [0-9]+$' "$tmp/out")" -eq 3 ]

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
