"""The simulator: oracle exactness, contention, I/O, pool, buffers, OOM, AUTOTUNE's caps, seed splits."""

import dataclasses
import itertools

import numpy as np
import pytest

from intune_flow.env import TuningEnv
from intune_flow.knobs import AUTOTUNE, Knob, KnobSpace
from intune_flow.sim import (Buffer, SimEnv, SimPipeline, Stage, autotune_config,
                             autotune_hillclimb, evaluate, oracle, oracle_pipeline,
                             random_pipeline, sample_pipeline)

GIB = 2**30


def make(stages, buffers=(), cores=8, pool=True, ram_budget=64 * GIB, base=GIB, kappa=0.2,
         par_max=64, pool_max=256, buf_max=64):
    knobs = [Knob(s.knob, "parallelism", 1, par_max, AUTOTUNE) for s in stages if s.knob]
    knobs += [Knob(b.knob, "buffer", 1, buf_max, AUTOTUNE) for b in buffers]
    if pool:
        knobs.append(Knob("threadpool", "threads", 1, pool_max, AUTOTUNE))
    return SimPipeline(stages=tuple(stages), buffers=tuple(buffers), space=KnobSpace(tuple(knobs)),
                       cores=cores, ram_total=2 * ram_budget, ram_budget=ram_budget,
                       base_mem=base, contention=kappa, noise=0.02,
                       threads_knob="threadpool" if pool else None)


def brute_force(p, cores=None):
    names = [k.name for k in p.space]
    best_cfg, best = None, -1.0
    for values in itertools.product(*(k.grid() for k in p.space)):
        cfg = dict(zip(names, values))
        ev = evaluate(p, cfg, cores)
        if ev.memory <= p.ram_budget and ev.throughput > best:
            best_cfg, best = cfg, ev.throughput
    return best_cfg, max(best, 0.0)


def shrink(p, par_max=8, pool_max=16, buf_max=8):
    knobs = tuple(dataclasses.replace(k, max={"parallelism": par_max, "threads": pool_max,
                                              "buffer": buf_max}[k.kind]) for k in p.space)
    return dataclasses.replace(p, space=KnobSpace(knobs))


@pytest.mark.parametrize("index", range(6))
def test_oracle_matches_brute_force_on_small_random_pipelines(index):
    rng = np.random.default_rng(100 + index)
    p = shrink(random_pipeline(rng, n_stages=int(rng.integers(2, 4)), cores=int(rng.choice([2, 4, 8]))))
    _, exact = brute_force(p)
    cfg, found = oracle_pipeline(p)
    assert found == pytest.approx(exact, rel=1e-6)
    assert evaluate(p, cfg).throughput == pytest.approx(found, rel=1e-9)
    assert evaluate(p, cfg).memory <= p.ram_budget


def test_oracle_respects_a_tight_ram_budget():
    s = [Stage("read", cpu=1e-3, io=0.0, records=1, mem=GIB // 4, knob="read")]
    free = make(s, cores=16, base=0)
    tight = dataclasses.replace(free, ram_budget=2 * GIB)
    cfg_free, x_free = oracle_pipeline(free)
    cfg_tight, x_tight = oracle_pipeline(tight)
    assert x_tight < x_free
    assert evaluate(tight, cfg_tight).memory <= 2 * GIB
    assert brute_force(shrink(tight, par_max=16))[1] == pytest.approx(
        oracle_pipeline(shrink(tight, par_max=16))[1], rel=1e-6)


def test_contention_when_runnable_threads_exceed_cores():
    p = make([Stage("map", cpu=1e-3, io=0.0, records=1, mem=1000, knob="map")], cores=4, kappa=0.2)
    at_cores = evaluate(p, {"map": 4, "threadpool": 4}).throughput
    over = evaluate(p, {"map": 32, "threadpool": 32})
    assert at_cores == pytest.approx(4 / 1e-3 * 1 / (1 + 0.2 * (5 / 4 - 1)), rel=1e-6)
    assert over.throughput < at_cores * 0.5          # 33 runnable threads on 4 cores
    assert over.efficiency < 0.5
    # The pool caps runnable threads: parallelism 32 on a pool of 4 is no worse than 4.
    assert evaluate(p, {"map": 32, "threadpool": 4}).throughput == pytest.approx(at_cores)


def test_io_wait_blocks_threads_not_cores():
    io = make([Stage("read", cpu=1e-4, io=1e-2, records=1, mem=1000, knob="read")], cores=2)
    cpu = make([Stage("map", cpu=1e-2, io=0.0, records=1, mem=1000, knob="map")], cores=2)
    # I/O-bound: throughput keeps growing with parallelism far past the 2 cores...
    x = [evaluate(io, {"read": n, "threadpool": 256}).throughput for n in (2, 16, 64)]
    assert x[1] > 7 * x[0] and x[2] > 3.5 * x[1]
    # ...but only if the thread pool lets the calls run: the pool caps the calls in flight.
    assert evaluate(io, {"read": 64, "threadpool": 2}).throughput == pytest.approx(x[0], rel=1e-6)
    # CPU-bound: no gain past the cores.
    y = [evaluate(cpu, {"map": n, "threadpool": n}).throughput for n in (2, 16)]
    assert y[1] < y[0]


def test_batching_ratio_and_buffers():
    stages = [Stage("map", cpu=1e-4, io=0, records=1, mem=100, knob="map"),
              Stage("batch", cpu=64e-5, io=0, records=64, mem=6400, knob="batch")]
    p = make(stages, [Buffer("prefetch", 1, 6400, 0.5)], cores=4)
    # work per record: 1e-4 (map) + 1e-5 (batch call / 64 records)
    ev = evaluate(p, {"map": 2, "batch": 1, "prefetch": 64, "threadpool": 3})
    assert ev.caps["batch"] == pytest.approx(64 / 64e-5)
    assert ev.caps["map"] == pytest.approx(2 / 1e-4)
    small = evaluate(p, {"map": 2, "batch": 1, "prefetch": 1, "threadpool": 3})
    assert small.throughput < 0.9 * ev.throughput     # a 1-element buffer loses to variability
    assert small.memory < ev.memory


def test_simenv_is_a_tuning_env_with_clock_noise_signals_and_oom():
    p = make([Stage("read", cpu=1e-4, io=1e-2, records=1, mem=GIB // 8, knob="read")],
             [Buffer("prefetch", 0, 1000, 0.1)], cores=4, ram_budget=4 * GIB, base=GIB)
    env = SimEnv(p, seed=3)
    assert isinstance(env, TuningEnv)
    ok = env.measure({"read": 4, "prefetch": 2, "threadpool": 4})
    assert ok.ok and env.clock() == pytest.approx(2.5)
    assert ok.throughput == pytest.approx(env.true_throughput(ok.config), rel=0.2)
    assert ok.throughput != env.true_throughput(ok.config)        # noisy
    assert set(ok.stage_signals) == {"read", "prefetch", "threadpool"}
    assert all(0 <= v <= 1 for v in ok.stage_signals.values())
    assert ok.stage_signals["read"] == pytest.approx(1.0, rel=0.02)  # the bottleneck is saturated
    oom = env.measure({"read": 32, "prefetch": 2, "threadpool": 32})  # 1 + 2*32/8 GiB > 4 GiB
    assert oom.status == "oom" and oom.throughput == 0 and oom.peak_rss > env.ram_budget
    assert env.clock() == pytest.approx(3.5)
    # AUTOTUNE values resolve to the core count.
    assert env.measure({"read": -1, "prefetch": -1, "threadpool": -1}).config == {
        "read": 4, "prefetch": 2, "threadpool": 4}


def test_cores_change_on_schedule_and_by_call():
    env = SimEnv(sample_pipeline("test", 0, cores=32), core_schedule=[(5.0, 16)])
    cfg = env.space.ones()
    env.measure(cfg)
    assert env.cpu_budget == 32
    env.measure(cfg)
    assert env.cpu_budget == 16
    env.set_cores(8)
    assert env.cpu_budget == 8


def test_autotune_caps_parallelism_and_pool_at_cores():
    io = make([Stage("read", cpu=1e-4, io=1e-2, records=1, mem=1000, knob="read"),
               Stage("map", cpu=1e-4, io=0, records=1, mem=1000, knob="map")],
              [Buffer("prefetch", 1, 1000, 0.3)], cores=4)
    cfg, rounds = autotune_config(io, 4)
    assert cfg["read"] <= 4 and cfg["map"] <= 4 and cfg["threadpool"] == 4
    assert rounds > 0
    assert cfg["prefetch"] in (1, 2, 4, 8, 16, 32, 64)     # grown by doubling
    _, best = oracle_pipeline(io)
    assert evaluate(io, cfg).throughput < 0.2 * best       # latency-bound: capped by the pool
    for i in range(8):
        env = SimEnv(sample_pipeline("test", i, cores=8))
        cfg, _ = autotune_hillclimb(env)
        for k in env.space:
            if k.kind in ("parallelism", "threads"):
                assert cfg[k.name] <= 8


def test_autotune_matches_oracle_on_a_cpu_bound_pipeline():
    p = make([Stage("a", cpu=1e-4, io=0, records=1, mem=100, knob="a"),
              Stage("b", cpu=3e-4, io=0, records=1, mem=100, knob="b")], cores=8, kappa=0.05)
    cfg, _ = autotune_config(p, 8)
    assert evaluate(p, cfg).throughput >= 0.9 * oracle_pipeline(p)[1]


def test_random_pipelines_span_the_ranges_and_splits_never_overlap():
    sizes, cores = set(), set()
    for i in range(60):
        p = sample_pipeline("train", i)
        sizes.add(len(p.stages))
        cores.add(p.cores)
        assert 2 <= len(p.stages) <= 12 and 2 <= p.cores <= 128
        assert oracle_pipeline(p)[1] > 0                     # something always fits
    assert len(sizes) >= 6 and min(cores) <= 4 and max(cores) >= 64
    train = {sample_pipeline("train", i, cores=16).stages for i in range(40)}
    evals = {sample_pipeline("eval", i, cores=16).stages for i in range(40)}
    assert not train & evals
    assert sample_pipeline("eval", 3, cores=16).stages == sample_pipeline("eval", 3, cores=16).stages


def test_oracle_of_env_uses_current_cores():
    env = SimEnv(sample_pipeline("test", 5, cores=32))
    _, x32 = oracle(env)
    env.set_cores(4)
    _, x4 = oracle(env)
    assert x4 < x32
