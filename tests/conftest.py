"""Test session setup: hermetic homes and temp dirs, set before any library is imported.

Every library that writes outside the project (Airflow, Keras, Metaflow, matplotlib,
XDG caches, seaweedfs sockets in the temp dir) is pointed into one session directory
that is removed at the end. torch is imported first: Metaflow/Airflow patch ``typing``
in a way that breaks a later ``import torch`` (Netflix/metaflow#2462).
"""

import os
import shutil
import tempfile
from pathlib import Path

from tests.short_paths import short_temp_base  # noqa: E402  (no library imports)

_ROOT = Path(tempfile.mkdtemp(prefix="intune-flow-tests-", dir=short_temp_base()))
_ENV = {
    "HOME": _ROOT / "home",
    "TMPDIR": _ROOT / "tmp",
    "AIRFLOW_HOME": _ROOT / "airflow",
    "KERAS_HOME": _ROOT / "keras",
    "METAFLOW_HOME": _ROOT / "metaflow_home",
    "METAFLOW_CLIENT_CACHE_PATH": _ROOT / "metaflow_client",
    "METAFLOW_DATASTORE_SYSROOT_LOCAL": _ROOT / "metaflow_datastore",
    "METAFLOW_CARD_LOCALROOT": _ROOT / "metaflow_cards",
    "MPLCONFIGDIR": _ROOT / "mpl",
    "TORCHINDUCTOR_CACHE_DIR": _ROOT / "torchinductor",
    "XDG_CACHE_HOME": _ROOT / "xdg_cache",
    "XDG_CONFIG_HOME": _ROOT / "xdg_config",
    "XDG_DATA_HOME": _ROOT / "xdg_data",
    "INTUNE_FLOW_CACHE": _ROOT / "intune_cache",
    "INTUNE_FLOW_DATA_DIR": _ROOT / "intune_data",
}
for _name, _path in _ENV.items():
    _path.mkdir(parents=True, exist_ok=True)
    os.environ[_name] = str(_path)
os.environ.update({
    "USERNAME": "intune-tests",
    "METAFLOW_DEFAULT_DATASTORE": "local",
    "METAFLOW_DEFAULT_METADATA": "local",
    "TF_CPP_MIN_LOG_LEVEL": "2",
    "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    "AIRFLOW__CORE__UNIT_TEST_MODE": "True",
})
for _secret in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
    os.environ.pop(_secret, None)
tempfile.tempdir = None  # re-read TMPDIR

import torch  # noqa: E402,F401  (must precede metaflow/airflow imports)

pytest_plugins = ["tests.fixtures"]


def pytest_collection_modifyitems(items):
    """Whole flows first, longest first, then the other slow cases, dealt round-robin into
    one run of tests per pytest-xdist process. ``make test`` runs ``--dist worksteal``, which
    hands each process one contiguous share of this list and lets idle ones take the end of
    another's queue: so every share starts with its long tests, and none is left to run a
    five-minute flow at the end while the others wait."""
    def order(item):
        flow = item.get_closest_marker("flow")
        return (-flow.kwargs.get("minutes", 1) if flow else 0,
                item.get_closest_marker("slow") is None)

    ranked = sorted(items, key=order)
    processes = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    items[:] = [item for share in range(processes) for item in ranked[share::processes]]


def pytest_sessionfinish(session):
    """Stop any process the tests left behind, and name it: by now every fixture that starts
    a server or a pool has stopped it, so a child still running is a leak (a DataLoader
    worker forked while another thread held a lock once hung in a futex wait and outlived
    its pytest-xdist process by an hour). Not in an xdist controller, whose children are
    the test processes."""
    import sys

    import psutil

    config = session.config
    if not hasattr(config, "workerinput") and getattr(config.option, "dist", "no") != "no":
        return
    left = psutil.Process().children(recursive=True)
    for proc in left:
        try:
            print(f"conftest: stopping process {proc.pid} the tests left running: "
                  f"{' '.join(proc.cmdline())[:200]}", file=sys.stderr)
            proc.terminate()
        except psutil.Error:
            pass
    _, alive = psutil.wait_procs(left, timeout=5)
    for proc in alive:
        proc.kill()


def pytest_unconfigure(config):
    shutil.rmtree(_ROOT, ignore_errors=True)
