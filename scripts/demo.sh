#!/usr/bin/env bash
# Runs the CLI end to end on a temporary SQLite database: migrate, enroll two PRs, show status.
set -euo pipefail
cb=${1:-convergebot}
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
export CONVERGEBOT_DATABASE_URL="sqlite:///$dir/convergebot.db"
export CONVERGEBOT_LOGGING_FORMAT=console
"$cb" migrate
"$cb" submit octo-org/widgets#101
"$cb" submit octo-org/widgets#102 --max-rounds 3 --no-merge
"$cb" submit octo-org/widgets#101          # idempotent: already running
"$cb" abandon octo-org/widgets#102
"$cb" submit octo-org/widgets#102          # a finished PR starts a new run
"$cb" status
"$cb" status octo-org/widgets#102 --json
