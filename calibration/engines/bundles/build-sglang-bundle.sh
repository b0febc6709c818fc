#!/bin/bash
# Build an offline install bundle of SGLang 0.5.15 (the newest release pinned to torch 2.11) for a
# GPU host with Python 3.12, torch 2.11.0+cu130 and no package access, in parts small enough for
# the device tool (each call carries at most 64 MiB with the working tree: 26 MB parts beside the 35 MB
# tree of 2026-12-07; 30 MB parts were refused).
#
#   bash calibration/engines/bundles/build-sglang-bundle.sh OUT_DIR [PART_MB=26]
#
# Writes OUT_DIR/c00/part_00, OUT_DIR/c01/part_01, ... (one folder a call carries) and the
# bundle's SHA256 in the last folder. A call carries the working tree too (about 35 MB tracked
# now), so PART_MB plus the tree must stay under 64 MiB: `du -sh --exclude=.git .` tells.
# Packed by calibration/engines/bundles/pack-bundle.sh. The bundle also holds what the host lacks beside SGLang (simpy, decorator, and the transformers
# and tokenizers SGLang pins: the host's transformers 5.17 registers a config SGLang registers too). The bundle is one tar of wheels, xz-compressed; the large
# wheels are re-zipped uncompressed first so xz sees their raw bytes. Left out, and why:
# - sglang-kernel: sgl_kernel/sm100/common_ops (Blackwell; a Hopper GPU loads sm90/);
#   FA3 (flash_ops.abi3.so, 1.76 GB) and FlashMLA are kept;
# - flashinfer-cubin: its SM100 / SM103 / SM110 / SM120 cubins (1.7 GB of 1.76);
# - the dependencies that calibration/engines/bundles/sglang-0.5.15-deps.txt says are not imported on this path.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-sglang-bundle.sh OUT_DIR [PART_MB]}; mb=${2:-26}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
plat=(--platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 --platform manylinux_2_24_x86_64
      --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_31_x86_64
      --platform manylinux_2_34_x86_64 --platform manylinux_2_35_x86_64 --platform manylinux1_x86_64
      --platform manylinux_2_5_x86_64 --platform any)
dl() { python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
        --abi cp312 --abi abi3 --abi none "${plat[@]}" -d "$work/dl" "$@"; }
mkdir -p "$work/dl" "$out"
dl sglang==0.5.15 sglang-kernel==0.4.4 flashinfer-cubin==0.6.12
dl -r "$here/sglang-0.5.15-deps.txt"
dl simpy==4.1.1 decorator==5.2.1 transformers==5.12.1 tokenizers==0.22.2
DROP="sglang_kernel-:sgl_kernel/sm100/* flashinfer_cubin-:*Sm100* flashinfer_cubin-:*Sm103* flashinfer_cubin-:*sm100f*
      flashinfer_cubin-:*sm103a* flashinfer_cubin-:*sm_10[0-9]a* flashinfer_cubin-:*sm_110a* flashinfer_cubin-:*sm_12*" \
  bash "$here/pack-bundle.sh" "$work/dl" "$out" "$mb"
