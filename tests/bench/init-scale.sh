#!/bin/bash
# Init as the job grows: `gcollrun -n N --nodes N/PER_NODE init_bench` for
# N = 8 .. 256 on this host (virtual nodes: ranks on different ones talk
# TCP, as across machines), with GCOLL_DEBUG=INFO. Per run, one table row:
#
#   endpoints    where the ranks found their plan neighbours: "plan" (the
#                endpoints file and listening sockets gcollrun gives them,
#                issue 16) or "store" (gcollrun --no-endpoints: the central
#                store, as before)
#   wall, cpu    per-rank gcollCommInitFromPlan time (median / max over
#                ranks), from tests/bench/init_bench.c; cpu is the whole
#                process, "main" the calling thread alone (the difference is
#                mostly the proxy thread polling while the rank waits)
#   bootstrap    per-rank time waiting in the bootstrap (the store's
#                answers, or with endpoints the neighbours' values and the
#                closing wave), from the runtime's "init timings" line
#                (median)
#   req/rank     requests one rank sent to the central store at init
#                (median / max), same line: 0 with endpoints from the plan,
#                which a "plan" row also checks on every rank
#   msgs/rank    messages one rank sent straight to its plan neighbours
#                (median / max), same line; "-" on the store's path
#   store total  requests the central store (gcollrun's) served, hellos and
#                goodbyes included, from gcollrun's INFO line at exit
#   run cpu      gcollrun's own CPU time, same line: an upper bound on the
#                store's (gcollrun also forks the ranks and carries their
#                output)
#   plan         gcollrun's plan computation and write, from its INFO line
#   RSS          peak resident memory of a rank (median / max; shared-memory
#                FIFOs mapped by two ranks count in both)
#   faults       page faults of the median rank during init (first touches
#                of its FIFOs, mostly); "cpu us/fault" is that rank's init
#                CPU over them, an upper bound of one first touch's cost.
#                On a VM that is where init CPU moves with the job: the
#                count per rank stays flat, but a large job touches memory
#                the host has not backed yet, at several times the cost.
#
#   tests/bench/init-scale.sh [BUILDDIR]      (default: .)
#     RANKS="8 16 ..."  rank counts (default 8 16 32 64 128 256)
#     PER_NODE=K        ranks per virtual node (default 4)
#     WARMUP=0          no unreported warm-up run (default: one, the first
#                       rank count on the first path, before the table: the
#                       first run after a build paid 1.5-2x the CPU per page
#                       fault of the next, in every run of this script)
#     ENDPOINTS="plan store"  which paths to run per rank count (default both)
#
# Every rank checks one allreduce. A benchmark, not a timed test: it exits 1
# only when a run fails, a rank reports a wrong sum, or a rank's figures are
# missing, or (endpoints from the plan) a rank sent the store a request at
# init; slow figures never fail it (these machines are shared and noisy).
set -u

builddir=${1:-.}
ranks=${RANKS:-"8 16 32 64 128 256"}
per_node=${PER_NODE:-4}
modes=${ENDPOINTS:-"plan store"}
run=$builddir/gcollrun
bench=$builddir/tests/bench/init_bench

for f in "$run" "$bench"; do
  if [ ! -x "$f" ]; then
    echo "init-scale: $f is not built (make, then pass the build directory)" >&2
    exit 2
  fi
done
case $per_node in '' | *[!0-9]* | 0) echo "init-scale: PER_NODE='$per_node' is not a positive integer" >&2; exit 2 ;; esac

tmp=$(mktemp -d "${TMPDIR:-/tmp}/init-scale.XXXXXX") || exit 1
trap 'rm -rf "$tmp"' EXIT

# stats FILE: "median max" of the numbers in FILE, one per line.
stats() {
  sort -g "$1" | awk '{ v[NR] = $1 } END {
    if (NR == 0) { print "- -"; exit }
    m = NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2
    printf "%s %s\n", m, v[NR] }'
}

# field NAME FILE: the number after NAME on each line of FILE.
field() {
  awk -v name="$1" '{ for (i = 1; i < NF; i++) if ($i == name) { print $(i + 1); break } }' "$2"
}

echo "# init-scale: $(nproc) CPUs, $(awk '/MemTotal/ { printf "%.0f GiB", $2 / 1048576 }' /proc/meminfo), $per_node ranks per virtual node, gcollrun's plan (cpu-only topology), GCOLL_DEBUG=INFO"
printf '| %5s | %5s | %9s | %20s | %19s | %19s | %12s | %16s | %16s | %11s | %10s | %7s | %15s | %12s | %12s |\n' ranks nodes \
  endpoints "init wall ms med/max" "init cpu ms med/max" "main cpu ms med/max" "bootstrap ms" \
  "req/rank med/max" "msgs/rank med/max" "store total" "run cpu ms" "plan ms" "RSS MiB med/max" \
  "faults (med)" "cpu us/fault"
echo "|------:|------:|----------:|---------------------:|--------------------:|--------------------:|-------------:|-----------------:|-----------------:|------------:|-----------:|--------:|----------------:|-------------:|-------------:|"
status=0
if [ "${WARMUP:-1}" != 0 ]; then
  read -r first_n _ <<<"$ranks"
  read -r first_mode _ <<<"$modes"
  warm_opt=; [ "$first_mode" = store ] && warm_opt=--no-endpoints
  # shellcheck disable=SC2086  # $warm_opt is one option or nothing
  "$run" $warm_opt -n "$first_n" --nodes $(( (first_n + per_node - 1) / per_node )) --timeout 600 \
    "$bench" >/dev/null 2>&1 || echo "init-scale: the warm-up run failed (the table follows)" >&2
fi
for n in $ranks; do
 for mode in $modes; do
  case $n in '' | *[!0-9]* | 0) echo "init-scale: RANKS has '$n', not a positive integer" >&2; exit 2 ;; esac
  case $mode in plan) opt= ;; store) opt=--no-endpoints ;;
    *) echo "init-scale: ENDPOINTS has '$mode', expected plan or store" >&2; exit 2 ;; esac
  nodes=$(( (n + per_node - 1) / per_node ))
  log=$tmp/run-$n-$mode.log
  # shellcheck disable=SC2086  # $opt is one option or nothing
  if ! GCOLL_DEBUG=INFO "$run" $opt -n "$n" --nodes "$nodes" --timeout 600 "$bench" >"$log" 2>&1; then
    echo "init-scale: $n ranks on $nodes nodes ($mode) failed:" >&2
    grep -v '^gcoll rank [0-9]*: \(recv\|send\|joined\|init timings\)' "$log" | tail -20 >&2
    status=1
    continue
  fi
  grep '^init_bench rank [0-9]* of ' "$log" >"$tmp/bench"
  grep '^gcoll rank [0-9]*: init timings: ' "$log" >"$tmp/timings"
  got_bench=$(wc -l <"$tmp/bench") got_timings=$(wc -l <"$tmp/timings")
  if [ "$got_bench" -ne "$n" ] || [ "$got_timings" -ne "$n" ]; then
    echo "init-scale: $n ranks: $got_bench init_bench lines and $got_timings 'init timings' lines, expected $n of each" >&2
    status=1
    continue
  fi
  field wall_ms "$tmp/bench" >"$tmp/wall"
  field cpu_ms "$tmp/bench" >"$tmp/cpu"
  field main_cpu_ms "$tmp/bench" >"$tmp/main"
  field maxrss_kb "$tmp/bench" | awk '{ printf "%.1f\n", $1 / 1024 }' >"$tmp/rss"
  field faults "$tmp/bench" >"$tmp/faults"
  field bootstrap "$tmp/timings" >"$tmp/store"
  field requests "$tmp/timings" | tr -d : >"$tmp/req"
  if [ "$mode" = plan ]; then
    sed -n 's/.*; endpoints from the plan.s endpoints file: \([0-9]*\) messages.*/\1/p' \
      "$tmp/timings" >"$tmp/msgs"
    if [ "$(wc -l <"$tmp/msgs")" -ne "$n" ] || [ "$(grep -vcx 0 "$tmp/req")" -ne 0 ]; then
      echo "init-scale: $n ranks: not every rank took its endpoints from the plan with 0 store requests:" >&2
      grep -v 'endpoints from the plan.s endpoints file' "$tmp/timings" | head -3 >&2
      grep -v '; bootstrap requests 0: ' "$tmp/timings" | head -3 >&2
      status=1
      continue
    fi
    read -r msgs_med msgs_max < <(stats "$tmp/msgs")
  else
    msgs_med=- msgs_max=-
  fi
  served=$(sed -n 's/^gcollrun: the store served \([0-9]*\) requests.*/\1/p' "$log")
  run_cpu=$(sed -n 's/^gcollrun: the store served .* used \([0-9.]*\) ms of CPU$/\1/p' "$log")
  plan_ms=$(sed -n 's/^gcollrun: plan for .* in \([0-9.]*\) ms:.*/\1/p' "$log")
  read -r wall_med wall_max < <(stats "$tmp/wall")
  read -r cpu_med cpu_max < <(stats "$tmp/cpu")
  read -r main_med main_max < <(stats "$tmp/main")
  read -r rss_med rss_max < <(stats "$tmp/rss")
  read -r faults_med _ < <(stats "$tmp/faults")
  # The median rank's init CPU over its page faults: an upper bound of what
  # one first touch cost in this run (the rest of init is in it too).
  per_fault=$(awk -v c="$cpu_med" -v f="$faults_med" 'BEGIN { if (f > 0) printf "%.2f", 1000 * c / f; else print "-" }')
  read -r store_med _ < <(stats "$tmp/store")
  read -r req_med req_max < <(stats "$tmp/req")
  printf '| %5d | %5d | %9s | %9.1f / %8.1f | %9.1f / %7.1f | %9.1f / %7.1f | %12.1f | %7s / %6s | %7s / %6s | %11s | %10s | %7s | %6.1f / %6.1f | %12s | %12s |\n' \
    "$n" "$nodes" "$mode" "$wall_med" "$wall_max" "$cpu_med" "$cpu_max" "$main_med" "$main_max" \
    "$store_med" "$req_med" "$req_max" "$msgs_med" "$msgs_max" "${served:--}" "${run_cpu:--}" \
    "${plan_ms:--}" "$rss_med" "$rss_max" "$faults_med" "$per_fault"
 done
done
exit $status
