#!/usr/bin/env bash
# A virtualenv in .venv with the Python packages the integration tests use (PyPI; tests
# and tooling only, never the server). Idempotent.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="$root/.venv"
req="$root/tests/integration/requirements.txt"
stamp="$venv/.requirements.sha256"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
want="$(sha256sum "$req" | cut -d' ' -f1)"
if [ ! -f "$stamp" ] || [ "$(cat "$stamp")" != "$want" ]; then
  "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$req"
  echo "$want" > "$stamp"
fi
