"""The node level: the existing single-node agent tunes the prefix's knobs on one node.

The cluster agent calls it for each node class that may run the prefix: the
trainer (K = 0) and one worker (all workers run the same graph, so its config
goes to every worker). It goes through the
public :func:`intune_flow.search.run_search` on the env's ``node_env(k)``, whose
clock is the cluster's: node tuning spends the same wall-clock budget.
"""

from __future__ import annotations

NODE_STEPS = 40
NODE_BUDGET_S = 120.0


def tune_node(env, k: int, *, steps: int = NODE_STEPS, budget_s: float = NODE_BUDGET_S,
              policy_state=None, seed: int | None = 0, learn: bool = True,
              start=None) -> tuple[dict, float]:
    """(config, measured standalone records/s) the node agent finds on ``env.node_env(k)``,
    searching from ``start`` (default: the knobs' defaults)."""
    from ..search import run_search
    node = env.node_env(k)
    out = run_search(node, "intune", start=start, budget_s=budget_s, max_steps=steps,
                     policy_state=policy_state, seed=seed, progress=False, learn=learn)
    return dict(out.best.config), float(out.best.throughput)
