#!/bin/bash
# End-to-end tests of gcollrun and the bootstrap KVS with real processes and
# real sockets. Run by `make check` (top_srcdir / top_builddir come from
# AM_TESTS_ENVIRONMENT) or by hand:
#   top_srcdir=/path/to/src top_builddir=/path/to/build tests/integration/test_gcollrun.sh
set -u

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
CLIENT=$top_builddir/tests/integration/kvs_client
BENCH=$top_builddir/tests/bench/init_bench
export GCOLL_TOPO_DIR="${GCOLL_TOPO_DIR:-$top_srcdir/etc/topologies}"
unset GCOLL_TIMEOUT GCOLL_KVS_ADDR GCOLL_JOB_KEY GCOLL_BOOTSTRAP

for b in "$RUN" "$CLIENT" "$BENCH"; do
  if [ ! -x "$b" ]; then
    echo "test_gcollrun: no executable $b" >&2
    exit 1
  fi
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcollrun-test.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT
# gcollrun's own temp dirs go here, so the test can see they are removed.
export TMPDIR=$tmp/tmpdir
mkdir -p "$TMPDIR"

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# run CMD...: stdout -> $tmp/out, stderr -> $tmp/err, status -> $rc; every
# run is bounded so that a hang is a failure, not a stuck `make check`.
# The bound is far above a run's time (8 ranks: 0.15 s under ASan), since
# an ASan build on a 2-core machine at load 14 once took over 20 s.
rc=0
run() { timeout 60 "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
errtext() { head -c 600 "$tmp/err"; }

check() {
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}

no_leftover_dirs() { [ -z "$(ls -A "$TMPDIR")" ]; }

# one_line_matching NAME STATUS REGEX CMD...: exit status and exactly one
# stderr line matching REGEX.
one_line_matching() {
  local name=$1 want=$2 re=$3
  shift 3
  run "$@"
  if [ "$rc" -ne "$want" ]; then
    bad "$name: exit $rc, expected $want; stderr: $(errtext)"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || ! grep -Eq -e "$re" "$tmp/err"; then
    bad "$name: stderr is '$(errtext)', expected one line matching '$re'"
  else
    ok
  fi
}

# ---- the ring check at every size and node split ---------------------------
# Splits that leave a remainder are placed in blocks, the remainder on the
# first nodes (as Slurm's block distribution): 3 on 2 is 2+1, 7 on 3 is
# 3+2+2, 5 on 4 is 2+1+1+1.
for shape in "1 1" "2 1" "3 1" "4 1" "8 1" "2 2" "3 2" "4 2" "5 2" "8 2" "7 3" "5 4" "6 4"; do
  set -- $shape
  n=$1 k=$2
  # Split jobs also run with --tag-output: the tags are checked below.
  tag=()
  [ "$k" -eq 2 ] && tag=(--tag-output)
  run "$RUN" -n "$n" --nodes "$k" "${tag[@]}" "$CLIENT"
  if [ "$k" -eq 2 ]; then
    tagged=0
    for ((r = 0; r < n; r++)); do grep -q "^\[$r\] rank $r/$n " "$tmp/out" && tagged=$((tagged + 1)); done
    check "--tag-output -n $n: each rank's line carries its tag" [ "$tagged" -eq "$n" ]
    check "--tag-output -n $n: every line is tagged" [ "$(grep -vc '^\[[0-9]\] ' "$tmp/out")" -eq 0 ]
    sed -i 's/^\[[0-9]*\] //' "$tmp/out"
  fi
  if [ "$rc" -ne 0 ]; then
    bad "-n $n --nodes $k: exit $rc; stderr: $(errtext)"
    continue
  fi
  check "-n $n --nodes $k: $n ok lines" [ "$(grep -c ' ok$' "$tmp/out")" -eq "$n" ]
  # Every rank reports itself once, on the node and local rank the
  # block layout gives: n/k ranks per virtual node, one more on each of
  # the first n%k nodes.
  per=$((n / k)) extra=$((n % k))
  bad_layout=0
  for ((r = 0; r < n; r++)); do
    if [ "$r" -lt $((extra * (per + 1))) ]; then
      node=$((r / (per + 1))) loc=$((r % (per + 1)))
    else
      node=$((extra + (r - extra * (per + 1)) / per)) loc=$(((r - extra * (per + 1)) % per))
    fi
    grep -qx "rank $r/$n node $node local $loc: prev [0-9]* next [0-9]* ok" \
      "$tmp/out" || bad_layout=1
  done
  check "-n $n --nodes $k: every rank on its node" [ "$bad_layout" -eq 0 ]
  # The ring read from the plan is one cycle through all ranks.
  declare -A next=()
  while read -r _ rn _ _ _ _ _ _ _ nx _; do next[${rn%/*}]=$nx; done <"$tmp/out"
  cur=0
  for ((i = 0; i < n; i++)); do cur=${next[$cur]:-x}; [ "$cur" = x ] && break; done
  seen=$(for ((r = 0, c = 0; r < n; r++)); do echo "${next[$c]:-x}"; c=${next[$c]:-0}; done | sort -u | wc -l)
  check "-n $n --nodes $k: ring is one cycle" eval '[ "$cur" = 0 ] && [ "$seen" -eq "$n" ]'
  # Ranks of one node are neighbours on the ring: it leaves each node
  # once (k times in all, none on one node).
  changes=0
  declare -A node_of=()
  while read -r _ rn _ nd _ _ _ _ _ _ _; do node_of[${rn%/*}]=$nd; done <"$tmp/out"
  for ((r = 0; r < n; r++)); do
    [ "${node_of[$r]}" != "${node_of[${next[$r]:-0}]}" ] && changes=$((changes + 1))
  done
  want=$k; [ "$k" -eq 1 ] && want=0
  check "-n $n --nodes $k: each node's ranks are together on the ring ($changes node changes)" \
    [ "$changes" -eq "$want" ]
  unset next node_of
  check "-n $n --nodes $k: stderr empty" [ ! -s "$tmp/err" ]
done
check "temp plan dirs removed after success" no_leftover_dirs

# A plan computed by gcoll-plan can be given instead.
if [ -x "$top_builddir/gcoll-plan" ]; then
  "$top_builddir/gcoll-plan" generate --topo cpu-only --nodes 2 -k 2 -q -o "$tmp/p4.yaml"
  run "$RUN" -n 4 --plan "$tmp/p4.yaml" "$CLIENT"
  check "--plan FILE: runs (exit $rc, $(errtext))" [ "$rc" -eq 0 ]
  check "--plan FILE: nodes from the plan" grep -qx 'rank 3/4 node 1 local 1: .* ok' "$tmp/out"
  one_line_matching "--plan with the wrong rank count" 1 '^gcollrun: --plan .* is for 4 ranks, not -n 2$' \
    "$RUN" -n 2 --plan "$tmp/p4.yaml" "$CLIENT"
  one_line_matching "--plan with the wrong node count" 1 'has 2 nodes, not --nodes 4$' \
    "$RUN" -n 4 --nodes 4 --plan "$tmp/p4.yaml" "$CLIENT"
  # A plan with uneven nodes (1, 3 and 2 ranks) places ranks as it says.
  "$top_builddir/gcoll-plan" generate --topo cpu-only --nodes 3 -k 1,3,2 -q -o "$tmp/p132.yaml"
  run "$RUN" -n 6 --plan "$tmp/p132.yaml" "$CLIENT"
  check "--plan with uneven nodes: runs (exit $rc, $(errtext))" [ "$rc" -eq 0 ]
  check "--plan with uneven nodes: ranks on the plan's nodes" \
    eval 'grep -qx "rank 0/6 node 0 local 0: .* ok" "$tmp/out" && grep -qx "rank 3/6 node 1 local 2: .* ok" "$tmp/out" && grep -qx "rank 5/6 node 2 local 1: .* ok" "$tmp/out"'
  # gcollrun's block placement of 7 ranks on 3 nodes is the plan gcoll-plan
  # generates for Slurm's 3(x1),2(x2) on the same virtual hosts.
  run "$RUN" -n 7 --nodes 3 sh -c '[ "$GCOLL_RANK" != 0 ] || cp "$GCOLL_PLAN" "$1"' sh "$tmp/run73.yaml"
  host=$(hostname); host=${host%%.*}
  "$top_builddir/gcoll-plan" generate --topo cpu-only --nodes 3 -k '3,2(x2)' \
    --hosts "$host-v[0-2]" -q -o "$tmp/gen73.yaml"
  check "gcollrun -n 7 --nodes 3 plans 3+2+2 ranks, as gcoll-plan generate -k '3,2(x2)'" \
    "$top_builddir/gcoll-plan" diff "$tmp/run73.yaml" "$tmp/gen73.yaml"
fi
# A FIFO as --plan or --topo is refused at once, not read forever.
mkfifo "$tmp/fifo.yaml"
one_line_matching "--plan FIFO" 1 "^gcollrun: $tmp/fifo.yaml: is a FIFO, not a regular file\$" \
  "$RUN" -n 2 --plan "$tmp/fifo.yaml" "$CLIENT"
one_line_matching "--topo FIFO" 1 "^gcollrun: $tmp/fifo.yaml: is a FIFO, not a regular file\$" \
  "$RUN" -n 2 --topo "$tmp/fifo.yaml" "$CLIENT"

# ---- the node topology: a name, $GCOLL_TOPO, or auto (detection) ------------
GCOLL_DEBUG=INFO run "$RUN" -n 4 --nodes 2 --topo auto "$CLIENT"
check "--topo auto: runs (exit $rc, $(errtext))" [ "$rc" -eq 0 ]
check "--topo auto: 4 ok lines" [ "$(grep -c ' ok$' "$tmp/out")" -eq 4 ]
check "--topo auto: says what it detected" grep -q 'topology auto: topology detected (.*), no topology file' "$tmp/err"
GCOLL_TOPO=pcie-2s-4gpu run "$RUN" -n 2 sh -c '[ "$GCOLL_RANK" != 0 ] || cp "$GCOLL_PLAN" "$1"' sh "$tmp/envtopo.yaml"
check "GCOLL_TOPO names the default topology" \
  eval '[ "$rc" -eq 0 ] && [ "$("$top_builddir/gcoll-plan" show "$tmp/envtopo.yaml" | grep -c "pcie-2s-4gpu")" -gt 0 ]'
one_line_matching "--topo auto with a missing GCOLL_TOPO_FILE" 1 \
  '^gcollrun: topology auto: .*/nonexistent.xml: .*\(from GCOLL_TOPO_FILE\)$' \
  env GCOLL_TOPO_FILE="$tmp/nonexistent.xml" "$RUN" -n 2 --topo auto "$CLIENT"
one_line_matching "--topo auto with a missing NCCL_TOPO_FILE" 1 \
  '^gcollrun: topology auto: .*/nonexistent.xml: .*NCCL_TOPO_FILE' \
  env NCCL_TOPO_FILE="$tmp/nonexistent.xml" "$RUN" -n 2 --topo auto "$CLIENT"

# ---- init explains itself: one "init timings" line per rank -----------------
# A rank's bootstrap requests are its hello, one put per receiving edge, the
# fence, one get per sending edge, the channel cap (the root of channel 0's
# tree puts it, the others get it) and the closing barrier: its connections + 4, at any job
# size. The store served those and one goodbye per rank (init_bench asks
# nothing more of it), which gcollrun reports at exit. That is the store's
# path (--no-endpoints); with endpoints from the plan, the default, a rank
# sends the store nothing at all (tests/integration/test_endpoints.sh).
GCOLL_DEBUG=INFO run "$RUN" --no-endpoints -n 6 --nodes 3 "$BENCH"
check "init timings: init_bench runs (exit $rc, $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-5] of 6: wall_ms " "$tmp/out")" -eq 6 ]'
timings_re='^gcoll rank [0-5]: init timings: total [0-9]+\.[0-9]{2} ms = plan [0-9]+\.[0-9]{2} \+ bootstrap [0-9]+\.[0-9]{2} \+ connect [0-9]+\.[0-9]{2} \+ executor [0-9]+\.[0-9]{2} \+ other [0-9]+\.[0-9]{2}; bootstrap requests [0-9]+: [0-9]+ to the store at 127\.0\.0\.1:[0-9]+(; proxy thread [0-9]+ rounds, [0-9]+ asleep)?$'
check "init timings: one well-formed line per rank" \
  eval '[ "$(grep -Ec "$timings_re" "$tmp/err")" -eq 6 ] && [ "$(grep "init timings" "$tmp/err" | cut -d: -f1 | sort -u | wc -l)" -eq 6 ]'
check "init timings: the phases add up to the total" \
  eval '[ "$(grep "init timings" "$tmp/err" | awk "{ s = \$11 + \$14 + \$17 + \$20 + \$23; d = s - \$7; if (d < -0.06 || d > 0.06) print }" | wc -l)" -eq 0 ]'
per_rank_ok=1 asked=0
for ((r = 0; r < 6; r++)); do
  conns=$(sed -n "s/^gcoll rank $r: joined .* \([0-9]*\) connections,.*/\1/p" "$tmp/err")
  reqs=$(sed -n "s/^gcoll rank $r: init timings: .*; bootstrap requests \([0-9]*\): .*/\1/p" "$tmp/err")
  [ -n "$conns" ] && [ -n "$reqs" ] && [ "$reqs" -eq $((conns + 4)) ] || per_rank_ok=0
  asked=$((asked + ${reqs:-0}))
done
check "init timings: each rank sent its connections + 4 requests" [ "$per_rank_ok" -eq 1 ]
served=$(sed -n 's/^gcollrun: the store served \([0-9]*\) requests for 6 ranks ([0-9]* keys); gcollrun used [0-9.]* ms of CPU$/\1/p' "$tmp/err")
check "init timings: the store served what the ranks counted, plus 6 goodbyes ($served vs $asked)" \
  [ "${served:-0}" -eq $((asked + 6)) ]
check "gcollrun says how long the plan took" \
  grep -Eq '^gcollrun: plan for 6 ranks on 3 nodes computed and written in [0-9]+\.[0-9]{2} ms: ' "$tmp/err"

# ---- --tag-output -----------------------------------------------------------
# Lines written in pieces, from many ranks at once, come out whole.
run "$RUN" -n 4 --tag-output bash -c \
  'for i in $(seq 1 200); do printf "%s-" $GCOLL_RANK; printf "line-%s-end\n" $i; done'
whole=$(grep -Ec '^\[([0-3])\] [0-3]-line-[0-9]+-end$' "$tmp/out")
mixed=$(awk '{ t = substr($1, 2, 1); if (substr($2, 1, 1) != t) m++ } END { print m + 0 }' "$tmp/out")
check "--tag-output: 800 whole lines ($whole)" [ "$whole" -eq 800 ]
check "--tag-output: no line mixes ranks ($mixed)" [ "$mixed" -eq 0 ]
run "$RUN" -n 2 --tag-output bash -c 'printf "no newline at the end"; echo "to stderr" >&2'
check "--tag-output: a final partial line is flushed" [ "$(grep -c '^\[[01]\] no newline at the end$' "$tmp/out")" -eq 2 ]
check "--tag-output: stderr tagged too" [ "$(grep -c '^\[[01]\] to stderr$' "$tmp/err")" -eq 2 ]

# ---- the socket interface ---------------------------------------------------
# Every rank is on this host: TCP stays on loopback, unless the user chose
# an interface (then it passes through, once).
run env -u GCOLL_SOCKET_IFADDR "$RUN" -n 2 sh -c 'env | grep "^GCOLL_SOCKET_IFADDR="'
check "ranks get GCOLL_SOCKET_IFADDR=127.0.0.1 ($(head -c 200 "$tmp/out"))" \
  [ "$(grep -cx 'GCOLL_SOCKET_IFADDR=127.0.0.1' "$tmp/out")" -eq 2 ]
run env GCOLL_SOCKET_IFADDR= "$RUN" -n 1 sh -c 'env | grep "^GCOLL_SOCKET_IFADDR="'
check "an empty GCOLL_SOCKET_IFADDR is replaced ($(head -c 200 "$tmp/out"))" \
  [ "$(cat "$tmp/out")" = "GCOLL_SOCKET_IFADDR=127.0.0.1" ]
run env GCOLL_SOCKET_IFADDR=lo "$RUN" -n 2 sh -c 'env | grep "^GCOLL_SOCKET_IFADDR="'
check "the user's GCOLL_SOCKET_IFADDR is kept ($(head -c 200 "$tmp/out"))" \
  [ "$(grep -cx 'GCOLL_SOCKET_IFADDR=lo' "$tmp/out")" -eq 2 -a "$(wc -l <"$tmp/out")" -eq 2 ]

# ---- --cpu-bind ---------------------------------------------------------------
# Each rank reports its CPUs; with binding they must be disjoint blocks that
# together are gcollrun's own CPUs, sizes differing by at most one.
cpu_report='echo "$GCOLL_RANK [${GCOLL_CPU_BIND-unset}] $(sed -n "s/^Cpus_allowed_list:[[:space:]]*//p" /proc/self/status)"'
own_cpus=$(sed -n 's/^Cpus_allowed_list:[[:space:]]*//p' /proc/self/status)
ncpu=$(nproc)
expand_cpus() {  # "0-2,5" -> "0 1 2 5"
  local item out=""
  for item in ${1//,/ }; do out="$out $(seq "${item%-*}" "${item#*-}" | tr '\n' ' ')"; done
  echo $out
}
blocks_ok() {  # blocks_ok N: N disjoint blocks covering own_cpus, sizes within one
  local n=$1 all="" sizes="" line list
  [ "$(wc -l <"$tmp/out")" -eq "$n" ] || return 1
  [ "$(grep -c ' \[cores\] ' "$tmp/out")" -eq "$n" ] || return 1
  while read -r _ _ list; do
    list=$(expand_cpus "$list"); all="$all $list"; sizes="$sizes $(echo $list | wc -w)"
  done <"$tmp/out"
  [ "$(echo $all | tr ' ' '\n' | sort -n | tr '\n' ' ')" = "$(expand_cpus "$own_cpus" | tr ' ' '\n' | sort -n | tr '\n' ' ')" ] || return 1
  set -- $(echo $sizes | tr ' ' '\n' | sort -n)
  local min=$1; shift $(($# - 1))
  [ $(($1 - min)) -le 1 ]
}
run "$RUN" -n 2 sh -c "$cpu_report"
if [ "$ncpu" -ge 2 ]; then
  check "2 ranks on $ncpu CPUs: bound by default to disjoint blocks, GCOLL_CPU_BIND=cores ($(head -c 200 "$tmp/out"))" blocks_ok 2
else
  check "2 ranks on 1 CPU: not bound by default ($(head -c 200 "$tmp/out"))" \
    [ "$(grep -c ' \[unset\] ' "$tmp/out")" -eq 2 ]
fi
run "$RUN" -n 1 sh -c "$cpu_report"
check "1 rank: bound to all of gcollrun's CPUs ($(head -c 200 "$tmp/out"))" blocks_ok 1
run env GCOLL_CPU_BIND=cores "$RUN" -n 2 --cpu-bind none sh -c "$cpu_report"
check "--cpu-bind none: every rank on every CPU, a stale GCOLL_CPU_BIND dropped ($(head -c 200 "$tmp/out"))" \
  [ "$(grep -c " \[unset\] $own_cpus\$" "$tmp/out")" -eq 2 ]
run "$RUN" -n $((ncpu + 1)) sh -c "$cpu_report"
check "more ranks than CPUs: not bound by default ($(head -c 200 "$tmp/out"))" \
  [ "$(grep -c " \[unset\] $own_cpus\$" "$tmp/out")" -eq $((ncpu + 1)) ]
one_line_matching "--cpu-bind cores with more ranks than CPUs" 1 \
  "^gcollrun: --cpu-bind=cores: $((ncpu + 1)) ranks but $ncpu CPUs to bind them to" \
  "$RUN" -n $((ncpu + 1)) --cpu-bind cores true
one_line_matching "--cpu-bind with a wrong value" 2 "^gcollrun: --cpu-bind 'sockets': expected cores or none" \
  "$RUN" -n 2 --cpu-bind sockets true
# The runtime counts bound CPUs as the rank's own: 2 ranks on one CPU each
# have a core per thread (long-spinning waits), where sharing 1 CPU they would not.
if [ "$ncpu" -ge 2 ]; then
  GCOLL_DEBUG=INFO run taskset -c "$(expand_cpus "$own_cpus" | cut -d' ' -f1-2 | tr ' ' ',')" "$RUN" -n 2 "$BENCH"
  check "bound ranks count their CPUs as their own: long-spinning waits (exit $rc, $(errtext))" \
    eval '[ "$rc" -eq 0 ] && [ "$(grep -c "long-spinning waits" "$tmp/err")" -eq 2 ]'
fi
run "$RUN" -n 1 env GCOLL_CPU_BIND=sockets "$BENCH"
check "a wrong GCOLL_CPU_BIND fails init in one line (exit $rc, $(errtext))" \
  eval '[ "$rc" -ne 0 ] && grep -q "GCOLL_CPU_BIND=sockets: expected cores or none" "$tmp/err"'

# ---- failures ---------------------------------------------------------------
one_line_matching "a rank exiting 3" 3 '^gcollrun: rank 2 \(pid [0-9]+\) exited with status 3$' \
  "$RUN" -n 4 "$CLIENT" --exit 2 3

start=$(date +%s)
run "$RUN" -n 4 --nodes 2 "$CLIENT" --kill 1
elapsed=$(($(date +%s) - start))
check "SIGKILLed rank: gcollrun exits 137 (got $rc)" [ "$rc" -eq 137 ]
check "SIGKILLed rank: named on one line ($(errtext))" \
  grep -Eqx 'gcollrun: rank 1 \(pid [0-9]+\) killed by signal SIGKILL' "$tmp/err"
check "SIGKILLed rank: the others were stopped quickly (${elapsed}s)" [ "$elapsed" -le 5 ]
check "SIGKILLed rank: no rank finished its barrier" [ "$(grep -c ' ok$' "$tmp/out")" -eq 0 ]
check "temp plan dirs removed after failures" no_leftover_dirs

# --kill-wait: the seconds between the SIGTERM that follows a failure and
# the SIGKILL, for a rank that ignores SIGTERM (its sleep inherits that).
# Rank 0 fails after 0.5 s; the job then ends kill-wait seconds later.
kill_wait_ms() {  # kill_wait_ms [--kill-wait SEC]: prints the job's ms, checks the exit
  local t0=$(date +%s%N)
  run "$RUN" -n 2 "$@" bash -c 'if [ "$GCOLL_RANK" = 0 ]; then sleep 0.5; exit 5; fi; trap "" TERM; sleep 30'
  echo $(( ($(date +%s%N) - t0) / 1000000 ))
  [ "$rc" -eq 5 ] && grep -Eqx 'gcollrun: rank 0 \(pid [0-9]+\) exited with status 5' "$tmp/err"
}
ms=$(kill_wait_ms); krc=$?
check "--kill-wait default: SIGKILL 3 s after SIGTERM (job ${ms} ms, status ok: $krc)" \
  eval '[ "$krc" -eq 0 ] && [ "$ms" -ge 3400 ] && [ "$ms" -lt 9000 ]'
ms=$(kill_wait_ms --kill-wait 1); krc=$?
check "--kill-wait 1: SIGKILL 1 s after SIGTERM (job ${ms} ms, status ok: $krc)" \
  eval '[ "$krc" -eq 0 ] && [ "$ms" -ge 1400 ] && [ "$ms" -lt 3000 ]'
ms=$(kill_wait_ms --kill-wait 0); krc=$?
check "--kill-wait 0: SIGKILL at once (job ${ms} ms, status ok: $krc)" \
  eval '[ "$krc" -eq 0 ] && [ "$ms" -lt 1400 ]'
one_line_matching "bad kill-wait" 2 "--kill-wait: '-1' is not a number of seconds in \\[0, 1e7\\]" \
  "$RUN" -n 2 --kill-wait -1 true

one_line_matching "a failing shell rank" 9 '^gcollrun: rank 0 \(pid [0-9]+\) exited with status 9$' \
  "$RUN" -n 1 bash -c 'exit 9'

start=$(date +%s)
one_line_matching "--timeout" 124 '^gcollrun: job timed out after 1 s; killing 2 running ranks$' \
  "$RUN" -n 2 --timeout 1 "$CLIENT" --sleep 60
check "--timeout: took $(($(date +%s) - start)) s" [ $(($(date +%s) - start)) -le 6 ]

# SIGTERM to gcollrun reaches every rank (each reports it and exits 0).
timeout 20 "$RUN" -n 2 --tag-output "$CLIENT" --wait-term >"$tmp/term.out" 2>"$tmp/term.err" &
pid=$!
for _ in $(seq 1 100); do
  [ "$(grep -c ready "$tmp/term.out" 2>/dev/null)" -eq 2 ] && break
  sleep 0.1
done
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM forwarded: gcollrun exit 0 (got $rc; $(head -c 300 "$tmp/term.err"))" [ "$rc" -eq 0 ]
check "SIGTERM forwarded: both ranks got it" [ "$(grep -c 'got SIGTERM' "$tmp/term.out")" -eq 2 ]

# SIGTERM to ranks that do not catch it: they die of it, gcollrun says so.
timeout 20 "$RUN" -n 2 "$CLIENT" --sleep 30 >"$tmp/t2.out" 2>"$tmp/t2.err" &
pid=$!
for _ in $(seq 1 100); do [ "$(grep -c ' ok$' "$tmp/t2.out" 2>/dev/null)" -eq 2 ] && break; sleep 0.1; done
kill -TERM "$pid"
wait "$pid"
rc=$?
check "SIGTERM to default ranks: exit 143 (got $rc)" [ "$rc" -eq 143 ]
check "SIGTERM to default ranks: named" grep -Eq '^gcollrun: rank [01] \(pid [0-9]+\) killed by signal SIGTERM$' "$tmp/t2.err"
check "temp plan dirs removed after signals" no_leftover_dirs

# ---- the KVS refuses strangers and bounds every wait ------------------------
run "$RUN" -n 2 "$CLIENT" --wrong-key
check "wrong job key refused by the server ($(errtext))" [ "$rc" -eq 0 ]
check "wrong job key: reason printed" [ "$(grep -c "not signed with this job's key" "$tmp/out")" -eq 2 ]

start=$(date +%s)
run env GCOLL_TIMEOUT=1 "$RUN" -n 2 "$CLIENT" --get-missing
check "missing key: get fails with a deadline message (exit $rc; $(errtext))" [ "$rc" -eq 0 ]
check "missing key: one line per rank" \
  [ "$(grep -c "^bootstrap(tcp): get 'test/nobody-puts-this': no rank put this key within .* (deadline from GCOLL_TIMEOUT)$" "$tmp/err")" -eq 2 ]
check "missing key: bounded by GCOLL_TIMEOUT" [ $(($(date +%s) - start)) -le 5 ]

# Raw strangers on the KVS socket: malformed input is answered with a reason
# and the connection is closed (cat sees EOF well before its 5 s bound).
raw_kvs() {
  run "$RUN" -n 1 bash -c 'exec 3<>/dev/tcp/${GCOLL_KVS_ADDR%:*}/${GCOLL_KVS_ADDR#*:}
    printf "$1" >&3; timeout 5 cat <&3 | tr -c "[:print:]" "."; exit ${PIPESTATUS[0]}' raw "$1"
}
raw_kvs 'GARBAGEGARBAGE!!'
check "KVS: bad magic refused and closed ($(errtext))" eval '[ "$rc" -eq 0 ] && grep -q "bad magic" "$tmp/out"'
raw_kvs 'gcKV\x00\x02\x00\x02\x00\x00\x00\x00\x7f\xff\xff\xff'
check "KVS: oversized body refused and closed" eval '[ "$rc" -eq 0 ] && grep -q "exceeds the limit" "$tmp/out"'
raw_kvs 'gcKV\x00\x03\x00\x01\x00\x00\x00\x00\x00\x00\x00\x00'
check "KVS: other protocol version refused" eval '[ "$rc" -eq 0 ] && grep -q "protocol version 3" "$tmp/out"'
# A well-formed PUT that skips the authenticated HELLO: refused and closed.
raw_kvs 'gcKV\x00\x02\x00\x02\x00\x00\x00\x00\x00\x00\x00\x08\x00\x01k\x00\x00\x00\x01v'
check "KVS: request before an authenticated hello refused" eval '[ "$rc" -eq 0 ] && grep -q "put before hello" "$tmp/out"'

# The KVS client outside gcollrun: one-line reasons, no hang.
run env -u GCOLL_KVS_ADDR "$CLIENT"
check "no bootstrap in the environment: one line ($(errtext))" \
  eval '[ "$rc" -eq 1 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && grep -q "GCOLL_KVS_ADDR unset" "$tmp/err"'
run env GCOLL_KVS_ADDR=127.0.0.1:1 GCOLL_JOB_KEY=k GCOLL_RANK=0 GCOLL_NRANKS=1 "$CLIENT"
check "nothing listening: one line ($(errtext))" \
  eval '[ "$rc" -eq 1 ] && grep -q "cannot connect to the KVS at 127.0.0.1:1" "$tmp/err"'
run env GCOLL_KVS_ADDR=127.0.0.1:1 GCOLL_JOB_KEY=k GCOLL_RANK=2 GCOLL_NRANKS=2 "$CLIENT"
check "rank out of range: one line ($(errtext))" eval '[ "$rc" -eq 1 ] && grep -q "GCOLL_RANK=.2." "$tmp/err"'
run env GCOLL_KVS_ADDR=127.0.0.1:1 GCOLL_JOB_KEY=k GCOLL_RANK=0 GCOLL_NRANKS=1 GCOLL_TIMEOUT=soon "$CLIENT"
check "bad GCOLL_TIMEOUT: one line ($(errtext))" eval '[ "$rc" -eq 1 ] && grep -q "GCOLL_TIMEOUT=.soon." "$tmp/err"'

# ---- command line -----------------------------------------------------------
usage_re='\(see .gcollrun --help.\)$'
one_line_matching "no -n" 2 "missing -n N $usage_re" "$RUN" "$CLIENT"
one_line_matching "no program" 2 "missing PROGRAM $usage_re" "$RUN" -n 2
one_line_matching "-n 0" 2 "-n: 0 is out of range" "$RUN" -n 0 "$CLIENT"
one_line_matching "-n abc" 2 "-n: 'abc' is not an integer" "$RUN" -n abc "$CLIENT"
one_line_matching "-n too many" 2 "out of range 1\.\.1024" "$RUN" -n 5000 "$CLIENT"
# 1024 ranks on 3 nodes: the first node would hold 342 (blocks round up).
one_line_matching "too many ranks per node" 2 "342 ranks per node, at most 256 \(use --nodes\)" \
  "$RUN" -n 1024 --nodes 3 "$CLIENT"
one_line_matching "more nodes than ranks" 2 "--nodes 4 is more than -n 2" "$RUN" -n 2 --nodes 4 "$CLIENT"
one_line_matching "unknown option" 2 "unrecognized option '--frobnicate'" "$RUN" --frobnicate -n 2 "$CLIENT"
one_line_matching "option without value" 2 "option '--timeout' needs a value" "$RUN" -n 2 --timeout
one_line_matching "bad timeout" 2 "--timeout: '-3' is not a number" "$RUN" -n 2 --timeout -3 "$CLIENT"
one_line_matching "--plan with --topo" 2 "--plan and --topo exclude each other" \
  "$RUN" -n 2 --plan x.yaml --topo cpu-only "$CLIENT"
one_line_matching "unknown topology" 1 "^gcollrun: topology 'no-such-topo': no such file" \
  "$RUN" -n 2 --topo no-such-topo "$CLIENT"
one_line_matching "missing program" 127 '^gcollrun: no-such-program-zz: command not found$' \
  "$RUN" -n 2 no-such-program-zz
one_line_matching "missing program path" 127 '^gcollrun: /nonexistent/prog: No such file or directory$' \
  "$RUN" -n 2 /nonexistent/prog
touch "$tmp/notexec"
one_line_matching "program not executable" 126 "^gcollrun: $tmp/notexec: Permission denied$" \
  "$RUN" -n 2 "$tmp/notexec"
# Options after PROGRAM belong to PROGRAM.
run "$RUN" -n 1 echo -n --tag-output
check "program options are passed through" eval '[ "$rc" -eq 0 ] && [ "$(cat "$tmp/out")" = "--tag-output" ]'
run "$RUN" --help
check "--help exits 0 with usage" eval '[ "$rc" -eq 0 ] && grep -q "^usage: gcollrun -n N" "$tmp/out"'
# GCOLL_TUNING calibrates the plan gcollrun computes, as it does gcoll-plan's:
# with ring priced out, allreduce (the one collective with a host tree) moves
# to tree at every size.
show_allreduce_tuning='if [ "$GCOLL_RANK" = 0 ]; then sed -n "/^  allreduce:/,/^  [a-z]/p" "$GCOLL_PLAN"; fi'
run "$RUN" -n 2 sh -c "$show_allreduce_tuning"
cp "$tmp/out" "$tmp/tuning.default"
run env GCOLL_TUNING=host.ring.simple.base_lat=1e7,host.ring.ll.base_lat=1e7 \
  "$RUN" -n 2 sh -c "$show_allreduce_tuning"
check "GCOLL_TUNING changes gcollrun's plan (ring priced out of allreduce)" \
  eval '[ "$rc" -eq 0 ] && grep -q "algo: ring" "$tmp/tuning.default" && ! grep -q "algo: ring" "$tmp/out" && grep -q "algo: tree" "$tmp/out"'
one_line_matching "malformed GCOLL_TUNING" 1 "GCOLL_TUNING: .*nonsense" \
  env GCOLL_TUNING=nonsense=1 "$RUN" -n 2 true
check "temp plan dirs removed on every path" no_leftover_dirs

# ---- --no-plan: the ranks plan the job themselves ------------------------------
# As under srun --mpi=pmi2 without the plugin: one topology per node meets at
# rank 0 through the store, rank 0 builds the plan, every rank reads it back.
# It must be the plan gcollrun itself would have made (gcoll-plan diff).
GCOLL_DEBUG=INFO GCOLL_TOPO=dgx-h100 GCOLL_PLAN_SAVE="$tmp/self.yaml" \
  run "$RUN" -n 6 --nodes 2 --no-plan "$BENCH"
check "--no-plan: 6 ranks init and allreduce on a plan of their own (exit $rc, $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-5] of 6:" "$tmp/out")" -eq 6 ]'
check "--no-plan: every rank says it planned the job itself" \
  [ "$(grep -c "no GCOLL_PLAN: the ranks planned the job themselves in [0-9.]* ms" "$tmp/err")" -eq 6 ]
"$top_builddir/gcoll-plan" generate -q -t dgx-h100 --hosts "$(hostname -s)-v[0-1]" -k 3 \
  -o "$tmp/ref.yaml"
check "--no-plan: the plan is the one gcoll-plan generate makes for the job" \
  "$top_builddir/gcoll-plan" diff "$tmp/ref.yaml" "$tmp/self.yaml"
GCOLL_TOPO=dgx-h100 run "$RUN" -n 7 --nodes 3 --no-plan "$BENCH"
check "--no-plan: 7 ranks on 3 nodes (3+2+2) (exit $rc, $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-6] of 7:" "$tmp/out")" -eq 7 ]'
run "$RUN" -n 3 --no-plan "$BENCH"
check "--no-plan: detected topology by default (exit $rc, $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-2] of 3:" "$tmp/out")" -eq 3 ]'
GCOLL_DEBUG=INFO GCOLL_TOPO=pcie-2s-4gpu run "$RUN" -n 6 --no-plan "$BENCH"
check "--no-plan: 6 ranks sharing a node's 4 GPUs are planned as a CPU node (exit $rc, $(errtext))" \
  eval '[ "$rc" -eq 0 ] && [ "$(grep -c "^init_bench rank [0-5] of 6:" "$tmp/out")" -eq 6 ] && grep -q "runs 6 ranks on 4 GPUs: planned as a CPU node" "$tmp/err"'
GCOLL_TOPO=no-such-topology run "$RUN" -n 2 --no-plan "$BENCH"
check "--no-plan: a node that cannot describe itself fails the job, saying why" \
  eval '[ "$rc" -ne 0 ] && [ "$(grep -c "no GCOLL_PLAN, and planning in-process failed: .*no-such-topology" "$tmp/err")" -ge 1 ]' 
one_line_matching "--no-plan with --plan" 2 "^gcollrun: --no-plan excludes --plan and --topo" \
  "$RUN" -n 2 --no-plan --topo cpu-only "$BENCH"
check "temp plan dirs removed after --no-plan" no_leftover_dirs

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
