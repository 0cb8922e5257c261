#!/usr/bin/env bash
# Debian packages the tests need that pip cannot install (real servers the tests talk to).
# Idempotent: installs only what is missing, and only as root (CI runs as root).
# Usage: scripts/system_packages.sh [package:binary ...]   (default: redis-server:redis-server)
set -euo pipefail
wanted=("$@")
[ ${#wanted[@]} -eq 0 ] && wanted=("redis-server:redis-server")
missing=()
for item in "${wanted[@]}"; do
  pkg="${item%%:*}"; bin="${item##*:}"
  command -v "$bin" >/dev/null 2>&1 || missing+=("$pkg")
done
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != 0 ]; then
  echo "missing system packages: ${missing[*]} (run this script as root to install them)" >&2
  exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -q >/dev/null
apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
