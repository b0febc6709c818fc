#!/bin/bash
# Pack a folder of wheels as the device tool carries them: one tar, xz-compressed, split into parts
# of PART_MB (default 32) in OUT_DIR/c00, c01, ... (one folder a call carries), the SHA256 of the
# whole in the last folder. Wheels over 1 MB are re-zipped uncompressed first (after deleting the
# members matching the globs given for them in DROP, "wheel-prefix:glob ..."), so xz sees raw bytes.
# calibration/engines/device.sh `stash` / `start` join and install them on the GPU host.
#
#   bash calibration/engines/bundles/pack-bundle.sh WHEEL_DIR OUT_DIR [PART_MB]
set -euo pipefail
src=${1:?usage: pack-bundle.sh WHEEL_DIR OUT_DIR [PART_MB]}; out=${2:?OUT_DIR}; mb=${3:-32}
work=$(mktemp -d); trap 'rm -rf "$work"' EXIT
mkdir -p "$work/whl" "$out"
set -f; rules=(${DROP:-}); set +f  # globs kept as text
for w in "$src"/*.whl; do
  name=$(basename "$w"); globs=()
  for rule in "${rules[@]}"; do [[ $name == ${rule%%:*}* ]] && globs+=("${rule#*:}"); done
  if [ ${#globs[@]} -eq 0 ] && [ "$(stat -c %s "$w")" -le 1000000 ]; then cp "$w" "$work/whl/"; continue; fi
  d=$(mktemp -d -p "$work")
  (cd "$d" && unzip -q "$w" && for g in "${globs[@]}"; do find . -path "./$g" -type f -delete; done \
     && zip -q -0 -r "$work/whl/$name" .)
  rm -rf "$d"
done
tar -C "$work/whl" -cf - . | xz -T0 -6 > "$work/bundle.tar.xz"
rm -rf "$out"/c[0-9]*
split -b "${mb}m" -d "$work/bundle.tar.xz" "$work/part_"
n=0; for p in "$work"/part_*; do d=$(printf "%s/c%02d" "$out" "$n"); mkdir -p "$d"; mv "$p" "$d/"; n=$((n + 1)); done
last=$(printf "%s/c%02d" "$out" $((n - 1)))
sha256sum "$work/bundle.tar.xz" | awk '{print $1}' > "$last/SHA256"
echo "wheels: $(ls "$work/whl" | wc -l); bundle: $(stat -c %s "$work/bundle.tar.xz") bytes in $n parts; SHA256 in $last"
