"""Training on a scale-out result: start its workers, read through the service, stop them.

::

    result = intune_flow.tune(factory, workers="local:4x1")
    with result.serve() as ds:          # starts result.workers workers, stops them on exit
        model.fit(ds, steps_per_epoch=1000)

In another process (an Airflow training task reading the tuning task's XCom)::

    from intune_flow.scaleout import serve
    with serve(xcom_result_dict) as ds:
        ...
"""

from __future__ import annotations

from contextlib import contextmanager

from .service import ServicePipeline
from .worker_side import check_worker_side


@contextmanager
def serve(result, *, processing_mode: str = "parallel_epochs", pool=None,
          replace_lost: bool = True, **factory_kwargs):
    """Yield the dataset to train on for ``result`` (a TuneResult or its ``to_dict()``).

    With ``result.workers`` > 0: checks the worker side (no Python callbacks), starts that
    many workers of ``result.worker_pool`` (or of ``pool``, a spec or a
    :class:`~intune_flow.scaleout.pools.WorkerPool`), each registered before the dataset is
    yielded, and yields the worker side distributed to them (``processing_mode``:
    ``"parallel_epochs"``, every worker runs the whole worker side, the default for repeated
    training data; ``"distributed_epoch"``, each record of a finite epoch once) followed by
    the trainer side. With ``replace_lost`` (the default) a worker that dies while serving is
    replaced (``WorkerPool.supervise``: logged, in ``pool.replacements``). A pool it started
    is stopped on exit, whatever happened; a ``pool`` object passed in is left to its owner
    (its supervision set back as it was). With no workers (a single-node result, a pick of
    K = 0, a fallback) it yields ``result.build()``'s dataset and starts nothing.
    """
    from ..result import TuneResult
    from .pools.spec import make_pool

    if isinstance(result, dict):
        result = TuneResult.from_dict(result)
    pipe = result.pipeline_object(**factory_kwargs)
    if not result.workers:
        yield pipe.build(result.config, cpu_budget=result.cpu_budget or None)
        return
    check_worker_side(pipe.worker_side(result.config),
                      what=f"the worker side of {pipe.name}")
    owned = pool is None or isinstance(pool, str)
    pool = make_pool(pool if pool is not None else result.worker_pool)
    supervised = pool.supervised
    try:
        pool.start(result.workers)
        pool.supervise(replace_lost or supervised)
        yield ServicePipeline(pipe, pool.target, processing_mode).build(
            result.config, cpu_budget=result.cpu_budget or None)
    finally:
        if owned:
            pool.stop()
        else:
            pool.supervise(supervised)


class Served:
    """Datasets served for one step or task, stopped together: ``open(result, **kwargs)``
    builds one (starting the result's workers, if any), ``close()`` stops every pool opened.
    What ``current.intune.dataset()`` (Metaflow) and ``intune.dataset()`` (``@intune_task``)
    use: the workers live until the step or task ends."""

    def __init__(self):
        self._open: list = []

    def open(self, result, **factory_kwargs):
        if not result.workers:
            return result.build(**factory_kwargs)
        cm = serve(result, **factory_kwargs)
        ds = cm.__enter__()
        self._open.append(cm)
        return ds

    def close(self) -> None:
        while self._open:
            self._open.pop().__exit__(None, None, None)
