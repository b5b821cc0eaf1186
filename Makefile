# The two quick-start commands:  make demo   and   make test
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: setup demo test test-unit test-fast bench-quick clean

# --compile-bytecode: with PYTHONDONTWRITEBYTECODE set (as on these machines) nothing caches the
# .pyc files, and every process would compile TensorFlow's and torch's sources again (2-3x the
# CPU of an import; the test suite starts hundreds of such processes).
$(BIN)/intune-flow: pyproject.toml constraints.txt
	@command -v uv >/dev/null 2>&1 || $(PY) -m pip install -q uv
	uv venv -q --allow-existing -p $(PY) $(VENV)
	mkdir -p $(VENV)/.tmp   # uv's build locks go there, not into /tmp
	TMPDIR=$(abspath $(VENV))/.tmp uv pip install -q -p $(BIN)/python --find-links "$${PIP_FIND_LINKS:-/opt/wheels}" \
		--compile-bytecode -c constraints.txt --config-settings editable_mode=compat -e ".[all,test]"
	@touch $@

setup: $(BIN)/intune-flow

demo: setup  ## the nightly retraining demo, run twice: the second night hits the cache
	$(BIN)/intune-flow demo

# Tests that run tf.data service dispatchers and Ray clients inside the pytest process leave
# gRPC threads there; a DataLoader or torchdata worker forked beside them can crash ("Other
# threads are currently calling into gRPC, skipping fork() handlers", then a segfault in the
# child). They run in pytest processes of their own, after the rest.
GRPC_TESTS := tests/test_scaleout.py tests/test_worker_pools.py
NOT_GRPC := $(foreach t,$(GRPC_TESTS),--ignore=$(t))

test: setup  ## the whole test suite, slow cases included, on 3 processes (pytest-xdist)
	$(BIN)/python -m pytest -q -n 3 --dist worksteal $(NOT_GRPC)
	$(BIN)/python -m pytest -q -n 3 --dist worksteal $(GRPC_TESTS)

test-unit: setup  ## the fast unit subset: no TensorFlow, no servers (under 2 minutes)
	$(BIN)/python -m pytest -q tests/unit

test-fast: setup  ## everything but the slow cases
	$(BIN)/python -m pytest -q -n 3 --dist worksteal -m "not slow" $(NOT_GRPC)
	$(BIN)/python -m pytest -q -n 3 --dist worksteal -m "not slow" $(GRPC_TESTS)

bench-quick: setup
	$(BIN)/intune-flow bench --quick

clean:
	rm -rf $(VENV) .intune_flow
