"""The cluster agent and the baselines on hand-made jobs: decisions that can be worked out by
hand, adaptation to a new demand and to lost workers, the policy file's safe loading."""

import numpy as np
import pytest

from intune_flow.agent.policy_io import PolicyError
from intune_flow.scaleout.cost import Objective
from intune_flow.scaleout.policy_io import (cluster_policy_from_bytes, load_cluster_policy,
                                            save_cluster_policy)
from intune_flow.scaleout.search import CHECK_S, ScaleOut, run_scaleout
from intune_flow.sim.cluster_env import SimClusterEnv
from tests.cluster_jobs import job_of, line_pipeline

# 1e5 records/s per worker (and on the trainer alone), linear scaling: K = D / 1e5 is the oracle.
JOB = job_of(line_pipeline(), demand=4e5, noise=0.0)


def test_the_shipped_cluster_policy_loads_safely_and_bad_files_are_refused(tmp_path):
    state = load_cluster_policy()
    path = tmp_path / "c.safetensors"
    save_cluster_policy(state, path, {"steps": 1})
    again = load_cluster_policy(path)
    assert set(again) == set(state) and all(np.array_equal(again[k], state[k]) for k in state)
    assert path.with_suffix(".json").exists()
    with pytest.raises(PolicyError):
        cluster_policy_from_bytes(path.read_bytes()[:50])
    with pytest.raises(PolicyError):
        cluster_policy_from_bytes(b"\x80\x04pickle")
    bad = dict(state)
    bad["body.0.weight"] = bad["body.0.weight"][:, :3]
    with pytest.raises(PolicyError):
        save_cluster_policy(bad, tmp_path / "bad.safetensors")


@pytest.mark.parametrize("method,want", [("demand_match", 4), ("scale_until_flat", 4),
                                         ("fixed_2", 2), ("fixed_32", 16)])
def test_baselines_pick_what_their_rule_says(method, want):
    out = run_scaleout(SimClusterEnv(JOB, seed=0), method)
    assert out.workers == want


def test_the_utilization_rule_grows_while_workers_are_busy_and_optuna_keeps_the_budget():
    util = run_scaleout(SimClusterEnv(JOB, seed=0), "utilization")
    assert util.workers >= 4 and util.pick.worker_util <= 0.81
    env = SimClusterEnv(JOB, seed=0)
    opt = run_scaleout(env, "optuna", budget_s=300)
    assert opt.seconds <= 300 + JOB.startup_s * 1.3 and len(opt.history) >= 3
    assert opt.value == min(h["value"] for h in opt.history)


def test_the_agent_finds_the_oracle_k_and_leaves_the_cluster_running_it():
    env = SimClusterEnv(JOB, seed=0)
    out = run_scaleout(env, "intunex", budget_s=1800)
    assert out.workers == 4 and env.workers() == 4
    assert out.pick.trainer_wait <= 0.01 and out.pick_seconds <= out.seconds <= 1800 + 60
    # The throughput objective under a cap of 2 takes all it may.
    capped = run_scaleout(SimClusterEnv(JOB, seed=0), "intunex",
                          objective=Objective("throughput", max_workers=2))
    assert capped.workers == 2


def test_the_agent_re_decides_k_when_the_demand_doubles_and_when_workers_are_lost():
    env = SimClusterEnv(JOB, seed=0, events=[(1500.0, "demand", 8e5), (3000.0, "lose", 3)])
    search = ScaleOut(env, budget_s=1200)
    first = search.search()
    assert first.workers == 4 and env.clock() < 1500
    decisions = search.watch(until_s=4500)
    assert [d["reason"].split()[0] for d in decisions] == ["demand", "lost"]
    grow, restore = decisions
    assert grow["from_workers"] == 4 and grow["to_workers"] == 8
    assert restore["from_workers"] == 5 and restore["to_workers"] == 8
    assert env.workers() == 8


def test_the_trainer_takes_the_budget_no_worker_stage_could_spend():
    def stages(budget_s):
        env = SimClusterEnv(JOB, seed=0)          # 10 s windows, 60 s start-up prior
        search = ScaleOut(env, budget_s=budget_s, node_budget_s=20)
        walk = search.start()
        return {s["stage"]: s for s in walk.stages}, walk

    # Room for everything: the trainer gets its share (20 s plus two windows), then a worker
    # starts (70 s) and is tuned (40 s).
    room, _ = stages(1800)
    assert room["tune the trainer"]["cost_s"] == 40 and room["start the first worker"]["ran"]
    assert room["tune the worker"]["ran"]
    # 150 s: after K = 0 (10 s) the trainer's share and a start fit (110 s), the worker's
    # tuning after them not; the trainer takes it: 140 - 70 - 20 - 0.1 = 49.9 s of search.
    # (The start then took 24 s, not the 60 s prior, so the worker's tuning fitted after all.)
    mid, walk = stages(150)
    assert mid["tune the trainer"]["left_s"] == 140
    assert mid["tune the trainer"]["cost_s"] == pytest.approx(140 - 70 - CHECK_S)
    assert mid["start the first worker"]["ran"]
    # 100 s: after the trainer's share no start fits either: all that is left less two
    # windows (and the check's 0.1 s) goes to the trainer.
    short, walk = stages(100)
    trainer = short["tune the trainer"]
    assert trainer["ran"] and trainer["left_s"] == 90
    assert trainer["cost_s"] == pytest.approx(90 - CHECK_S)
    assert not short["start the first worker"]["ran"] and walk.best.workers == 0
    assert walk.elapsed() > 60                  # the node search spent it
    # 45 s: not even the trainer's share fits (20 s + two windows > 35 s left); it searches on
    # what fits instead of leaving the budget unspent at all-AUTOTUNE.
    tight, walk = stages(45)
    trainer = tight["tune the trainer"]
    assert trainer["ran"] and trainer["cost_s"] == pytest.approx(35 - CHECK_S)
    assert walk.elapsed() <= 45
    # 25 s: less than a window of search would fit: the trainer stage is skipped.
    assert not stages(25)[0]["tune the trainer"]["ran"]


def test_a_pick_of_k0_spends_the_budget_left_refining_the_trainer_from_its_config():
    from intune_flow.scaleout.cost import CostModel
    from intune_flow.scaleout.node import tune_node

    calls = []

    def tuner(env, k, budget_s, start=None):
        calls.append((k, start, budget_s))
        return tune_node(env, k, budget_s=budget_s, start=start)

    # Workers at ten times the trainer's price never pay: the pick is K = 0, and the walk
    # leaves most of 900 s unspent.
    dear = job_of(line_pipeline(), demand=4e5, noise=0.0, cost=CostModel(4.0, 40.0))
    out = ScaleOut(SimClusterEnv(dear, seed=0), budget_s=900, node_tuner=tuner).search()
    refine = next(s for s in out.stages if s["stage"] == "refine the trainer")
    assert out.workers == 0 and refine["ran"]
    k, start, budget = calls[-1]
    assert k == 0 and start is not None and budget >= 3 * 10   # three 10 s windows at least
    assert out.seconds <= 900
    # A refine that finds worse is measured, and K = 0 keeps the pick's config.
    def worse(env, k, budget_s, start=None):
        if start is not None:
            return {name: 1 for name in start}, 0.0
        return tune_node(env, k, budget_s=budget_s)

    search = ScaleOut(SimClusterEnv(dear, seed=0), budget_s=900, node_tuner=worse)
    out = search.search()
    assert out.workers == 0 and out.config != {"read": 1, "prefetch": 1}
    assert search.config_for(0) == out.config
    assert any(s["stage"] == "refine the trainer" and s["ran"] for s in out.stages)
    # A pick with workers is not refined on the trainer.
    out = ScaleOut(SimClusterEnv(JOB, seed=0), budget_s=1800, node_tuner=tuner).search()
    assert out.workers == 4 and "refine the trainer" not in {s["stage"] for s in out.stages}


def test_a_warm_start_is_never_worse_than_its_start_whatever_the_budget_holds():
    """A refine or a transfer from a record with a budget too small for any node search
    (one 10 s window): step 1 measures the record's config, not all-AUTOTUNE, so the pick
    is the record's config; the cache's verification probe of it counts as step 1."""
    from intune_flow.knobs import AUTOTUNE, Knob, KnobSpace
    from intune_flow.sim import Buffer, SimPipeline, Stage

    # A read waiting 10 ms per call: AUTOTUNE's calls (one per core) starve it.
    waits = SimPipeline(stages=(Stage("read", 8e-5, 0.01, 1.0, 1e3, "read"),),
                        buffers=(Buffer("prefetch", 0, 1e3, 0.0),),
                        space=KnobSpace((Knob("read", "parallelism", 1, 64, AUTOTUNE),
                                         Knob("prefetch", "buffer", 1, 16, AUTOTUNE))),
                        cores=8, ram_total=64 << 30, ram_budget=32 << 30, base_mem=1 << 30,
                        contention=0.0, noise=0.001)
    job = job_of(waits, demand=4e5)
    start = dict(ScaleOut(SimClusterEnv(job, seed=0), budget_s=1800).search().config)
    cold = ScaleOut(SimClusterEnv(job, seed=0), budget_s=15).search()
    assert len(cold.history) == 1            # all-AUTOTUNE alone: what a refine got before
    warm = ScaleOut(SimClusterEnv(job, seed=0), budget_s=15, start=start).search()
    assert warm.config == start and len(warm.history) == 1
    assert warm.pick.delivered > 2 * cold.pick.delivered

    env = SimClusterEnv(job, seed=0)
    probe = env.measure(start)                   # the verification probe, at K = 0
    known = ScaleOut(env, budget_s=15, start=start, known=[probe]).search()
    assert known.pick is probe and len(known.history) == 1
