#!/usr/bin/env bash
# Runs WitCert's whole test suite on this machine: builds (scripts/setup.sh), fetches the
# default model, runs every CTest test (unit, golden, property, integration) and the
# Python integration tests that drive a real `witcert serve` with real clients.
#
# The model is required here: tests that read it fail, rather than skip, when it is absent.
# GPU tests skip cleanly when no GPU is present.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build_dir="${WITCERT_BUILD_DIR:-$root/build}"
cd "$root"

"$root/scripts/setup.sh"
"$root/scripts/fetch_model.sh"

export WITCERT_REQUIRE_MODEL=1
# The full soundness property runs: S up to 131072 through the cache, 10^6 Tier B cells.
export WITCERT_LONG_TESTS=1
export WITCERT_MODEL="$root/models/SmolLM2-135M-Instruct.Q4_1.gguf"
export WITCERT_BIN="$build_dir/server/witcert"

jobs="${WITCERT_TEST_JOBS:-2}"
ctest --test-dir "$build_dir" --output-on-failure -j "$jobs" --timeout 900

if [ -d "$root/tests/integration" ] && ls "$root"/tests/integration/test_*.py >/dev/null 2>&1; then
  "$root/scripts/python_env.sh"
  "$root/.venv/bin/python" -m pytest -q "$root/tests/integration"
fi
