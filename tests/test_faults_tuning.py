"""Issue-8 faults inside the pipeline under ``tune()``: training's config always comes back.

Each case injects the fault through a real tf.data factory and asserts what survives: tune()
returns, says ``fallback`` or keeps the start config, names the reason, and never takes the
process past the RAM budget plus the documented margin. A hang is bounded by ``timeout_s``:
the tests check that the step that hung was the one stopped, by that value (the defaults are
30 s per probe and 60 s for discovery), and that the whole run stayed inside a bound made of
the configured values; pytest's timeout fails a run that hangs anyway.
"""

import threading

import numpy as np
import pytest
import tensorflow as tf  # noqa: F401  (imported here, not inside the bounded discovery)

from intune_flow import tune
from intune_flow.resources import RSS_MARGIN, current_rss

_release = threading.Event()


def hanging_map_pipeline(knobs):
    """Discovery succeeds; every element then blocks forever (a stuck remote read)."""
    import tensorflow as tf

    def stuck(x):
        _release.wait()  # never set while the test runs
        return x

    ds = tf.data.Dataset.range(1_000_000)
    ds = ds.map(lambda x: tf.numpy_function(stuck, [x], tf.int64),
                num_parallel_calls=knobs.parallelism("read", max=8))
    return ds.batch(32)


def hanging_factory(knobs):
    """The factory itself never returns (e.g. waits on a lock held by a dead process)."""
    knobs.parallelism("read", max=8)
    _release.wait()


_leak = []


def leaking_pipeline(knobs):
    """Every element keeps 4 MiB alive: RSS grows without bound while it runs."""
    import tensorflow as tf

    def grow(x):
        _leak.append(np.ones(1 << 20, dtype=np.float32))
        return x

    ds = tf.data.Dataset.range(10_000_000)
    ds = ds.map(lambda x: tf.numpy_function(grow, [x], tf.int64),
                num_parallel_calls=knobs.parallelism("work", max=4))
    return ds.batch(8)


@pytest.fixture(autouse=True)
def _cleanup():
    _release.clear()
    yield
    _leak.clear()
    _release.set()  # let the hung calls return so their abandoned threads can wind down


TIMEOUT_S, BUDGET_S, WINDOW_S = 3.0, 5.0, 0.5
# Work outside every bound (loading the policy, building the agent, cache I/O): seconds of
# CPU, generous so that a machine other jobs keep busy cannot fail the bound below.
UNBOUNDED_WORK_S = 60.0


def _run_bound(bounded_steps: int) -> float:
    """The longest a run may take: each bounded step at most ``timeout_s``, the search's
    budget with one probe over it (timeout, warm-up and window), and the unbounded work."""
    return bounded_steps * TIMEOUT_S + BUDGET_S + (TIMEOUT_S + 2 * WINDOW_S) + UNBOUNDED_WORK_S


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_pipeline_that_hangs_falls_back_when_its_probe_times_out(tmp_path):
    result = tune(hanging_map_pipeline, budget_s=BUDGET_S, cache=str(tmp_path),
                  window_s=WINDOW_S, timeout_s=TIMEOUT_S, progress=False)
    assert result.source == "fallback"
    assert result.config == {"read": 1, "threadpool": -1}
    # Discovery passed; every probe was stopped by timeout_s (3 s, not the default 30 s).
    assert result.history and all(m.status == "timeout" for m in result.history)
    assert all("no first element within 3 s" in m.error for m in result.history)
    assert "every probe failed" in result.reason and "within 3 s" in result.reason
    # discovery, the fingerprint and the stage lookup are bounded steps before the search
    assert result.tuning_seconds < _run_bound(bounded_steps=3), result.tuning_seconds


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_factory_that_hangs_falls_back_when_discovery_times_out(tmp_path):
    result = tune(hanging_factory, budget_s=BUDGET_S, cache=str(tmp_path), window_s=WINDOW_S,
                  timeout_s=TIMEOUT_S, progress=False)
    assert result.source == "fallback" and result.history == []
    # The factory's dry build was abandoned after timeout_s (3 s, not the default 60 s).
    assert "knob discovery (the factory's dry build) did not return within 3 s" in result.reason
    assert result.tuning_seconds < TIMEOUT_S + UNBOUNDED_WORK_S, result.tuning_seconds


def _warm_runtime():
    """Load what every tune() holds before its first probe (torch and the policy, tf.data's
    runtime), so a budget taken from current_rss() leaves the pipeline its 300 MiB."""
    from intune_flow.search.intune import load_policy
    load_policy()
    list(tf.data.Dataset.range(64).map(lambda x: x + 1, num_parallel_calls=2).batch(8))


def test_leaking_pipeline_never_passes_the_ram_budget_plus_margin(tmp_path):
    _warm_runtime()
    budget = current_rss() + 300 * 2**20
    result = tune(leaking_pipeline, budget_s=6, cache=str(tmp_path), ram_budget=budget,
                  window_s=1.0)
    assert result.history, "the start config must have been measured"
    assert all(m.peak_rss <= budget * (1 + RSS_MARGIN) for m in result.history)
    assert any(m.status == "oom" for m in result.history)
    ran = [m for m in result.history if m.ok]
    if not ran:     # the usual case: every probe leaked past the budget
        assert result.source == "fallback" and "ram" in (result.reason or "").lower()
    else:           # a probe slowed down enough (a loaded machine) to end its window in budget
        assert result.source == "tuned" and result.config in [m.config for m in ran]
