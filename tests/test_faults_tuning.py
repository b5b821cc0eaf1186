"""Issue-8 faults inside the pipeline under ``tune()``: training's config always comes back.

Each case injects the fault through a real tf.data factory and asserts what survives: tune()
returns (bounded in time by the probe timeout), says ``fallback`` or keeps the start config,
names the reason, and never takes the process past the RAM budget plus the documented margin.
"""

import threading

import numpy as np
import pytest

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


@pytest.mark.slow
def test_pipeline_that_hangs_falls_back_within_the_step_timeout(tmp_path):
    result = tune(hanging_map_pipeline, budget_s=5, cache=str(tmp_path), window_s=0.5,
                  timeout_s=3)
    assert result.source == "fallback"
    assert "timeout" in (result.reason or "").lower()
    assert result.config == {"read": 1, "threadpool": -1}


@pytest.mark.slow
def test_factory_that_hangs_falls_back_within_the_step_timeout(tmp_path):
    result = tune(hanging_factory, budget_s=5, cache=str(tmp_path), window_s=0.5, timeout_s=3)
    assert result.source == "fallback"
    assert "timeout" in (result.reason or "").lower() or "hang" in (result.reason or "").lower()


def test_leaking_pipeline_never_passes_the_ram_budget_plus_margin(tmp_path):
    budget = current_rss() + 300 * 2**20
    result = tune(leaking_pipeline, budget_s=6, cache=str(tmp_path), ram_budget=budget,
                  window_s=1.0)
    assert result.history, "the start config must have been measured"
    assert all(m.peak_rss <= budget * (1 + RSS_MARGIN) for m in result.history)
    assert any(m.status == "oom" for m in result.history)
    assert result.source == "fallback" and "ram" in (result.reason or "").lower()
