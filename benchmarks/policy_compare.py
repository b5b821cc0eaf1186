"""Policies side by side on the simulator's selection split (never the benchmarks' pipelines).

    python -m benchmarks.policy_compare                         # the shipped policy
    python -m benchmarks.policy_compare default other.safetensors

Each policy runs intune's search on the "test" seed stream's pipelines 200-229 on 8, 32 and
128 cores (pretraining's held-out checks use pipelines 0-23 of that stream; the benchmarks
score the "eval" stream), with per-stage signals, without them, and on a simulated tf.data,
at 10 and 20 measurements. Prints median / p10 / mean of the returned config's noise-free
throughput over the oracle's. This is how a retrained policy is compared with the shipped
one before it replaces it (docs/tuner.md, "Pretraining").
"""

from __future__ import annotations

import argparse
import sys

import numpy as np

PIPELINES = range(200, 230)
CORES = (8, 32, 128)
STEPS = (10, 20)
PROBES = {"signals": {"signals": True}, "no signals": {"signals": False},
          "tf.data": {"native_autotune": True}}


def score(policy: dict, steps: int, probe: dict) -> np.ndarray:
    """best/oracle of intune with ``policy`` on every selection pipeline."""
    from intune_flow.search import run_search
    from intune_flow.sim import SimEnv, oracle, sample_pipeline
    out = []
    for cores in CORES:
        for i in PIPELINES:
            pipe = sample_pipeline("test", i, cores=cores)
            _, best = oracle(SimEnv(pipe, seed=0))
            env = SimEnv(pipe, seed=i, **probe)
            res = run_search(env, "intune", budget_s=1e12, max_steps=steps, seed=i,
                             progress=False, policy_state=policy, learn=True)
            out.append(env.true_throughput(res.best.config) / best if best > 0 else 1.0)
    return np.asarray(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("policies", nargs="*", default=["default"],
                    help='"default" (the shipped policy) or .safetensors files')
    args = ap.parse_args(argv)
    import torch
    torch.set_num_threads(1)
    from intune_flow.agent.policy_io import load_default_policy, load_policy
    print("| policy | probe | measurements | median | p10 | mean |")
    print("|---|---|---|---|---|---|")
    for name in args.policies:
        policy = load_default_policy() if name == "default" else load_policy(name)
        for steps in STEPS:
            for probe, opts in PROBES.items():
                r = score(policy, steps, opts)
                print(f"| {name} | {probe} | {steps} | {np.median(r):.3f} | "
                      f"{np.percentile(r, 10):.3f} | {r.mean():.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
