# The two set-up commands: `make demo` and `make test` (see README.md).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: demo test test-slurm-versions lint install minicluster minicluster-down bench clean

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
	@if [ "$$CI" = "true" ]; then $(MAKE) --no-print-directory test-slurm-versions; fi

# The real-Slurm suites again on the newer Slurm versions, each from its Debian root
# (built once and cached; see deploy/minicluster/README.md). `make test` runs it
# after the suite when CI=true.
SLURM_VERSIONS_TESTED ?= 24.11 26.05
SLURM_VERSION_SUITES ?= -m slurm_versions tests
# Not on the roots: the DDP example's job runs inside the root, whose Python (3.13 on
# trixie and sid) cannot load this venv's PyTorch; it runs on 22.05 in `test`.
SLURM_VERSION_DESELECT ?= \
	--deselect tests/jobs/test_jobs_on_slurm.py::test_the_ddp_example_resumes_from_its_checkpoint_after_a_requeue

test-slurm-versions: $(STAMP)
	@set -e; for version in $(SLURM_VERSIONS_TESTED); do \
		echo "== real-Slurm suites on Slurm $$version"; \
		MEDBAY_TEST_SLURM=$$version $(PY) -m pytest $(SLURM_VERSION_SUITES) \
			$(SLURM_VERSION_DESELECT) $(PYTEST_ARGS); \
		deploy/minicluster/down --slurm $$version; \
	done

minicluster:
	deploy/minicluster/up

minicluster-down:
	deploy/minicluster/down

clean:
	rm -rf $(VENV) *.sqlite3 staticfiles
