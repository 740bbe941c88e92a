# The README's two commands: `make demo` and `make test`. Both run `make setup` first.
SHELL := /bin/bash
VENV  ?= .venv
PY    := $(VENV)/bin/python
TARGET ?= engine
PYTEST_ARGS ?=

FUZZ_MINUTES ?= 10
FUZZ_FILES = $(sort $(wildcard tests/test_fuzz_*.py))

.PHONY: setup demo test bench fuzz lint clean help

help:
	@echo "make setup   install apt packages, $(VENV) and the project (root, idempotent)"
	@echo "make demo    setup, then the main demo on the $(TARGET) target (TARGET=bmv2 in the VM)"
	@echo "make test    setup, then the test suite"
	@echo "make bench   setup, then the benchmarks (figures, not pass/fail)"
	@echo "make fuzz    setup, then the fuzz tests long: FUZZ_MINUTES (default 10) shared by tests/test_fuzz_*.py"
	@echo "make clean   remove leftovers of crashed runs (only what rocelab created)"

setup:
	@bash testbed/install/setup.sh

# The demo twice on the engine: in virtual time (production units, the same figures on every
# machine), then in real time on Mininet (captures to open in Wireshark, the CLI's fabric).
demo: setup
	@if [ "$(TARGET)" = engine ]; then $(VENV)/bin/rocelab demo --clock virtual; fi
	$(VENV)/bin/rocelab demo --target $(TARGET)

test: setup
	$(PY) -m pytest $(PYTEST_ARGS)

bench: setup
	$(VENV)/bin/rocelab bench all

# Each fuzz file gets an equal share of FUZZ_MINUTES (ROCELAB_FUZZ_SECONDS is per file);
# `make test` runs the same tests short (a fixed, seeded number of inputs).
fuzz: setup
	@n=$(words $(FUZZ_FILES)); share=$$(( $(FUZZ_MINUTES) * 60 / n )); \
	for f in $(FUZZ_FILES); do \
	  echo "*** $$f: $$share s"; \
	  ROCELAB_FUZZ_SECONDS=$$share $(PY) -m pytest -s -q -W ignore::DeprecationWarning $$f || exit 1; \
	done

lint:
	for f in testbed/install/setup.sh testbed/install/provision-vagrant.sh testbed/install/build-bmv2.sh .ci/run; do \
		bash -n "$$f" || exit 1; done
	shellcheck testbed/install/setup.sh testbed/install/provision-vagrant.sh testbed/install/build-bmv2.sh .ci/run

clean:
	@if [ -x $(VENV)/bin/rocelab ]; then $(VENV)/bin/rocelab clean; fi
