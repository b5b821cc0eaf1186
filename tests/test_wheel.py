"""The wheel as a user installs it: only intune_flow's packages (and the Metaflow extension
namespace), the reference pipelines inside it, and the three entry points working from a
fresh virtual environment, away from the checkout.

The wheel is built from a copy of the sources (nothing is written into the checkout) and
installed with ``--no-deps`` into a new venv. Its dependencies (TensorFlow, Metaflow,
Airflow, ...) come from this test's own environment through a ``.pth`` line: such a line
adds that site-packages directory but not the ``.pth`` files inside it, so the editable
install of the checkout stays out of sight (the test checks that intune_flow is imported
from the new venv and that the checkout's ``examples`` package cannot be imported).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FLOW = '''
from metaflow import FlowSpec, intune, step


class WheelFlow(FlowSpec):
    @step
    def start(self):
        self.next(self.train)

    @intune(pipeline="intune_flow.examples.criteo:criteo_pipeline", budget_s=3)
    @step
    def train(self):
        self.next(self.end)

    @step
    def end(self):
        pass


if __name__ == "__main__":
    WheelFlow()
'''


def _run(cmd, *, cwd, env, timeout=300):
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=timeout, stdin=subprocess.DEVNULL)
    assert proc.returncode == 0, (cmd, proc.stdout[-3000:], proc.stderr[-3000:])
    return proc.stdout


@pytest.fixture(scope="module")
def wheel_venv(tmp_path_factory):
    """(venv python, a work dir outside the checkout, env) with only the wheel installed."""
    uv = shutil.which("uv")
    if uv is None:
        pytest.skip("uv not found (make setup installs it)")
    root = tmp_path_factory.mktemp("wheel")
    src = root / "src"
    src.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(REPO / name, src / name)
    for name in ("intune_flow", "metaflow_extensions", "examples"):
        shutil.copytree(REPO / name, src / name,
                        ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    out = root / "dist"
    name = _run([sys.executable, "-c", "import sys, setuptools.build_meta as b; "
                 "print(b.build_wheel(sys.argv[1]))", str(out)], cwd=src, env=dict(os.environ))
    wheel = out / name.strip().splitlines()[-1]
    env = dict(os.environ, UV_CACHE_DIR=str(root / "uv-cache"))
    venv = root / "venv"
    _run([uv, "venv", "-q", "-p", sys.executable, str(venv)], cwd=root, env=env)
    python = venv / "bin" / "python"
    _run([uv, "pip", "install", "-q", "-p", str(python), "--no-deps", "--offline", str(wheel)],
         cwd=root, env=env)
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                   cwd=root, env=env).strip()
    Path(purelib, "zz_test_stack.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    work = root / "work"
    work.mkdir()
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env.pop("PYTHONPATH", None)
    return wheel, python, work, env


@pytest.mark.slow
def test_the_wheel_installs_only_intune_flow_and_its_entry_points_work(wheel_venv, tmp_path):
    wheel, python, work, env = wheel_venv
    names = zipfile.ZipFile(wheel).namelist()
    assert {n.split("/")[0] for n in names} == {
        "intune_flow", "metaflow_extensions", "intune_flow-0.1.0.dist-info"}
    for module in ("criteo", "criteo_remote", "criteo_s3", "criteo_memory", "criteo_torch",
                   "criteo_dataloader", "dlrm"):
        assert f"intune_flow/examples/{module}.py" in names

    where = _run([str(python), "-c", "import importlib.util, intune_flow; "
                  "print(intune_flow.__file__); print(importlib.util.find_spec('examples'))"],
                 cwd=work, env=env).split()
    assert where[0].startswith(str(python.parents[1])), where   # the wheel's copy
    assert where[1] == "None"                                   # no top-level examples

    out = _run([str(python.parent / "intune-flow"), "tune",
                "intune_flow.examples.criteo:criteo_pipeline", "--method", "ones",
                "--budget-s", "3", "--window-s", "0.5", "--cache", str(tmp_path / "cache"),
                "--json"], cwd=work, env=env)
    result = json.loads(out)
    assert result["source"] == "tuned" and result["throughput"] > 0
    assert {"read", "parse", "transform", "prefetch", "threadpool"} <= set(result["config"])

    (work / "wheel_flow.py").write_text(FLOW)
    shown = _run([str(python), "wheel_flow.py", "--quiet", "show"], cwd=work, env=env)
    assert "@intune" in shown

    providers = _run([str(python), "-m", "airflow", "providers", "list"], cwd=work, env=env)
    assert [line for line in providers.splitlines() if line.startswith("intune-flow ")]
