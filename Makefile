# The two commands (see README): `make demo` runs isrwatch on its embedded default (`make demo-real`: on real brokers),
# `make test` provisions everything the suite needs and runs it. `make lab` starts a real Kafka cluster.
SHELL := /bin/bash
VENV := .venv
LAB_DIR ?= var/lab
# Maven keeps its cache under .tools/ like every other provisioned tool.
MVN := mvn -q -B -Dstyle.color=never -Dmaven.repo.local=$(CURDIR)/.tools/m2
export PATH := $(CURDIR)/.tools/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
# Jars, the agent's Maven cache and other provisioned tools stay in this clone (an installed wheel uses ~/.cache).
export ISRWATCH_TOOLS := $(CURDIR)/.tools
export PYTHONWARNINGS := ignore::FutureWarning

.PHONY: demo demo-real test check lint bench setup lab lab-down agent

setup:
	bash scripts/provision.sh --python-only

demo: setup
	$(VENV)/bin/isrwatch demo

# The same story on real Kafka brokers running isrwatch-agent (Java 17 and Maven; jars fetched once into .tools/):
# KRaft 4.x by default (what a newcomer runs); KAFKA=3.9 for ZooKeeper mode. `make lab` runs the same Kafka.
KAFKA ?= 4.4
demo-real:
	bash scripts/provision.sh --lab
	$(MAKE) --no-print-directory agent
	$(VENV)/bin/isrwatch demo --real --kafka $(KAFKA)

test:
	bash scripts/provision.sh
	$(MAKE) --no-print-directory agent
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider --durations=25 -n 2 --dist loadscope

lab:
	bash scripts/provision.sh --lab
	$(VENV)/bin/isrwatch lab up --kafka $(KAFKA) --dir $(LAB_DIR)

lab-down:
	$(VENV)/bin/isrwatch lab down --dir $(LAB_DIR)

lint: setup
	$(VENV)/bin/ruff check .

# The fast loop (seconds, no apt-get, no JVM): style, types of the core, the layering, the core's tests.
check: setup
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider -m "not spark" tests/state

bench: setup
	$(VENV)/bin/isrwatch bench engine

# The broker agent (agent/README.md): builds agent/target/isrwatch-agent.jar and runs its unit tests
# (Maven's output only on failure).
agent:
	@cd agent && out=$$($(MVN) package 2>&1) || { echo "$$out"; exit 1; }; \
	  n=$$(cat target/surefire-reports/*.txt | grep -o 'Tests run: [0-9]*' | awk '{n += $$3} END {print n}'); \
	  echo "agent: $$n unit tests passed; built agent/target/isrwatch-agent.jar"
