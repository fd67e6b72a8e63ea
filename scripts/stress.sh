#!/usr/bin/env bash
# Run tests many times in a row under CPU load, to show they are not flaky:
#   scripts/stress.sh 100 tests/e2e/test_polling.py::test_a_pr_that_does_not_exist_ends_its_run_instead_of_polling_404s
# Keeps one busy process per core running beside pytest for the whole run (the load), and stops
# at the first failure. Backends as for the suite (CONVERGEBOT_TEST_BACKENDS).
set -euo pipefail
cd "$(dirname "$0")/.."
times=$1; shift
load=()
for _ in $(seq "$(nproc)"); do
  python3 -c 'while True: pass' & load+=($!)
done
trap 'kill "${load[@]}" 2>/dev/null' EXIT
CONVERGEBOT_TEST_REPEAT=$times .venv/bin/python -m pytest -q -x -p no:cacheprovider "$@"
