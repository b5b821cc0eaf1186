"""The cluster simulator: cost formula, the aggregate model, the exact oracle vs brute force,
the env's clock, start-ups and events, the job generator's ranges and splits."""

import dataclasses
import itertools
import math

import numpy as np
import pytest

from intune_flow.knobs import Knob, KnobSpace
from intune_flow.scaleout.cost import CostModel, Objective
from intune_flow.scaleout.env import ClusterEnv
from intune_flow.sim import random_pipeline
from intune_flow.sim.cluster import NodeClass, aggregate, cluster_rate, node_rate
from intune_flow.sim.cluster_env import START_JITTER, SimClusterEnv
from intune_flow.sim.cluster_generate import sample_job
from intune_flow.sim.cluster_oracle import cluster_oracle, cost_curve, evaluate_pick
from tests.cluster_jobs import job_of, line_pipeline

GIB = 2**30


def test_cost_per_million_is_price_per_hour_over_records_served_capped_at_demand():
    c = CostModel(trainer_per_hour=4.0, worker_per_hour=0.8)
    assert c.per_hour(5) == pytest.approx(8.0)
    assert c.per_million(5, 1e5, 1e6) == pytest.approx(8.0 / (1e5 * 3600) * 1e6)
    # Records beyond what the accelerator consumes are not counted.
    assert c.per_million(0, 2e6, 1e6) == pytest.approx(4.0 / 3600)
    assert c.per_million(3, 0.0, 1e6) == math.inf
    assert CostModel.for_worker_cores(16).worker_per_hour == pytest.approx(0.8)
    assert CostModel().trainer_per_hour >= 4 * CostModel().worker_per_hour
    o = Objective()
    assert o.value(c, 5, 1e5, 1e6) == pytest.approx(math.log(c.per_million(5, 1e5, 1e6)))
    with pytest.raises(ValueError):
        Objective("speed")


def test_aggregate_terms_diminishing_returns_and_the_trainer_alone():
    job = job_of(line_pipeline(), demand=1e9, coordination=0.1, record_bytes=1000.0,
                 worker=NodeClass("w", 8, 64 * GIB, 5e7))     # 5e4 records/s of network each
    r = node_rate(job.prefix, {"read": 8, "prefetch": 4})
    assert r == pytest.approx(1e5)
    one, four = aggregate(job, [r]), aggregate(job, [r] * 4)
    assert one.limit == "worker_net" and one.delivered == pytest.approx(5e4)
    fast = dataclasses.replace(job, worker=NodeClass("w", 8, 64 * GIB, 1e12))
    rates = [aggregate(fast, [r] * k).delivered for k in range(1, 30)]
    gains = np.diff(rates)
    assert (gains > 0).all() and (np.diff(gains) < 0).all()     # more, but less each time
    assert aggregate(fast, [r] * 4).compute == pytest.approx(4 * r / 1.3)
    assert four.delivered > one.delivered
    # K = 0: the trainer's cores shared by prefix and suffix.
    t = dataclasses.replace(job, suffix_cpu=1e-5)
    x0 = aggregate(t, [], trainer_rate=1e5).delivered
    assert x0 == pytest.approx(1 / (1 / 1e5 + 1e-5 / 8))
    # The demand caps what is delivered and names the limit.
    capped = aggregate(job_of(line_pipeline(), demand=1e5), [r] * 4)
    assert capped.delivered == 1e5 and capped.limit == "demand" and capped.capacity > 1e5


def _small(p, top=3):
    knobs = tuple(Knob(k.name, k.kind, 1, min(k.max, top), k.default) for k in p.space)
    return dataclasses.replace(p, space=KnobSpace(knobs))


def _brute_force(job, objective):
    """Every K and every combination of per-worker configs, different on each worker."""
    def configs(p):
        names = [k.name for k in p.space]
        return [dict(zip(names, v)) for v in itertools.product(*(k.grid() for k in p.space))]
    trainer = job.trainer_pipeline()
    best = (math.inf, None)
    for c in configs(trainer):
        agg = aggregate(job, [], trainer_rate=node_rate(trainer, c))
        best = min(best, (objective.value(job.cost, 0, agg.delivered, job.demand), 0))
    rates = [node_rate(job.prefix, c) for c in configs(job.prefix)]
    for k in range(1, objective.cap(job.max_workers) + 1):
        for combo in itertools.combinations_with_replacement(rates, k):
            v = objective.value(job.cost, k, aggregate(job, list(combo)).delivered, job.demand)
            if v < best[0] - 1e-12:
                best = (v, k)
    return best


@pytest.mark.parametrize("seed", range(6))
def test_the_oracle_matches_brute_force_over_heterogeneous_worker_configs(seed):
    rng = np.random.default_rng(seed)
    prefix = _small(random_pipeline(rng, n_stages=2, cores=4, threads_knob=False))
    r1 = node_rate(prefix, cluster_oracle(job_of(prefix)).config or prefix.space.ones())
    job = job_of(prefix, demand=float(rng.uniform(0.5, 3.5)) * max(r1, 1.0),
                 coordination=float(rng.uniform(0.0, 0.3)), max_workers=3,
                 suffix_cpu=float(rng.uniform(1e-6, 1e-4)),
                 trainer=NodeClass("t", 2, 64 * GIB, 1e12),
                 cost=CostModel(float(rng.uniform(1, 8)), float(rng.uniform(0.1, 2))))
    for objective in (Objective(), Objective("throughput", max_workers=2)):
        want_v, want_k = _brute_force(job, objective)
        got = cluster_oracle(job, objective)
        assert got.value == pytest.approx(want_v, rel=1e-9, abs=1e-12)
        assert got.workers == want_k
        again = evaluate_pick(job, got.workers, got.config, objective)
        assert again.value == pytest.approx(got.value)


def test_oracle_meets_the_demand_with_the_fewest_workers_when_workers_are_the_bottleneck():
    job = job_of(line_pipeline(), demand=4e5)       # 1e5 records/s per worker, no overheads
    best = cluster_oracle(job)
    assert best.workers == 4 and best.delivered == pytest.approx(4e5)
    assert best.per_million == pytest.approx(job.cost.per_million(4, 4e5, 4e5))
    curve = cost_curve(job)
    assert min(curve, key=lambda p: p.value).workers == 4 and len(curve) == 17
    # Throughput first under a cap of 2 workers: as many as allowed.
    assert cluster_oracle(job, Objective("throughput", max_workers=2)).workers == 2
    # A demand the trainer meets alone: no worker at all.
    assert cluster_oracle(job_of(line_pipeline(), demand=1e3)).workers == 0


def test_sim_cluster_env_charges_start_ups_and_applies_events():
    job = job_of(line_pipeline(), demand=4e5)
    env = SimClusterEnv(job, seed=1, events=[(30.0, "demand", 8e5), (10_000.0, "lose", 2)])
    assert isinstance(env, ClusterEnv)
    m0 = env.measure(env.space.autotune())
    assert m0.workers == 0 and env.clock() == pytest.approx(10.0) and m0.trainer_wait > 0
    s = env.set_workers(4)
    assert job.startup_s * START_JITTER[0] <= s <= job.startup_s * START_JITTER[1]
    assert env.workers() == 4 and env.started == 4
    m = env.measure({"read": 8, "prefetch": 2})
    assert m.delivered == pytest.approx(4e5, rel=0.01) and m.demand == 8e5   # swapped at t=30
    assert m.per_hour == pytest.approx(job.cost.per_hour(4))
    assert 0.0 < m.trainer_wait < 0.6 and m.worker_util == pytest.approx(1.0, abs=0.01)
    assert env.set_workers(2) == env.remove_s and env.set_workers(2) == 0.0
    t = env.clock()
    node = env.node_env(1)
    node.measure(node.space.defaults())
    assert env.clock() > t                          # node tuning spends the cluster's clock
    env._advance(20_000)
    assert env.workers() == 0                       # two workers lost
    with pytest.raises(RuntimeError):
        env.node_env(1)
    assert cluster_rate(job, 2, {"read": 8, "prefetch": 2}).delivered == pytest.approx(2e5)


def test_generated_jobs_span_the_ranges_and_splits_are_disjoint():
    jobs = [sample_job("test", i) for i in range(20)]
    assert all(4 <= j.worker.cores <= 64 and 1e4 <= j.demand <= 1e7 for j in jobs)
    assert all(j.max_workers == 64 and 5 <= j.startup_s <= 180 for j in jobs)
    assert all(j.cost.trainer_per_hour > j.cost.worker_per_hour for j in jobs)
    assert sample_job("test", 3).demand == sample_job("test", 3).demand
    assert sample_job("train", 3).demand != sample_job("test", 3).demand
