# The two quick-start commands:  make demo   and   make test
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-fast bench-quick clean

$(BIN)/intune-flow: pyproject.toml constraints.txt
	@command -v uv >/dev/null 2>&1 || $(PY) -m pip install -q uv
	uv venv -q --allow-existing -p $(PY) $(VENV)
	uv pip install -q -p $(BIN)/python --find-links "$${PIP_FIND_LINKS:-/opt/wheels}" \
		-c constraints.txt --config-settings editable_mode=compat -e ".[all,test]"
	@touch $@

setup: $(BIN)/intune-flow

demo: setup  ## the nightly retraining demo, run twice: the second night hits the cache
	$(BIN)/intune-flow demo

# Two workers: most of the suite's wall time is tuning budgets, flows and DAG runs that wait,
# so two processes halve it even on two cores (each test keeps its own homes and S3 server).
PYTEST := $(BIN)/python -m pytest -q -n 2 --dist worksteal

test: setup  ## the whole test suite, slow cases included
	$(PYTEST)

test-fast: setup
	$(PYTEST) -m "not slow"

bench-quick: setup
	$(BIN)/intune-flow bench --quick

clean:
	rm -rf $(VENV) .intune_flow
