# esp — two commands on a fresh machine: `make demo` and `make test`.
# Everything installs into .venv/ at the repo root; JVM jars into .esp/jars (both ignored).

PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
ESP := $(BIN)/esp
STAMP := $(VENV)/.installed
JARS_STAMP := .esp/jars/.resolved
S3A_JARS_STAMP := .esp/jars/.resolved-s3a
PYTEST_ARGS ?=

export GX_ANALYTICS_ENABLED := false

# The test runs' JVMs (the broker, each stream's Spark driver) live minutes: C1 alone compiles
# enough, and C2's compiler threads cost more CPU than they save on 2 cores (the e2e step-up test:
# 252 s -> 183 s, its Spark driver's CPU 177 s -> 123 s).
TEST_JVM_OPTIONS ?= -XX:TieredStopAtLevel=1
test test-unit test-integration test-browser test-long test-cluster: export JDK_JAVA_OPTIONS := $(TEST_JVM_OPTIONS)

.PHONY: install jars jars-s3a chromium lint test test-unit test-integration test-long test-browser test-cluster soak endurance demo demo-stop ui clean help

help:
	@echo "make demo   install, start Kafka + Dagster + the word-count stream under load, print the UI address"
	@echo "make test   install, lint (ruff, mypy) and run all tests (unit, integration on the real broker and Spark, Dagster, the UI in Chromium)"
	@echo "make lint   ruff (lint + format check) over the project, mypy over the typed packages"
	@echo "make chromium  install Debian's Chromium for the browser tests when it is missing"
	@echo "make test-browser  only the real-browser tests of the Dagster UI (Chromium + Playwright; make test runs them too)"
	@echo "make test-long  the minutes-long suites (Dagster daemon / code server killed under a resize run, the SIGKILL matrix, admission and per-channel cap streams)"
	@echo "make test-cluster  the cluster profile: both pipelines on 3-node Kafka + Spark standalone + object store, executors following channels 2-4-2, a worker and a broker SIGKILLed; each piece alone"
	@echo "make soak   the 30-minute exactly-once soak (kills + rescales), report in benchmarks/results/soak.json"
	@echo "make endurance  the 60-minute endurance run (no kills, topics with a retention): disk, files, memory flat"

$(VENV)/bin/python:
	@command -v $(PYTHON) >/dev/null 2>&1 || { echo "error: $(PYTHON) not found; install Python 3.11"; exit 1; }
	$(PYTHON) -m venv $(VENV)

# Bytecode compiled at install and cached after: every Python process of the stack (Dagster's run
# workers, code servers, the stream drivers) otherwise compiles each module it imports, every time
# (here `import great_expectations` took 18.8 s without, 7.4 s with; the code location 6.4 s, 3.0 s).
$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(BIN)/python -m pip install --quiet --upgrade pip uv
	$(BIN)/uv pip install --python $(BIN)/python --quiet --compile-bytecode -e '.[dev]'
	# PySpark is a source distribution. Where the index's cached answer is stale (on this machine, at
	# every install) uv downloads and builds it again and keeps each build, ~1.1 GB apiece: 47 clean
	# installs had left 49 GB in uv's cache. Pruning removes only what no install can reach any more.
	$(BIN)/uv cache prune --quiet
	@touch $@

install: $(STAMP)

$(JARS_STAMP): infra/jvm/pom.xml infra/jvm/kafka-broker/pom.xml infra/jvm/spark-kafka/pom.xml \
		infra/jvm/local-fs/pom.xml $(wildcard infra/jvm/local-fs/src/main/java/dev/esp/hadoop/*.java) | $(STAMP)
	@command -v java >/dev/null 2>&1 || { echo "error: java not found; install a Java 17 JDK (apt-get install openjdk-17-jdk-headless)"; exit 1; }
	@command -v mvn >/dev/null 2>&1 || { echo "error: mvn not found; install Apache Maven (apt-get install maven)"; exit 1; }
	$(ESP) infra jars --force
	@touch $@

jars: $(JARS_STAMP)

# Hadoop's s3a connector (~690 MB) only for stream folders on an object store: the cluster profile's tests.
$(S3A_JARS_STAMP): infra/jvm/pom.xml infra/jvm/spark-s3a/pom.xml | $(JARS_STAMP)
	rm -rf .esp/jars/spark-s3a && $(ESP) infra jars --object-store
	@touch $@

jars-s3a: $(S3A_JARS_STAMP)

# The browser tests drive Debian's Chromium: Playwright from PyPI cannot download its own browser here.
# Nothing to do (and quick) when a chromium is on the PATH; installed as root, or through sudo.
chromium:
	@command -v chromium >/dev/null 2>&1 || { \
	  SUDO=$$([ "$$(id -u)" = 0 ] || echo sudo); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq chromium >/dev/null; }
	@command -v chromium >/dev/null 2>&1 || { echo "error: chromium not installed (apt-get install chromium)"; exit 1; }

# House rules first: a lint or type finding fails the run before the long suites start.
lint: install
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: lint jars chromium
	bash tests/run_all.sh $(PYTEST_ARGS)

test-unit: install jars
	$(BIN)/python -m pytest tests/unit -q $(PYTEST_ARGS)

test-integration: install jars
	$(BIN)/python -m pytest tests/integration -q -m "not long and not cluster" $(PYTEST_ARGS)

# The real-browser tests of the Dagster UI (Playwright driving Debian's Chromium), screenshots kept
# under pytest's tmp folder; ESP_SAVE_SCREENSHOTS=docs/screenshots refreshes the README's tour.
test-browser: install jars chromium
	$(BIN)/python -m pytest tests/browser -q -p no:cacheprovider $(PYTEST_ARGS)

# Minutes-long suites kept out of `make test`'s budget: the soak's Dagster faults one by one, the
# mid-batch SIGKILL matrix, the stages sensor under Dagster, and the stream tests of the options that
# are off by default (admission control, the per-channel records cap).
test-long: install jars
	$(BIN)/python -m pytest tests -q -p no:cacheprovider -m long $(PYTEST_ARGS)

# The tests of esp's cluster pieces (3-node KRaft Kafka, Spark standalone cluster, object-store
# roots) and of the whole cluster profile (both pipelines, executors following channels, a worker
# and a broker killed), each started in a temporary run folder: about 10 minutes, so kept out of
# `make test`, which runs the single broker.
test-cluster: install jars-s3a
	$(BIN)/python -m pytest tests -q -p no:cacheprovider -m cluster --durations=10 $(PYTEST_ARGS)

# The long soak: not part of `make test` (a 90-second one is); SOAK_MINUTES and SOAK_SEED override.
SOAK_MINUTES ?= 30
SOAK_SEED ?= 7
soak: install jars
	$(ESP) soak --minutes $(SOAK_MINUTES) --seed $(SOAK_SEED) --json benchmarks/results/soak.json

# The endurance run: rescales but no kills, every topic's retention cut to 10 minutes; the streams'
# folders, the broker's log, Dagster's storage and the processes' memory must stay flat after the
# first retention cycle. ENDURANCE_MINUTES and SOAK_SEED override.
ENDURANCE_MINUTES ?= 60
endurance: install jars
	$(ESP) soak --minutes $(ENDURANCE_MINUTES) --seed $(SOAK_SEED) --no-kills --json benchmarks/results/endurance.json

demo: install jars
	bash infra/demo.sh

demo-stop:
	bash infra/demo.sh stop

ui: install jars
	$(ESP) ui

clean:
	rm -rf $(VENV) .esp .pytest_cache .hypothesis
