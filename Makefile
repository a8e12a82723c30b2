# Two commands for a newcomer: `make demo` runs the bridge on the embedded default,
# `make test` installs everything and runs the whole suite (what CI runs).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test lint unit integration bench clean

# setup.py and the Cython kernels too: the editable install builds the kernels in place.
$(STAMP): pyproject.toml setup.py $(wildcard service/pgbridge/*/_native.pyx)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e ".[dev]"
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(VENV)/bin/pgbridge demo

lint: install
	$(VENV)/bin/ruff check service tests bench spark jvm setup.py
	$(VENV)/bin/mypy

test: lint
	$(PY) -m pytest -q -p no:cacheprovider

unit: install
	$(PY) -m pytest -q tests/unit

integration: install
	$(PY) -m pytest -q -m integration

bench: install
	$(PY) bench/run.py

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache
