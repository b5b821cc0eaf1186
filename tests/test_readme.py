"""The README's examples are exactly true: its tagged code blocks run as written.

A block preceded by ``<!-- readme-test -->`` whose first line is ``# <name>.py`` is written to
that file in a scratch directory; any other tagged block runs there as a script, in order.
"""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
BLOCK = re.compile(r"<!-- readme-test -->\n```python\n(.*?)```", re.S)


def _blocks():
    files, scripts = {}, []
    for body in BLOCK.findall(README.read_text()):
        first = body.splitlines()[0]
        name = re.match(r"#\s*([\w.]+\.py)\b", first)
        if name:
            files[name.group(1)] = body
        else:
            scripts.append(body)
    return files, scripts


def _run(args, cwd, timeout=900):
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    proc = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return proc.stdout


@pytest.fixture
def readme_dir(tmp_path):
    files, scripts = _blocks()
    assert "my_pipelines.py" in files and scripts, "the README lost its tested examples"
    for name, body in files.items():
        (tmp_path / name).write_text(body)
    return tmp_path, scripts


def test_readme_tune_example_runs_as_written(readme_dir):
    cwd, scripts = readme_dir
    for i, body in enumerate(scripts):
        (cwd / f"readme_block_{i}.py").write_text(body)
        out = _run([sys.executable, f"readme_block_{i}.py"], cwd)
    lines = out.splitlines()
    assert lines[0] == "tuned"
    assert "'map':" in lines[1] and "'prefetch':" in lines[1] and "'threadpool':" in lines[1]
    assert (cwd / "intune-cache").is_dir()


@pytest.mark.slow
def test_readme_metaflow_flow_runs_twice_and_hits_the_cache(readme_dir, monkeypatch):
    cwd, _ = readme_dir
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(cwd / "flow-cache"))
    first = _run([sys.executable, "my_flow.py", "run"], cwd)
    second = _run([sys.executable, "my_flow.py", "run"], cwd)
    # the end step prints: <source> <tuning seconds>
    assert re.search(r"/end/.*\] tuned [\d.]+$", first, re.M), first[-3000:]
    assert re.search(r"/end/.*\] (cache|refined) [\d.]+$", second, re.M), second[-3000:]
