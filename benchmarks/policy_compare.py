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
PROBES = {"signals": "intune", "no signals": "intune_nosignals", "tf.data": "intune_tfdata"}
"""Probe kinds and the :mod:`benchmarks.sim_bench` row that runs intune on each."""


def score(policy: dict, steps: int) -> dict[str, np.ndarray]:
    """best/oracle of intune with ``policy`` on every selection pipeline, per probe kind."""
    from . import sim_bench
    data = sim_bench.run(len(PIPELINES), CORES, tuple(PROBES.values()), steps=steps,
                         log=lambda *_: None, split="test", first=PIPELINES[0], policy=policy)
    return {probe: np.array([r["ratio"] for r in data["rows"] if r["method"] == method])
            for probe, method in PROBES.items()}


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
            for probe, r in score(policy, steps).items():
                print(f"| {name} | {probe} | {steps} | {np.median(r):.3f} | "
                      f"{np.percentile(r, 10):.3f} | {r.mean():.3f} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
