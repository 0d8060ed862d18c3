#!/bin/bash
# What the two shared libraries export (README, "Exported symbols and layers"):
#   - libgcoll.so: every function declared in an installed header
#     (include/*.h) under version GCOLL_1; besides those, only the names
#     of src/gcoll.map's GCOLL_PRIVATE node, under that version, each one
#     prefixed gcoll_, declared in no installed header, and used by at
#     least one of gcoll's installed programs or libnccl.so.2 (the node is
#     their interface, not a place for whatever a test needs);
#   - libnccl.so.2: exactly the NCCL names in tests/cli/libnccl.exports,
#     the ABI that PyTorch and nccl-tests bind to. A deliberate change to
#     it updates that list in the same commit.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
lib=$top_builddir/.libs/libgcoll.so
nccl=$top_builddir/.libs/libnccl.so.2
map=$top_srcdir/src/gcoll.map
inc=$(cd "$top_srcdir/include" && pwd)
if [ ! -f "$lib" ]; then echo "SKIP: no $lib (shared libraries not built)"; exit 77; fi
# The header parse uses GCC's prototype dump (-aux-info), which clang lacks.
cc=$(command -v gcc) || { echo "SKIP: gcc not found"; exit 77; }
nm --help 2>/dev/null | grep -q -- --with-symbol-versions ||
  { echo "SKIP: nm cannot print symbol versions (binutils < 2.35)"; exit 77; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-exports.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }
list() { tr '\n' ' ' <"$1" | sed 's/ $//'; }

# Functions the installed headers declare: GCC's own list of prototypes,
# kept to those whose declaration is in include/ (a static inline one is
# no symbol).
for h in "$inc"/*.h; do echo "#include \"$h\""; done >"$tmp/headers.c"
"$cc" -fsyntax-only -I"$inc" -aux-info "$tmp/aux" "$tmp/headers.c" ||
  { echo "FAIL: the installed headers do not compile"; exit 1; }
grep -F "/* $inc/" "$tmp/aux" | grep -vw static | sed -E 's|^/\*[^*]*\*/ *||; s/^([^(]*[ *])?([A-Za-z_][A-Za-z0-9_]*) \(.*/\2/' |
  sort -u >"$tmp/public"
[ -s "$tmp/public" ] || { echo "FAIL: no function found in $inc/*.h"; exit 1; }

# GCOLL_PRIVATE's names as the map spells them.
awk '/^GCOLL_PRIVATE[ \t]*\{/ { in_node = 1; next }
     in_node && /^\}/ { in_node = 0 }
     in_node { sub(/\/\*.*\*\//, ""); if ($0 ~ /^[ \t]*[A-Za-z_][A-Za-z0-9_]*;/) { gsub(/[ \t;]/, ""); print } }' \
  "$map" | sort -u >"$tmp/private"
[ -s "$tmp/private" ] || { echo "FAIL: no GCOLL_PRIVATE node in $map"; exit 1; }

# NAME VERSION for every symbol libgcoll.so defines; the version nodes
# themselves (absolute symbols named GCOLL_*) are not functions.
nm -D --defined-only --with-symbol-versions "$lib" | awk '$2 != "A" { print $3 }' |
  sed -E 's/@@?/ /' | awk '{ print $1, (NF > 1 ? $2 : "(none)") }' | sort -u >"$tmp/exports"
awk '$2 == "GCOLL_1" { print $1 }' "$tmp/exports" >"$tmp/exp_public"
awk '$2 == "GCOLL_PRIVATE" { print $1 }' "$tmp/exports" >"$tmp/exp_private"

stray=$(awk '$2 != "GCOLL_1" && $2 != "GCOLL_PRIVATE" { print $1 "@" $2 }' "$tmp/exports")
if [ -z "$stray" ]; then ok "every libgcoll.so symbol is versioned GCOLL_1 or GCOLL_PRIVATE"
else bad "libgcoll.so exports outside GCOLL_1/GCOLL_PRIVATE (is src/gcoll.map applied?): $(echo $stray)"; fi

undeclared=$(comm -23 "$tmp/exp_public" "$tmp/public")
if [ -z "$undeclared" ]; then ok "every GCOLL_1 symbol is declared in include/ ($(wc -l <"$tmp/exp_public") functions)"
else bad "exported as GCOLL_1 but declared in no installed header: $(echo $undeclared)"; fi

missing=$(comm -13 "$tmp/exp_public" "$tmp/public")
if [ -z "$missing" ]; then ok "every function of include/*.h is exported as GCOLL_1"
else bad "declared in include/ but not exported as GCOLL_1 (add to src/gcoll.map): $(echo $missing)"; fi

unlisted=$(comm -23 "$tmp/exp_private" "$tmp/private")
if [ -z "$unlisted" ]; then ok "every GCOLL_PRIVATE symbol is listed in the map's node"
else bad "exported as GCOLL_PRIVATE but not listed in src/gcoll.map: $(echo $unlisted)"; fi

unprefixed=$(grep -v '^gcoll_' "$tmp/private")
public_too=$(comm -12 "$tmp/private" "$tmp/public")
if [ -z "$unprefixed$public_too" ]; then ok "GCOLL_PRIVATE holds only gcoll_ names no installed header declares"
else bad "GCOLL_PRIVATE names that are unprefixed or public: $(echo $unprefixed $public_too)"; fi

# Who may use the private node: the installed programs and libnccl.so.2.
# libtool leaves the real executable in .libs when it links a shared
# libgcoll; a static build has no such node to check.
users=
for p in gcollrun gcoll-plan gcoll-perf gcoll-info; do
  if [ -f "$top_builddir/.libs/$p" ]; then users="$users $top_builddir/.libs/$p"
  elif [ -f "$top_builddir/$p" ]; then users="$users $top_builddir/$p"
  else bad "$p is not built"; fi
done
[ -f "$nccl" ] && users="$users $nccl" || bad "$nccl is not built"
for u in $users; do nm -D --undefined-only "$u"; done | awk '{ print $2 }' | sed 's/@.*//' |
  sort -u >"$tmp/used"
unused=$(comm -23 "$tmp/exp_private" "$tmp/used")
if [ -z "$unused" ]; then ok "every GCOLL_PRIVATE symbol is used by an installed program or libnccl.so.2 ($(wc -l <"$tmp/exp_private") symbols)"
else bad "in GCOLL_PRIVATE but used by no installed program nor libnccl.so.2 (drop it from src/gcoll.map; tests link libgcoll_internal.la): $(echo $unused)"; fi

# Every reference those programs make into libgcoll resolves, with the
# version it was linked against, in the libgcoll.so just built.
libs=$(cd "$top_builddir/.libs" && pwd)
unresolved=
for u in $users; do
  u_bad=$(LD_LIBRARY_PATH=$libs ldd -r "$u" 2>&1 | grep -E 'not found|undefined symbol' | grep gcoll)
  [ -z "$u_bad" ] || unresolved="$unresolved $(basename "$u"): $(echo $u_bad);"
done
if [ -z "$unresolved" ]; then ok "the installed programs and libnccl.so.2 resolve against libgcoll.so"
else bad "unresolved against $libs/libgcoll.so:$unresolved"; fi

if [ -f "$nccl" ]; then
  nm -D --defined-only "$nccl" | awk '$2 != "A" { print $3 }' | sed 's/@.*//' | sort -u >"$tmp/nccl"
  sort -u "$top_srcdir/tests/cli/libnccl.exports" >"$tmp/nccl_expected"
  extra=$(comm -23 "$tmp/nccl" "$tmp/nccl_expected")
  gone=$(comm -13 "$tmp/nccl" "$tmp/nccl_expected")
  if [ -z "$extra" ]; then ok "libnccl.so.2 exports nothing outside tests/cli/libnccl.exports"
  else bad "libnccl.so.2 exports names outside tests/cli/libnccl.exports: $(echo $extra)"; fi
  if [ -z "$gone" ]; then ok "libnccl.so.2 exports all $(wc -l <"$tmp/nccl_expected") names of tests/cli/libnccl.exports"
  else bad "libnccl.so.2 no longer exports: $(echo $gone)"; fi
fi

echo "test_exports: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
