#!/usr/bin/env bash
# The whole test suite, from any state of the checkout: set up (quick when done), lint, then pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
.venv/bin/ruff check .
.venv/bin/ruff format --check .
set +e
.venv/bin/python -m pytest "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then echo "test: pytest collected no tests; that is a failure" >&2; exit 1; fi
exit "$status"
