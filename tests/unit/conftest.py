"""The fast unit subset (``make test-unit``): no TensorFlow, no servers, no flows.

When only tests under this folder ran, importing TensorFlow fails the session: a unit test
that needs it belongs under ``tests/`` with the integration tests.
"""

import sys
from pathlib import Path

HERE = Path(__file__).parent


def pytest_sessionfinish(session, exitstatus):
    items = getattr(session, "items", [])
    if not items or not all(HERE in Path(str(item.fspath)).parents for item in items):
        return
    heavy = [m for m in ("tensorflow", "airflow", "metaflow") if m in sys.modules]
    if heavy:
        session.config.pluginmanager.get_plugin("terminalreporter").write_line(
            f"tests/unit imported {', '.join(heavy)}: move that test out of tests/unit", red=True)
        session.exitstatus = 1
