#!/usr/bin/env bash
# The storage tests start a throwaway PostgreSQL cluster from the installed server binaries.
# Install them from Debian's packages when they are missing and we may (root with apt-get).
set -euo pipefail
if [ -n "${CONVERGEBOT_TEST_POSTGRES_URL:-}" ] || command -v initdb >/dev/null \
   || compgen -G '/usr/lib/postgresql/*/bin/initdb' >/dev/null; then
  exit 0
fi
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing PostgreSQL from Debian packages..." >&2
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq postgresql >/dev/null
  exit 0
fi
echo "PostgreSQL server binaries not found: install PostgreSQL (e.g. 'sudo apt-get install postgresql')," >&2
echo "or point CONVERGEBOT_TEST_POSTGRES_URL at a server, or run only SQLite with CONVERGEBOT_TEST_BACKENDS=sqlite." >&2
exit 1
