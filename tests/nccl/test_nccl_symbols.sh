#!/bin/bash
# Every function the system's real nccl.h declares (ncclX and the
# profilers' pncclX) must be defined by gcoll's libnccl.so.2: the names come
# from the header itself (comments stripped by the compiler, directives
# dropped, then every `p?nccl[A-Z]...(`), the exports from
# `nm -D --defined-only`. Lists what is missing and fails when anything is;
# names exported but not in the header are listed for information.
# Signatures are test_nccl_abi.sh's (nccl_abi_layout.c). Skips when nccl.h
# is missing (77).
set -u
top_builddir=${top_builddir:-.}
inc=${CUDA_HOME:-/usr/local/cuda}/include
HDR=$inc/nccl.h
if [ ! -f "$HDR" ]; then
  echo "skipped: nccl.h not found (looked in $inc; set CUDA_HOME)"
  exit 77
fi
LIB=$top_builddir/.libs/libnccl.so.2
[ -e "$LIB" ] || { echo "test_nccl_symbols: $LIB is not built" >&2; exit 99; }
mkvar() { sed -n "s/^$1 = //p" "$top_builddir/Makefile" 2>/dev/null | head -1; }
CC=$(mkvar CC)
[ -n "$CC" ] || CC=cc
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-symbols.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT

# The header without comments (-fpreprocessed: no macro is expanded, no
# file included); directive lines, continuations joined, are dropped.
if ! $CC -fpreprocessed -dD -E -P -x c "$HDR" >"$tmp/nocomments" 2>"$tmp/cc.out"; then
  echo "test_nccl_symbols: $CC cannot strip $HDR's comments:"; head -5 "$tmp/cc.out"
  exit 99
fi
grep -v '^[[:space:]]*#' "$tmp/nocomments" | tr '\n' ' ' |
  grep -oE '(^|[^A-Za-z0-9_])p?nccl[A-Z][A-Za-z0-9_]*[[:space:]]*\(' |
  sed -E 's/^[^A-Za-z0-9_]//; s/[[:space:]]*\($//' | sort -u >"$tmp/declared"
# NCCL 2.28's device API (nccl_device/*.h) also has host functions that
# programs link (PyTorch's libtorch_cuda.so does): those declared
# `NCCL_EXTERN_C __host__`, not the inline ones.
if [ -d "$inc/nccl_device" ]; then
  cat "$inc"/nccl_device/*.h | tr '\n' ' ' | sed 's/;/;\n/g' |
    grep -E 'NCCL_EXTERN_C[[:space:]]+__host__' |
    grep -oE '(^|[^A-Za-z0-9_])nccl[A-Z][A-Za-z0-9_]*[[:space:]]*\(' |
    sed -E 's/^[^A-Za-z0-9_]//; s/[[:space:]]*\($//' >>"$tmp/declared"
  sort -u -o "$tmp/declared" "$tmp/declared"
fi
ndecl=$(wc -l <"$tmp/declared")
# A header that yields few names means the extraction broke, not the library.
if [ "$ndecl" -lt 20 ]; then
  echo "test_nccl_symbols: only $ndecl functions found in $HDR:"; cat "$tmp/declared"
  exit 99
fi

nm -D --defined-only "$LIB" | awk '$2 ~ /^[TtWi]$/ {print $3}' | sort -u >"$tmp/exported"
missing=$(comm -23 "$tmp/declared" "$tmp/exported")
extra=$(comm -13 "$tmp/declared" "$tmp/exported" | grep -E '^p?nccl[A-Z]')
version=$(sed -n 's/^#define NCCL_VERSION_CODE[[:space:]]*//p' "$HDR")
echo "$HDR (NCCL_VERSION_CODE $version) and nccl_device/ declare $ndecl functions (nccl* and pnccl*)"
if [ -n "$extra" ]; then
  echo "exported but not declared there (not an error): $(echo $extra)"
fi
if [ -z "$missing" ]; then
  echo "ok: $LIB defines all $ndecl"
  exit 0
fi
echo "FAIL: $LIB lacks $(echo "$missing" | wc -l) of them:"
echo "$missing" | sed 's/^/  /'
exit 1
