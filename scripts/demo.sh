#!/usr/bin/env bash
# The main job on the embedded default: two local llama.cpp servers, no API keys.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh local
exec .venv/bin/llmroute demo "$@"
