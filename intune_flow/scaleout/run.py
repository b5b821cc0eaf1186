"""``tune(..., workers=...)``: the scale-out decision table, on real tf.data service workers.

:class:`ScaleOutRun` is a :class:`~intune_flow.tune.TuningRun` whose environment is a
:class:`~intune_flow.scaleout.service.ServiceClusterEnv` over the pool ``workers=`` names:

* before any worker starts, the worker side is checked (``check_worker_side``: a
  ``py_function`` stage there raises :class:`~intune_flow.errors.PipelineError`; so does a
  pipeline that is not tf.data);
* the key is the single-node key's with the worker node class added
  (``cpu2-ram16g+workers-local1c``);
* an exact hit starts the recorded number of workers at once and verifies the recorded
  per-worker config with one short probe through the service (``"cache"``); one that
  delivers below the drift threshold is searched again from it (``"refined"``);
* a record of the same pipeline under another worker class (or on one node) seeds the
  per-worker config of a short search (``"transferred"``);
* a miss runs the cluster agent (:class:`~intune_flow.scaleout.search.ScaleOut`: K = 0,
  the node agent on the trainer, one worker and the node agent on it, then the agent's
  moves over K) within ``budget_s`` wall seconds, worker start-ups included (``"tuned"``),
  each stage only if its estimate fits what is left; ``demand=`` (records/s) caps the rate
  worth paying for, and a record tuned for another demand (by more than 10%) is searched
  again from (``"refined"``);
* a failure of the pool (Ray missing or unreachable, a worker that never registers within
  the pool's bounded wait, a port in use) falls back, in :meth:`fallback`, to single-node
  tuning: ``source="fallback"``, ``workers=0`` and the reason.

The pool used for tuning is stopped when ``tune()`` returns; ``result.serve()`` starts the
chosen number of workers again for training.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import time

from ..cache.keys import make_key
from ..cache.records import Lookup, Record, summarize_history, transfer_candidates
from ..errors import describe_error
from ..resources import ram_class
from ..tune import TuningRun, WriteIntent, _shipped_shapes
from .cost import Objective
from .observation import meets
from .pools.spec import PoolSpec, make_pool, parse_pool_spec
from .search import REDECIDE_DEMAND, ScaleOut
from .service import DEMAND, ServiceClusterEnv
from .worker_side import check_worker_side

log = logging.getLogger(__name__)

NODE_SHARE = 0.2
"""Each node-level tuning (the trainer, then one worker) gets this share of the budget."""
NODE_MIN_WINDOWS = 4
"""... and at least this many windows: a shorter node search ends inside its smart start."""
NODE_STEPS = 12
"""At most this many node-level measurements per node (the budget usually ends them first)."""


def _rate(demand: float) -> str:
    return "none stated" if demand >= DEMAND else f"{demand:,.0f} records/s"


def worker_class(spec: PoolSpec) -> str:
    """The worker node class in cache keys: ``workers-local1c``, ``workers-ray4c``, and the
    RAM per worker's bucket where stated (``workers-local1c-ram2g``, as in hardware_class)."""
    ram = f"-{ram_class(spec.ram_per_worker)}" if spec.ram_per_worker else ""
    return f"workers-{spec.kind}{spec.cores_per_worker}c{ram}"


def _as_written(measurements, autotune: dict):
    """The first window of the job as the user wrote it (no workers, all AUTOTUNE), or None."""
    return next((m for m in measurements if m.ok and m.workers == 0 and m.delivered > 0
                 and dict(m.config) == autotune), None)


def _done_event(outcome, env, elapsed: float) -> dict:
    """The scale-out search's "done" progress event: the pick and the stages the budget
    skipped (a short budget on a small machine may never start a worker)."""
    pick = outcome.pick
    skipped = [s["stage"] for s in outcome.stages if not s["ran"]]
    if not outcome.stages:      # the first window met the demand: nothing after it ran
        stopped = ("the first window met the demand: no stage ran" if meets(pick)
                   else "no stage ran")
    else:
        stopped = (f"skipped for the budget: {', '.join(skipped)}" if skipped
                   else "every stage ran")
    return {"event": "done", "method": "intunex", "step": len(env.measurements),
            "elapsed": elapsed, "best": pick.delivered, "throughput": pick.delivered,
            "config": {"workers": outcome.workers, **dict(pick.config)},
            "status": "ok" if pick.ok else pick.status, "stopped": stopped}


class ScaleOutRun(TuningRun):
    """One ``tune(..., workers=spec)``; ``pool_kwargs`` go to the pool
    (``registration_timeout_s=``, ...)."""

    def __init__(self, options, pipeline, *, cache, single_node_env, pool_kwargs=None, **kw):
        super().__init__(options, pipeline, cache=cache, make_env=single_node_env, **kw)
        given = options.workers
        self.pool_source = given if not isinstance(given, str) else None   # a WorkerPool
        self.spec = parse_pool_spec(given) if isinstance(given, str) else PoolSpec.of(given)
        self.node_hardware = self.hardware
        self.hardware = f"{self.hardware}+{worker_class(self.spec)}"
        self.pool_kwargs = dict(pool_kwargs or {})
        self.primary_cache = cache
        self.cluster: ServiceClusterEnv | None = None
        self.scale: ScaleOut | None = None
        self._clock0: float | None = None     # when the budget's clock started (pool open)

    # -- checks before anything starts ------------------------------------------------------
    def execute(self):
        try:
            description = self.pipeline.describe(self.options.timeout_s)
        except Exception:  # noqa: BLE001 - TuningRun.execute reports it (falls back)
            description = None
        if description is not None:
            check_worker_side(self.pipeline.worker_side(description.space.defaults()),
                              what=f"the worker side of {self.pipeline.name}")
        return super().execute()

    # -- the sources --------------------------------------------------------------------------
    def _tune(self):
        self.description = self.pipeline.describe(self.options.timeout_s)
        self.key = make_key(self.description.fingerprint, self.description.space, self.hardware)
        found = self._look_up()
        budget = self.options.budget_s
        with make_pool(self.pool_source or self.spec, **self.pool_kwargs) as pool:
            self._clock0 = time.perf_counter()
            window = self.options.window_s or self.policy.search_window(budget)
            self.cluster = ServiceClusterEnv(
                self.pipeline, pool, cpu_budget=self.cpu_budget, ram_budget=self.ram_budget,
                window_s=window, warmup_s=min(self.policy.probe_warmup_s, window / 2),
                timeout_s=self.options.timeout_s or 30.0,
                demand=self.options.demand or DEMAND)
            if found.record is not None and "workers" in found.record.history:
                return self.use_cached_cluster(found)
            for candidate in self.cache.call(transfer_candidates, self.key,
                                             cpu_budget=self.cpu_budget,
                                             expected_shapes=_shipped_shapes()) or []:
                config = self._valid_config(candidate.config)
                if config is not None:
                    self.started_from = candidate
                    why = (f"no record for {self.hardware}; started from the record for "
                           f"{candidate.key.hardware}")
                    return self.scale_out(start=config, budget_s=self._warm_budget(),
                                          source="transferred", reason=why,
                                          cold_seconds=self._cold_seconds(candidate))
            return self.scale_out(start=None, budget_s=budget, source="tuned",
                                  reason="; ".join(self.notes) or None)

    def use_cached_cluster(self, found: Lookup):
        """Start the recorded workers at once and verify with one short probe."""
        record = self.record = self.started_from = found.record
        config = self.description.space.validate(record.config)
        k = min(int(record.history["workers"]), self.spec.max_workers)
        env = self.cluster
        was = float(record.history.get("demand") or DEMAND)
        if abs(math.log(was / env.demand)) > math.log1p(REDECIDE_DEMAND):
            return self.scale_out(
                start=config, budget_s=self._warm_budget(), source="refined",
                reason=f"the record was tuned for a demand of {_rate(was)}, this run states "
                       f"{_rate(env.demand)}; searched again from the cached config",
                stale=(found.version, 0.0), cold_seconds=self._cold_seconds(record))
        env.set_workers(k)
        m = env.measure(config, window_s=self.policy.verify_window_s,
                        warmup_s=self.policy.verify_warmup_s)
        if m.ok and m.delivered >= self.policy.drift_threshold * record.throughput:
            result = self._cluster_result("cache", k, config, m, reason="; ".join(self.notes))
            return result, None
        why = (f"verification probe with {k} worker(s) measured {m.delivered:,.0f}/s, below "
               f"{self.policy.drift_threshold:.0%} of the recorded {record.throughput:,.0f}/s"
               if m.ok else f"verification probe failed ({m.status}: {str(m.error)[:200]})")
        return self.scale_out(start=config, budget_s=self._warm_budget(), source="refined",
                              reason=f"{why}; searched again from the cached config",
                              stale=(found.version, 0.0),
                              cold_seconds=self._cold_seconds(record),
                              known=[m] if m.ok else [])

    def scale_out(self, *, start, budget_s: float, source: str, reason, stale=None,
                  cold_seconds=None, known=()):
        """The cluster agent over K with the node agent nested, on the real pool; from
        ``start`` (a warm start's config, with ``known`` measurements of it) where given."""
        from ..progress import make_progress
        from ..search import run_search
        from ..search.intune import load_policy

        env, seed = self.cluster, self.options.seed
        load_policy()          # off the clock, as in run_search; ScaleOut loads its own below
        node_budget = max(NODE_SHARE * budget_s, NODE_MIN_WINDOWS * (env.window_s + env.warmup_s))
        report = make_progress(self.options.progress)

        def node_tuner(cluster, k, budget, start=start):
            # The walk's windows at this K (all-AUTOTUNE at K = 0) count as the search's own.
            known = [m for workers, m in cluster.probes if workers == k]
            where = "trainer" if k == 0 else "worker"
            out = run_search(cluster.node_env(k), "intune", start=start, budget_s=budget,
                             max_steps=NODE_STEPS, seed=seed, known=known,
                             progress=lambda ev: report({**ev, "method": f"intune, {where}"}))
            if out.best is None or not out.best.ok:
                why = (f"{out.best.status}: {str(out.best.error)[:200]}" if out.best is not None
                       else "nothing measured")
                hint = ("; raise the RAM budget per worker (the spec's :SIZE, e.g. "
                        "'local:2x1:4GiB')" if k and out.best is not None
                        and out.best.status == "oom" else "")
                raise RuntimeError(f"no config measured on the {where} ({why}){hint}")
            return dict(out.best.config), float(out.best.throughput)

        self.scale = ScaleOut(env, Objective(), budget_s=budget_s, seed=seed,
                              node_tuner=node_tuner, node_budget_s=node_budget,
                              start=start, known=known)
        report({"event": "start", "method": "intunex", "budget_s": budget_s, "step": 0,
                "config": {"workers": 0}, "best": 0.0, "throughput": 0.0, "status": "ok"})
        outcome = self.scale.search()      # the budget counts from here
        pick = outcome.pick
        report(_done_event(outcome, env, time.perf_counter() - self._clock0))
        if not pick.ok or pick.delivered <= 0:
            raise RuntimeError(f"every scale-out measurement failed ({pick.status}: "
                               f"{pick.error})")
        config = dict(pick.config)     # the best measured (K, config): the env runs it now
        confirm = env.measure(config, window_s=self.policy.verify_window_s,
                              warmup_s=self.policy.verify_warmup_s)
        result = self._cluster_result(source, outcome.workers, config, pick, reason=reason)
        result.scaleout_stages = list(outcome.stages)
        intent = WriteIntent(outcome, None, stale=stale, cold_seconds=cold_seconds)
        self._confirmed = confirm
        return result, intent

    def _cluster_result(self, source, k, config, pick, reason):
        env = self.cluster
        first = env.measurements[0] if env.measurements else pick
        result = self._result(source=source, config=config, throughput=pick.delivered,
                              start_config=first.config, start_throughput=first.delivered,
                              reason=reason, history=[m for _, m in env.probes])
        result.workers = k
        job = _as_written(env.measurements, self.description.search_space.autotune())
        if source != "cache" and job is not None:
            # The pick against the job as written, both delivered to the trainer: the node
            # searches' AUTOTUNE windows (standalone, on one node) are another figure.
            result.autotune_throughput = job.delivered
            result.vs_autotune = pick.delivered / job.delivered
        result.worker_pool = str(self.spec)
        result.cost_per_million = env.cost.per_million(k, pick.delivered, env.demand)
        result.cluster_history = [m.to_dict() for m in env.measurements]
        result.worker_startups = [list(s) for s in env.startups]
        return result

    # -- the one fallback point ---------------------------------------------------------------
    def fallback(self, reason: str):
        """A scale-out failure: tune on this node instead (``source="fallback"``), on what is
        left of ``budget_s`` (at least the warm-start minimum)."""
        if self.description is None:
            return super().fallback(reason)
        msg = f"scale-out failed ({reason}); tuning on this node instead"
        log.warning(msg)
        budget = self.options.budget_s
        if self._clock0 is not None:
            budget = max(self.policy.warm_min_s, budget - (time.perf_counter() - self._clock0))
        options = dataclasses.replace(self.options, workers=None, budget_s=budget)
        inner = TuningRun(options, self.pipeline, cpu_budget=self.cpu_budget,
                          ram_budget=self.ram_budget, cache=self.primary_cache,
                          make_env=self.make_env, policy=self.policy,
                          spent_s=max(0.0, self.options.budget_s - budget))
        try:
            result = inner.execute()
        except Exception as exc:  # noqa: BLE001 - strict single-node tuning raised
            return super().fallback(f"{reason}; single-node tuning failed too: "
                                    f"{describe_error(exc)}")
        was, result.source = result.source, "fallback"
        result.reason = (f"scale-out with workers={self.spec} failed ({reason}); tuned on this "
                         f"node instead (single-node source {was})")
        result.worker_pool = str(self.spec)
        result.warnings.insert(0, msg)
        return result

    # -- the record ---------------------------------------------------------------------------
    def _record(self, result, intent) -> Record:
        """The scale-out record: the per-worker config, the worker count, the cost per record,
        and the figure of the confirming probe where lower (as single-node records)."""
        outcome = intent.outcome
        cold = intent.cold_seconds if intent.cold_seconds is not None else result.tuning_seconds
        history = summarize_history(result.history)
        recorded = result.throughput
        confirm = getattr(self, "_confirmed", None)
        if confirm is not None and confirm.ok:
            recorded = min(recorded, confirm.delivered)
        history.update(workers=int(result.workers), worker_pool=result.worker_pool,
                       worker_class=worker_class(self.spec),
                       cost_per_million=result.cost_per_million, source=result.source,
                       demand=self.options.demand,
                       cold_tuning_seconds=cold, search_seconds=outcome.seconds,
                       search_best_throughput=float(result.throughput),
                       cluster=[{k: m[k] for k in ("workers", "delivered", "per_hour",
                                                   "status")} for m in result.cluster_history],
                       startups=result.worker_startups)
        if result.autotune_throughput:     # a cache hit reports it, as single-node ones do
            history["autotune_throughput"] = float(result.autotune_throughput)
        return self._record_of(result, recorded, history)

