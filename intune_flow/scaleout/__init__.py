"""Scale-out (InTuneX): how many data workers feed a training job, and their knobs.

* :mod:`.env`: the :class:`ClusterEnv` interface (the simulator's
  :class:`~intune_flow.sim.cluster_env.SimClusterEnv` is one implementation) and
  :class:`ClusterMeasurement`;
* :mod:`.cost`: prices and the objective (cost per million records, or throughput);
* :mod:`.search`: :func:`run_scaleout` and :class:`ScaleOut` (search, then watch and
  re-decide), the agent's :mod:`.walk` over K and the :mod:`.baselines`;
* :mod:`.pools`: real tf.data service workers (local processes, Ray actors) and
  :mod:`.worker_side`: the check that no Python callback runs on a worker.

None of these import torch: the cluster agent's network loads when a search needs it.
"""

from .baselines import BASELINES
from .cost import CostModel, Objective
from .env import ClusterEnv, ClusterMeasurement
from .search import METHODS, ScaleOut, ScaleOutcome, run_scaleout
from .serve import Served, serve
from .walk import ScaleWalk

__all__ = ["BASELINES", "METHODS", "ClusterEnv", "ClusterMeasurement", "CostModel", "Objective",
           "ScaleOut", "ScaleOutcome", "ScaleWalk", "Served", "run_scaleout", "serve"]
