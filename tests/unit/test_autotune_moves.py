"""AUTOTUNE per knob: the simulator's partial AUTOTUNE, the walk's AUTOTUNE move, the
heuristics leaving a handed-over knob alone, and the baselines sampling AUTOTUNE."""

import numpy as np
import pytest

from intune_flow.agent.allocations import halved, hybrid_autotune, rescaled, scaled
from intune_flow.agent.observation import AUTO, action_index, encode
from intune_flow.agent.walk import Walk
from intune_flow.knobs import AUTOTUNE, Knob, KnobSpace
from intune_flow.search import run_search
from intune_flow.sim import (Buffer, SimEnv, SimPipeline, Stage, autotune_config, evaluate,
                             resolve_autotune, sample_pipeline)

SPACE = KnobSpace((Knob("read", "parallelism", 1, 64, 1), Knob("map", "parallelism", 1, 64, 1),
                   Knob("prefetch", "buffer", 1, 64, 1), Knob("pool", "threads", 1, 256, 1)))


def _shared_pool_pipeline(first: Stage, second: Stage, cores: int) -> SimPipeline:
    """Two stages and a prefetch buffer on one shared thread pool, every knob AUTOTUNE-able."""
    space = KnobSpace((Knob(first.knob, "parallelism", 1, 128, AUTOTUNE),
                       Knob(second.knob, "parallelism", 1, 64, AUTOTUNE),
                       Knob("prefetch", "buffer", 1, 32, AUTOTUNE),
                       Knob("pool", "threads", 1, 256, AUTOTUNE)))
    return SimPipeline(stages=(first, second), buffers=(Buffer("prefetch", 1, 1e4, 0.3),),
                       space=space, cores=cores, ram_total=16 << 30, ram_budget=8 << 30,
                       base_mem=1 << 28, contention=0.05, noise=0.0, threads_knob="pool")


def _io_pipeline(cores=4):
    """A read waiting 50 ms per call (it wants ~40 calls) and a cheap map, on a shared pool."""
    return _shared_pool_pipeline(
        Stage("read", cpu=0.001, io=0.05, records=1, mem=1e4, knob="read"),
        Stage("map", cpu=0.002, io=0.0, records=1, mem=1e4, knob="map"), cores)


def test_autotune_caps_parallelism_at_the_pool_it_runs_on():
    """All-AUTOTUNE is the core-capped hill-climb (a latency-bound read starves at 4 calls);
    with the pool set to 64, AUTOTUNE may raise the read past the cores, as tf.data caps
    parallelism at its runner pool's size, and the hybrid beats plain AUTOTUNE."""
    p = _io_pipeline(cores=4)
    plain, _ = autotune_config(p, 4)
    assert plain["read"] <= 4 and plain["pool"] == 4
    fixed = resolve_autotune(p, {**p.space.autotune(), "pool": 64}, 4)
    assert fixed["pool"] == 64 and fixed["read"] > 4
    assert evaluate(p, fixed, 4).throughput > 2 * evaluate(p, plain, 4).throughput
    assert resolve_autotune(p, {"read": 8, "map": 2, "prefetch": 4, "pool": 16}, 4) == \
        {"read": 8, "map": 2, "prefetch": 4, "pool": 16}     # nothing to resolve


def test_a_native_sim_reports_autotune_values_and_what_autotune_chose():
    p = _io_pipeline()
    env = SimEnv(p, seed=0, native_autotune=True)
    cfg = {"read": AUTOTUNE, "map": 2, "prefetch": 4, "pool": 64}
    m = env.measure(cfg)
    assert m.config == cfg and set(m.autotune_choices) == {"read"}
    ran = resolve_autotune(p, cfg, env.cpu_budget, p.ram_total)
    assert m.autotune_choices["read"] == ran["read"] > 4
    assert env.true_throughput(cfg) == evaluate(p, ran, env.cpu_budget).throughput
    plain = SimEnv(p, seed=0).measure(cfg)        # no framework tuner: AUTOTUNE -> concretize
    assert plain.config["read"] == 4 and not plain.autotune_choices


def test_the_autotune_move_hands_a_knob_over_and_takes_it_back_at_autotunes_choice():
    p = _io_pipeline()
    env = SimEnv(p, seed=0, native_autotune=True)
    start = env.measure({"read": 2, "map": 2, "prefetch": 4, "pool": 64})
    walk = Walk(p.space, start, cpu_budget=env.cpu_budget, ram_budget=env.ram_budget,
                autotune=True)
    read = action_index(p.space.names.index("read"), AUTO)
    reward, _, m = walk.step(read, env.measure)
    assert m.config["read"] == AUTOTUNE and reward > 0 and walk.best is m
    chose = m.autotune_choices["read"]
    _, mask = walk.observe()
    assert not mask[action_index(0, 1)] and not mask[action_index(0, -1)]  # no up/down there
    assert mask[read]                                  # ...but the move back is open
    assert walk.candidate("read", AUTO) == {**m.config, "read": chose}
    kf, _ = encode(p.space, env.cpu_budget, env.ram_budget, walk.view(), autotune=True)
    assert kf[0, 13] == 1.0 and kf[0, 14] == 1.0 and kf[1, 13] == 0.0
    walk.step(read, env.measure)
    assert walk.last.config["read"] == chose
    no_tuner = Walk(p.space, start, cpu_budget=4, ram_budget=env.ram_budget)
    assert no_tuner.candidate("read", AUTO) is None
    assert not no_tuner.observe()[1][read]


def test_the_move_back_without_a_choice_returns_the_value_handed_over():
    from intune_flow.measurement import Measurement
    start = Measurement(config={"read": 6, "map": 2, "prefetch": 2, "pool": 8}, throughput=1.0)
    walk = Walk(SPACE, start, cpu_budget=4, ram_budget=1 << 40, autotune=True)
    walk.step(action_index(0, AUTO), lambda cfg: Measurement(config=cfg, throughput=2.0))
    assert walk.current.config["read"] == AUTOTUNE
    assert walk.candidate("read", AUTO) is None          # back to the start: measured already
    walk.step(action_index(1, 1), lambda cfg: Measurement(config=cfg, throughput=3.0))
    assert walk.candidate("read", AUTO) == {"read": 6, "map": 3, "prefetch": 2, "pool": 8}


def test_heuristics_leave_a_knob_at_autotune_where_it_is():
    cfg = {"read": AUTOTUNE, "map": 4, "prefetch": 1, "pool": 8}
    assert scaled(SPACE, cfg, 4)["read"] == AUTOTUNE
    assert scaled(SPACE, cfg, 0.5)["read"] == AUTOTUNE
    assert rescaled(SPACE, cfg, 2.0) == {**cfg, "map": 8, "pool": 16}
    assert halved(SPACE, cfg) == {"read": AUTOTUNE, "map": 2, "prefetch": 1, "pool": 4}
    assert hybrid_autotune(SPACE, cfg) == {**cfg, "map": AUTOTUNE}


def test_a_hybrid_keeps_the_knobs_it_is_told_to_keep():
    cfg = {"read": 8, "map": 4, "prefetch": 2, "pool": 16}
    assert hybrid_autotune(SPACE, cfg, keep=("read",)) == {**cfg, "map": AUTOTUNE}
    assert hybrid_autotune(SPACE, cfg) == {**cfg, "read": AUTOTUNE, "map": AUTOTUNE}


def test_random_and_optuna_sample_autotune_only_where_the_framework_has_it():
    for method in ("random", "optuna"):
        for native in (True, False):
            env = SimEnv(sample_pipeline("test", 5, cores=8), seed=0, native_autotune=native)
            out = run_search(env, method, budget_s=1e9, max_steps=30, seed=1, progress=False)
            autos = [m for m in out.history if AUTOTUNE in m.config.values()]
            assert bool(autos) == native, (method, native)


def test_intune_on_a_native_sim_may_hand_knobs_to_autotune_and_keeps_what_it_measured():
    """The search's result on a native env can hold AUTOTUNE values; the best it reports is
    a config it measured, and the walk's AUTOTUNE moves were among its measurements."""
    seen = 0
    for i in range(6):
        env = SimEnv(sample_pipeline("test", 60 + i, cores=16), seed=i, native_autotune=True)
        out = run_search(env, "intune", budget_s=1e9, max_steps=40, seed=0, progress=False)
        keys = {tuple(sorted(m.config.items())) for m in out.history}
        assert tuple(sorted(out.best.config.items())) in keys
        seen += sum(1 for m in out.history[1:] if AUTOTUNE in m.config.values())
        assert np.isfinite(env.true_throughput(out.best.config))
    assert seen >= 6      # at least the AUTOTUNE floor on each


def test_the_walk_never_hands_a_knob_the_hybrids_keep_to_autotune():
    """An interleave's cycle_length at AUTOTUNE is sized by tf.data from the CPU, and the
    hybrids keep it static (env.kept_from_autotune); the walk's AUTOTUNE move does too (a
    full generality run's 60 s search handed tfrecord_lookup's read to AUTOTUNE, a config
    whose repeats read 42,600-166,700 records/s on 2 cores, and its race took it on one
    look). Back from AUTOTUNE stays open: a start can hold it there."""
    from intune_flow.measurement import Measurement
    handed = {False: 0, True: 0}
    for kept in (False, True):
        for i in range(6):
            env = SimEnv(sample_pipeline("test", 60 + i, cores=16), seed=i, native_autotune=True)
            read = env.space.knobs[0].name
            if kept:
                env.kept_from_autotune = (read,)
            out = run_search(env, "intune", budget_s=1e9, max_steps=40, seed=0, progress=False)
            handed[kept] += sum(1 for m in out.history[2:] if m.config[read] == AUTOTUNE)
    assert handed[False] > 0 and handed[True] == 0
    p = _io_pipeline(cores=4)
    start = Measurement(config={"read": 1, "map": 2, "prefetch": 2, "pool": 64},
                        throughput=1.0)
    walk = Walk(p.space, start, cpu_budget=4, ram_budget=p.ram_budget, autotune=True,
                keep=("read",))
    _, mask = walk.observe()
    assert not mask[action_index(0, AUTO)] and mask[action_index(1, AUTO)]
    assert walk.candidate("read", AUTO) is None and walk.candidate("map", AUTO) is not None
    held = Walk(p.space, Measurement(config={**start.config, "read": AUTOTUNE}, throughput=1.0),
                cpu_budget=4, ram_budget=p.ram_budget, autotune=True, keep=("read",))
    assert held.observe()[1][action_index(0, AUTO)]
    assert held.candidate("read", AUTO)["read"] != AUTOTUNE


def test_a_known_autotune_window_is_read_as_the_floor_instead_of_measured_again():
    """A scale-out walk measured all-AUTOTUNE on this env just before: the search takes that
    window as its floor (in its history, no step spent) instead of a second one."""
    env = SimEnv(sample_pipeline("test", 5, cores=8), seed=0, native_autotune=True)
    floor = env.measure(env.space.autotune())
    out = run_search(env, "intune", budget_s=1e9, max_steps=12, seed=0, progress=False,
                     known=[floor])
    assert out.history[1] is floor
    assert out.steps == len(out.history) - 2
    without = run_search(SimEnv(sample_pipeline("test", 5, cores=8), seed=0,
                                native_autotune=True), "intune", budget_s=1e9, max_steps=12,
                         seed=0, progress=False)
    assert without.history[1].config == floor.config and without.history[1] is not floor
    assert without.steps == len(without.history) - 1
    # A start it holds is read too (step 5 of a scale-out search refines from the pick).
    tuned = env.measure(out.best.config)
    again = run_search(env, "intune", start=dict(tuned.config), budget_s=1e9, max_steps=4,
                       seed=0, progress=False, known=[floor, tuned])
    assert again.start is tuned and again.history[0] is tuned and again.history[1] is floor
    assert again.steps == len(again.history) - 2


def test_a_start_given_keeps_its_autotune_values_where_the_framework_has_autotune():
    """A refine from a cached hybrid config starts from that config, not from its
    concretized copy; without a framework tuner (and for the default start) AUTOTUNE
    values start at the values concretize gives."""
    pipe = sample_pipeline("test", 7, cores=8)
    hybrid = {**pipe.space.concretize(pipe.space.defaults(), 8), pipe.space.names[0]: AUTOTUNE}
    for native in (True, False):
        env = SimEnv(pipe, seed=0, native_autotune=native)
        out = run_search(env, "ones", start=hybrid, budget_s=1e9, progress=False)
        assert (out.history[0].config[pipe.space.names[0]] == AUTOTUNE) == native
    env = SimEnv(pipe, seed=0, native_autotune=True)
    out = run_search(env, "ones", budget_s=1e9, progress=False)
    assert AUTOTUNE not in out.history[0].config.values()


def test_a_hybrid_whose_growth_the_reserve_stopped_grows_at_the_end():
    """The smart start measured the hybrid on a pool AUTOTUNE ran the read at, the CPU idle,
    and the measurements kept for the end stopped it before the growth: the end measures the
    growth (once), not nothing because the hybrid itself was seen."""
    from intune_flow.agent.allocations import autotune_held_back
    from intune_flow.agent.moves import unpin
    from intune_flow.search.intune import _measure_hybrid, _Reserved
    from intune_flow.search.tracker import Tracker

    p = _pinned_read_pipeline()
    env = SimEnv(p, seed=0, native_autotune=True)
    tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
    start = tr.measure({"read": 16, "map": 2, "prefetch": 2, "pool": 16}, start=True)
    walk = Walk(p.space, start, cpu_budget=4, ram_budget=p.ram_budget, autotune=True)

    def reserved_after_one(config):
        if len(tr.history) > 1:
            raise _Reserved()
        return tr.measure(config)

    try:
        unpin(walk, reserved_after_one)
    except _Reserved:
        pass
    hybrid = tr.history[-1]
    assert len(tr.history) == 2 and hybrid.config["read"] == AUTOTUNE
    grown = autotune_held_back(p.space, hybrid)
    assert grown is not None and grown["pool"] > 16
    for best in (start, hybrid):        # the walk kept the start, or took the hybrid
        walk.best = best
        _measure_hybrid(tr, env, walk)
        assert [m.config for m in tr.history[2:]] == [grown]
    # on the grown pool AUTOTUNE ran the read past the old pool's 16 threads
    assert tr.history[-1].ok and tr.history[-1].autotune_choices["read"] > 16


def test_a_pool_that_caps_autotune_on_an_idle_cpu_grows():
    """AUTOTUNE ran the read at the pool's 16 threads with the CPU mostly idle: the pool is
    what holds it back, so the follow-up grows it (to the CPU's headroom, at least double);
    a busy CPU, a stage below the pool, or a pool at its maximum get no follow-up."""
    from intune_flow.agent.allocations import autotune_held_back
    from intune_flow.measurement import Measurement

    p = _io_pipeline(cores=4)
    env = SimEnv(p, seed=0, native_autotune=True)
    hybrid = {"read": AUTOTUNE, "map": AUTOTUNE, "prefetch": 2, "pool": 16}
    m = env.measure(hybrid)
    assert m.autotune_choices["read"] == 16 and m.cpu_util < 0.8
    grown = autotune_held_back(p.space, m)
    assert grown == {**hybrid, "pool": grown["pool"]} and grown["pool"] >= 32
    assert env.measure(grown).throughput > 1.5 * m.throughput

    def reading(cpu, read_at, pool=16):
        return Measurement(config={**hybrid, "pool": pool}, throughput=1.0, cpu_util=cpu,
                           autotune_choices={"read": read_at, "map": 2})
    assert autotune_held_back(p.space, reading(0.3, 16)) is not None
    assert autotune_held_back(p.space, reading(0.95, 16)) is None      # the CPU is the limit
    assert autotune_held_back(p.space, reading(0.3, 9)) is None        # AUTOTUNE stopped below it
    assert autotune_held_back(p.space, reading(0.3, 256, pool=256)) is None   # nothing to grow


def test_a_knob_the_hybrid_kept_static_grows_when_the_hybrid_leaves_the_cpu_idle():
    """An interleave's cycle_length is kept at the walk's value in the hybrid (tf.data sizes
    an AUTOTUNE one from the CPU); at that value it can hold the hybrid back, which an idle
    CPU says: it grows by the headroom, at least double. A busy CPU, a knob not kept, or
    one handed to AUTOTUNE get no follow-up."""
    from intune_flow.agent.allocations import autotune_held_back
    from intune_flow.measurement import Measurement

    p = _io_pipeline(cores=4)
    hybrid = {"read": 1, "map": AUTOTUNE, "prefetch": 2, "pool": 128}

    def reading(cpu, **config):
        return Measurement(config={**hybrid, **config}, throughput=1.0, cpu_util=cpu,
                           autotune_choices={"map": 8})      # below the pool: not capped
    grown = autotune_held_back(p.space, reading(0.45), keep=("read",))
    assert grown == {**hybrid, "read": 2}                 # x2 (headroom 2.0), pool as it was
    assert autotune_held_back(p.space, reading(0.1), keep=("read",))["read"] >= 8
    assert autotune_held_back(p.space, reading(0.95), keep=("read",)) is None
    assert autotune_held_back(p.space, reading(0.45)) is None
    assert autotune_held_back(p.space, reading(0.45, read=AUTOTUNE), keep=("read",)) is None


def test_the_end_of_the_search_grows_a_pool_that_caps_the_hybrid():
    """The walk's best holds a 16-thread pool: the hybrid runs the read at 16 calls, so the
    end of the search measures it again with a larger pool, and that one becomes the best."""
    from intune_flow.search.intune import _measure_hybrid
    from intune_flow.search.tracker import Tracker

    p = _io_pipeline(cores=4)
    env = SimEnv(p, seed=0, native_autotune=True)
    tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
    start = tr.measure({"read": 16, "map": 2, "prefetch": 2, "pool": 16}, start=True)
    walk = Walk(p.space, start, cpu_budget=4, ram_budget=p.ram_budget, autotune=True)
    _measure_hybrid(tr, env, walk)
    hybrid, grown = tr.history[1:]
    assert hybrid.config == {"read": AUTOTUNE, "map": AUTOTUNE, "prefetch": 2, "pool": 16}
    assert grown.config["pool"] > 16 and grown.config["read"] == AUTOTUNE
    assert tr.best is grown and grown.throughput > 2 * hybrid.throughput
    assert hybrid.throughput >= start.throughput


def test_the_end_of_the_search_grows_a_kept_knob_that_holds_the_hybrid_back():
    """The env keeps the read static in a hybrid (as an interleave's cycle_length): kept at
    the walk's one call, it holds the hybrid on an idle CPU, so the end of the search
    measures the hybrid again with the read grown, and that one becomes the best."""
    from intune_flow.search.intune import _measure_hybrid
    from intune_flow.search.tracker import Tracker

    p = _io_pipeline(cores=4)
    env = SimEnv(p, seed=0, native_autotune=True)
    env.kept_from_autotune = ("read",)
    tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
    start = tr.measure({"read": 1, "map": 2, "prefetch": 2, "pool": 64}, start=True)
    walk = Walk(p.space, start, cpu_budget=4, ram_budget=p.ram_budget, autotune=True)
    _measure_hybrid(tr, env, walk)
    hybrid, grown = tr.history[1:]
    assert hybrid.config == {"read": 1, "map": AUTOTUNE, "prefetch": 2, "pool": 64}
    assert hybrid.cpu_util < 0.8
    assert grown.config == {**hybrid.config, "read": grown.config["read"]}
    assert grown.config["read"] >= 2
    assert tr.best is grown and grown.throughput > 1.5 * hybrid.throughput


def test_no_end_hybrid_where_the_best_and_autotune_kept_the_cpu_busy():
    """Two CPU maps on 2 cores whose best and all-AUTOTUNE both keep the CPU busy: the end of
    the search measures no hybrid (AUTOTUNE's split of the cores again) and leaves its
    measurement to the walk. Where AUTOTUNE was not measured, or starved a latency-bound
    read (on an idle CPU, or on one others keep busy, far below the best), the hybrid is
    measured, on the best's own pool."""
    from intune_flow.search.intune import (_autotune_busy, _autotune_near, _end_reserve,
                                           _measure_hybrid)
    from intune_flow.search.tracker import Tracker

    def end_of(p, best, measure_autotune=True):
        env = SimEnv(p, seed=0, native_autotune=True)
        tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
        start = tr.measure(best, start=True)
        auto = tr.measure(p.space.autotune()) if measure_autotune else None
        walk = Walk(p.space, start, cpu_budget=2, ram_budget=p.ram_budget, autotune=True)
        reserve = _end_reserve(tr, env, walk, 3, 1)
        _measure_hybrid(tr, env, walk)
        return start, auto, list(tr.history[2 if measure_autotune else 1:]), reserve

    two_maps = _shared_pool_pipeline(
        Stage("first", cpu=0.002, io=0.0, records=1, mem=1e4, knob="first"),
        Stage("second", cpu=0.002, io=0.0, records=1, mem=1e4, knob="second"), cores=2)
    best, auto, end, reserve = end_of(two_maps, {"first": 8, "second": 8, "prefetch": 2,
                                                 "pool": 32})
    assert best.cpu_util >= 0.8 and auto.cpu_util >= 0.8
    assert end == [] and reserve == 2
    *_, end, reserve = end_of(two_maps, best.config, measure_autotune=False)
    assert [m.config for m in end] == [{"first": AUTOTUNE, "second": AUTOTUNE, "prefetch": 2,
                                        "pool": 32}] and reserve == 3

    best, auto, end, reserve = end_of(_io_pipeline(cores=2), {"read": 64, "map": 8,
                                                              "prefetch": 2, "pool": 128})
    assert best.cpu_util >= 0.8 and auto.cpu_util < 0.8 and reserve == 3
    assert end[0].config == {"read": AUTOTUNE, "map": AUTOTUNE, "prefetch": 2, "pool": 128}

    # The same read on a machine others keep busy: AUTOTUNE's small share of the CPU is
    # most of what they leave it, so it reads busy, but far below the best: the hybrid
    # on the best's pool is still measured.
    class Loaded(SimEnv):
        def measure(self, config):
            m = super().measure(config)
            m.machine_busy = 0.99
            return m

    io = _io_pipeline(cores=2)
    env = Loaded(io, seed=0, native_autotune=True)
    tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
    start = tr.measure({"read": 64, "map": 8, "prefetch": 2, "pool": 128}, start=True)
    auto = tr.measure(io.space.autotune())
    assert auto.own_share >= 0.8 and start.own_share >= 0.8
    walk = Walk(io.space, start, cpu_budget=2, ram_budget=io.ram_budget, autotune=True)
    assert _autotune_busy(tr, env, walk) and not _autotune_near(tr, env, walk)
    assert _end_reserve(tr, env, walk, 3, 1) == 3
    _measure_hybrid(tr, env, walk)
    assert tr.history[2].config == {"read": AUTOTUNE, "map": AUTOTUNE, "prefetch": 2,
                                    "pool": 128}


def test_the_scaling_keeps_its_pool_where_autotune_left_the_cpu_idle():
    """A latency-bound read on 2 cores: the scaling's round at 64 calls on 128 threads loses
    on a busy CPU, which alone would cut its pool to 3 threads (what a CPU-bound pipeline
    wants), starving the read. All-AUTOTUNE, measured first, left the CPU idle: a stage
    waits, so the warm-up keeps the pools and spends that measurement elsewhere."""
    from intune_flow.agent.moves import scale_out
    from intune_flow.search.intune import _warm_up
    from intune_flow.search.tracker import Tracker

    p = _io_pipeline(cores=2)
    start_config = {"read": 1, "map": 1, "prefetch": 1, "pool": 2}

    def warmed(warm):
        # without stage signals (a probe can miss them) the smart start scales every stage
        env = SimEnv(p, seed=0, native_autotune=True, signals=False)
        tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
        start = tr.measure(start_config, start=True)
        walk = Walk(p.space, start, cpu_budget=2, ram_budget=p.ram_budget, autotune=True)
        warm(tr, env, walk)
        return tr.history

    cut = warmed(lambda tr, env, walk: scale_out(walk, tr.measure))
    assert any(m.config["pool"] == 3 and m.config["read"] == 64 for m in cut)
    kept = warmed(_warm_up)
    autotune = [m for m in kept if m.config == p.space.autotune()]
    assert autotune and autotune[0].cpu_util < 0.8
    assert not any(m.config["pool"] == 3 for m in kept)


def test_autotune_within_the_noise_of_a_busy_cpu_counts_as_busy():
    """One window's CPU share is noisy: all-AUTOTUNE at 0.79 on a CPU-bound pipeline must
    not switch the warm-up to keeping an overgrown pool (as 0.5 does: a stage waits)."""
    from types import SimpleNamespace

    from intune_flow.measurement import Measurement
    from intune_flow.search.intune import _autotune_busy

    space = KnobSpace((Knob("map", "parallelism", 1, 8, 1), Knob("pool", "threads", 1, 64, 2)))
    env = SimpleNamespace(space=space)

    def busy(cpu, plateau):
        auto = Measurement(config=space.autotune(), throughput=1.0, cpu_util=cpu)
        other = Measurement(config=space.defaults(), throughput=1.0, cpu_util=0.95)
        return _autotune_busy(SimpleNamespace(history=[other, auto]), env,
                              SimpleNamespace(plateau=plateau))

    assert busy(0.79, plateau=0.05) is True
    assert busy(0.79, plateau=0.0) is False
    assert busy(0.5, plateau=0.08) is False
    assert _autotune_busy(SimpleNamespace(history=[]), env, SimpleNamespace(plateau=0.05)) is None


def test_autotune_that_keeps_busy_the_cpu_other_processes_left_counts_as_busy():
    """The generality suite's interleave at 20 s: all-AUTOTUNE read 0.64 of the CPU while
    the machine was 0.89 busy (others held a quarter); read as idle, the warm-up kept the
    scaling's 32-thread pool (0.65 of the best known). A stage that waits leaves the CPU
    others left it idle, contended or not, and stays not busy."""
    from types import SimpleNamespace

    from intune_flow.measurement import Measurement
    from intune_flow.search.intune import _autotune_busy

    space = KnobSpace((Knob("map", "parallelism", 1, 8, 1), Knob("pool", "threads", 1, 64, 2)))
    env = SimpleNamespace(space=space)

    def busy(cpu, machine):
        auto = Measurement(config=space.autotune(), throughput=1.0, cpu_util=cpu,
                           machine_busy=machine)
        return _autotune_busy(SimpleNamespace(history=[auto]), env,
                              SimpleNamespace(plateau=0.02))

    assert busy(0.64, machine=0.89) is True
    assert busy(0.64, machine=0.66) is False     # alone on the CPU: a third of it idle
    assert busy(0.10, machine=0.50) is False     # others hold 40%, half the rest idle
    assert busy(0.64, machine=None) is False
    assert Measurement(config={}, cpu_util=0.3, machine_busy=1.0).own_share == pytest.approx(1.0)


def _pinned_read_pipeline(cores=4):
    """The latency-bound read of :func:`_io_pipeline` (it wants ~40 calls) declared with
    ``max=16``: at 16 calls it is saturated on an idle CPU, and no static value can grow it."""
    from dataclasses import replace

    p = _io_pipeline(cores=cores)
    space = KnobSpace(tuple(replace(k, max=16) if k.name == "read" else k for k in p.space))
    return replace(p, space=space)


def test_a_stage_saturated_at_its_maximum_on_an_idle_cpu_is_handed_to_autotune_early():
    """The smart start leaves the read at its maximum, saturated, the CPU idle: the hybrid
    (AUTOTUNE bounded by the pool, not by the knob) is measured right away and the walk goes
    on from it; a stage below its maximum, a busy CPU or a knob kept static is not pinned."""
    from intune_flow.agent.allocations import pinned_stages
    from intune_flow.agent.moves import unpin
    from intune_flow.measurement import Measurement
    from intune_flow.search.intune import _measure_hybrid
    from intune_flow.search.tracker import Tracker

    p = _pinned_read_pipeline()
    env = SimEnv(p, seed=0, native_autotune=True)
    tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
    start = tr.measure({"read": 16, "map": 2, "prefetch": 2, "pool": 64}, start=True)
    assert start.cpu_util < 0.8 and start.stage_signals["read"] >= 0.9
    assert [k.name for k in pinned_stages(p.space, start)] == ["read"]
    walk = Walk(p.space, start, cpu_budget=4, ram_budget=p.ram_budget, autotune=True)
    unpin(walk, tr.measure)
    hybrid = tr.history[1]
    assert hybrid.config == {"read": AUTOTUNE, "map": AUTOTUNE, "prefetch": 2, "pool": 64}
    assert hybrid.autotune_choices["read"] > 16
    # the walk moved on from the start (a jump is kept only past its noise margin) to the
    # hybrid or its grown pool
    assert walk.best is not start and walk.best in tr.history[1:]
    assert walk.best.config["read"] == AUTOTUNE
    measured = len(tr.history)
    walk.best = start                      # its hybrid was measured: the end does not redo it
    _measure_hybrid(tr, env, walk)
    assert len(tr.history) == measured

    def reading(cpu, read, saturated=0.97):
        return Measurement(config={"read": read, "map": 2, "prefetch": 2, "pool": 64},
                           throughput=1.0, cpu_util=cpu, stage_signals={"read": saturated})
    assert pinned_stages(p.space, reading(0.3, 16))
    assert not pinned_stages(p.space, reading(0.3, 8))                  # it can still grow
    assert not pinned_stages(p.space, reading(0.95, 16))                # the CPU is the limit
    assert not pinned_stages(p.space, reading(0.3, 16, saturated=0.5))  # not what limits
    assert not pinned_stages(p.space, reading(0.3, 16), keep=("read",))


def test_the_walk_takes_the_end_hybrids_measurement_when_the_smart_start_measured_it():
    """The end keeps a measurement for the best's hybrid; once the smart start measured that
    hybrid (:func:`unpin`) the walk may take it, and a new best whose hybrid is unmeasured
    keeps it for the end again."""
    from intune_flow.agent.moves import unpin
    from intune_flow.search.intune import _end_reserve
    from intune_flow.search.tracker import Tracker

    p = _pinned_read_pipeline()
    env = SimEnv(p, seed=0, native_autotune=True)
    tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
    start = tr.measure({"read": 16, "map": 2, "prefetch": 2, "pool": 64}, start=True)
    walk = Walk(p.space, start, cpu_budget=4, ram_budget=p.ram_budget, autotune=True)
    assert _end_reserve(tr, env, walk, 3, 1) == 3          # the start's hybrid: unmeasured
    unpin(walk, tr.measure)
    walk.best = start
    assert _end_reserve(tr, env, walk, 3, 1) == 2          # measured by the smart start
    assert _end_reserve(tr, env, walk, None, 1) is None    # continuous: no end
    assert _end_reserve(tr, env, walk, 3, 0) == 3          # no hybrid kept for
    walk.best = tr.measure({"read": 8, "map": 2, "prefetch": 4, "pool": 64})
    assert _end_reserve(tr, env, walk, 3, 1) == 3          # a new best, its hybrid unmeasured


def test_a_scaling_round_held_by_a_pinned_stage_ends_the_scaling():
    """The read is saturated at its declared maximum on an idle CPU: scaling every stage
    cannot grow it, so a round that did not pay ends the scaling (no half step, no
    one-thread pool, no scale-down) and leaves the measurements to the hybrid after it.
    Without a tuner of the framework's own to hand the read to, the scaling goes on."""
    from intune_flow.agent.allocations import pinned_stages
    from intune_flow.agent.moves import scale_out
    from intune_flow.search.tracker import Tracker

    def scaled_from(autotune):
        p = _pinned_read_pipeline(cores=2)
        env = SimEnv(p, seed=0, native_autotune=autotune)
        tr = Tracker(env, "intune", budget_s=1e9, max_steps=None, progress=lambda ev: None)
        start = tr.measure({"read": 16, "map": 2, "prefetch": 2, "pool": 64}, start=True)
        assert [k.name for k in pinned_stages(p.space, start)] == ["read"]
        walk = Walk(p.space, start, cpu_budget=2, ram_budget=p.ram_budget, autotune=autotune)
        scale_out(walk, tr.measure, trim=False)
        return [m.config for m in tr.history[1:]]

    pinned = scaled_from(True)
    assert len(pinned) == 1 and pinned[0]["read"] == 16 and pinned[0]["map"] > 2
    plain = scaled_from(False)
    assert len(plain) > 1 and any(c["pool"] == 1 for c in plain)    # the one-thread pool
