#!/bin/bash
# The declared table of GCOLL_* settings (src/common/params.c) against the
# sources, the README and gcoll-info's view of the environment:
#   - every GCOLL_* name the sources read as a string literal (src/, and
#     the emulated GPU's variables in tests/cudaemu/cudaemu.c) is in the
#     table, and every name in the table is read somewhere;
#   - the table is sorted (gcoll_param_find searches it in halves);
#   - every user setting appears in the README;
#   - gcoll-info reports values and origins as the runtime reads them: a
#     GCOLL_ variable, an NCCL variable mapped to one, an NCCL
#     configuration file, and an unset one's default;
#   - a wrong argument is refused in one line, exit 2.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
INFO=$top_builddir/gcoll-info
[ -x "$INFO" ] || { echo "test_params: $INFO is not built" >&2; exit 99; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-params.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

# GCOLL_X in comments is an example, not a variable.
"$INFO" --names >"$tmp/table" || { echo "FAIL: gcoll-info --names"; exit 1; }
grep -rhoE '"GCOLL_[A-Z0-9_]+"' "$top_srcdir/src" "$top_srcdir/tests/cudaemu/cudaemu.c" |
  tr -d '"' | grep -v '^GCOLL_X$' | sort -u >"$tmp/read"
missing=$(comm -13 "$tmp/table" "$tmp/read")
unused=$(comm -23 <(sort "$tmp/table") "$tmp/read")
if [ -z "$missing" ]; then ok "every GCOLL_* name the sources read is declared ($(wc -l <"$tmp/read") names)"
else bad "read but not declared in src/common/params.c: $(echo $missing)"; fi
if [ -z "$unused" ]; then ok "every declared setting is read somewhere"
else bad "declared but read nowhere: $(echo $unused)"; fi
if sort -c "$tmp/table" 2>/dev/null && [ "$(LC_ALL=C sort "$tmp/table")" = "$(cat "$tmp/table")" ]; then
  ok "the table is sorted by name"
else
  bad "src/common/params.c is not sorted by name"
fi

# User settings documented: the README's variable tables name each one.
env -i PATH="$PATH" "$INFO" --params | sed -n 's/^  \(GCOLL_[A-Z0-9_]*\) .*/\1/p' | sort -u >"$tmp/user"
undocumented=$(while read -r v; do grep -q "\`$v\b" "$top_srcdir/README.md" || echo "$v"; done <"$tmp/user")
if [ -s "$tmp/user" ] && [ -z "$undocumented" ]; then ok "every user setting is in the README ($(wc -l <"$tmp/user"))"
else bad "user settings missing from the README: $(echo $undocumented)"; fi

# Values and origins, each in a clean environment with a private HOME (no
# ~/.nccl.conf of the machine's).
clean() { env -i PATH="$PATH" HOME="$tmp" "$@"; }
field() {  # field OUTPUT NAME: the "set:"/"unset:" line under NAME
  awk -v n="$2" '$1 == n {found = 1; next} found && /^  GCOLL_/ {exit} found && /(set|unset):/ {sub(/^ +/, ""); print; exit}' "$1"
}
clean GCOLL_TIMEOUT=7 NCCL_ALGO=Tree "$INFO" --params >"$tmp/out1" 2>&1
t=$(field "$tmp/out1" GCOLL_TIMEOUT) a=$(field "$tmp/out1" GCOLL_ALGO) p=$(field "$tmp/out1" GCOLL_PROTO)
if [ "$t" = "set: 7 (from GCOLL_TIMEOUT)" ] && [[ "$a" == "set: tree (from NCCL_ALGO=Tree (environment))" ]] &&
   [[ "$p" == "unset: the plan's tuning table" ]]; then
  ok "values and origins: a GCOLL_ variable, an NCCL variable mapped, an unset default"
else
  bad "values and origins: GCOLL_TIMEOUT '$t', GCOLL_ALGO '$a', GCOLL_PROTO '$p'"
fi
printf 'NCCL_PROTO=LL\n' >"$tmp/nccl.conf"
clean NCCL_CONF_FILE="$tmp/nccl.conf" GCOLL_ALGO=ring NCCL_ALGO=Tree "$INFO" --params >"$tmp/out2" 2>&1
a=$(field "$tmp/out2" GCOLL_ALGO) p=$(field "$tmp/out2" GCOLL_PROTO)
if [ "$a" = "set: ring (from GCOLL_ALGO)" ] && [[ "$p" == "set: ll (from NCCL_PROTO=LL ($tmp/nccl.conf:1))" ]]; then
  ok "GCOLL_ wins over NCCL_; a value from an NCCL configuration file names file and line"
else
  bad "precedence and files: GCOLL_ALGO '$a', GCOLL_PROTO '$p'"
fi
if clean "$INFO" --all | grep -q '^  GCOLL_KVS_ADDR ' && ! clean "$INFO" | grep -q '^  GCOLL_KVS_ADDR '; then
  ok "launcher-set settings only with --all"
else
  bad "--all: launcher settings shown or hidden wrongly"
fi
if clean "$INFO" | head -3 | grep -q '^  CUDA here: '; then ok "the build summary says whether CUDA is usable here: $(clean "$INFO" | grep '^  CUDA here: ')"
else bad "no CUDA line in gcoll-info's summary"; fi
clean "$INFO" --bogus >"$tmp/o" 2>"$tmp/e"
rc=$?
if [ $rc -eq 2 ] && [ ! -s "$tmp/o" ] && [ "$(grep -c . "$tmp/e")" -ge 1 ]; then ok "a wrong option is refused (exit 2): $(head -1 "$tmp/e")"
else bad "a wrong option: exit $rc"; fi
clean "$INFO" extra >/dev/null 2>"$tmp/e"
rc=$?
if [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/e")" -eq 1 ]; then ok "a stray argument is refused in one line: $(cat "$tmp/e")"
else bad "a stray argument: exit $rc"; fi

echo "$pass passed, $fail failed"
[ "$fail" -eq 0 ]
