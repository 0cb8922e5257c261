#!/usr/bin/env bash
# Installs the servers the shared-state tests start on loopback: redis-server and PostgreSQL
# (Debian packages). Idempotent and quiet; only acts as root and only for what is missing.
# The test fixtures start and stop their own instances in temporary folders; nothing runs as a
# system service.
set -euo pipefail
missing=()
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
if ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 && ! command -v initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" != "0" ]; then
  echo "scripts/services.sh: missing ${missing[*]} (run as root, or install them, to run the shared-state tests)" >&2
  exit 0
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq >/dev/null
apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
# The Debian postgresql package may start a cluster on 5432 as a service; the tests use their own.
