#!/bin/bash
# End-to-end tests of the gcoll-plan command-line tool. Run by `make check`
# (top_srcdir / top_builddir come from AM_TESTS_ENVIRONMENT) or by hand:
#   top_srcdir=/path/to/src top_builddir=/path/to/build tests/cli/test_cli.sh
set -u

top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
BIN=${GCOLL_PLAN_BIN:-$top_builddir/gcoll-plan}
TOPOS="$top_srcdir/etc/topologies"
export GCOLL_TOPO_DIR="${GCOLL_TOPO_DIR:-$TOPOS}"

if [ ! -x "$BIN" ]; then
  echo "test_cli: no executable $BIN" >&2
  exit 1
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-cli.XXXXXX") || exit 1
trap 'chmod -R u+w "$tmp" 2>/dev/null; rm -rf "$tmp"' EXIT

pass=0
fail=0
ok() { pass=$((pass + 1)); }
bad() { fail=$((fail + 1)); echo "FAIL: $*" >&2; }

# run CMD...: stdout -> $tmp/out, stderr -> $tmp/err, status -> $rc
rc=0
run() { "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?; }
errtext() { head -c 400 "$tmp/err"; }

# expect_rc NAME STATUS CMD...
expect_rc() {
  local name=$1 want=$2
  shift 2
  run "$@"
  if [ "$rc" -eq "$want" ]; then ok; else bad "$name: exit $rc, expected $want; stderr: $(errtext)"; fi
}

# expect_err NAME STATUS MESSAGE CMD...: the exact one-line message on stderr
expect_err() {
  local name=$1 want=$2 msg=$3
  shift 3
  run "$@"
  if [ "$rc" -ne "$want" ]; then
    bad "$name: exit $rc, expected $want; stderr: $(errtext)"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || [ "$(cat "$tmp/err")" != "$msg" ]; then
    bad "$name: stderr is '$(errtext)', expected '$msg'"
  else
    ok
  fi
}

# expect_err_prefix NAME STATUS PREFIX CMD...: one line starting with PREFIX
expect_err_prefix() {
  local name=$1 want=$2 prefix=$3
  shift 3
  run "$@"
  local line
  line=$(cat "$tmp/err")
  if [ "$rc" -ne "$want" ]; then
    bad "$name: exit $rc, expected $want; stderr: $(errtext)"
  elif [ "$(wc -l <"$tmp/err")" -ne 1 ] || [ "${line#"$prefix"}" = "$line" ]; then
    bad "$name: stderr is '$(errtext)', expected a line starting '$prefix'"
  else
    ok
  fi
}

# check NAME CONDITION...: evaluates a test(1) expression
check() {
  local name=$1
  shift
  if "$@"; then ok; else bad "$name"; fi
}

# Ranks per node a topology file implies: its GPUs, or its cores when it has
# none (ranks are CPU cores on CPU-only nodes).
local_ranks_of() {
  local f=$TOPOS/$1.yaml ngpu
  ngpu=$(grep -c '^ *- *{ *name: *gpu' "$f")
  if [ "$ngpu" -gt 0 ]; then
    echo "$ngpu"
  else
    sed -n 's/.*cores: *\([0-9]*\).*/\1/p' "$f" | awk '{ s += $1 } END { print s }'
  fi
}

# value_of LABEL: the field after "LABEL" in `show --rank` output ($tmp/out)
ring_next() { awk -v c="$2" '$1 == "ring" && $2 == c":" { for (i = 1; i <= NF; i++) if ($i == "next") print $(i + 1) }' "$1"; }
ring_prev() { awk -v c="$2" '$1 == "ring" && $2 == c":" { for (i = 1; i <= NF; i++) if ($i == "prev") print $(i + 1) }' "$1"; }

# ---- help, version, dispatch ------------------------------------------------
expect_rc "--help" 0 "$BIN" --help
check "--help lists commands" grep -q '^  generate' "$tmp/out"
expect_rc "--version" 0 "$BIN" --version
check "--version names gcoll" grep -q '^gcoll-plan (gcoll) ' "$tmp/out"
expect_err "unknown command" 2 "gcoll-plan: unknown command 'frobnicate' (see 'gcoll-plan --help')" \
  "$BIN" frobnicate
expect_rc "no command" 2 "$BIN"
for cmd in generate show verify diff dot topo split; do
  expect_rc "$cmd --help" 0 "$BIN" "$cmd" --help
  cp "$tmp/out" "$tmp/help1"
  check "$cmd --help starts with usage" grep -q "^usage: gcoll-plan $cmd" "$tmp/help1"
  expect_rc "help $cmd" 0 "$BIN" help "$cmd"
  check "help $cmd equals $cmd --help" cmp -s "$tmp/out" "$tmp/help1"
  expect_rc "$cmd -h" 0 "$BIN" "$cmd" -h
  check "$cmd -h equals $cmd --help" cmp -s "$tmp/out" "$tmp/help1"
  expect_err "$cmd bad option" 2 \
    "gcoll-plan: $cmd: unrecognized option '--no-such-option' (see 'gcoll-plan $cmd --help')" \
    "$BIN" "$cmd" --no-such-option
done
expect_err "help unknown" 1 "gcoll-plan: help: unknown command 'nope' (see 'gcoll-plan --help')" \
  "$BIN" help nope

# ---- generate / verify / show for every reference topology ------------------
for topo in dgx-h100 dgx-a100 pcie-2s-4gpu cpu-only; do
  L=$(local_ranks_of "$topo")
  for n in 1 2 3 16; do
    p="$tmp/$topo-$n.yaml"
    R=$((n * L))
    expect_rc "generate $topo x$n" 0 "$BIN" generate --topo "$topo" --nodes "$n" -o "$p"
    [ "$rc" -eq 0 ] || continue
    line=$(cat "$tmp/err")
    nodes_word=nodes
    [ "$n" -eq 1 ] && nodes_word=node
    ranks_word=ranks
    [ "$R" -eq 1 ] && ranks_word=rank
    case "$line" in
    "$p: $R $ranks_word, $n $nodes_word, 1 topology class, "*" channels") ok ;;
    *) bad "generate $topo x$n summary: '$line' (expected $R ranks, $n nodes)" ;;
    esac
    expect_rc "verify $topo x$n" 0 "$BIN" verify "$p" --nodes "$n" --ranks "$R"
    case "$(cat "$tmp/out")" in
    "$p: OK ($R $ranks_word, $n $nodes_word, 1 topology class, "*) ok ;;
    *) bad "verify $topo x$n output: $(cat "$tmp/out")" ;;
    esac
    last=$((R - 1))
    expect_rc "show --rank $last $topo x$n" 0 "$BIN" show "$p" --rank "$last"
    check "show --rank $last header" grep -q "^rank $last of $R\$" "$tmp/out"
    check "show --rank $last node" grep -q "^node: *$((n - 1)) of $n," "$tmp/out"
    gpu_suffix=", drives GPU $((L - 1)) of the node ([0-9a-f]\{4\}:[0-9a-f]\{2\}:[0-9a-f]\{2\}\.[0-7])"
    [ "$topo" = cpu-only ] && gpu_suffix=
    check "show --rank $last local" grep -q "^local: *rank $((L - 1)) of $L$gpu_suffix\$" "$tmp/out"
    expect_err_prefix "show --rank $R $topo x$n out of range" 1 "gcoll-plan: " \
      "$BIN" show "$p" --rank "$R"
    expect_rc "show $topo x$n" 0 "$BIN" show "$p"
    check "show $topo x$n names class" grep -q "^  $topo: hash [0-9a-f]\{8\}, $n node" "$tmp/out"
    check "show $topo x$n has tuning" grep -q "^  allreduce " "$tmp/out"
  done
done

# The tool's rank views must form rings: following `next` on channel 0 from
# rank 0 visits every rank once and comes back, and prev(next(r)) = r.
p="$tmp/dgx-h100-2.yaml"
R=16
seen=" "
r=0
ring_ok=1
for _ in $(seq 1 $R); do
  "$BIN" show "$p" --rank "$r" >"$tmp/view" 2>/dev/null || { ring_ok=0; break; }
  case "$seen" in *" $r "*) ring_ok=0; break ;; esac
  seen="$seen$r "
  nx=$(ring_next "$tmp/view" 0)
  "$BIN" show "$p" --rank "$nx" >"$tmp/view2" 2>/dev/null || { ring_ok=0; break; }
  [ "$(ring_prev "$tmp/view2" 0)" = "$r" ] || { ring_ok=0; break; }
  r=$nx
done
check "channel 0 ring through show --rank is one cycle of $R ranks" test "$ring_ok" -eq 1 -a "$r" = 0
check "ring crosses nodes over the network" grep -q 'ring  0: .*(net)' <("$BIN" show "$p" --rank 0; "$BIN" show "$p" --rank 7; "$BIN" show "$p" --rank 8; "$BIN" show "$p" --rank 15)

# ---- generate: output to stdout, topology lists, hosts, job ids -------------
expect_rc "generate -o -" 0 "$BIN" generate --topo dgx-h100 --nodes 2 -q -o -
check "generate -o - writes the plan" grep -q '^gcoll-plan: 1' "$tmp/out"
check "generate -q is quiet" [ ! -s "$tmp/err" ]
cp "$tmp/out" "$tmp/stdout.yaml"
expect_rc "verify plan from stdout" 0 "$BIN" verify "$tmp/stdout.yaml"

L_pcie=$(local_ranks_of pcie-2s-4gpu)
p="$tmp/mixed.yaml"
expect_rc "generate with two topologies" 0 "$BIN" generate --topo dgx-h100,pcie-2s-4gpu \
  --nodes 3 --hosts 'n[001-003]' -o "$p"
check "two topologies: 2 classes" grep -q ", 2 topology classes, " "$tmp/err"
expect_rc "verify mixed" 0 "$BIN" verify "$p" --hosts 'n[001-003]' --nodes 3 --ranks $((16 + L_pcie))
# Nodes cycle through the list: node 1 is pcie-2s-4gpu, node 2 dgx-h100 again.
expect_rc "show mixed node 1" 0 "$BIN" show "$p" --rank 8
check "node 1 uses the second topology" grep -q "^topology: *pcie-2s-4gpu " "$tmp/out"
check "node 1 host from --hosts" grep -q "^node: *1 of 3, host n002\$" "$tmp/out"
expect_rc "show mixed node 2" 0 "$BIN" show "$p" --rank $((8 + L_pcie))
check "node 2 cycles back to the first topology" grep -q "^topology: *dgx-h100 " "$tmp/out"

expect_err "verify --ranks mismatch" 1 \
  "gcoll-plan: $p: not for this job: plan has $((16 + L_pcie)) ranks, job has 8" \
  "$BIN" verify "$p" --ranks 8
expect_err "verify --nodes mismatch" 1 "gcoll-plan: $p: not for this job: plan has 3 nodes, job has 2" \
  "$BIN" verify "$p" --nodes 2
expect_err "verify --hosts count" 1 \
  "gcoll-plan: $p: not for this job: plan has 3 nodes, job has 4 hosts (n[001-004])" \
  "$BIN" verify "$p" --hosts 'n[001-004]'
expect_err "verify --hosts order" 1 \
  "gcoll-plan: $p: not for this job: node 0 is host n001 in the plan but n002 in the job" \
  "$BIN" verify "$p" --hosts 'n002,n001,n003'

# Per-node topology directory, as the SPANK plugin writes it.
d="$tmp/pernode"
mkdir "$d"
cp "$TOPOS/dgx-h100.yaml" "$d/0.yaml"
cp "$TOPOS/dgx-h100.yaml" "$d/1.yaml"
cp "$TOPOS/pcie-2s-4gpu.yaml" "$d/2.yaml"
expect_rc "generate from directory" 0 "$BIN" generate --topo "$d" -o "$tmp/dir.yaml"
check "directory: node count from files" grep -q ": $((16 + L_pcie)) ranks, 3 nodes, 2 topology classes, " "$tmp/err"
expect_rc "verify directory plan" 0 "$BIN" verify "$tmp/dir.yaml" --nodes 3
# Files 0,1,2 = dgx-h100, dgx-h100, pcie: not the list's cycling order, so
# build the list plan that matches the directory node for node.
"$BIN" generate --topo dgx-h100,dgx-h100,pcie-2s-4gpu --nodes 3 -q -o "$tmp/list3.yaml"
expect_rc "directory plan equals the equivalent list plan" 0 "$BIN" diff "$tmp/dir.yaml" "$tmp/list3.yaml"
"$BIN" generate --topo dgx-h100,dgx-h100,pcie-2s-4gpu --nodes 3 --hosts 'n[001-003]' -q -o "$tmp/list3h.yaml"
expect_rc "diff dir vs hosts (hosts differ)" 1 "$BIN" diff "$tmp/dir.yaml" "$tmp/list3h.yaml"
check "diff reports node hosts" grep -q "^node host: 3 nodes differ: 0 (.* -> n001), 1 (.* -> n002), 2 (.* -> n003)\$" "$tmp/out"
check "diff reports only the hosts" [ "$(grep -vc '^---\|^+++\|^node host' "$tmp/out")" -eq 0 ]
expect_err "directory vs --nodes" 1 "gcoll-plan: --nodes is 4 but $d holds 3 per-node topology files" \
  "$BIN" generate --topo "$d" --nodes 4 -o "$tmp/x.yaml"
rm "$d/1.yaml"
expect_err "directory with a gap" 1 \
  "gcoll-plan: $d: per-node topology files must be numbered 0.yaml..1.yaml without gaps (found 2 files, highest 2.yaml)" \
  "$BIN" generate --topo "$d" -o "$tmp/x.yaml"

# ---- generate: errors ---------------------------------------------------------
expect_err "missing -o" 2 \
  "gcoll-plan: generate: missing -o FILE; use '-o -' for standard output (see 'gcoll-plan generate --help')" \
  "$BIN" generate --topo dgx-h100 --nodes 2
expect_err "missing --topo" 2 "gcoll-plan: generate: missing --topo (see 'gcoll-plan generate --help')" \
  "$BIN" generate --nodes 2 -o "$tmp/x.yaml"
expect_err "missing --nodes" 2 "gcoll-plan: generate: missing --nodes (see 'gcoll-plan generate --help')" \
  "$BIN" generate --topo dgx-h100 -o "$tmp/x.yaml"
expect_err "bad --nodes" 2 \
  "gcoll-plan: generate: --nodes: 'two' is not an integer (see 'gcoll-plan generate --help')" \
  "$BIN" generate --topo dgx-h100 --nodes two -o "$tmp/x.yaml"
expect_err "zero --nodes" 2 \
  "gcoll-plan: generate: --nodes: 0 is out of range 1..1048576 (see 'gcoll-plan generate --help')" \
  "$BIN" generate --topo dgx-h100 --nodes 0 -o "$tmp/x.yaml"
expect_err "--nodes without value" 2 \
  "gcoll-plan: generate: option '--nodes' needs a value (see 'gcoll-plan generate --help')" \
  "$BIN" generate --topo dgx-h100 -o "$tmp/x.yaml" --nodes
expect_err "nonexistent topology file" 1 "gcoll-plan: $tmp/nosuch.yaml: cannot open: No such file or directory" \
  "$BIN" generate --topo "$tmp/nosuch.yaml" --nodes 2 -o "$tmp/x.yaml"
expect_err_prefix "unknown topology name" 1 \
  "gcoll-plan: topology 'nosuch': no such file, and no nosuch.yaml in \$GCOLL_TOPO_DIR ($GCOLL_TOPO_DIR), " \
  "$BIN" generate --topo nosuch --nodes 2 -o "$tmp/x.yaml"
expect_err "host count mismatch" 1 \
  "gcoll-plan: --hosts 'n[1-3]' expands to 3 hosts, but the job has 2 nodes" \
  "$BIN" generate --topo dgx-h100 --nodes 2 --hosts 'n[1-3]' -o "$tmp/x.yaml"
check "failed generate wrote nothing" [ ! -e "$tmp/x.yaml" ]

# A failed generate leaves an existing plan untouched.
p="$tmp/keep.yaml"
"$BIN" generate --topo dgx-h100 --nodes 2 -q -o "$p" && cp "$p" "$tmp/keep.orig"
printf 'gcoll-topo: 1\nname: broken\ncpus: [{name: cpu0, cores: many}]\n' >"$tmp/broken.yaml"
expect_err_prefix "broken topology" 1 "gcoll-plan: $tmp/broken.yaml:3: " \
  "$BIN" generate --topo "dgx-h100,$tmp/broken.yaml" --nodes 2 -o "$p"
check "plan untouched after a bad topology" cmp -s "$p" "$tmp/keep.orig"
expect_rc "bad hosts" 1 "$BIN" generate --topo dgx-h100 --nodes 2 --hosts 'n[1-' -o "$p"
check "plan untouched after bad hosts" cmp -s "$p" "$tmp/keep.orig"
if [ "$(id -u)" -ne 0 ]; then
  chmod a-w "$tmp"
  expect_rc "unwritable directory" 1 "$BIN" generate --topo dgx-h100 --nodes 3 -o "$p"
  chmod u+w "$tmp"
  check "plan untouched after an unwritable directory" cmp -s "$p" "$tmp/keep.orig"
  check "no temporary left behind" [ -z "$(ls "$tmp" | grep '\.tmp\.')" ]
else
  echo "test_cli: running as root, skipping the unwritable-directory case"
fi

# ---- verify: corrupted plans --------------------------------------------------
p="$tmp/dgx-h100-3.yaml"
line=$(grep -n '^ranks:' "$p" | cut -d: -f1)
sed 's/^ranks: .*/ranks: banana/' "$p" >"$tmp/corrupt.yaml"
expect_err_prefix "verify corrupted plan" 1 "gcoll-plan: $tmp/corrupt.yaml:$line: " \
  "$BIN" verify "$tmp/corrupt.yaml"
check "corruption message names the field" grep -q "ranks" "$tmp/err"
line=$(grep -n '^ring:' "$p" | cut -d: -f1)
sed 's/^ring: .*/ring: {node_order: 0-1}/' "$p" >"$tmp/short-ring.yaml"
run "$BIN" verify "$tmp/short-ring.yaml"
check "verify rejects a ring missing a node (exit $rc)" [ "$rc" -eq 1 ]
check "  ... with one line" [ "$(wc -l <"$tmp/err")" -eq 1 ]
expect_err_prefix "verify missing file" 1 "gcoll-plan: $tmp/none.yaml: cannot open: " \
  "$BIN" verify "$tmp/none.yaml"
expect_err "verify without file" 2 "gcoll-plan: verify: missing PLAN file (see 'gcoll-plan verify --help')" \
  "$BIN" verify

# ---- diff -----------------------------------------------------------------------
a="$tmp/a.yaml"
b="$tmp/b.yaml"
"$BIN" generate --topo dgx-h100 --nodes 4 --job-id 7 --step-id 0 -q -o "$a"
sleep 1
"$BIN" generate --topo dgx-h100 --nodes 4 --job-id 7 --step-id 0 -q -o "$b"
expect_rc "diff regenerated plan (created differs)" 0 "$BIN" diff "$a" "$b"
check "diff of equivalent plans prints nothing" [ ! -s "$tmp/out" ]
expect_rc "diff self" 0 "$BIN" diff "$a" "$a"
"$BIN" generate --topo dgx-h100 --nodes 4 --job-id 8 --step-id 0 -q -o "$b"
expect_rc "diff job id" 1 "$BIN" diff "$a" "$b"
check "diff names the job id change" grep -qx "job id: 7 -> 8" "$tmp/out"
"$BIN" generate --topo dgx-h100 --nodes 5 --job-id 7 --step-id 0 -q -o "$b"
expect_rc "diff node count" 1 "$BIN" diff "$a" "$b"
check "diff names the node count change" grep -qx "nodes: 4 -> 5" "$tmp/out"
check "diff names the rank count change" grep -qx "ranks: 32 -> 40" "$tmp/out"
"$BIN" generate --topo pcie-2s-4gpu --nodes 4 --job-id 7 --step-id 0 -q -o "$b"
expect_rc "diff topology" 1 "$BIN" diff "$a" "$b"
check "diff: class removed" grep -q "^- class dgx-h100 " "$tmp/out"
check "diff: class added" grep -q "^+ class pcie-2s-4gpu " "$tmp/out"
check "diff: node classes summarised" grep -q "^node class: 4 nodes differ: 0 (dgx-h100 -> pcie-2s-4gpu)" "$tmp/out"
"$BIN" generate --topo dgx-h100 --nodes 40 -q -o "$a"
"$BIN" generate --topo dgx-h100 --nodes 40 --hosts 'h[100-139]' -q -o "$b"
expect_rc "diff hosts" 1 "$BIN" diff "$a" "$b"
check "diff summarises long lists" grep -q "^node host: 40 nodes differ: .*, \.\.\. (30 more)\$" "$tmp/out"
expect_rc "diff -q" 1 "$BIN" diff -q "$a" "$b"
check "diff -q prints nothing" [ ! -s "$tmp/out" ]
expect_rc "diff unreadable" 2 "$BIN" diff "$a" "$tmp/none.yaml"
expect_rc "diff one file" 2 "$BIN" diff "$a"

# ---- dot ----------------------------------------------------------------------
p="$tmp/dgx-h100-3.yaml"
expect_rc "dot ring" 0 "$BIN" dot "$p"
check "dot: 24 ring edges" [ "$(grep -c ' -> r[0-9]* \[color=' "$tmp/out")" -eq 24 ]
check "dot: 3 clusters" [ "$(grep -c 'subgraph cluster_' "$tmp/out")" -eq 3 ]
check "dot: 3 network ring edges" [ "$(grep -c 'color=red\]' "$tmp/out")" -eq 3 ]
cp "$tmp/out" "$tmp/ring.dot"
expect_rc "dot tree" 0 "$BIN" dot "$p" --tree --channel 1
# A spanning tree over 24 ranks has 23 edges.
check "dot: 23 tree edges" [ "$(grep -c 'style=dashed' "$tmp/out")" -eq 23 ]
cp "$tmp/out" "$tmp/tree.dot"
expect_rc "dot ring+tree" 0 "$BIN" dot "$p" --tree --ring
check "dot: 47 edges for ring and tree" [ "$(grep -c ' -> ' "$tmp/out")" -eq 47 ]
expect_err "dot too many ranks" 1 \
  "gcoll-plan: $p: 24 ranks is more than --max-ranks 16; pass --max-ranks 24 to draw it anyway" \
  "$BIN" dot "$p" --max-ranks 16
expect_rc "dot bad channel" 1 "$BIN" dot "$p" --channel 31
if command -v dot >/dev/null 2>&1; then
  for g in ring tree; do
    if dot -Tsvg "$tmp/$g.dot" >"$tmp/$g.svg" 2>"$tmp/dot.err" && grep -q '<svg' "$tmp/$g.svg"; then
      ok
    else
      bad "dot -Tsvg rejects the $g graph: $(head -c 300 "$tmp/dot.err")"
    fi
  done
else
  echo "test_cli: graphviz 'dot' not installed, skipping the rendering check"
fi

# ---- topo -----------------------------------------------------------------------
for topo in dgx-h100 dgx-a100 pcie-2s-4gpu cpu-only; do
  expect_rc "topo $topo" 0 "$BIN" topo "$topo"
  cp "$tmp/out" "$tmp/norm.yaml"
  expect_rc "topo $topo --hash" 0 "$BIN" topo "$topo" --hash
  h=$(cat "$tmp/out")
  check "topo $topo hash is 8 hex digits" grep -qx '[0-9a-f]\{8\}' "$tmp/out"
  expect_rc "topo normalized --hash" 0 "$BIN" topo "$tmp/norm.yaml" --hash
  check "normalized $topo keeps its hash" [ "$(cat "$tmp/out")" = "$h" ]
  "$BIN" generate --topo "$topo" --nodes 2 -q -o "$tmp/h.yaml"
  check "plan class hash = topo --hash ($topo)" grep -q "hash: \"\{0,1\}$h\"\{0,1\}" "$tmp/h.yaml"
  expect_rc "topo $topo --paths" 0 "$BIN" topo "$topo" --paths
done
check "--paths of dgx-h100 shows NVLink between GPUs" grep -q '^gpu0 .*NVL' <("$BIN" topo dgx-h100 --paths)
check "--paths of dgx-h100 lists NICs" grep -q 'mlx5_0' <("$BIN" topo dgx-h100 --paths)
expect_rc "topo --paths --hash" 2 "$BIN" topo dgx-h100 --paths --hash
expect_rc "topo without input" 2 "$BIN" topo
expect_rc "topo --detect with file" 2 "$BIN" topo --detect dgx-h100
expect_rc "topo --detect" 0 "$BIN" topo --detect
if [ "$rc" -eq 0 ]; then
  cp "$tmp/out" "$tmp/detected.yaml"
  expect_rc "detected topology reads back" 0 "$BIN" topo "$tmp/detected.yaml" --hash
fi

# ---- NCCL topology XML -----------------------------------------------------------
NCCL_DATA="$top_srcdir/tests/data/nccl-topo"
IBM_XML="$top_srcdir/../shared/topologies/nccl/ibmcloud-h100-vsi-topo.xml"
xml_files="$NCCL_DATA/aws-p4d-24xl-topo.xml $NCCL_DATA/azure-ndv4-topo.xml"
xml_files="$xml_files $NCCL_DATA/azure-ndv5-topo.xml $NCCL_DATA/gcoll-quirks.xml"
if [ -f "$IBM_XML" ]; then
  xml_files="$xml_files $IBM_XML"
else
  echo "test_cli: $IBM_XML not present, skipping it"
fi
for x in $xml_files; do
  b=$(basename "$x" .xml)
  expect_rc "topo --from-nccl $b -o" 0 "$BIN" topo --from-nccl "$x" -o "$tmp/$b.yaml"
  check "topo --from-nccl -o $b prints nothing" [ ! -s "$tmp/out" ]
  check "$b.yaml starts as YAML" grep -q '^gcoll-topo: 1$' "$tmp/$b.yaml"
  expect_rc "topo $b.xml --hash (sniffed)" 0 "$BIN" topo "$x" --hash
  hx=$(cat "$tmp/out")
  expect_rc "topo $b.yaml --hash" 0 "$BIN" topo "$tmp/$b.yaml" --hash
  check "$b: XML and its YAML have one hash" [ "$(cat "$tmp/out")" = "$hx" ]
  expect_rc "topo --from-nccl $b (stdout)" 0 "$BIN" topo --from-nccl "$x"
  check "$b: stdout is the -o file" cmp -s "$tmp/out" "$tmp/$b.yaml"
  expect_rc "topo $b --paths" 0 "$BIN" topo "$x" --paths
done
# Complete files plan (generate --topo FILE.xml) and verify.
plan_xml() {  # plan_xml NAME FILE RANKS_PER_NODE
  expect_rc "generate --topo $1.xml" 0 "$BIN" generate --topo "$2" --nodes 4 -o "$tmp/$1-plan.yaml"
  expect_rc "verify the $1.xml plan" 0 "$BIN" verify "$tmp/$1-plan.yaml" --nodes 4 --ranks $((4 * $3))
  check "$1.xml plan class is named after the file" grep -q "^  $1:" "$tmp/$1-plan.yaml"
}
plan_xml gcoll-quirks "$NCCL_DATA/gcoll-quirks.xml" 4
[ -f "$IBM_XML" ] && plan_xml ibmcloud-h100-vsi-topo "$IBM_XML" 8
# The same topology named twice, as XML and as its YAML: one class.
"$BIN" generate --topo "$NCCL_DATA/gcoll-quirks.xml,$tmp/gcoll-quirks.yaml" --nodes 2 -q \
  -o "$tmp/mixed.yaml"
check "XML and YAML of one node are one class" [ "$(grep -c 'hash:' "$tmp/mixed.yaml")" -eq 1 ]
# Overrides convert but do not plan: one line naming what is missing.
expect_err "generate from an override" 1 \
  "gcoll-plan: node 0: topology 'azure-ndv4-topo' lacks what a plan needs: gpu0 (0001:00:00.0) has no compute capability and no NVLink list (NCCL: <gpu sm> and <nvlink>)" \
  "$BIN" generate --topo "$NCCL_DATA/azure-ndv4-topo.xml" --nodes 4 -o "$tmp/az.yaml"
check "nothing planned from an override" [ ! -e "$tmp/az.yaml" ]
expect_err "generate from an override's YAML" 1 \
  "gcoll-plan: node 0: topology 'aws-p4d-24xl-topo' lacks what a plan needs: gpu0 (0000:10:1c.0) has no compute capability and no NVLink list (NCCL: <gpu sm> and <nvlink>)" \
  "$BIN" generate --topo "$tmp/aws-p4d-24xl-topo.yaml" --nodes 4 -o "$tmp/aws-plan.yaml"
# Errors: one line, FILE:LINE.
printf '<system version="1">\n  <cpu numaid="0" affinity="ff">\n    <pci busid="0000:01:00.0" class="0x030200">\n      <gpu dev="0" sm="90"><nvlink target="0000:02:00.0" count="4" tclass="0x030200"/></gpu>\n    </pci>\n  </cpu>\n</system>\n' >"$tmp/bad.xml"
expect_err "topo --from-nccl bad nvlink" 1 \
  "gcoll-plan: $tmp/bad.xml:4: <nvlink target=\"0000:02:00.0\">: no GPU or NVSwitch with that bus id in this file" \
  "$BIN" topo --from-nccl "$tmp/bad.xml"
expect_err "generate --topo bad nvlink" 1 \
  "gcoll-plan: $tmp/bad.xml:4: <nvlink target=\"0000:02:00.0\">: no GPU or NVSwitch with that bus id in this file" \
  "$BIN" generate --topo "$tmp/bad.xml" --nodes 2 -o "$tmp/x.yaml"
head -c 300 "$NCCL_DATA/gcoll-quirks.xml" >"$tmp/cut.xml"
expect_err_prefix "topo truncated XML" 1 "gcoll-plan: $tmp/cut.xml:" "$BIN" topo "$tmp/cut.xml"
expect_err_prefix "--from-nccl on YAML" 1 "gcoll-plan: $TOPOS/dgx-h100.yaml:1: XML: " \
  "$BIN" topo --from-nccl "$TOPOS/dgx-h100.yaml"
expect_rc "--from-nccl with --detect" 2 "$BIN" topo --detect --from-nccl "$tmp/bad.xml"
expect_rc "--from-nccl with a file" 2 "$BIN" topo dgx-h100 --from-nccl "$tmp/bad.xml"
expect_rc "-o with --hash" 2 "$BIN" topo dgx-h100 --hash -o "$tmp/h.yaml"
expect_rc "topo dgx-h100 -o" 0 "$BIN" topo dgx-h100 -o "$tmp/h100.yaml"
check "topo -o writes the normalized YAML" cmp -s "$tmp/h100.yaml" <("$BIN" topo dgx-h100)

# ---- NCCL topology XML out (--to-nccl) ------------------------------------------
for topo in dgx-h100 dgx-a100 pcie-2s-4gpu cpu-only; do
  expect_rc "topo $topo --to-nccl -o" 0 "$BIN" topo "$topo" --to-nccl -o "$tmp/$topo.xml"
  check "$topo.xml is NCCL's <system version=\"1\">" grep -q '^<system version="1">$' "$tmp/$topo.xml"
  expect_rc "topo $topo --to-nccl (stdout)" 0 "$BIN" topo "$topo" --to-nccl
  check "$topo: stdout is the -o file" cmp -s "$tmp/out" "$tmp/$topo.xml"
  h=$("$BIN" topo "$topo" --hash)
  expect_rc "topo $topo.xml --hash" 0 "$BIN" topo "$tmp/$topo.xml" --hash
  check "$topo: import of the export has its hash" [ "$(cat "$tmp/out")" = "$h" ]
  expect_rc "topo --from-nccl $topo.xml --hash" 0 "$BIN" topo --from-nccl "$tmp/$topo.xml" --hash
  check "$topo: --from-nccl of the export has its hash" [ "$(cat "$tmp/out")" = "$h" ]
done
expect_rc "--to-nccl with --hash" 2 "$BIN" topo dgx-h100 --to-nccl --hash
expect_rc "--to-nccl with --paths" 2 "$BIN" topo dgx-h100 --paths --to-nccl

# ---- overrides merged with a base (--merge) and with detection -----------------
AZ="$NCCL_DATA/azure-ndv4-topo.xml"
: >"$tmp/empty.conf"
export NCCL_CONF_FILE="$tmp/empty.conf"   # no ~/.nccl.conf of whoever runs this
expect_rc "topo override --merge dgx-a100 -o" 0 "$BIN" topo "$AZ" --merge dgx-a100 -o "$tmp/az-merged.yaml"
check "--merge prints nothing without GCOLL_DEBUG" [ ! -s "$tmp/out" ] && [ ! -s "$tmp/err" ]
# The file's placement: GPU 0003:00:00.0 shares sw0 with NIC 0103:00:00.0,
# which takes the base's name and speed; the base's GPU model fills in.
check "merged: the file's GPU placement" grep -q "^- {name: gpu2, busid: '0003:00:00.0', parent: sw0, sms: 108, cc: 80}$" "$tmp/az-merged.yaml"
check "merged: the file's NIC placement, the base's name and speed" grep -q "^- {name: mlx5_0, busid: '0103:00:00.0', parent: sw0, port: 1, gbps: 200}$" "$tmp/az-merged.yaml"
check "merged: the base's NVLinks" [ "$(grep -c 'b: nvs, type: nvlink, count: 12, bw: 300' "$tmp/az-merged.yaml")" -eq 8 ]
expect_rc "merged --paths" 0 "$BIN" topo "$tmp/az-merged.yaml" --paths
check "merged: gpu2 - mlx5_0 is PIX" [ "$(awk '$1 == "gpu2" { print $17 }' "$tmp/out")" = "PIX" ]
expect_rc "generate from the merged override" 0 "$BIN" generate --topo "$tmp/az-merged.yaml" --nodes 4 -o "$tmp/az-merged-plan.yaml"
expect_rc "verify the merged override's plan" 0 "$BIN" verify "$tmp/az-merged-plan.yaml" --nodes 4 --ranks 32
expect_rc "--from-nccl --merge" 0 "$BIN" topo --from-nccl "$AZ" --merge dgx-a100 --hash
check "--from-nccl --merge has the merged hash" [ "$(cat "$tmp/out")" = "$("$BIN" topo "$tmp/az-merged.yaml" --hash)" ]
run env GCOLL_DEBUG=INFO "$BIN" topo "$AZ" --merge dgx-a100 --hash
check "--merge at GCOLL_DEBUG=INFO: one line saying what came from where" \
  [ "$rc" -eq 0 ] && [ "$(grep -c 'merged with dgx-a100: GPUs matched in order' "$tmp/err")" -eq 1 ] && grep -q 'from the base: GPU model (cc/sms) of 8, 8 NVLinks' "$tmp/err"
expect_err "--merge with an unknown base" 1 \
  "gcoll-plan: topology 'no-such-base': no such file, and no no-such-base.yaml in \$GCOLL_TOPO_DIR ($GCOLL_TOPO_DIR), $(sed -n 's/.*in \$GCOLL_TOPO_DIR ([^)]*), //p' <("$BIN" topo no-such-base 2>&1))" \
  "$BIN" topo "$AZ" --merge no-such-base
expect_err "--merge with a base of another GPU count" 1 \
  "gcoll-plan: $AZ merged with pcie-2s-4gpu: the file's gpu0 (0001:00:00.0) is not among the 4 GPUs found (no GPU at that bus id)" \
  "$BIN" topo "$AZ" --merge pcie-2s-4gpu
expect_rc "--merge with --detect" 2 "$BIN" topo --detect --merge dgx-a100
expect_rc "--merge without a file" 2 "$BIN" topo --merge dgx-a100
# --detect merges GCOLL_TOPO_FILE, else NCCL_TOPO_FILE (environment or
# NCCL's files); a file that cannot be used is one line, never skipped.
expect_err "--detect with a missing GCOLL_TOPO_FILE" 1 \
  "gcoll-plan: $tmp/none.xml: cannot open: No such file or directory (from GCOLL_TOPO_FILE)" \
  env GCOLL_TOPO_FILE="$tmp/none.xml" "$BIN" topo --detect
expect_err "--detect with a missing NCCL_TOPO_FILE" 1 \
  "gcoll-plan: $tmp/none.xml: cannot open: No such file or directory (from NCCL_TOPO_FILE=$tmp/none.xml (environment))" \
  env -u GCOLL_TOPO_FILE NCCL_TOPO_FILE="$tmp/none.xml" "$BIN" topo --detect
echo "NCCL_TOPO_FILE=$TOPOS/cpu-only.yaml" >"$tmp/topo.conf"
run env -u GCOLL_TOPO_FILE -u NCCL_TOPO_FILE NCCL_CONF_FILE="$tmp/topo.conf" GCOLL_DEBUG=INFO "$BIN" topo --detect
check "--detect with NCCL_TOPO_FILE from a conf file: merged and said so" \
  [ "$rc" -eq 0 ] && grep -q "^gcoll-plan: topology file $TOPOS/cpu-only.yaml merged with detection: .*(file from NCCL_TOPO_FILE=$TOPOS/cpu-only.yaml ($tmp/topo.conf:1))\$" "$tmp/err"
run env NCCL_TOPO_FILE="$tmp/none.xml" GCOLL_TOPO_FILE="$TOPOS/cpu-only.yaml" "$BIN" topo --detect
check "--detect: GCOLL_TOPO_FILE wins over NCCL_TOPO_FILE" [ "$rc" -eq 0 ] && grep -q '^name: cpu-only$' "$tmp/out"
if ! "$BIN" topo --detect 2>/dev/null | grep -q '^gpus:'; then
  # No GPU on this machine: the 8-GPU override names its first GPU.
  expect_err "--detect with an 8-GPU override on a GPU-less machine" 1 \
    "gcoll-plan: $AZ: merging with detection: the file's gpu0 (0001:00:00.0) is not among the 0 GPUs found (no GPU at all) (from GCOLL_TOPO_FILE)" \
    env GCOLL_TOPO_FILE="$AZ" "$BIN" topo --detect
fi
unset NCCL_CONF_FILE

# ---- split: sub-communicator plans ---------------------------------------------
expect_rc "split: parent" 0 "$BIN" generate -t dgx-h100 -N 3 -q -o "$tmp/dgx3.yaml"
expect_rc "split: even GPUs of node 0 and all of node 1" 0 \
  "$BIN" split "$tmp/dgx3.yaml" --ranks 0-6:2,8-15 -o "$tmp/half.yaml"
check "split: summary line" grep -qx "$tmp/half.yaml: 12 ranks, 2 nodes, 2 topology classes, 16 channels" "$tmp/err"
expect_rc "split: child verifies" 0 "$BIN" verify "$tmp/half.yaml" --ranks 12 --hosts 'node[00000-00001]'
expect_rc "split: show the child" 0 "$BIN" show "$tmp/half.yaml"
check "split: show names the GPUs driven" grep -q "GPUs driven by local ranks 0..3: \[0 2 4 6\]" "$tmp/out"
expect_rc "split: a rank's view" 0 "$BIN" show "$tmp/half.yaml" --rank 3
check "split: child rank 3 drives GPU 6" grep -qx "local:     rank 3 of 4, drives GPU 6 of the node (0000:d1:00.0)" "$tmp/out"
expect_rc "split: every rank in order is the parent itself" 0 \
  "$BIN" split "$tmp/dgx3.yaml" --ranks 0-23 -q -o "$tmp/same.yaml"
expect_rc "split: ... as diff sees it" 0 "$BIN" diff "$tmp/dgx3.yaml" "$tmp/same.yaml"
expect_rc "split: to stdout" 0 "$BIN" split "$tmp/dgx3.yaml" --ranks 5,13,21 -q -o -
check "split: one GPU per node keeps its NIC" grep -q "{order: \[0\], nic_in: mlx5_5, nic_out: mlx5_5, rail_in: 5, rail_out: 5}" "$tmp/out"
expect_rc "split: a node's members need not be adjacent" 0 \
  "$BIN" split "$tmp/dgx3.yaml" --ranks 0,8,1,9 -q -o "$tmp/interleaved.yaml"
check "split: ... the plan lists each node's ranks" \
  eval 'grep -q "ranks: \"0,2\"" "$tmp/interleaved.yaml" && grep -q "ranks: \"1,3\"" "$tmp/interleaved.yaml"'
expect_rc "split: ... and verifies" 0 "$BIN" verify "$tmp/interleaved.yaml"
expect_rc "split: ... and rank 1's view is on the second node" 0 "$BIN" show "$tmp/interleaved.yaml" --rank 1
check "split: ... node 1, local rank 0" grep -q "^node:      1 of 2" "$tmp/out"
expect_err "split: bad list" 2 \
  "gcoll-plan: split: --ranks: rank list '0-x': '0-x' is not N, N-M or N-M:STEP (see 'gcoll-plan split --help')" \
  "$BIN" split "$tmp/dgx3.yaml" --ranks 0-x -o "$tmp/no.yaml"
expect_err "split: rank outside" 2 \
  "gcoll-plan: split: --ranks: rank list '0,24': rank 24 is outside 0..23 (see 'gcoll-plan split --help')" \
  "$BIN" split "$tmp/dgx3.yaml" --ranks 0,24 -o "$tmp/no.yaml"
expect_err "split: no --ranks" 2 "gcoll-plan: split: missing --ranks (see 'gcoll-plan split --help')" \
  "$BIN" split "$tmp/dgx3.yaml" -o "$tmp/no.yaml"

# ---- --gpus: a step that owns some of each node's GPUs --------------------------
expect_rc "generate --gpus 5,6" 0 "$BIN" generate -t dgx-h100 -N 2 -k 2 --gpus 5,6 -q -o "$tmp/g56.yaml"
expect_rc "show the --gpus plan" 0 "$BIN" show "$tmp/g56.yaml"
check "--gpus: the class drives GPUs 5 and 6" grep -q "GPUs driven by local ranks 0..1: \[5 6\]" "$tmp/out"
# Rail-aligned: the ring enters by GPU 5's NIC and leaves by it too, GPU 6
# sending through GPU 5 (PXN); the next channel uses GPU 6's rail.
check "--gpus: rings use their NICs" grep -q "ring  0: \[0 1\]  nic in mlx5_5 out mlx5_5 (rails 5/5) last sends via local rank 0 (PXN)" "$tmp/out"
check "--gpus: ... and GPU 6's" grep -q "ring  6: \[1 0\]  nic in mlx5_6 out mlx5_6 (rails 6/6) last sends via local rank 1 (PXN)" "$tmp/out"
expect_err "--gpus of another count than the ranks" 1 \
  "gcoll-plan: --gpus names 1 GPU, node 0 has 2 ranks" \
  "$BIN" generate -t dgx-h100 -N 2 -k 2 --gpus 5 -o "$tmp/no.yaml"
expect_err "--gpus twice the same" 1 \
  "gcoll-plan: node 0: rank 1 on GPU 5, which another rank of the node drives (the node has GPUs 0..7)" \
  "$BIN" generate -t dgx-h100 -N 2 -k 2 --gpus 5,5 -o "$tmp/no.yaml"

# ---- NVLink domains across nodes ----------------------------------------------
# 36 GB200 trays in racks of 18: show lists the racks, edges inside a rack
# are p2p, and channel 0's ring leaves a rack over the network exactly
# twice (counted on every rank's view as the runtime loads it).
p="$tmp/gb200-36.yaml"
expect_rc "generate --nvlink-domain 18" 0 "$BIN" generate --topo gb200-tray --nodes 36 \
  --nvlink-domain 18 -o "$p"
expect_rc "verify a domain plan" 0 "$BIN" verify "$p" --nodes 36 --ranks 144
expect_rc "show a domain plan" 0 "$BIN" show "$p"
check "show lists rack 0" grep -q '^  domain 0: 18 nodes (0-17), node\[00000-00017\]$' "$tmp/out"
check "show lists rack 1" grep -q '^  domain 1: 18 nodes (18-35), node\[00018-00035\]$' "$tmp/out"
for r in $(seq 0 143); do "$BIN" show "$p" --rank "$r"; done >"$tmp/views" 2>&1
check "channel 0 leaves a rack twice" [ "$(grep -c '^ring  0: .* next [0-9]* (net)' "$tmp/views")" -eq 2 ]
# 2 crossings: 2 ranks send over the network, 2 receive; the other 140 are p2p both ways.
check "every other ring edge is p2p" \
  [ "$(grep -c '^ring  0: prev [0-9]* (p2p) -> [0-9]* -> next [0-9]* (p2p)' "$tmp/views")" -eq 140 ]
expect_rc "show --rank in a rack" 0 "$BIN" show "$p" --rank 100
check "the view names its rack" grep -q '^domain: *NVLink domain 1 of 18 nodes' "$tmp/out"
# Domains from per-node files (as detection writes nvlink_domain): trays
# 0 and 2 in one clique, 1 and 3 in another, one topology class.
d="$tmp/trays"
mkdir "$d"
for i in 0 1 2 3; do
  sed "s/^name: gb200-tray\$/name: gb200-tray\nnvlink_domain: {cluster: 4f1c2d3e-0000-4000-8000-00000000002a, clique: $((i % 2))}/" \
    "$TOPOS/gb200-tray.yaml" >"$d/$i.yaml"
done
expect_rc "generate from trays with nvlink_domain" 0 "$BIN" generate --topo "$d" -o "$tmp/trays.yaml"
check "trays: one class" grep -q ": 16 ranks, 4 nodes, 1 topology class, " "$tmp/err"
expect_rc "show trays" 0 "$BIN" show "$tmp/trays.yaml"
check "trays: ring visits each clique together" grep -q '^ring: *node order 0,2,1,3$' "$tmp/out"
check "trays: clique 0 holds nodes 0 and 2" grep -q '^  domain 0: 2 nodes (0,2), ' "$tmp/out"
expect_err "--nvlink-domain without GPUs" 1 \
  "gcoll-plan: --nvlink-domain: node 0's topology 'cpu-only' has no GPUs to join by NVLink" \
  "$BIN" generate --topo cpu-only --nodes 2 --nvlink-domain 2 -o "$tmp/x.yaml"
expect_err "--nvlink-domain 0" 2 \
  "gcoll-plan: generate: --nvlink-domain: 0 is out of range 1..1048576 (see 'gcoll-plan generate --help')" \
  "$BIN" generate --topo gb200-tray --nodes 2 --nvlink-domain 0 -o "$tmp/x.yaml"
"$BIN" generate -q --topo gb200-tray --nodes 4 -o "$tmp/trays-none.yaml"
"$BIN" generate -q --topo gb200-tray --nodes 4 --nvlink-domain 4 -o "$tmp/trays-one.yaml"
expect_rc "diff: domains differ" 1 "$BIN" diff "$tmp/trays-none.yaml" "$tmp/trays-one.yaml"
check "diff names the domains" grep -q '^node NVLink domain (-1: none): 4 nodes differ: 0 (-1 -> 0), ' "$tmp/out"
# p5: 32 EFA NICs; its 16 channels each enter and leave a node by one NIC
# (one rail), so 16 NICs carry rings, every one a different one.
expect_rc "generate p5 x2" 0 "$BIN" generate --topo p5 --nodes 2 -o "$tmp/p5.yaml"
expect_rc "show p5" 0 "$BIN" show "$tmp/p5.yaml"
check "p5: 16 NICs in the rings" [ "$(grep '^    ring' "$tmp/out" | grep -o 'rdmap[0-9a-f]*s0' | sort -u | wc -l)" -eq 16 ]
check "p5: no edge changes rails" grep -q "^rails:     0 of 32 ring edges and 0 of 32 tree edges" "$tmp/out"
expect_rc "p5: verify checks rails" 0 "$BIN" verify -q "$tmp/p5.yaml"

# ---- rails -----------------------------------------------------------------------
expect_rc "rails: 4 DGX-H100" 0 "$BIN" generate -q --topo dgx-h100 --nodes 4 -o "$tmp/r4.yaml"
expect_rc "rails: verify" 0 "$BIN" verify "$tmp/r4.yaml"
expect_rc "rails: show" 0 "$BIN" show "$tmp/r4.yaml"
check "rails: no crossing" grep -q "^rails:     0 of 32 ring edges and 0 of 48 tree edges between nodes change rails" "$tmp/out"
check "rails: channel 3's pair" grep -qx "  ring  3: mlx5_3/rail 3 -> mlx5_3/rail 3 x4" "$tmp/out"
expect_rc "rails: show rank 15" 0 "$BIN" show "$tmp/r4.yaml" --rank 15
check "rails: rank 15 leaves through rank 8's NIC" \
  grep -qx "ring  0: prev 14 (p2p) -> 15 -> next 16 (net)  out mlx5_0/rail 0 -> mlx5_0/rail 0 via rank 8 (PXN)" "$tmp/out"
check "rails: rank 15 enters on rail 7" \
  grep -qx "ring  7: prev 6 (net) -> 15 -> next 8 (p2p)  in mlx5_7/rail 7 <- mlx5_7/rail 7" "$tmp/out"
# Every inter-node edge of every rank, paired from both ends' views.
nets=0; same=0
for r in $(seq 0 31); do
  "$BIN" show "$tmp/r4.yaml" --rank $r > "$tmp/v$r" || bad "show rank $r"
  nets=$((nets + $(grep -c ' (net)  out ' "$tmp/v$r")))
  same=$((same + $(grep ' (net)  out ' "$tmp/v$r" | grep -cE 'out (mlx5_[0-7])/rail ([0-7]) -> \1/rail \2( |$)')))
done
check "rails: 64 inter-node ring edges, all on one rail" [ "$nets" -eq 64 -a "$same" -eq 64 ]
# A plan with cross-rail rings (the old DGX shape, or --allow-cross-rail on a
# node with one NIC per socket) fails verify unless the fabric has no rails.
expect_rc "rails: pcie cross-rail" 0 "$BIN" generate -q --topo pcie-2s-4gpu --nodes 3 --allow-cross-rail -o "$tmp/x3.yaml"
expect_err "rails: verify refuses cross-rail" 1 \
  "gcoll-plan: $tmp/x3.yaml: ring channel 0: node 0 leaves by mlx5_1 (rail 1), node 1 enters by mlx5_0 (rail 0): cross-rail (on a fabric without rails: --allow-cross-rail)" \
  "$BIN" verify "$tmp/x3.yaml"
expect_rc "rails: --allow-cross-rail" 0 "$BIN" verify --allow-cross-rail "$tmp/x3.yaml"
expect_rc "rails: show cross" 0 "$BIN" show "$tmp/x3.yaml"
check "rails: cross counted" grep -q "^rails:     6 of 6 ring edges and 0 of 8 tree edges" "$tmp/out"
expect_rc "rails: pcie rail-aligned by default" 0 "$BIN" generate -q --topo pcie-2s-4gpu --nodes 3 -o "$tmp/a3.yaml"
expect_rc "rails: ... verifies" 0 "$BIN" verify -q "$tmp/a3.yaml"
expect_rc "rails: diff shows the rails" 1 "$BIN" diff "$tmp/a3.yaml" "$tmp/x3.yaml"
check "rails: diff names rail_out" grep -q "^class pcie-2s-4gpu: ring 0 rail_out: 0 -> 1" "$tmp/out"
# A plan written before rails: NIC names stand in for them.
sed -e 's/, rail_in: [0-9]*//; s/, rail_out: [0-9]*//; s/, pxn: [0-9]*//; s/, rail: [0-9]*//' \
  -e '0,/nic_out: mlx5_0/s//nic_out: mlx5_7/' "$tmp/r4.yaml" > "$tmp/old.yaml"
expect_err "rails: an old cross-rail plan" 1 \
  "gcoll-plan: $tmp/old.yaml: ring channel 0: node 0 leaves by mlx5_7, node 1 enters by mlx5_0: cross-rail (on a fabric without rails: --allow-cross-rail)" \
  "$BIN" verify "$tmp/old.yaml"
# Rails named in a topology file win over NIC indices.
sed -E 's/(name: mlx5_([0-7]),.*gbps: 400)/\1, rail: 1\2/' "$TOPOS/dgx-h100.yaml" > "$tmp/railed.yaml"
expect_rc "rails: named rails" 0 "$BIN" generate -q --topo "$tmp/railed.yaml" --nodes 2 -o "$tmp/railed-plan.yaml"
check "rails: the file's rails in the plan" grep -q "nic_in: mlx5_3, nic_out: mlx5_3, rail_in: 13, rail_out: 13" "$tmp/railed-plan.yaml"
expect_rc "rails: named rails verify" 0 "$BIN" verify -q "$tmp/railed-plan.yaml"
sed 's/rail: 13}/rail: -1}/' "$tmp/railed.yaml" > "$tmp/railbad.yaml"
expect_err_prefix "rails: a bad rail" 1 "gcoll-plan: $tmp/railbad.yaml:" "$BIN" topo "$tmp/railbad.yaml"

# ---- degraded links: a port down or below its line rate ---------------------------
# As detection writes them (no RDMA device here to detect one for real).
sed -e 's/\({name: mlx5_3,.*gbps: 400\)}/\1, state: down}/' \
  -e 's/\({name: mlx5_5,.*gbps: 400\)}/\1, active_gbps: 200}/' "$TOPOS/dgx-h100.yaml" > "$tmp/sick.yaml"
expect_rc "degraded: a topology with a port down" 0 "$BIN" topo "$tmp/sick.yaml"
check "degraded: the topology keeps the marks" grep -q "name: mlx5_3, .*state: down" "$tmp/out"
expect_rc "degraded: generate" 0 "$BIN" generate --topo dgx-h100,"$tmp/sick.yaml" --nodes 2 -o "$tmp/sick-plan.yaml"
check "degraded: one INFO line for the port down" \
  grep -qx "gcoll-plan: INFO: mlx5_3 of node 1 (node00001) left out of the plan: port down" "$tmp/err"
check "degraded: one INFO line for the slow port" \
  grep -qx "gcoll-plan: INFO: mlx5_5 of node 1 (node00001) left out of the plan: 200 of 400 Gb/s" "$tmp/err"
check "degraded: two INFO lines" [ "$(grep -c INFO "$tmp/err")" -eq 2 ]
check "degraded: the plan says so" grep -q "{nic: mlx5_3, reason: down}" "$tmp/sick-plan.yaml"
check "degraded: no ring or chain uses them" \
  [ "$(grep -v reason "$tmp/sick-plan.yaml" | grep -cE 'nic_(in|out): mlx5_[35]|nic: mlx5_[35]')" -eq 0 ]
expect_rc "degraded: verify" 0 "$BIN" verify -q "$tmp/sick-plan.yaml"
expect_rc "degraded: show" 0 "$BIN" show "$tmp/sick-plan.yaml"
check "degraded: show names the port" grep -qx "    NIC mlx5_5 left out: below its line rate" "$tmp/out"
"$BIN" generate -q --topo dgx-h100 --nodes 2 -o "$tmp/well-plan.yaml"
expect_rc "degraded: diff against a healthy plan" 1 "$BIN" diff "$tmp/well-plan.yaml" "$tmp/sick-plan.yaml"
check "diff: the degraded class and its ports" \
  grep -q "^+ class dgx-h100-2 (hash [0-9a-f]*, 8 local ranks, NICs left out: mlx5_3 (down), mlx5_5 (slow))" "$tmp/out"
check "diff: the node that changed" grep -q "^node class: 1 node differs: 1 (dgx-h100 -> dgx-h100-2)" "$tmp/out"
expect_rc "degraded: -q prints nothing" 0 "$BIN" generate -q --topo "$tmp/sick.yaml" --nodes 2 -o "$tmp/sick2.yaml"
check "degraded: -q is quiet" [ ! -s "$tmp/err" ]
expect_rc "degraded: NCCL XML keeps the marks" 0 "$BIN" topo "$tmp/sick.yaml" --to-nccl -o "$tmp/sick.xml"
h1=$("$BIN" topo "$tmp/sick.yaml" --hash); h2=$("$BIN" topo "$tmp/sick.xml" --hash)
check "degraded: same hash through NCCL XML" [ "$h1" = "$h2" ]
sed 's/state: down/state: off/' "$tmp/sick.yaml" > "$tmp/sick-bad.yaml"
expect_err "degraded: a bad state" 1 \
  "gcoll-plan: $tmp/sick-bad.yaml:33: field 'nics[3].state': expected up or down, found 'off'" \
  "$BIN" topo "$tmp/sick-bad.yaml"

# ---- paths that are not regular files ----------------------------------------
# A FIFO used to block the open forever; each reader must refuse it at once
# (timeout turns a hang into status 124).
mkfifo "$tmp/fifo.yaml"
fifo_msg="gcoll-plan: $tmp/fifo.yaml: is a FIFO, not a regular file"
expect_err "show a FIFO" 1 "$fifo_msg" timeout 10 "$BIN" show "$tmp/fifo.yaml"
expect_err "show --rank a FIFO" 1 "$fifo_msg" timeout 10 "$BIN" show "$tmp/fifo.yaml" --rank 0
expect_err "verify a FIFO" 1 "$fifo_msg" timeout 10 "$BIN" verify "$tmp/fifo.yaml"
expect_err "topo a FIFO" 1 "$fifo_msg" timeout 10 "$BIN" topo "$tmp/fifo.yaml"
expect_err "generate from a FIFO" 1 "$fifo_msg" \
  timeout 10 "$BIN" generate --topo "$tmp/fifo.yaml" --nodes 2 -o "$tmp/from-fifo.yaml"
check "nothing generated from a FIFO" [ ! -e "$tmp/from-fifo.yaml" ]
expect_err "show a device" 1 "gcoll-plan: /dev/zero: is a character device, not a regular file" \
  timeout 10 "$BIN" show /dev/zero
expect_err "show a directory" 1 "gcoll-plan: $tmp: is a directory, not a regular file" \
  timeout 10 "$BIN" show "$tmp"

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
