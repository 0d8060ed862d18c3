#!/bin/bash
# NCCL net plugins through real ranks (docs/net.md): gcoll loads an ncclNet
# plugin by NCCL's rules and moves collectives' data through it on host
# buffers, 2 virtual nodes of 2 ranks, checked element by element by
# gcoll-perf. The plugin is gcoll's own (tests/net_plugin: the ABI over
# loopback TCP), built in each ABI version gcoll loads and in the ways a
# plugin can be unusable:
#   - NCCL_NET_PLUGIN=NAME (libnccl-net-NAME.so), a path, from NCCL's
#     configuration file, GCOLL_NET_PLUGIN first, or unset with a
#     libnccl-net.so on the library path: every cross-node edge over
#     net/plugin, the plugin's own count of bytes moved is not zero;
#   - ncclNet v10, v9 and v8 all move data;
#   - a plugin that is missing, too old (v7), fails init or has no device:
#     one line per rank, and the run falls back to net/socket, right;
#   - NCCL_NET_PLUGIN=none, NCCL_NET=Socket: no plugin; NCCL_NET naming
#     the plugin's network uses it, naming one no plugin serves fails the
#     init in one line;
#   - GCOLL_TRANSPORT=net/plugin: every edge, even inside a node.
set -u
top_builddir=${top_builddir:-.}
RUN=$top_builddir/gcollrun
PERF=$top_builddir/gcoll-perf
PLUGINS=$top_builddir/tests/net_plugin/.libs
for f in "$RUN" "$PERF" "$PLUGINS/libnccl-net-gcolltest.so"; do
  [ -e "$f" ] || { echo "test_net_plugin: $f is not built" >&2; exit 99; }
done
unset GCOLL_ALGO GCOLL_PROTO GCOLL_TRANSPORT GCOLL_PERF_INJECT_ERROR GCOLL_PLAN GCOLL_RANK \
  GCOLL_NET GCOLL_NET_PLUGIN NCCL_NET NCCL_NET_PLUGIN NCCL_IB_DISABLE
export GCOLL_TIMEOUT=${GCOLL_TIMEOUT:-30}
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-netplugin.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
export LD_LIBRARY_PATH="$PLUGINS${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
pass=0 fail=0
ok() { pass=$((pass + 1)); echo "ok: $*"; }
bad() { fail=$((fail + 1)); echo "FAIL: $*"; }

# run [env...]: a 2-node job of 4 ranks, allreduce (ring and tree, LL and
# SIMPLE as the tuning picks) and alltoall (send/recv), 8 B to 1 MiB.
run() {
  env GCOLL_DEBUG=INFO "$@" timeout 120 "$RUN" -n 4 --nodes 2 "$PERF" -o allreduce,alltoall \
    -b 8 -e 1M -f 8 >"$tmp/out" 2>"$tmp/err"
}
rows() { awk '!/^#/ && NF == 13' "$tmp/out" | wc -l; }
wrong() { awk '!/^#/ && NF == 13 && ($9 != 0 || $13 != 0)' "$tmp/out" | wc -l; }
edges_over() { grep -c "(net edge, id [0-9]*) over $1\$" "$tmp/err"; }
net_elsewhere() { grep "(net edge, id [0-9]*) over " "$tmp/err" | grep -vc "over $1\$"; }
# What the plugin says its send comms moved, summed over ranks.
plugin_bytes() {
  grep -o "gcolltest: send comm closed after [0-9]* messages, [0-9]* bytes" "$tmp/err" \
    | awk '{s += $(NF-1)} END {print s + 0}'
}

# expect_plugin WHAT VERSION [env...]: right results, every cross-node edge
# over net/plugin, the plugin moved bytes, and it loaded as ncclNet vVERSION.
expect_plugin() {
  local what=$1 version=$2
  shift 2
  run "$@"
  local rc=$? n r w b
  n=$(edges_over net/plugin) r=$(rows) w=$(wrong) b=$(plugin_bytes)
  if [ "$rc" -eq 0 ] && [ "$r" -eq 12 ] && [ "$w" -eq 0 ] && [ "$n" -gt 0 ] \
    && [ "$(net_elsewhere net/plugin)" -eq 0 ] && [ "$b" -gt 0 ] \
    && grep -q "net/plugin: NCCL net plugin GcollTest (.*ncclNet v$version)" "$tmp/err"; then
    ok "$what: $r sizes, 0 wrong, $n net edge ends over net/plugin (ncclNet v$version), plugin moved $b bytes"
  else
    bad "$what: rc $rc, $r rows, $w wrong, $n edge ends over net/plugin, $b bytes"
    tail -5 "$tmp/err"
  fi
}

# expect_fallback WHAT NEEDLE [env...]: right results over net/socket, and
# every rank said why in one line that holds NEEDLE.
expect_fallback() {
  local what=$1 needle=$2
  shift 2
  run "$@"
  local rc=$? r w lines
  r=$(rows) w=$(wrong)
  lines=$(grep -c "^gcoll rank [0-3]: .*$needle" "$tmp/err")
  if [ "$rc" -eq 0 ] && [ "$r" -eq 12 ] && [ "$w" -eq 0 ] && [ "$(edges_over net/socket)" -gt 0 ] \
    && [ "$(net_elsewhere net/socket)" -eq 0 ] && [ "$lines" -eq 4 ]; then
    ok "$what: falls back to net/socket, 0 wrong: $(grep -m1 "$needle" "$tmp/err")"
  else
    bad "$what: rc $rc, $r rows, $w wrong, $lines lines with '$needle' (want 4)"
    grep -m3 "net/plugin\|plugin" "$tmp/err"
  fi
}

# NCCL's name rules, and each ABI version.
expect_plugin "NCCL_NET_PLUGIN=gcolltest" 10 NCCL_NET_PLUGIN=gcolltest
expect_plugin "NCCL_NET_PLUGIN=gcolltest9" 9 NCCL_NET_PLUGIN=gcolltest9
expect_plugin "NCCL_NET_PLUGIN=gcolltest8" 8 NCCL_NET_PLUGIN=gcolltest8
expect_plugin "NCCL_NET_PLUGIN as a path" 10 \
  NCCL_NET_PLUGIN="$(cd "$PLUGINS" && pwd)/libnccl-net-gcolltest.so"
expect_plugin "GCOLL_NET_PLUGIN over NCCL_NET_PLUGIN" 8 GCOLL_NET_PLUGIN=gcolltest8 \
  NCCL_NET_PLUGIN=nosuch
printf 'NCCL_NET_PLUGIN=gcolltest8\n' >"$tmp/nccl.conf"
expect_plugin "NCCL_NET_PLUGIN from NCCL_CONF_FILE" 8 NCCL_CONF_FILE="$tmp/nccl.conf"
mkdir -p "$tmp/default"
ln -s "$(cd "$PLUGINS" && pwd)/libnccl-net-gcolltest9.so" "$tmp/default/libnccl-net.so"
expect_plugin "libnccl-net.so on the library path" 9 \
  LD_LIBRARY_PATH="$tmp/default:$LD_LIBRARY_PATH"
expect_plugin "NCCL_NET names the plugin's network" 10 NCCL_NET_PLUGIN=gcolltest NCCL_NET=gcolltest

# Plugins that cannot serve: one line each rank, the built-in devices.
expect_fallback "missing plugin" \
  "no NCCL net plugin nosuch or libnccl-net-nosuch.so on the library path; cross-node edges use" \
  NCCL_NET_PLUGIN=nosuch
expect_fallback "ABI too old" "exports ncclNet ABI v7 only; gcoll loads v8 to v10" \
  NCCL_NET_PLUGIN=gcolltest7
expect_fallback "init fails" "(GcollTest, v10) failed to initialise (ncclResult 3)" \
  NCCL_NET_PLUGIN=gcolltestfail
expect_fallback "no device" "(GcollTest, v10) has no device" NCCL_NET_PLUGIN=gcolltestnodev
expect_fallback "NCCL_NET_PLUGIN=none" "net/plugin not used (NCCL net plugins disabled" \
  NCCL_NET_PLUGIN=none LD_LIBRARY_PATH="$tmp/default:$LD_LIBRARY_PATH"

# A built-in network named: the plugin is not even loaded.
run NCCL_NET_PLUGIN=gcolltest NCCL_NET=Socket
rc=$?
[ "$rc" -eq 0 ] && [ "$(wrong)" -eq 0 ] && [ "$(rows)" -eq 12 ] && [ "$(edges_over net/socket)" -gt 0 ] \
  && [ "$(net_elsewhere net/socket)" -eq 0 ] && ! grep -q "gcolltest\|net/plugin" "$tmp/err" \
  && ok "NCCL_NET=Socket: net/socket, the plugin not loaded" \
  || { bad "NCCL_NET=Socket: rc $rc"; grep -m3 "plugin" "$tmp/err"; }

# A network no plugin serves, named: the init fails in one line per rank.
run NCCL_NET_PLUGIN=gcolltestfail NCCL_NET=GcollTest
rc=$?
lines=$(grep -c "NCCL_NET=GcollTest (environment): no such network (NCCL net plugin .* failed to initialise" "$tmp/err")
[ "$rc" -ne 0 ] && [ "$lines" -ge 1 ] \
  && ok "NCCL_NET names a network no plugin serves: refused: $(grep -m1 'NCCL_NET=GcollTest' "$tmp/err")" \
  || { bad "NCCL_NET=GcollTest with a failing plugin: rc $rc, $lines lines"; tail -3 "$tmp/err"; }

# Forced on every edge: inside one node too.
GCOLL_TRANSPORT=net/plugin NCCL_NET_PLUGIN=gcolltest GCOLL_DEBUG=INFO timeout 60 "$RUN" -n 2 \
  "$PERF" -o allreduce -b 8 -e 64K -f 8 >"$tmp/out" 2>"$tmp/err"
rc=$?
shm_over=$(grep -c "(shm edge, id [0-9]*) over net/plugin$" "$tmp/err")
[ "$rc" -eq 0 ] && [ "$(wrong)" -eq 0 ] && [ "$(rows)" -eq 5 ] && [ "$shm_over" -gt 0 ] \
  && ok "GCOLL_TRANSPORT=net/plugin: $shm_over node-local edge ends over the plugin, 0 wrong" \
  || { bad "GCOLL_TRANSPORT=net/plugin: rc $rc, $(rows) rows, $shm_over edge ends"; tail -3 "$tmp/err"; }

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
