#!/bin/bash
# Two hosts on one machine: two network namespaces joined by a veth pair,
# each seeing only its loopback and an eth0 on 10.231.77.0/24. Four ranks,
# two per "host", join with gcollGetUniqueId + gcollCommInitRank and no
# launcher and no GCOLL_SOCKET_IFADDR: the store rank 0 hosts and every
# socket must be on eth0 (loopback cannot reach the other namespace), and
# every collective must come out right (coll_check matrix).
#
# Needs root and iproute2; skips (77) with one line otherwise.
set -u
top_builddir=${top_builddir:-.}
CHECK=$top_builddir/tests/integration/coll_check
[ -x "$CHECK" ] || { echo "test_netns: $CHECK is not built" >&2; exit 99; }
if [ "$(id -u)" -ne 0 ] || ! command -v ip >/dev/null 2>&1; then
  echo "skipped: network namespaces need root and ip (iproute2)"
  exit 77
fi
unset GCOLL_SOCKET_IFADDR GCOLL_PLAN GCOLL_RANK GCOLL_KVS_ADDR GCOLL_JOB_KEY GCOLL_TRANSPORT

nsA=gcoll-a-$$ nsB=gcoll-b-$$ ifA=gca$$ ifB=gcb$$
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-netns.XXXXXX") || exit 99
cleanup() {
  ip netns del "$nsA" 2>/dev/null
  ip netns del "$nsB" 2>/dev/null
  rm -rf "$tmp"
}
trap cleanup EXIT
if ! { ip netns add "$nsA" && ip netns add "$nsB" &&
       ip link add "$ifA" type veth peer name "$ifB"; } 2>"$tmp/err"; then
  echo "skipped: cannot make network namespaces here: $(head -1 "$tmp/err")"
  exit 77
fi
for side in "A $nsA $ifA 1" "B $nsB $ifB 2"; do
  set -- $side
  ip link set "$3" netns "$2" &&
    ip -n "$2" link set "$3" name eth0 &&
    ip -n "$2" addr add "10.231.77.$4/24" dev eth0 &&
    ip -n "$2" link set eth0 up &&
    ip -n "$2" link set lo up || { echo "test_netns: setting up host $1 failed" >&2; exit 99; }
done

pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# rank R runs in namespace NS
start_rank() {
  GCOLL_NODES=2 GCOLL_TIMEOUT=30 GCOLL_DEBUG=INFO timeout 300 \
    ip netns exec "$2" "$CHECK" --uid "$tmp/uid" 4 "$1" matrix >"$tmp/out.$1" 2>&1 &
  pids[$1]=$!
}
t0=$SECONDS
start_rank 0 "$nsA"
start_rank 1 "$nsA"
start_rank 2 "$nsB"
start_rank 3 "$nsB"
failed=0
for r in 0 1 2 3; do
  wait "${pids[$r]}" || { failed=1; echo "rank $r exited with $?"; tail -5 "$tmp/out.$r"; }
done
[ "$failed" -eq 0 ] && ok "4 ranks on 2 hosts, no launcher: exited 0 ($((SECONDS - t0)) s)" ||
  bad "4 ranks on 2 hosts: a rank failed"

clean=$(cat "$tmp"/out.* | grep -c '^rank [0-3]: [0-9]* calls, 0 wrong bytes$')
[ "$clean" -eq 4 ] && ok "every collective right on all 4 ranks" ||
  bad "$clean of 4 ranks reported 0 wrong bytes: $(grep -h '^rank' "$tmp"/out.* | head -8)"

uid_addr=$(tr -d '\0' <"$tmp/uid" 2>/dev/null | awk '{print $2}')
[[ $uid_addr == 10.231.77.1:* ]] && ok "the id names rank 0's eth0 ($uid_addr)" ||
  bad "the id names '$uid_addr', not 10.231.77.1"

a=$(cat "$tmp/out.0" "$tmp/out.1" | grep -c 'net/socket listens on 10\.231\.77\.1:')
b=$(cat "$tmp/out.2" "$tmp/out.3" | grep -c 'net/socket listens on 10\.231\.77\.2:')
[ "$a" -eq 2 ] && [ "$b" -eq 2 ] && ok "each host's ranks listen on its eth0" ||
  bad "listeners: $a of 2 on host A's eth0, $b of 2 on host B's: $(grep -h listens "$tmp"/out.* | head -4)"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
