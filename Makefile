# The two set-up commands: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test lint install minicluster minicluster-down bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	DEBUG=$${DEBUG:-true} $(PY) manage.py demo $(DEMO_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	DEBUG=true $(PY) manage.py makemigrations --check --dry-run

test: $(STAMP)
	@if [ "$$CI" = "true" ]; then ./.ci/services; fi
	$(MAKE) --no-print-directory lint
	$(PY) -m pytest $(PYTEST_ARGS)

minicluster:
	deploy/minicluster/up

minicluster-down:
	deploy/minicluster/down

clean:
	rm -rf $(VENV) *.sqlite3 staticfiles
