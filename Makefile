# The two commands a newcomer needs: `make demo` and `make test`. Both set everything up by themselves.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

.PHONY: demo test venv bench clean

$(STAMP): pyproject.toml $(wildcard setup.py) $(wildcard eventlog/*.c)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/demo.py --log ./demo-log

KAFKA_PORT ?= 19092

# the Kafka tests run against Apache Kafka (one local broker, KRaft), started for the run and stopped after it;
# the first run fetches Kafka's jars through Maven into ~/.cache/eventlog (needs Java 17 and Maven)
test: $(STAMP)
	$(PY) tools/kafka-broker start --port $(KAFKA_PORT)
	EVENTLOG_KAFKA=127.0.0.1:$(KAFKA_PORT) $(PY) -m pytest -q $(PYTEST_ARGS); rc=$$?; \
	$(PY) tools/kafka-broker stop --port $(KAFKA_PORT); exit $$rc

# each benchmark prints ratios against a baseline measured in the same run; results go to BENCHMARKS.md
bench: $(STAMP)
	$(PY) tools/bench/bench_bundle.py
	$(PY) tools/bench/bench_file_log.py
	$(PY) tools/bench/bench_replay.py
	$(PY) tools/kafka-broker start --port $(KAFKA_PORT)
	$(PY) tools/bench/bench_kafka.py --bootstrap 127.0.0.1:$(KAFKA_PORT); \
	$(PY) tools/bench/bench_runtime.py --kafka 127.0.0.1:$(KAFKA_PORT); \
	$(PY) tools/kafka-broker stop --port $(KAFKA_PORT)
	$(PY) tools/bench/bench_spark.py

clean:
	rm -rf $(VENV) demo-log build *.egg-info
