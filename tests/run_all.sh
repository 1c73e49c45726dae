#!/usr/bin/env bash
# The whole test suite but the `long` suites (`make test-long`) and the cluster's (`make test-cluster`);
# benchmarks are separate. Two pytest runs:
#   1. the unit tests on both cores (pytest-xdist): pure code, fakes and single-process Spark, each
#      test in its own folder, so they share nothing; `worksteal`: the few Spark-heavy tests that
#      come last in the order are shared out too;
#   2. everything that starts the real stack (integration, e2e, then the real-browser tests, which
#      share one stack started when the first of them runs), one test at a time: two streams side
#      by side on 2 cores would slow each other past their timeouts.
# Both always run; the exit status is the first non-zero one. Arguments go to both runs.
set -uo pipefail
cd "$(dirname "$0")/.."
python=.venv/bin/python
common=(-q -p no:cacheprovider -m "not long and not cluster")

"$python" -m pytest tests/unit "${common[@]}" -n 2 --dist worksteal --durations=10 "$@"
unit=$?

dirs=()
for d in tests/integration tests/e2e tests/browser; do [ -d "$d" ] && dirs+=("$d"); done
"$python" -m pytest "${dirs[@]}" "${common[@]}" --durations=20 "$@"
stack=$?

# 5 is pytest's "no tests collected": arguments that select tests of one run only.
[ "$unit" -eq 5 ] && unit=0
[ "$stack" -eq 5 ] && stack=0
[ "$unit" -ne 0 ] && exit "$unit"
exit "$stack"
