"""Every search method makes the same decisions as when tests/data/search_golden.json was made.

The fixture holds, per scenario, the configs ``run_search`` measured (in order), their
statuses, the best config and its throughput, the stop reason, the step count and the
notes (``extra``). It
was generated before search/ and agent/ were restructured, and a refactor must keep it.
Regenerate it only for a deliberate change of behaviour, and say so in the commit:
``.venv/bin/python -m tests.unit.test_search_equivalence``.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from intune_flow.search import METHODS, run_search
from intune_flow.sim import SimEnv, oracle, sample_pipeline

GOLDEN = Path(__file__).parent / "data" / "search_golden.json"


class NativeAutotune:
    """A SimEnv that also offers the framework's own tuner (measured once by intune)."""

    native_autotune = True

    def __init__(self, env):
        self.env, self.space = env, env.space
        self.cpu_budget, self.ram_budget = env.cpu_budget, env.ram_budget

    def clock(self):
        return self.env.clock()

    def measure(self, config):
        return self.env.measure(config)


class Raising(NativeAutotune):
    """Raises for configs whose first parallelism knob passes ``limit`` (an env that crashes)."""

    native_autotune = False

    def __init__(self, env, limit=4):
        super().__init__(env)
        self.knob = next(k.name for k in env.space if k.kind == "parallelism")
        self.limit = limit

    def measure(self, config):
        if config[self.knob] > self.limit:
            self.env._advance(1.0)
            raise RuntimeError("boom")
        return self.env.measure(config)


def _oom_start_env():
    for i in range(200):
        env = SimEnv(sample_pipeline("test", i, cores=32, mem_tightness=3.0), seed=i)
        if env.true_throughput(env.space.defaults()) == 0:
            return env
    raise AssertionError("no memory-tight test pipeline")


def _sim(index, cores=16, **kw):
    return SimEnv(sample_pipeline("test", index, cores=cores), seed=index, **kw)


def scenarios():
    """name -> (env factory, run_search keyword arguments)."""
    out = {}
    for method in METHODS:
        for index in (0, 3, 5, 9):
            out[f"{method}-sim{index}"] = (lambda i=index: _sim(i),
                                           dict(budget_s=1e9, max_steps=25, seed=index))
        out[f"{method}-budget"] = (lambda: _sim(4), dict(budget_s=40.0, seed=1))
        out[f"{method}-oom-start"] = (_oom_start_env, dict(budget_s=1e9, max_steps=30, seed=0))
        out[f"{method}-no-signals"] = (lambda: _sim(8, signals=False),
                                       dict(budget_s=1e9, max_steps=25, seed=2))
    out["intune-ones-start"] = (lambda: _sim(7, cores=32),
                                dict(start="ones", budget_s=100.0, seed=0))
    out["intune-continuous"] = (lambda: _sim(2, cores=32, core_schedule=[(60.0, 16)]),
                                dict(budget_s=200.0, seed=0, continuous=True))
    out["intune-continuous-steady"] = (lambda: _sim(1), dict(budget_s=150.0, seed=3,
                                                             continuous=True))
    out["intune-cores-change"] = (lambda: _sim(2, cores=32, core_schedule=[(30.0, 8)]),
                                  dict(budget_s=1e9, max_steps=40, seed=0))
    for index in (0, 3, 6):
        out[f"intune-oracle-start{index}"] = (lambda i=index: _sim(i),
                                              dict(start="oracle", budget_s=1e9, max_steps=25,
                                                   seed=0))
    out["intune-no-learn"] = (lambda: _sim(5), dict(budget_s=1e9, max_steps=25, seed=4,
                                                    learn=False))
    out["intune-native-autotune"] = (lambda: NativeAutotune(_sim(6)),
                                     dict(budget_s=1e9, max_steps=20, seed=0))
    for method in ("intune", "hillclimb", "optuna"):
        out[f"{method}-raising"] = (lambda: Raising(_sim(6)),
                                    dict(start="ones", budget_s=1e9, max_steps=20, seed=0))
    return out


def search(name):
    """The scenario's outcome, with the env it ran on."""
    factory, kwargs = scenarios()[name]
    env, kwargs = factory(), dict(kwargs)
    if kwargs.get("start") == "ones":
        kwargs["start"] = env.space.ones()
    elif kwargs.get("start") == "oracle":
        kwargs["start"] = oracle(env)[0]
    return env, run_search(env, name.split("-")[0], progress=False, **kwargs)


def reported(out) -> float:
    """The throughput the search reports for its best: the mean over the end-of-search looks
    when they chose a config other than the start (before the restructuring, ``best`` was a
    made-up measurement with that mean as its throughput), else the best's own window."""
    mean = out.extra.get("best_mean")
    return mean if mean is not None and out.best is not out.start else out.best.throughput


def record(env, out) -> dict:
    names = [k.name for k in env.space]
    return {"knobs": names,
            "configs": [[m.config[n] for n in names] for m in out.history],
            "statuses": [m.status for m in out.history],
            "best": [out.best.config[n] for n in names],
            "best_throughput": reported(out),
            "stopped": out.stopped, "steps": out.steps,
            "extra": {k: v for k, v in out.extra.items() if k in ("autotune_rounds",
                                                                    "rebased_at",
                                                                    "final_cores")}}


@pytest.fixture(scope="module")
def golden():
    return json.loads(GOLDEN.read_text())


@pytest.mark.parametrize("name", sorted(scenarios()))
def test_same_configs_measured_as_before(name, golden):
    want = golden[name]
    env, out = search(name)
    got = record(env, out)
    for key in ("knobs", "configs", "statuses", "best", "stopped", "steps", "extra"):
        assert got[key] == want[key], key
    assert math.isclose(got["best_throughput"], want["best_throughput"], rel_tol=1e-12)
    assert any(m is out.best for m in out.history)     # best is always a real measurement
    assert out.best.throughput >= reported(out)


def main() -> None:
    names = sorted(scenarios())
    GOLDEN.parent.mkdir(exist_ok=True)
    data = {n: record(*search(n)) for n in names}
    GOLDEN.write_text(json.dumps(data, indent=None, separators=(",", ":")).replace(
        '},"', '},\n"') + "\n")
    print(f"wrote {len(data)} scenarios to {GOLDEN}")


if __name__ == "__main__":
    main()
