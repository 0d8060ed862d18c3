#!/bin/bash
# Which transport the communicator picks per edge in a build with net/ib
# (libibverbs) but no RDMA device: a 2-node job falls back to net/socket
# across nodes (shm inside), says so once per rank at GCOLL_DEBUG=INFO and
# computes right; GCOLL_TRANSPORT=net/ib fails the init in one line naming
# the missing device; net/ib is not even tried where it cannot matter (one
# node) or where GCOLL_TRANSPORT forces another transport.
# Skipped on a machine that has an RDMA device: there the fallback is not
# what happens.
set -u
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
PERF=$top_builddir/gcoll-perf
for f in "$RUN" "$PERF"; do
  [ -x "$f" ] || { echo "test_transport_choice: $f is not built" >&2; exit 99; }
done
if [ -n "$(ls -A /sys/class/infiniband 2>/dev/null)" ]; then
  echo "skipped: this machine has an RDMA device (/sys/class/infiniband)"
  exit 77
fi
unset GCOLL_ALGO GCOLL_PROTO GCOLL_TRANSPORT GCOLL_PERF_INJECT_ERROR GCOLL_PLAN GCOLL_RANK \
  GCOLL_IB_HCA GCOLL_IB_GID_INDEX
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-tchoice.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }
fallbacks() { grep -c "^gcoll rank [0-9]*: net/ib unavailable (" "$tmp/err"; }

# A 2-node allreduce: right results, every rank reports the fallback exactly
# once, cross-node edges over net/socket and node-local ones over shm.
perf=(-o allreduce -b 8 -e 1M -f 8)
GCOLL_DEBUG=INFO timeout 120 "$RUN" -n 4 --nodes 2 "$PERF" "${perf[@]}" >"$tmp/out" 2>"$tmp/err"
rc=$?
rows=$(awk '!/^#/ && NF == 13' "$tmp/out" | wc -l)
wrong=$(awk '!/^#/ && NF == 13 && ($9 != 0 || $13 != 0)' "$tmp/out" | wc -l)
[ "$rc" -eq 0 ] && [ "$rows" -eq 6 ] && [ "$wrong" -eq 0 ] \
  && ok "2 nodes without a device: $rows sizes, 0 wrong" \
  || { bad "2 nodes without a device: rc $rc, $rows rows, $wrong with wrong elements"; \
       cat "$tmp/out"; tail -5 "$tmp/err"; }
per_rank=$(for r in 0 1 2 3; do
  grep -c "^gcoll rank $r: net/ib unavailable (no RDMA device.*); cross-node edges use net/socket$" \
    "$tmp/err"; done | tr '\n' ' ')
[ "$per_rank" = "1 1 1 1 " ] && [ "$(fallbacks)" -eq 4 ] \
  && ok "fallback logged once per rank: $(grep -m1 'net/ib unavailable' "$tmp/err")" \
  || bad "fallback lines per rank 0..3: $per_rank (want 1 1 1 1)"
net_socket=$(grep -c "(net edge, id [0-9]*) over net/socket$" "$tmp/err")
net_other=$(grep "(net edge, id [0-9]*) over " "$tmp/err" | grep -vc "over net/socket$")
shm_other=$(grep "(shm edge, id [0-9]*) over " "$tmp/err" | grep -vc "over shm$")
[ "$net_socket" -gt 0 ] && [ "$net_other" -eq 0 ] && [ "$shm_other" -eq 0 ] \
  && ok "$net_socket cross-node edge ends over net/socket, node-local ones over shm" \
  || bad "edges: $net_socket net over net/socket, $net_other net elsewhere, $shm_other shm elsewhere"

# Forced net/ib without a device: the init fails in one line naming it.
GCOLL_TRANSPORT=net/ib timeout 60 "$RUN" -n 2 --nodes 2 "$PERF" -o allreduce -b 8 -e 8 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
lines=$(grep -c "GCOLL_TRANSPORT=net/ib: no RDMA device" "$tmp/err")
multi=$(grep "GCOLL_TRANSPORT=net/ib" "$tmp/err" | grep -vc "no RDMA device")
[ "$rc" -ne 0 ] && [ "$lines" -ge 1 ] && [ "$multi" -eq 0 ] \
  && ok "GCOLL_TRANSPORT=net/ib refused: $(grep -m1 'GCOLL_TRANSPORT=net/ib' "$tmp/err")" \
  || { bad "GCOLL_TRANSPORT=net/ib: rc $rc, $lines lines naming the device"; cat "$tmp/err"; }

# Not tried at all: a one-node job, or another transport forced.
GCOLL_DEBUG=INFO timeout 60 "$RUN" -n 2 "$PERF" -o allreduce -b 8 -e 8 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] && [ "$(fallbacks)" -eq 0 ] && ok "one node: net/ib not tried" \
  || { bad "one node: rc $rc, $(fallbacks) fallback lines"; tail -5 "$tmp/err"; }
GCOLL_TRANSPORT=net/socket GCOLL_DEBUG=INFO timeout 60 "$RUN" -n 2 --nodes 2 "$PERF" \
  -o allreduce -b 8 -e 8 >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -eq 0 ] && [ "$(fallbacks)" -eq 0 ] && ok "GCOLL_TRANSPORT=net/socket: net/ib not tried" \
  || { bad "forced net/socket: rc $rc, $(fallbacks) fallback lines"; tail -5 "$tmp/err"; }

# An unknown name is refused with a list that includes net/ib.
GCOLL_TRANSPORT=carrier-pigeon timeout 60 "$RUN" -n 2 "$PERF" -o allreduce -b 8 -e 8 \
  >"$tmp/out" 2>"$tmp/err"
rc=$?
[ "$rc" -ne 0 ] && grep -q "GCOLL_TRANSPORT='carrier-pigeon': expected shm, net/socket, net/ib" \
  "$tmp/err" && ok "unknown GCOLL_TRANSPORT refused, net/ib listed" \
  || { bad "unknown GCOLL_TRANSPORT: rc $rc"; cat "$tmp/err"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
