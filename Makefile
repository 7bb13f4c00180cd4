# The two commands a newcomer needs: `make demo` and `make test`. Both set everything up by themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo demo-handoff test lint venv bench bench-quick clean

$(STAMP): pyproject.toml $(wildcard setup.py) $(wildcard eventlog/*.c) $(wildcard eventlog/*/*.c)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[all,test,lint]"
	@# the JVM tap for the installed pyspark's Spark, from its jars (pip builds the package before pyspark is there)
	$(PY) -m connectors.spark.jvm >/dev/null || echo "the JVM tap is not prebuilt for this pyspark: it compiles on first use"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py --log ./demo-log
	@echo "next: make demo-handoff   (job A -> Apache Kafka -> job B, with job A killed and restarted)"

DEMO_KAFKA_PORT ?= 19692

# the cross-job handoff on Apache Kafka, started for the walkthrough and stopped after it: job B follows while
# job A is SIGKILLed mid-way and restarted; job B still sees every epoch once (README, "Cross-job handoff")
demo-handoff: $(STAMP)
	$(PY) tools/kafka-broker start --fresh --port $(DEMO_KAFKA_PORT)
	$(PY) examples/handoff/walkthrough.py --bootstrap 127.0.0.1:$(DEMO_KAFKA_PORT); rc=$$?; \
	$(PY) tools/kafka-broker stop --port $(DEMO_KAFKA_PORT); exit $$rc

KAFKA_PORT ?= 19092
# pytest-xdist workers (--dist loadgroup keeps each xdist_group, tests/conftest.py, on one worker, in order):
# two take ~13 min on 2 cores where one process takes ~20; PYTEST_WORKERS=0 runs everything in one process
PYTEST_WORKERS ?= 2

# the Kafka tests run against Apache Kafka (one local broker, KRaft), started for the run and stopped after it;
# the first run fetches Kafka's jars through Maven into ~/.cache/eventlog (needs Java 17 and Maven)
test: $(STAMP)
	$(PY) tools/kafka-broker start --fresh --port $(KAFKA_PORT)
	EVENTLOG_KAFKA=127.0.0.1:$(KAFKA_PORT) $(PY) -m pytest -q -n $(PYTEST_WORKERS) --dist loadgroup -m "not serial" $(PYTEST_ARGS); rc=$$?; \
	EVENTLOG_KAFKA=127.0.0.1:$(KAFKA_PORT) $(PY) -m pytest -q -m serial $(PYTEST_ARGS); rc2=$$?; \
	if [ $$rc -eq 0 ] && [ $$rc2 -ne 5 ]; then rc=$$rc2; fi; \
	$(PY) tools/kafka-broker stop --port $(KAFKA_PORT); exit $$rc

# the layering contract (import-linter: DESIGN.md's layers, no import cycle), ruff, and a type check of the public
# modules (mypy); the configuration of all three is in pyproject.toml
lint: $(STAMP)
	$(VENV)/bin/lint-imports
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

# each benchmark prints ratios against a baseline measured in the same run; results go to BENCHMARKS.md
bench: $(STAMP)
	$(PY) tools/bench/bench_bundle.py
	$(PY) tools/bench/bench_file_log.py
	$(PY) tools/bench/bench_replay.py
	$(PY) tools/bench/bench_cli_startup.py
	$(PY) tools/kafka-broker start --fresh --port $(KAFKA_PORT)
	$(PY) tools/bench/bench_kafka.py --bootstrap 127.0.0.1:$(KAFKA_PORT); \
	$(PY) tools/bench/bench_runtime.py --kafka 127.0.0.1:$(KAFKA_PORT); \
	$(PY) tools/kafka-broker stop --port $(KAFKA_PORT)
	$(PY) tools/bench/bench_spark.py

# every headline ratio in a few minutes (smaller inputs, the same interleaved rounds; starts its own broker)
bench-quick: $(STAMP)
	$(PY) tools/bench/quick.py

clean:
	rm -rf $(VENV) demo-log build *.egg-info
