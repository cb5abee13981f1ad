# The two commands (see README): `make demo` runs isrwatch on its embedded default,
# `make test` provisions everything the suite needs and runs it. `make lab` starts a real Kafka cluster.
SHELL := /bin/bash
VENV := .venv
LAB_DIR ?= var/lab
export PATH := $(CURDIR)/.tools/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export PYTHONWARNINGS := ignore::FutureWarning

.PHONY: demo test check lint bench setup lab lab-down

setup:
	bash scripts/provision.sh --python-only

demo: setup
	$(VENV)/bin/isrwatch demo

test:
	bash scripts/provision.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports --no-cache
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

lab:
	bash scripts/provision.sh --lab
	$(VENV)/bin/isrwatch lab up --dir $(LAB_DIR)

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
