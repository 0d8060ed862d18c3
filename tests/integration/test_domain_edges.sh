#!/bin/bash
# Edges between nodes of one multi-node NVLink domain at run time. The plan
# calls them p2p (gcoll-plan show --rank says so); this runtime's p2p
# transport reaches GPUs of its own node only (CUDA IPC), so such edges
# must be carried over the network, with one INFO line per rank saying so,
# and the collectives must compute right. Two virtual nodes of a 4-GPU
# topology, 2 ranks each, in one domain (generate --nvlink-domain 2).
set -u
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
PERF=$top_builddir/gcoll-perf
PLAN=$top_builddir/gcoll-plan
for f in "$RUN" "$PERF" "$PLAN"; do
  [ -x "$f" ] || { echo "test_domain_edges: $f is not built" >&2; exit 99; }
done
unset GCOLL_ALGO GCOLL_PROTO GCOLL_TRANSPORT GCOLL_PLAN GCOLL_RANK GCOLL_P2P_DISABLE
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-domain.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

"$PLAN" generate -q --topo pcie-2s-4gpu --nodes 2 -k 2 --nvlink-domain 2 -o "$tmp/plan.yaml" \
  || { echo "FAIL: generate"; exit 1; }
# Ranks 0, 1 are node 0, ranks 2, 3 node 1: every ring crosses between them.
cross=$("$PLAN" show "$tmp/plan.yaml" --rank 1 | grep -Ec '^ring .*(prev|next) [23] \(p2p\)')
[ "$cross" -gt 0 ] && ok "the plan's view: rank 1's ring edges to node 1 are p2p ($cross channels)" \
  || bad "the plan's view of rank 1 has no p2p ring edge to node 1"

GCOLL_DEBUG=INFO timeout 120 "$RUN" -n 4 --plan "$tmp/plan.yaml" "$PERF" -o allreduce -b 8 -e 1M \
  -f 8 >"$tmp/out" 2>"$tmp/err"
rc=$?
rows=$(awk '!/^#/ && NF == 13' "$tmp/out" | wc -l)
wrong=$(awk '!/^#/ && NF == 13 && ($9 != 0 || $13 != 0)' "$tmp/out" | wc -l)
[ "$rc" -eq 0 ] && [ "$rows" -eq 6 ] && [ "$wrong" -eq 0 ] \
  && ok "allreduce over the domain's nodes: $rows sizes, 0 wrong" \
  || { bad "allreduce: rc $rc, $rows rows, $wrong wrong"; tail -5 "$tmp/err"; }
per_rank=$(for r in 0 1 2 3; do
  grep -c "^gcoll rank $r: [0-9]* edge ends\? to other nodes of NVLink domain 0 use the network: " \
    "$tmp/err"; done | tr '\n' ' ')
[ "$per_rank" = "1 1 1 1 " ] && ok "said once per rank: $(grep -m1 'NVLink domain' "$tmp/err")" \
  || bad "fallback lines per rank 0..3: $per_rank (want 1 1 1 1)"
# No edge end between the nodes over anything but the network, and every
# one of them carried as a net edge.
node_of() { [ "$1" -lt 2 ] && echo 0 || echo 1; }
across_p2p=0 across_net=0
while read -r me peer cls over; do
  [ "$(node_of "$me")" = "$(node_of "$peer")" ] && continue
  if [ "$cls" = net ] && [ "$over" = net/socket ]; then across_net=$((across_net + 1));
  else across_p2p=$((across_p2p + 1)); fi
done < <(sed -n 's/^gcoll rank \([0-9]*\): \(recv from\|send to\) rank \([0-9]*\) (\([a-z0-9]*\) edge, id [0-9]*) over \(.*\)$/\1 \3 \4 \5/p' "$tmp/err")
[ "$across_net" -gt 0 ] && [ "$across_p2p" -eq 0 ] \
  && ok "$across_net edge ends between the nodes over net/socket, none over p2p or shm" \
  || bad "between the nodes: $across_net over net/socket, $across_p2p otherwise"

echo "test_domain_edges: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
