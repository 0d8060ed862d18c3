#!/bin/bash
# The layers of src/ depend one way (README, "Exported symbols and layers"):
#   src/common   on nothing else of gcoll;
#   src/graph    on common: no runtime, kernels or launcher, and no socket;
#   src/kernels  on common: no graph (plans), runtime or launcher, no socket.
# Every layer may use the installed headers (include/): kernels take the
# collective, algorithm and protocol names from gcoll_plan.h, not plans.
# Checked three ways:
#   1. each source and header is preprocessed with only its own layer and
#      the layers it may use on the include path, so an #include of any
#      other layer does not compile (and a "../" path is refused);
#   2. the objects of each layer reference no gcoll symbol defined outside
#      the layers it may use (a prototype written by hand counts too);
#   3. the graph and kernels objects call no socket function, and their
#      sources pull in no socket header except the exceptions below.
# The CUDA sources (*.cu, *.cuh) are checked by their #include lines only.
set -u
top_srcdir=${top_srcdir:-$(cd "$(dirname "$0")/../.." && pwd)}
top_builddir=${top_builddir:-.}
src=$(cd "$top_srcdir/src" && pwd)
inc=$(cd "$top_srcdir/include" && pwd)
build=$(cd "$top_builddir" && pwd)
cc=${CC:-cc}
command -v "$cc" >/dev/null || cc=gcc
tmp=$(mktemp -d "${TMPDIR:-/tmp}/gcoll-layering.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
pass=0 fail=0
ok() { echo "ok: $*"; pass=$((pass + 1)); }
bad() { echo "FAIL: $*"; fail=$((fail + 1)); }

layers="common graph kernels"
allowed() {
  case $1 in
    common) echo common ;;
    graph) echo "graph common" ;;
    kernels) echo "kernels common" ;;
  esac
}

# Socket headers a file may include, with why. Neither file opens a socket:
# detection lists the node's interfaces (getifaddrs, which needs the
# address families of sys/socket.h), and the endpoints reader checks that
# a host is a numeric address (inet_pton) without resolving it.
socket_exception() {
  case $1 in
    graph/topo_detect.c|graph/endpoints_file.c) return 0 ;;
  esac
  return 1
}
socket_headers='/(sys/socket|sys/un|netdb|arpa/inet|netinet/[a-z_]+)\.h$'
socket_calls='socket|connect|bind|listen|accept|accept4|send|sendto|sendmsg|recv|recvfrom|recvmsg'
socket_calls="$socket_calls|setsockopt|getsockopt|getsockname|getpeername|shutdown|getaddrinfo"
socket_calls="$socket_calls|gethostbyname|poll|ppoll|select|epoll_create1|epoll_ctl|epoll_wait"

cflags="-std=gnu11 -D_GNU_SOURCE -I$build -I$inc"
cflags="$cflags $(pkg-config --cflags yaml-0.1 libxml-2.0 2>/dev/null)"
pkg-config --exists hwloc 2>/dev/null && cflags="$cflags $(pkg-config --cflags hwloc)"

# 1. Include paths.
for L in $layers; do
  view=$tmp/view-$L
  mkdir -p "$view"
  for a in $(allowed "$L"); do cp -R "$src/$a" "$view/$a"; done
  n=0 before=$fail
  for f in "$view/$L"/*.c "$view/$L"/*.h; do
    [ -e "$f" ] || continue
    rel=$L/$(basename "$f")
    n=$((n + 1))
    if grep -nE '^[ \t]*#[ \t]*include[ \t]*"[^"]*\.\./' "$f" >"$tmp/dotdot"; then
      bad "$rel includes by a ../ path: $(head -1 "$tmp/dotdot")"
      continue
    fi
    # -x c: headers are preprocessed as they are, alone.
    if ! $cc -x c -M $cflags -I"$view" "$f" >"$tmp/deps" 2>"$tmp/err"; then
      bad "$rel includes outside $(allowed "$L" | sed 's/ /, /g'): $(grep -m1 -E 'error' "$tmp/err" | sed "s|$view/||")"
      continue
    fi
    if [ "$L" != common ] && ! socket_exception "$rel"; then
      sock=$(tr ' \\' '\n\n' <"$tmp/deps" | grep -E "$socket_headers" | sed 's|.*/include/||' | sort -u)
      [ -z "$sock" ] || bad "$rel pulls in socket headers: $(echo $sock)"
    fi
  done
  for f in "$src/$L"/*.cu "$src/$L"/*.cuh; do
    [ -e "$f" ] || continue
    rel=$L/$(basename "$f")
    n=$((n + 1))
    grep -hE '^[ \t]*#[ \t]*include[ \t]*"' "$f" | sed -E 's/^[^"]*"([^"]*)".*/\1/' |
      while read -r h; do
        case $h in
          */*) layer=${h%%/*}
               case " $(allowed "$L") " in *" $layer "*) ;; *) echo "$h" ;; esac ;;
          *) [ -e "$src/$L/$h" ] || [ -e "$inc/$h" ] || echo "$h" ;;
        esac
      done >"$tmp/cuda_bad"
    [ -s "$tmp/cuda_bad" ] && bad "$rel includes outside $(allowed "$L" | sed 's/ /, /g'): $(echo $(cat "$tmp/cuda_bad"))"
  done
  [ "$fail" -eq "$before" ] && ok "src/$L: $n files include only $(allowed "$L" | sed 's/ / and /') (and include/)"
done

# 2. and 3. The objects libtool built for libgcoll (the SPANK plugin's
# copies of the graph code are the same sources).
objects() {
  for lo in "$build/src/$1"/*.lo; do
    [ -e "$lo" ] || continue
    case $(basename "$lo") in spank_gcoll_la-*) continue ;; esac
    pic=$(sed -n "s/^pic_object='\(.*\)'/\1/p" "$lo")
    [ -n "$pic" ] && [ "$pic" != none ] && echo "$build/src/$1/$pic"
  done
}
for L in $layers; do
  objects "$L" >"$tmp/objs-$L"
  [ -s "$tmp/objs-$L" ] || { echo "FAIL: no objects under $build/src/$L (build first)"; exit 99; }
  xargs nm --defined-only <"$tmp/objs-$L" | awk 'NF == 3 && $2 ~ /[A-Z]/ { print $3 }' |
    sort -u >"$tmp/defs-$L"
done
# Everything libgcoll defines, whatever the layer, for the weak references.
for d in "$build"/src/*/; do objects "$(basename "$d")"; done | xargs nm --defined-only |
  awk 'NF == 3 && $2 ~ /[A-Z]/ { print $3 }' | sort -u >"$tmp/defs-all"
for L in $layers; do
  for a in $(allowed "$L"); do cat "$tmp/defs-$a"; done | sort -u >"$tmp/may"
  before=$fail
  while read -r o; do
    # A weak reference may name a symbol this configuration leaves out
    # (exec_host.c's gcoll_exec_cuda_ops without CUDA): a fault only when
    # another layer defines it.
    out=$( { nm -u "$o" | awk '$1 == "U" { print $2 }'
             nm -u "$o" | awk '$1 != "U" { print $2 }' | sort -u | comm -12 - "$tmp/defs-all"; } |
          grep -E '^(gcoll|nccl)' | sort -u | comm -23 - "$tmp/may")
    [ -z "$out" ] || bad "$L/$(basename "$o" .o) uses symbols of another layer: $(echo $out)"
    if [ "$L" != common ]; then
      calls=$(nm -u "$o" | awk '{ print $2 }' | sed 's/@.*//' | grep -xE "$socket_calls")
      [ -z "$calls" ] || bad "$L/$(basename "$o" .o) calls socket functions: $(echo $calls)"
    fi
  done <"$tmp/objs-$L"
  [ "$fail" -eq "$before" ] && ok "src/$L: $(wc -l <"$tmp/objs-$L") objects use only $(allowed "$L" | sed 's/ / and /')$([ "$L" != common ] && echo ", no socket call")"
done

echo "test_layering: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
