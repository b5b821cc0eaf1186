"""Scale-out (InTuneX): how many data workers feed a training job, and their knobs.

* :mod:`.env`: the :class:`ClusterEnv` interface (the simulator's
  :class:`~intune_flow.sim.cluster_env.SimClusterEnv` is one implementation) and
  :class:`ClusterMeasurement`;
* :mod:`.cost`: prices and the objective (cost per million records, or throughput);
* :mod:`.search`: :func:`run_scaleout` and :class:`ScaleOut` (search, then watch and
  re-decide), the agent's :mod:`.walk` over K and the :mod:`.baselines`.

Names are imported lazily, so the interface and baselines need no torch.
"""

from importlib import import_module

_LAZY = {
    "ClusterEnv": ".env", "ClusterMeasurement": ".env",
    "CostModel": ".cost", "Objective": ".cost",
    "ScaleOut": ".search", "ScaleOutcome": ".search", "run_scaleout": ".search",
    "METHODS": ".search", "BASELINES": ".baselines", "ScaleWalk": ".walk",
    "tune_node": ".node", "load_cluster_policy": ".policy_io",
    "save_cluster_policy": ".policy_io",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'intune_flow.scaleout' has no attribute {name!r}")


__all__ = sorted(_LAZY)
