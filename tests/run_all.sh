#!/usr/bin/env bash
# The whole test suite in one pytest run (unit, integration, e2e) but the `long` suites and, for now,
# the browser suite (`make test-browser`: 16-25 minutes on the loaded 2-core machine, not yet timed idle)
# (`make test-long`); benchmarks are separate.
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=()
for d in tests/unit tests/integration tests/e2e; do [ -d "$d" ] && dirs+=("$d"); done
exec .venv/bin/python -m pytest "${dirs[@]}" -q -p no:cacheprovider -m "not long" --durations=20 "$@"
