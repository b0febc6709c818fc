#!/bin/bash
# vLLM 0.26.0's offline bundle in parts the device tool carries with the working tree (a call
# carries at most 64 MiB; the tree is about 29 MB): the workplace's builder
# (../shared/engines/build-vllm-bundle.sh: the wheels less what a Hopper GPU does not load, as one
# tar) re-packed by calibration/engines/bundles/pack-bundle.sh (xz, PART_MB-sized parts in OUT_DIR/c00, c01, ...).
#
#   bash calibration/engines/bundles/build-vllm-bundle.sh OUT_DIR [PART_MB=32] [BUILDER=../shared/engines/build-vllm-bundle.sh]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
out=${1:?usage: build-vllm-bundle.sh OUT_DIR [PART_MB] [BUILDER]}; mb=${2:-32}
builder=${3:-$here/../../../../shared/engines/build-vllm-bundle.sh}
[ -f "$builder" ] || { echo "build-vllm-bundle.sh: the builder $builder is not here (give its path)"; exit 2; }
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
bash "$builder" "$work/tar" 100000 > /dev/null
mkdir -p "$work/whl" && cat "$work"/tar/part_* | tar -x -C "$work/whl"
bash "$here/pack-bundle.sh" "$work/whl" "$out" "$mb"
