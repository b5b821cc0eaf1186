"""Continuous tuning of a real tf.data pipeline re-allocates when the CPU affinity shrinks 2 -> 1."""

import os

import pytest

from intune_flow.search import run_search

pytestmark = pytest.mark.slow


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity") or len(os.sched_getaffinity(0)) < 2,
                    reason="needs CPU affinity control and at least 2 cores")
def test_continuous_mode_reallocates_when_affinity_shrinks():
    from intune_flow.real_env import PipelineEnv

    original = os.sched_getaffinity(0)
    two = sorted(original)[:2]
    os.sched_setaffinity(0, two)
    try:
        env = PipelineEnv("examples.criteo:criteo_pipeline", window_s=0.5, warmup_s=0.3)
        assert env.cpu_budget == 2
        measured = []
        inner = env.measure

        def measure(config):
            m = inner(config)
            measured.append(m)
            if len(measured) == 5:
                os.sched_setaffinity(0, {two[0]})
            return m

        env.measure = measure
        # counted measurements, not seconds: a loaded machine's slow windows cannot end
        # the search inside the re-allocation
        out = run_search(env, "intune", budget_s=600.0, max_steps=25, continuous=True, seed=0,
                         progress=False)
    finally:
        os.sched_setaffinity(0, original)
    assert out.extra["final_cores"] == 1
    cut = out.extra["rebased_at"]
    assert 5 <= cut < len(out.history)
    after = out.history[cut - 2:]
    # The returned config was measured on the one-core machine, after the change.
    assert any(m is out.best for m in after) and out.best.ok
    # Re-allocation: the best config from two cores was tried rescaled to one core.
    par = [k.name for k in env.space if k.kind in ("parallelism", "threads")]
    assert any(all(m.config[n] <= max(1, out.history[cut - 2].config[n]) for n in par)
               and m.config != out.history[cut - 2].config for m in after)


def test_intune_on_a_real_latency_bound_pipeline_grows_the_blocking_stage_and_measures_autotune():
    """The probe's stage signals show the blocking stage saturated on an idle CPU: the
    first jump grows it by the CPU's headroom (and the pool with it), and tf.data's own
    AUTOTUNE is measured once as a floor for the result."""
    from intune_flow.agent.allocations import rebalanced
    from intune_flow.knobs import AUTOTUNE
    from intune_flow.real_env import PipelineEnv

    env = PipelineEnv("tests.test_probe:sleepy", cpu_budget=2, ram_budget="64GiB",
                      window_s=0.5, warmup_s=0.1)
    assert env.native_autotune
    # A count of measurements, not seconds: on a slow machine a wall-clock budget could end
    # the search before the smart start's jump.
    out = run_search(env, "intune", start=env.space.ones(), budget_s=600.0, max_steps=12,
                     seed=0, progress=False)
    first = out.history[0]
    assert first.stage_signals["read"] >= 0.8
    # The AUTOTUNE floor comes first, then the smart start's jump.
    assert set(out.history[1].config.values()) == {AUTOTUNE}
    jump = out.history[2].config
    assert jump == rebalanced(env.space, first)
    assert jump["read"] > 1 and jump["threadpool"] >= jump["read"]
    assert sum(set(m.config.values()) == {AUTOTUNE} for m in out.history) >= 1
    # What the jump buys in records/s is measured by benchmarks/real_pipelines.py (case
    # "latency"), not asserted here: on a busy machine two probes cannot be compared.


def test_the_autotune_move_on_a_real_tf_data_pipeline_reads_back_autotunes_choice():
    """On tf.data the walk's AUTOTUNE move hands the read to tf.data's AUTOTUNE on the pool
    the config sets; the probe reports the parallelism AUTOTUNE chose, and the move back
    takes the read at that value (what the result would hold, config = build)."""
    from intune_flow.agent.observation import AUTO, action_index
    from intune_flow.agent.walk import Walk
    from intune_flow.knobs import AUTOTUNE
    from intune_flow.real_env import PipelineEnv

    env = PipelineEnv("tests.test_probe:sleepy", cpu_budget=2, ram_budget="64GiB",
                      window_s=0.5, warmup_s=0.3)
    start = env.measure({"read": 2, "prefetch": 2, "threadpool": 16})
    walk = Walk(env.space, start, cpu_budget=2, ram_budget=env.ram_budget, autotune=True)
    read = action_index(env.space.names.index("read"), AUTO)
    assert walk.observe()[1][read]
    walk.step(read, env.measure)
    handed = walk.last
    assert handed.ok and handed.config == {"read": AUTOTUNE, "prefetch": 2, "threadpool": 16}
    chose = handed.autotune_choices["read"]
    assert 1 <= chose <= 16                    # capped at the 16-thread pool it runs on
    walk.restart(handed)
    assert walk.candidate("read", AUTO) == {"read": chose, "prefetch": 2, "threadpool": 16}
