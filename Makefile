# The two commands (see README): `make demo` runs isrwatch on its embedded default,
# `make test` provisions everything the suite needs and runs it.
SHELL := /bin/bash
VENV := .venv
export PATH := $(CURDIR)/.tools/bin:$(CURDIR)/$(VENV)/bin:$(PATH)
export PYTHONWARNINGS := ignore::FutureWarning

.PHONY: demo test lint bench setup

setup:
	bash scripts/provision.sh --python-only

demo: setup
	$(VENV)/bin/isrwatch demo

test:
	bash scripts/provision.sh
	$(VENV)/bin/ruff check .
	$(VENV)/bin/python -m pytest -q -p no:cacheprovider

lint: setup
	$(VENV)/bin/ruff check .

bench: setup
	$(VENV)/bin/isrwatch bench engine
