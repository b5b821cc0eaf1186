"""Pretraining the cluster agent in the cluster simulator over many random jobs.

Jobs come from the "train" split; each episode redraws the demand (10^4-10^7
records/s), the trainer's price and the start-up time of a job from a pool, so a
pool of a few hundred prefix pipelines (whose single-node oracles are computed
once) yields thousands of distinct jobs. The node level is stood in for by what
it reaches in the single-node benchmark: the node oracle's config most of the
time, AUTOTUNE's otherwise, measured with the job's noise (running the node
agent in every episode would cost ~100x the time). The reward is the noise-free
improvement of the pick (the best measured config) in the objective's log units
minus the clock spent as a share of the budget: privileged, noise-free rewards
are what a simulator can give; the agent itself only sees measurements.
"""

from __future__ import annotations

import dataclasses
import math
import time
from dataclasses import dataclass, field

import numpy as np
import torch

from ..agent.dqn import linear_schedule
from ..sim.cluster import node_pipeline, node_rate, resolve
from ..sim.cluster_env import SimClusterEnv
from ..sim.cluster_generate import sample_job, trainer_price
from ..sim.cluster_oracle import cost_curve, evaluate_pick, node_oracles
from .cost import CostModel, Objective
from .dqn import ScaleDQN, ScaleDQNConfig
from .search import BUDGET_S, ScaleOut
from .walk import FAILED_VALUE

TIME_PENALTY = 0.1
EVAL_JOBS = 40
POOL = 200
THROUGHPUT_SHARE = 0.2
NODE_ORACLE_SHARE = 0.75


@dataclass
class ClusterPretrainLog:
    steps: list[int] = field(default_factory=list)
    eval_ratio: list[float] = field(default_factory=list)    # median cost / oracle cost, held out
    eval_p90: list[float] = field(default_factory=list)
    eval_minutes: list[float] = field(default_factory=list)  # median search minutes
    loss: list[float] = field(default_factory=list)


@dataclass
class PoolJob:
    job: object
    trainer_cfg: dict
    worker_cfg: dict


def job_pool(split: str, n: int, start: int = 0) -> list[PoolJob]:
    """``n`` jobs of ``split`` with their node oracles' configs."""
    out = []
    for i in range(start, start + n):
        job = sample_job(split, i)
        (c0, _), (cw, _) = node_oracles(job)
        out.append(PoolJob(job, c0, cw))
    return out


def _needs_workers(pj: PoolJob) -> bool:
    """Whether the job's best K is 2 or more (held-out jobs the trainer cannot serve alone)."""
    curve = cost_curve(pj.job, configs=(pj.trainer_cfg, pj.worker_cfg))
    return min(curve, key=lambda p: p.value).workers >= 2


def proxy_node_tuner(pj: PoolJob, rng: np.random.Generator, oracle_share: float):
    """The node level's stand-in: (oracle or AUTOTUNE config, its noisy standalone rate)."""
    def tune(env, k, budget_s, start=None):
        p = node_pipeline(env.job, k)
        use_oracle = rng.random() < oracle_share
        cfg = (pj.trainer_cfg if k == 0 else pj.worker_cfg) if use_oracle else resolve(
            p, p.space.autotune())
        return dict(cfg), node_rate(p, cfg) * float(math.exp(rng.normal(0, 0.02)))
    return tune


def _variant(job, rng: np.random.Generator):
    """The same pipelines with a new demand, trainer price and start-up time."""
    return dataclasses.replace(
        job, demand=float(math.exp(rng.uniform(math.log(1e4), math.log(1e7)))),
        startup_s=float(math.exp(rng.uniform(math.log(5), math.log(180)))),
        cost=CostModel(trainer_price(rng, job.cost.worker_per_hour), job.cost.worker_per_hour))


def _objective(rng) -> Objective:
    if rng.random() < THROUGHPUT_SHARE:
        return Objective("throughput", max_workers=int(rng.choice([8, 16, 32, 64])))
    return Objective()


def episode(pj: PoolJob, job, objective, choose, rng, *, seed: int, oracle_share: float,
            on_transition=None, budget_s: float = BUDGET_S):
    """One search on ``job``; calls ``on_transition(obs, a, reward, obs2, mask2, done)``."""
    env = SimClusterEnv(job, seed=seed)
    search = ScaleOut(env, objective, budget_s=budget_s, choose=choose,
                      node_tuner=proxy_node_tuner(pj, rng, oracle_share))
    walk = search.start()
    def true_value():
        v = evaluate_pick(job, walk.best.workers, walk.best.config, objective).value
        return min(v, FAILED_VALUE)

    truth = {"v": true_value(), "t": env.clock()}

    def on_step(obs, a, walk, stopped):
        v = true_value()
        now = env.clock()
        reward = (truth["v"] - v) - TIME_PENALTY * (now - truth["t"]) / budget_s
        truth.update(v=v, t=now)
        obs2, mask2 = walk.observe()
        done = stopped or not mask2[1:].any()
        if on_transition is not None:
            on_transition(obs, a, float(reward), obs2, mask2, done)

    search.decide(walk, on_step=on_step)
    return walk, env


def evaluate_agent(agent: ScaleDQN, jobs: list[PoolJob]) -> tuple[float, float, float]:
    """(median, p90 of cost / oracle cost, median search minutes) over held-out jobs."""
    ratios, minutes = [], []
    for i, pj in enumerate(jobs):
        best = min(cost_curve(pj.job, configs=(pj.trainer_cfg, pj.worker_cfg)),
                   key=lambda p: p.value)
        walk, env = episode(pj, pj.job, Objective(), agent.act, np.random.default_rng(i),
                            seed=i, oracle_share=1.0)
        got = evaluate_pick(pj.job, walk.best.workers, walk.best.config)
        ratios.append(got.per_million / best.per_million)
        minutes.append(env.clock() / 60)
    return (float(np.median(ratios)), float(np.percentile(ratios, 90)),
            float(np.median(minutes)))


def pretrain_cluster(steps: int, seed: int = 0, *, pool: int = POOL, eval_every: int = 5000,
                     log=print, config: ScaleDQNConfig | None = None):
    """Train a fresh cluster agent for ``steps`` decisions; returns it and its curve."""
    torch.set_num_threads(1)
    rng = np.random.default_rng(seed)
    agent = ScaleDQN(config, seed=seed)
    cfg = agent.cfg
    t0 = time.time()
    jobs = job_pool("train", pool, start=seed * 100_000)
    held_out = [pj for pj in job_pool("eval", 3 * EVAL_JOBS) if _needs_workers(pj)][:EVAL_JOBS]
    log(f"job pools ready: {pool} training, {len(held_out)} held out (best K >= 2) "
        f"({time.time() - t0:.0f}s)")
    hist = ClusterPretrainLog()
    t, ep, next_eval, losses = 0, 0, 0, []

    def on_transition(obs, a, reward, obs2, mask2, done):
        nonlocal t
        agent.remember(obs, a, reward, obs2, mask2, done)
        t += 1
        loss = agent.learn()
        if loss is not None:
            losses.append(loss)

    def record():
        med, p90, minutes = evaluate_agent(agent, held_out)
        hist.steps.append(t)
        hist.eval_ratio.append(med)
        hist.eval_p90.append(p90)
        hist.eval_minutes.append(minutes)
        hist.loss.append(float(np.mean(losses[-500:])) if losses else float("nan"))
        log(f"step {t:>6d}  episodes {ep:>5d}  eps {eps:.2f}  held-out cost/oracle median "
            f"{med:.3f} p90 {p90:.3f}  search {minutes:.1f} min  loss {hist.loss[-1]:.4f}  "
            f"{time.time() - t0:.0f}s")

    eps = cfg.eps_start
    while t < steps:
        if t >= next_eval:
            record()
            next_eval += eval_every
        eps = linear_schedule(cfg.eps_start, cfg.eps_end, cfg.eps_fraction * steps, t)
        pj = jobs[int(rng.integers(len(jobs)))]
        job = _variant(pj.job, rng)

        def choose(obs, mask, _eps=eps):
            return agent.act(obs, mask, epsilon=_eps)

        episode(pj, job, _objective(rng), choose, rng, seed=int(rng.integers(2**31)),
                oracle_share=NODE_ORACLE_SHARE, on_transition=on_transition)
        ep += 1
    record()
    return agent, hist
