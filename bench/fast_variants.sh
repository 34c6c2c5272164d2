#!/usr/bin/env bash
# Builds libkerncap_entry.so with the launch fast path stopped early (entry_hooks.cpp
# KC_FAST_VARIANT 1-5) next to a copy of the installed injection library, one directory
# per variant, for bench/paired.py to run against (KERNCAP_INJECT_LIB=DIR/libkerncap_inject.so
# brings its sibling). Bench processes only: a variant miscounts launches on purpose.
#   bash bench/fast_variants.sh OUTDIR [VARIANT ...]      (default: 1 2 3 4 5)
set -euo pipefail
out=$1; shift
variants=${*:-1 2 3 4 5}
here=$(cd "$(dirname "$0")/.." && pwd)
inject=$(python3 -c 'from kerncap.core.native import inject_library; print(inject_library())')
incs=()  # cuda.h and cupti.h, wherever this toolkit keeps them
for d in ${CUDA_HOME:+$CUDA_HOME/include $CUDA_HOME/extras/CUPTI/include} /usr/local/cuda/include \
         /usr/local/cuda/extras/CUPTI/include /usr/local/cuda-*/include /usr/local/cuda-*/extras/CUPTI/include; do
  [ -f "$d/cuda.h" ] || [ -f "$d/cupti.h" ] && incs+=("-I$d")
done
for v in $variants; do
  d=$out/v$v; mkdir -p "$d"
  cp "$inject" "$d/"
  c++ -DKC_FAST_VARIANT="$v" -I"$here/native/capture" "${incs[@]}" \
    -O2 -DNDEBUG -fPIC -fvisibility=hidden -fvisibility-inlines-hidden -std=gnu++17 -shared \
    -static-libstdc++ -static-libgcc -Wl,--exclude-libs,ALL -Wl,--version-script="$here/native/capture/entry_exports.map" \
    -Wl,-soname,libkerncap_entry.so -o "$d/libkerncap_entry.so" "$here/native/capture/entry_hooks.cpp" -ldl
  echo "variant $v: $d"
done
