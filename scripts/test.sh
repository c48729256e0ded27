#!/usr/bin/env bash
# Runs WitCert's whole test suite on this machine: builds (scripts/setup.sh), fetches the
# default model, runs every CTest test (unit, golden, property, integration), the libFuzzer
# targets for a fixed number of inputs (a clang build in build-fuzz/), and the Python
# integration tests that drive a real `witcert serve` with real clients.
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

# Coverage-guided fuzzing (libFuzzer, ASan, UBSan) of the GGUF, safetensors, config.json,
# tokenizer.json, OpenAI request and server config parsers: a clang build of the six targets beside the main one, each run on a copy of its seed corpus
# for a fixed number of inputs from a fixed seed (so a run is reproducible). The CTest fuzz
# drivers above replay the corpora through the product build; this keeps the coverage-guided
# build linking and exercised.
fuzz_dir="${WITCERT_FUZZ_BUILD_DIR:-$root/build-fuzz}"
if [ ! -f "$fuzz_dir/build.ninja" ]; then
  CC=clang CXX=clang++ cmake -S "$root" -B "$fuzz_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DWITCERT_FUZZ=ON -DWITCERT_CUDA=OFF >/dev/null
fi
ninja -C "$fuzz_dir" gguf_fuzz hf_config_fuzz safetensors_fuzz hf_tokenizer_fuzz request_fuzz server_config_fuzz >/dev/null
fuzz_log="$fuzz_dir/fuzz.log"
for spec in "tests/fuzz/gguf_fuzz tests/fuzz/corpus 200000" \
            "tests/fuzz/hf_config_fuzz tests/fuzz/hf_config_corpus 100000" \
            "tests/fuzz/safetensors_fuzz tests/fuzz/safetensors_corpus 100000" \
            "tests/fuzz/hf_tokenizer_fuzz tests/fuzz/hf_tokenizer_corpus 30000" \
            "tests/server/fuzz/request_fuzz tests/server/fuzz/corpus 50000" \
            "tests/server/fuzz/server_config_fuzz tests/server/fuzz/config_corpus 50000"; do
  read -r target seeds runs <<<"$spec"
  corpus="$(mktemp -d)"
  cp "$root/$seeds"/* "$corpus"/
  if ! (cd "$corpus" && "$fuzz_dir/$target" -seed=1 -runs="$runs" -rss_limit_mb=4096 "$corpus" >"$fuzz_log" 2>&1); then
    tail -40 "$fuzz_log"
    echo "fuzzing failed: $target (reproducer in $corpus)" >&2
    exit 1
  fi
  echo "fuzzed $target: $(grep -E '^Done' "$fuzz_log")"
  rm -rf "$corpus"
done

if [ -d "$root/tests/integration" ] && ls "$root"/tests/integration/test_*.py >/dev/null 2>&1; then
  "$root/scripts/python_env.sh"
  "$root/.venv/bin/python" -m pytest -q "$root/tests/integration"
fi
