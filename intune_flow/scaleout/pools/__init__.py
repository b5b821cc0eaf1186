"""Worker pools: tf.data service workers for one training job (issue 18).

The contract is :class:`~.base.WorkerPool`'s docstring; :class:`LocalProcessPool` (local
subprocesses, the default) and :class:`RayPool` (Ray actors) implement it, and
:func:`make_pool` builds either from a spec (``"local:4x1"``, ``"ray:8x2"``). Importing this
package imports neither TensorFlow nor Ray.
"""

from .base import WorkerInfo, WorkerPool, cpu_share
from .local import LocalProcessPool
from .ray import RayPool
from .spec import PoolSpec, make_pool, parse_pool_spec

__all__ = ["LocalProcessPool", "PoolSpec", "RayPool", "WorkerInfo", "WorkerPool", "cpu_share",
           "make_pool", "parse_pool_spec"]
