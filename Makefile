# The two commands (see README): `make demo` runs isrwatch on its embedded default,
# `make test` provisions everything the suite needs and runs it. `make lab` starts a real Kafka cluster.
SHELL := /bin/bash
VENV := .venv
LAB_DIR ?= var/lab
export PATH := $(CURDIR)/.tools/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export PYTHONWARNINGS := ignore::FutureWarning

.PHONY: demo test lint bench setup lab lab-down

setup:
	bash scripts/provision.sh --python-only

demo: setup
	$(VENV)/bin/isrwatch demo

test:
	bash scripts/provision.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

lab:
	bash scripts/provision.sh --lab
	$(VENV)/bin/isrwatch lab up --dir $(LAB_DIR)

lab-down:
	$(VENV)/bin/isrwatch lab down --dir $(LAB_DIR)

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(VENV)/bin/isrwatch bench engine
