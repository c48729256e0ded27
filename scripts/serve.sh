#!/usr/bin/env bash
# Builds WitCert (installing its Debian packages if needed), fetches the default model and
# serves it: `witcert serve` on 127.0.0.1:8000 unless flags say otherwise. Extra arguments
# go to `witcert serve` (e.g. --port 9000 --kv-scheme int8-rtn --gate repair).
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${WITCERT_BUILD_DIR:-$root/build}"
"$root/scripts/setup.sh"
"$root/scripts/fetch_model.sh"
exec "$build_dir/server/witcert" serve --model "$root/models/SmolLM2-135M-Instruct.Q4_1.gguf" "$@"
