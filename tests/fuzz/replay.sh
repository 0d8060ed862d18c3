#!/bin/sh
# make check: replays the fuzz corpus (seeds and every crash found so far)
# and the reference topologies through the readers (topology YAML, NCCL
# topology XML, plan YAML, endpoints YAML) under the normal build.
# Environment (set by make check): top_srcdir, top_builddir.
set -u

here=$(cd "$(dirname "$0")" && pwd)
top_srcdir=${top_srcdir:-$(cd "$here/../.." && pwd)}
top_builddir=${top_builddir:-$top_srcdir}
corpus=$top_srcdir/tests/fuzz/corpus
topologies=$top_srcdir/etc/topologies
status=0

# replay NAME INPUT...: runs one replayer; missing inputs are a failure, not
# a silent pass, since an empty replay would test nothing.
replay() {
  prog=$top_builddir/tests/fuzz/$1
  shift
  if [ ! -x "$prog" ]; then
    echo "replay.sh: $prog not built" >&2
    return 99
  fi
  for input in "$@"; do
    if [ ! -e "$input" ]; then
      echo "replay.sh: missing input $input" >&2
      return 1
    fi
  done
  echo "== $(basename "$prog") $*"
  out=$("$prog" "$@")
  rc=$?
  echo "$out"
  if [ $rc -ne 0 ]; then
    echo "replay.sh: $(basename "$prog") failed with status $rc" >&2
    return 1
  fi
  case $out in
    *"replayed 0 inputs"*) echo "replay.sh: no inputs replayed" >&2; return 1 ;;
  esac
  return 0
}

replay fuzz_topo_replay "$corpus/topo" "$topologies" || status=$?
# NCCL XML: its corpus (the cloud files of tests/data/nccl-topo among the
# seeds), plus IBM Cloud's dump from the workspace's ../shared when present.
xml_inputs="$corpus/topo-xml"
shared_xml=$top_srcdir/../shared/topologies/nccl
[ -d "$shared_xml" ] && xml_inputs="$xml_inputs $shared_xml"
# shellcheck disable=SC2086  # two directories at most, no spaces in either
replay fuzz_topo_xml_replay $xml_inputs || status=$?
replay fuzz_plan_replay "$corpus/plan" "$topologies" || status=$?
replay fuzz_endpoints_replay "$corpus/endpoints" || status=$?
exit $status
