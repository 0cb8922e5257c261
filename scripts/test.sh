#!/usr/bin/env bash
# The whole test suite (the real llama.cpp server included). CI runs exactly this.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh local,dev
bash scripts/services.sh
# Lint and types first (pyproject.toml: [tool.ruff], [tool.mypy] --strict over the whole llmroute package).
.venv/bin/python -m ruff check llmroute tests benchmarks
.venv/bin/python scripts/gen_completions.py --check  # llmroute/completions.py is written from scripts/completions_params.py
.venv/bin/python scripts/gen_sync.py --check  # the sync shells are written from the async ones (scripts/gen_sync.py)
.venv/bin/python -m mypy
exec .venv/bin/python -m pytest -q -p no:cacheprovider "$@"
