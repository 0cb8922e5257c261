#!/usr/bin/env bash
# Creates .venv (if missing) and installs llmroute with the given extras, from the package registry.
# Usage: scripts/setup.sh local,dev
set -euo pipefail
cd "$(dirname "$0")/.."
extras="${1:-local}"
python=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$python" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip >/dev/null 2>&1 || true
# setuptools prints an informational "Editable installation" notice on every editable build; it is
# not a deprecation and needs no action, so the build backend is told to skip it (only that one).
PYTHONWARNINGS="ignore:Editable installation" .venv/bin/python -m pip install --quiet -e ".[${extras}]"
