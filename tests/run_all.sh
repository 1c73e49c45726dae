#!/usr/bin/env bash
# The whole test suite in one pytest run (unit, integration, e2e, then the real-browser tests,
# which share one stack started when the first of them runs) but the `long` suites
# (`make test-long`) and the 3-node Kafka cluster's (`make test-cluster`); benchmarks are separate.
set -euo pipefail
cd "$(dirname "$0")/.."
dirs=()
for d in tests/unit tests/integration tests/e2e tests/browser; do [ -d "$d" ] && dirs+=("$d"); done
exec .venv/bin/python -m pytest "${dirs[@]}" -q -p no:cacheprovider -m "not long and not cluster" --durations=20 "$@"
