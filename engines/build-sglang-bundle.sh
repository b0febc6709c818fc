#!/bin/bash
# Build an offline install bundle of SGLang 0.5.15 (the newest release pinned to torch 2.11) for a
# GPU host with Python 3.12, torch 2.11.0+cu130 and no package access, in parts small enough for
# the device tool (each call carries at most 64 MiB with the working tree).
#
#   bash engines/build-sglang-bundle.sh OUT_DIR [PART_MB=32]
#
# Writes OUT_DIR/c00/part_00, OUT_DIR/c01/part_01, ... (one folder a call carries) and the
# bundle's SHA256 in the last folder. A call carries the working tree too (about 29 MB tracked
# now), so PART_MB plus the tree must stay under 64 MiB: `du -sh --exclude=.git .` tells.
# The bundle also holds what the host lacks beside SGLang (simpy, decorator, and the transformers
# and tokenizers SGLang pins: the host's transformers 5.17 registers a config SGLang registers too). The bundle is one tar of wheels, xz-compressed; the large
# wheels are re-zipped uncompressed first so xz sees their raw bytes. Left out, and why:
# - sglang-kernel: sgl_kernel/sm100/common_ops (Blackwell; a Hopper GPU loads sm90/);
#   FA3 (flash_ops.abi3.so, 1.76 GB) and FlashMLA are kept;
# - flashinfer-cubin: its SM100 / SM103 / SM110 / SM120 cubins (1.7 GB of 1.76);
# - the dependencies that engines/sglang-0.5.15-deps.txt says are not imported on this path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-sglang-bundle.sh OUT_DIR [PART_MB]}; mb=${2:-32}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_31_x86_64
      --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_5_x86_64 --platform any)
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --abi cp312 --abi abi3 --abi none "${plat[@]}" -d "$work/dl" "$@"; }
mkdir -p "$work/dl" "$work/whl" "$out"
dl sglang==0.5.15 sglang-kernel==0.4.4 flashinfer-cubin==0.6.12
dl -r "$here/sglang-0.5.15-deps.txt"
dl simpy==4.1.1 decorator==5.2.1 transformers==5.12.1 tokenizers==0.22.2
restore() {  # $1 wheel, rest: globs to delete; re-zipped uncompressed into $work/whl
  local w=$1; shift; local d; d=$(mktemp -d -p "$work")
  (cd "$d" && unzip -q "$w" && for g in "$@"; do find . -path "./$g" -type f -delete; done \
     && zip -q -0 -r "$work/whl/$(basename "$w")" .)
  rm -rf "$d"
}
for w in "$work"/dl/*.whl; do
  case $(basename "$w") in
    sglang_kernel-*) restore "$w" 'sgl_kernel/sm100/*' ;;
    flashinfer_cubin-*) restore "$w" '*Sm100*' '*Sm103*' '*sm100f*' '*sm103a*' '*sm_10[0-9]a*' '*sm_110a*' '*sm_12*' ;;
    *) if [ "$(stat -c %s "$w")" -gt 1000000 ]; then restore "$w"; else cp "$w" "$work/whl/"; fi ;;
  esac
done
tar -C "$work/whl" -cf - . | xz -T0 -6 > "$work/bundle.tar.xz"
rm -rf "$out"/c[0-9]*
split -b "${mb}m" -d "$work/bundle.tar.xz" "$work/part_"
n=0; for p in "$work"/part_*; do d=$(printf "%s/c%02d" "$out" "$n"); mkdir -p "$d"; mv "$p" "$d/"; n=$((n + 1)); done
last=$(printf "%s/c%02d" "$out" $((n - 1)))
sha256sum "$work/bundle.tar.xz" | awk '{print $1}' > "$last/SHA256"
echo "wheels: $(ls "$work/whl" | wc -l); bundle: $(stat -c %s "$work/bundle.tar.xz") bytes in $n parts; SHA256 in $last"
