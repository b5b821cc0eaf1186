"""The Tracker's API: what a search method records (stop reason, notes, best) and how a budget ends."""

import pytest

from intune_flow.measurement import Measurement
from intune_flow.search.tracker import BudgetSpent, Tracker
from intune_flow.sim import SimEnv, sample_pipeline


def tracker(max_steps=3):
    env = SimEnv(sample_pipeline("test", 1, cores=8), seed=1)
    tr = Tracker(env, "test", budget_s=1e9, max_steps=max_steps, progress=lambda ev: None)
    tr.measure(env.space.ones(), start=True)
    return tr, env


def test_methods_record_through_methods_only():
    tr, env = tracker()
    with pytest.raises(AttributeError):
        tr.autotune_rounds = 3            # no attribute is set from outside
    with pytest.raises(AttributeError):
        tr.best = tr.start
    tr.note("autotune_rounds", 3)
    tr.stop("converged")
    out = tr.outcome()
    assert out.extra == {"autotune_rounds": 3} and out.stopped == "converged"
    with pytest.raises(ValueError):
        tr.stop("bored")


def test_the_best_is_always_one_of_the_measurements():
    tr, env = tracker()
    first = tr.measure({k.name: k.max for k in env.space})
    assert tr.best is max((tr.start, first), key=lambda m: m.throughput if m.ok else -1)
    tr.set_best(tr.start)
    assert tr.best is tr.start
    made_up = Measurement(config=dict(first.config), throughput=1e12)
    with pytest.raises(ValueError, match="measured"):
        tr.set_best(made_up)


def test_rebase_counts_from_the_new_machine():
    tr, env = tracker(max_steps=10)
    tr.measure(env.space.ones())
    kept = tr.measure(env.space.ones())
    tr.rebase(kept)
    assert tr.best is kept and tr.rebased_at == len(tr.history) == 3
    assert tr.outcome().extra["rebased_at"] == 3


def test_a_refused_measurement_raises_and_says_why():
    tr, env = tracker(max_steps=1)
    tr.measure(env.space.ones())
    tr.stop("converged")
    with pytest.raises(BudgetSpent):
        tr.measure(env.space.ones())
    assert tr.stopped == "steps" and tr.steps == 1 and len(tr.history) == 2
