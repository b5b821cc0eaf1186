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
@pytest.mark.flow(minutes=3)
def test_readme_metaflow_flow_runs_twice_and_hits_the_cache(readme_dir, monkeypatch):
    from tests.test_metaflow_runs import artifact, card_components, card_summary

    cwd, _ = readme_dir
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(cwd / "flow-cache"))
    env = {**os.environ, "PYTHONPATH": str(cwd)}
    runs = []
    for night in (1, 2):
        out = _run([sys.executable, "my_flow.py", "run", "--run-id-file", f"run-{night}"], cwd)
        runs.append(((cwd / f"run-{night}").read_text().strip(), out))
    (run1, first_out), (run2, second_out) = runs
    # the end step prints: <source> <tuning seconds>
    assert re.search(r"/end/.*\] tuned [\d.]+$", first_out, re.M), first_out[-3000:]
    assert re.search(r"/end/.*\] (cache|refined) [\d.]+$", second_out, re.M), second_out[-3000:]

    first = artifact("MyFlow", run1, "train", "intune_result", env)
    second = artifact("MyFlow", run2, "train", "intune_result", env)
    assert first["source"] == "tuned" and len(first["history"]) >= 2 and first["throughput"] > 0
    assert second["cache_key"] == first["cache_key"] and second["seconds_saved"] > 0
    if second["source"] == "cache":
        assert second["config"] == first["config"]
        assert len(second["history"]) < len(first["history"])  # one verification probe, no search
    # the step body saw the same source and config through current.intune
    assert f"] {second['source']} {second['config']}" in second_out, second_out[-3000:]

    # the card holds the same figures as the artifact
    cold_comps = card_components(cwd / "my_flow.py", run1, "train", env, cwd)
    cold = card_summary(cold_comps)
    warm = card_summary(card_components(cwd / "my_flow.py", run2, "train", env, cwd))
    assert cold["source"] == "tuned" and warm["source"] == second["source"]
    assert cold["tuning seconds"] in (f"{first['tuning_seconds']:.2f} s",
                                      f"{first['tuning_seconds']:,.1f} s")
    assert warm["seconds saved"].endswith(" s") and warm["seconds saved"] != "0.00 s"
    assert any(c["type"] == "image" and c["src"].startswith("data:image/png") for c in cold_comps)
    knob_table = [c for c in cold_comps if c["type"] == "table"][1]
    assert [row[0] for row in knob_table["data"]] == list(first["config"])
    # a knob left to AUTOTUNE (-1) reads "AUTOTUNE" or "AUTOTUNE (n)", n what AUTOTUNE held
    chosen = [row[2] for row in knob_table["data"]]
    assert all(cell.startswith("AUTOTUNE") if v == -1 else cell == str(v)
               for cell, v in zip(chosen, first["config"].values())), (chosen, first["config"])
