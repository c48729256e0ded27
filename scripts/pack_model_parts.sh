#!/usr/bin/env bash
# Splits a model file into xz-compressed parts small enough for the GPU host's 64 MiB carry, so
# real-weight GPU runs can bring the default GGUF over consecutive device calls (the machine
# is released after ~30 s idle, so make the calls back to back).
#   scripts/pack_model_parts.sh MODEL OUT_PREFIX [PART_MB=45]
# writes OUT_PREFIX1/model.xz.part01, OUT_PREFIX2/model.xz.part02, ... (one folder per call's
# carry) and prints the command that reassembles the model on the GPU host:
#   cat /tmp/m/model.xz.part* | xz -d -T4 > /tmp/m/model.gguf   (copy each part to /tmp/m first)
set -euo pipefail
model="${1:?model file}"; prefix="${2:?output prefix, e.g. build/gpu_model}"; part_mb="${3:-45}"
tmp="$(mktemp)"
xz -6 -T2 -c "$model" > "$tmp"
split_dir="$(mktemp -d)"
trap 'rm -rf "$tmp" "$split_dir"' EXIT
split -b "$((part_mb * 1000 * 1000))" -d -a 2 "$tmp" "$split_dir/p"
n=0
for f in "$split_dir"/p*; do
  n=$((n + 1))
  mkdir -p "$prefix$n"
  mv "$f" "$prefix$n/model.xz.part$(printf %02d "$n")"
done
echo "$n parts of <= $part_mb MB under ${prefix}1..${prefix}$n (sha256 of the model: $(sha256sum "$model" | cut -c1-16))"
echo "on the GPU host, per call: mkdir -p /tmp/m && cp <carried dir>/model.xz.part* /tmp/m/"
echo "then: cat /tmp/m/model.xz.part* | xz -d -T4 > /tmp/m/model.gguf && export WITCERT_MODEL=/tmp/m/model.gguf"
