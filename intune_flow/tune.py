"""``tune()``: options -> discover -> look up -> decide the source -> verify or search -> write.

::

    result = intune_flow.tune("intune_flow.examples.criteo:criteo_pipeline", budget_s=60,
                              cache="s3://ml-bucket/intune")
    ds = result.build()

Warm-start semantics (each visible in ``result.source``): an exact hit is verified by a
short probe and used (``"cache"``); if it now delivers below ``drift_threshold`` of its
recorded throughput it is fine-tuned from the cached policy on a short budget
(``"refined"``); a record of the same schema and knob space on another hardware class
seeds a short search (``"transferred"``); a miss tunes from the shipped policy
(``"tuned"``). Any failure returns ``"fallback"`` with the cached config or the factory
defaults unless ``strict=True``: :meth:`TuningRun.execute` is the one place that decides
to fall back. A cache outage moves to a local cache, with a warning.

A :class:`TuningRun` gets its environment from a factory, so the whole decision table
runs on the simulator (:mod:`intune_flow.sim.target`) as it runs on a real pipeline.
"""

from __future__ import annotations

import functools
import logging
import math
import time
from dataclasses import dataclass, replace
from typing import Callable

from .cache import Cache, get_cache
from .cache.keys import CacheKey, make_key
from .cache.outage import publish_fallback
from .cache.records import (Lookup, Record, hardware_info, read, summarize_history,
                            transfer_candidates, write_best)
from .cache.session import CacheSession
from .errors import FactoryError, KnobError, TuningError, describe_error
from .agent.allocations import BUSY_CPU, pool_threads
from .agent.signals import SATURATED, trusted_signals
from .knobs import at_their_max, flat_below_max
from .measurement import STATUS_EMPTY, STATUS_ERROR, STATUS_TIMEOUT, Measurement
from .options import TuneOptions
from .progress import fmt_config
from .resources import hardware_class
from .search import SEARCHING, run_search
from .result import TuneResult, portable_kwargs

log = logging.getLogger(__name__)

ONE_CORE = 0.15
"""A process whose use of the CPU is within this many cores of one reads as held to one core
(:func:`one_core`)."""
OTHERS_BUSY = 0.10
"""Other processes' share of the CPU budget, above this process's own use, from which a
measurement counts as taken on a machine others kept busy (:func:`contended`)."""


@dataclass(frozen=True)
class TuningPolicy:
    """The thresholds of the warm-start decision and of the search's probes."""

    drift_threshold: float = 0.80
    """A cached config measured below this share of its recorded throughput, in every look,
    is refined. Not tighter: on a shared 2-core machine one config's short windows range
    about +-20% around their median (``intune-flow probe PIPELINE --config ... --repeat 20``
    shows a pipeline's own spread)."""
    verify_looks: int = 3
    """Looks at a cached config before calling it drift: short ones first, the last with the
    search's own window (one noisy window is not drift)."""
    verify_window_s: float = 0.75
    verify_warmup_s: float = 0.2
    """The short looks: a window after a warm-up (about 1.5 s in all on the Criteo pipeline)."""
    load_scaled: bool = True
    """Judge a look against the recorded throughput scaled by the CPU this process gets now
    over what it got when the record was written (``env.capacity()``), never scaled up: a
    machine made busy by other jobs is not taken for a slower pipeline."""
    warm_fraction: float = 0.25
    warm_min_s: float = 5.0
    warm_min_measurements: int = 4
    """Refining and transferring get this share of ``budget_s``, at least ``warm_min_s`` and,
    for a refine, at least what ``warm_min_measurements`` of its verification looks took (the
    start, the AUTOTUNE floor and two steps): on 2 cores a 5 s refine held the start alone, so
    it cached nothing and the stale record failed every later night's verification again."""
    search_window_s: tuple[float, float] = (0.75, 2.0)
    """A search's probe window without ``window_s``: 1/20 of its budget, within these bounds,
    so that a short budget (a 10 s cold search, a 5 s refine) still holds several
    measurements."""
    probe_warmup_s: float = 0.5
    """A search probe's warm-up before its window: at most half the window."""
    few_measurements: int = 5
    """A cold search the budget ends with fewer measurements than this (the start, AUTOTUNE,
    two jumps) warns that it stopped inside the smart start: a README-only trial's
    ``budget_s=5`` returned all-AUTOTUNE at 16,000 records/s without a word, where 20 s found
    270,000."""

    confirm_doubt: float = 2 / 3
    """A confirming probe of the chosen config below this share of the search's figure for
    it gets the runner-up a probe too (:meth:`TuningRun._second_opinion`), and what stays
    doubted is said in ``result.warnings``: a README-only trial's search on a machine another job
    kept busy reported 24,505 records/s ("2.1 times AUTOTUNE") where its probe read 11,666
    and, side by side, the config ran at 0.90 x AUTOTUNE. Not tighter: on 2 cores one
    config's windows spread by 20-40%."""

    def doubted(self, best: Measurement, confirm: Measurement | None) -> str | None:
        """The warning for a confirming probe that read well below ``best``, else None."""
        if confirm is None or not confirm.ok or not best.ok or best.throughput <= 0 \
                or confirm.throughput >= self.confirm_doubt * best.throughput:
            return None
        return (f"the confirming probe of the chosen config read {confirm.throughput:,.0f} "
                f"records/s, {confirm.throughput / best.throughput:.2f} of the search's best "
                f"window for it ({best.throughput:,.0f}): one of the two is off (a machine "
                "other jobs keep busy, or a window the config drew far from its typical "
                "rate: a short search chooses on one window), so `throughput` and the "
                "comparison with AUTOTUNE may read high; the cache stored the lower figure, "
                "which warm starts check against; where it matters, measure the config with "
                "`intune-flow probe --repeat 5` or tune again with a longer budget_s (its "
                "end-of-search race judges the best configs on new looks)")

    def warm_budget(self, budget_s: float, per_measurement: float = 0.0) -> float:
        """A refine's or transfer's budget, given what one measurement costs (0: unknown);
        never more than ``budget_s``."""
        return min(budget_s, max(self.warm_min_s, self.warm_fraction * budget_s,
                                 self.warm_min_measurements * per_measurement))

    def search_window(self, budget_s: float) -> float:
        low, high = self.search_window_s
        return min(high, max(low, budget_s / 20))


POLICY = TuningPolicy()


def search_window(budget_s: float) -> float:
    """The probe window of a search of ``budget_s`` seconds when the caller sets none."""
    return POLICY.search_window(budget_s)


def tune(pipeline=None, *, budget_s: float = 60.0, cpu_budget: float | None = None,
         ram_budget=None, cache=None, method: str = "intune", strict: bool = False,
         pipeline_kwargs: dict | None = None, window_s: float | None = None,
         timeout_s: float | None = None, progress=None,
         seed: int | None = None, s3_client=None, workers=None,
         demand: float | None = None, **unknown) -> TuneResult:
    """Tune ``pipeline`` (a ``"module:attr"`` string, a factory or a Pipeline) and return the result.

    The arguments are :class:`~intune_flow.options.TuneOptions`' (README: ``tune()``).
    ``workers="local:4x1"`` (or ``"ray:32x4"``, a pool object) scales out onto tf.data
    service workers: :class:`intune_flow.scaleout.run.ScaleOutRun` picks how many run and
    their knobs; ``result.serve()`` starts them for training. ``demand`` (records/s the
    accelerator consumes) stops it adding workers once the delivered rate meets it.
    Bad arguments raise a :class:`~intune_flow.errors.ConfigurationError` naming the fix (a
    missing or misspelt ``pipeline`` too: ``pipeline`` defaults to None for that);
    failures while tuning return ``source="fallback"``, or raise :class:`TuningError` with
    ``strict=True``.
    """
    from .pipeline import Pipeline
    from .real_env import PipelineEnv

    options = TuneOptions.parse(dict(
        pipeline=pipeline, budget_s=budget_s, cpu_budget=cpu_budget, ram_budget=ram_budget,
        cache=cache, method=method, strict=strict, pipeline_kwargs=pipeline_kwargs,
        window_s=window_s, timeout_s=timeout_s, progress=progress, seed=seed,
        s3_client=s3_client, workers=workers, demand=demand, **unknown))
    cpu, ram = options.budgets()
    cache = get_cache(options.cache, s3_client=options.s3_client)
    pipe = Pipeline.load(options.pipeline, **options.pipeline_kwargs)
    pipe.check_complete()

    def make_env(**kw):
        return PipelineEnv(pipe, cpu_budget=cpu, ram_budget=ram, **kw)

    if options.workers is not None:
        from .scaleout.run import ScaleOutRun

        run = ScaleOutRun(options, pipe, cpu_budget=cpu, ram_budget=ram, cache=cache,
                          single_node_env=make_env)
    else:
        run = TuningRun(options, pipe, cpu_budget=cpu, ram_budget=ram, cache=cache,
                        make_env=make_env)
    return run.execute().bind(pipe)


@dataclass(frozen=True)
class WriteIntent:
    """What a branch asks to store: the search it ran, the confirming re-measure of its best,
    ``stale=(version, 0.0)`` to replace a record just shown wrong whatever its figure, and
    the cold tuning seconds to carry over from the record it started from."""

    outcome: object            # search.SearchOutcome
    confirm: Measurement | None
    capacity: float | None = None
    stale: tuple[str | None, float] | None = None
    cold_seconds: float | None = None


def contended(m: Measurement) -> bool:
    """Whether other processes kept the CPU busy while ``m`` was measured: no idle core
    (``BUSY_CPU``) and at least ``OTHERS_BUSY`` of the budget theirs. A machine this process
    alone keeps near the threshold also shows a few points of kernel and background work
    above its own use, which is not others' load."""
    return m.cpu_busy >= BUSY_CPU and m.others_busy >= OTHERS_BUSY


def one_core(m: Measurement, cpu_budget: float, framework: str) -> float | None:
    """``cpu_budget``, where ``m`` used about one of its cores (within ``ONE_CORE``) and it
    had more: a process whose calls run Python in threads can use no more (the GIL). None
    otherwise, and for a DataLoader, whose work runs in worker processes (``cpu_util``
    counts them too). README-only trial 90: a torchdata pipeline of thread mappers used
    0.96 of 2 cores, and its collate, named at its max of 8, read the same at 1, 2, 4 and 8
    calls side by side."""
    if cpu_budget >= 2 and abs(m.cpu_util * cpu_budget - 1) <= ONE_CORE and \
            framework != "torch.utils.data":
        return cpu_budget
    return None


class TuningRun:
    """One call of ``tune()``: its options, pipeline, budgets, cache and environment.

    ``pipeline`` is anything with ``name``, ``ref``, ``kwargs`` and ``describe(timeout_s)``
    (a :class:`~intune_flow.pipeline.Pipeline`, or a simulated one);
    ``make_env(window_s=..., timeout_s=...)`` returns the
    :class:`~intune_flow.env.TuningEnv` that measures it; ``cache`` is the primary
    :class:`~intune_flow.cache.Cache` (a local one stands in during an outage).
    """

    def __init__(self, options: TuneOptions, pipeline, *, cpu_budget: float, ram_budget: int,
                 cache: Cache, make_env: Callable, policy: TuningPolicy | None = None,
                 spent_s: float = 0.0):
        self.options, self.pipeline, self.policy = options, pipeline, policy or POLICY
        # Seconds of the caller's budget_s spent before this run (a scale-out's fallback
        # tunes on what is left): budget advice adds them back.
        self.spent_s = float(spent_s)
        self.cache = CacheSession(cache, strict=options.strict)
        self.make_env = make_env
        self.cpu_budget, self.ram_budget = cpu_budget, ram_budget
        self.hardware = hardware_class(cpu_budget)
        self.description = None
        self.key: CacheKey | None = None
        self.record: Record | None = None          # the exact hit, if any
        self.started_from: Record | None = None    # the record a warm start began from
        self.history: list[Measurement] = []
        self.notes: list[str] = []
        self.window_s: float | None = None          # the search's probe window, once set

    # -- the run, top to bottom ----------------------------------------------------------
    def execute(self) -> TuneResult:
        """Discover, look up, decide, verify or search, write; the one fallback point."""
        started = time.perf_counter()
        try:
            result, intent = self._tune()
        except TuningError:
            raise
        except Exception as exc:  # noqa: BLE001 - any failure: fall back (or raise when strict)
            if isinstance(exc, (KnobError, FactoryError)) and self.description is None:
                raise   # the factory is written wrongly: not even defaults would build
            if self.options.strict:
                raise TuningError(f"tuning {self.pipeline.name} failed: "
                                  f"{describe_error(exc)}") from exc
            result, intent = self.fallback(describe_error(exc)), None
        if intent is not None:
            result.tuning_seconds = time.perf_counter() - started
            self._write(result, intent)
        return self._finish(result, started)

    def _tune(self) -> tuple[TuneResult, WriteIntent | None]:
        self.description = self.pipeline.describe(self.options.timeout_s)
        self.key = make_key(self.description.fingerprint, self.description.space,
                            self.hardware)
        env = self._env()
        found = self._look_up()
        if found.record is not None:
            return self.use_cache(env, found)
        candidates = self.cache.call(transfer_candidates, self.key, cpu_budget=self.cpu_budget,
                                     expected_shapes=_shipped_shapes()) or []
        for candidate in candidates:
            config = self._valid_config(candidate.config)
            if config is not None:
                return self.transfer(env, candidate, config)
        return self.tune_cold(env)

    def _look_up(self) -> Lookup:
        """The record for this key, with a damaged or invalid one quarantined (a miss). A
        record an earlier run stored in the local fallback during an outage of this cache is
        published first (the better record wins)."""
        self.cache.call(publish_fallback, self.key, expected_shapes=_shipped_shapes())
        found = self.cache.call(read, self.key, expected_shapes=_shipped_shapes()) or Lookup()
        if found.damage:
            self.notes.append(f"cached record was damaged ({found.damage}); quarantined and "
                              "re-tuned")
        error = found.record is not None and self._config_error(found.record.config)
        if error:
            self._quarantine(found, f"config invalid: {error}")
            self.notes.append(f"cached config was invalid ({error}); quarantined and re-tuned")
            return Lookup()
        return found

    # -- the sources ---------------------------------------------------------------------
    def use_cache(self, env, found: Lookup) -> tuple[TuneResult, WriteIntent | None]:
        """Verify the cached config; refine it if every look says it drifted."""
        record = self.record = self.started_from = found.record
        config = self.description.space.validate(record.config)
        probes, passed, why = self._verify(env, config, record)
        self.history = probes
        if passed:
            best = max((m for m in probes if m.ok), key=lambda m: m.throughput)
            result = self._result(source="cache", config=config, throughput=best.throughput,
                                  start_config=config, start_throughput=best.throughput,
                                  reason="; ".join(self.notes) or None)
            # every night's result says it, not the first's
            self._warn_at_max(result, best, record.history.get("best", []))
            return result, None
        return self.refine(env, found, probes, why)

    def refine(self, env, found: Lookup, probes: list[Measurement], why: str):
        """A short search from the cached config and policy; replaces the stale record."""
        policy = self._cached_policy(found)
        per = max((m.seconds for m in probes), default=0.0)
        outcome, confirm, capacity = self._search(env, start=found.record.config,
                                                  budget_s=self._warm_budget(per),
                                                  policy=policy, prior=probes)
        intent = WriteIntent(outcome, confirm, capacity, stale=(found.version, 0.0),
                             cold_seconds=self._cold_seconds(found.record))
        return self._searched(outcome, confirm, intent, "refined",
                              f"{why}; refined from the cached policy", prior=probes)

    def transfer(self, env, candidate: Record, config: dict):
        """A short search from the record of the same pipeline on other hardware."""
        self.started_from = candidate
        outcome, confirm, capacity = self._search(env, start=config,
                                                  budget_s=self._warm_budget(),
                                                  policy=_valid_policy(candidate.weights))
        intent = WriteIntent(outcome, confirm, capacity,
                             cold_seconds=self._cold_seconds(candidate))
        why = (f"no record for {self.hardware}; started from the record for "
               f"{candidate.key.hardware}")
        return self._searched(outcome, confirm, intent, "transferred",
                              "; ".join(self.notes + [why]))

    def tune_cold(self, env):
        """A miss: a search of the whole budget from the shipped policy."""
        outcome, confirm, capacity = self._search(env, start=None,
                                                  budget_s=self.options.budget_s, policy=None)
        return self._searched(outcome, confirm, WriteIntent(outcome, confirm, capacity),
                              "tuned", "; ".join(self.notes) or None)

    def fallback(self, reason: str) -> TuneResult:
        """The cached config, else the factory defaults, so training can go on; where the
        defaults are what failed (the factory's first build, or a probe of them that raised
        or hung), the warning says that training will fail the same way."""
        if self.record is not None:
            config, what = dict(self.record.config), "the cached config"
        elif self.description is not None:
            config, what = self.description.space.defaults(), "the factory defaults"
        else:
            config, what = {}, "the factory defaults"
        doomed = self.record is None and (self.description is None or self._failed_here(config))
        if doomed:
            what += ", which failed in this run too"
        result = TuneResult.fallback(reason, config=config, what=what, **self._identity())
        _warn(result, f"tuning failed ({reason}); using {what}" + (
            ": training will fail the same way until the pipeline is fixed" if doomed
            else " so training can go on"))
        return result

    def _failed_here(self, config: dict) -> bool:
        """Whether a probe of ``config`` (as given, or with its AUTOTUNE knobs at the values
        a search starts from) raised or hung in this run."""
        forms = (dict(config), self.description.space.concretize(config, self.cpu_budget))
        return any(m.config in forms and m.status in (STATUS_ERROR, STATUS_TIMEOUT)
                   for m in self.history)

    # -- verification --------------------------------------------------------------------
    def _verify(self, env, config: dict, record: Record) -> tuple[list[Measurement], bool, str]:
        """Up to ``verify_looks`` probes of ``config``: (probes, passed, why it did not)."""
        looks, probes, scale = self.policy.verify_looks, [], 1.0
        then = _positive(record.history.get("machine_capacity"))
        for i in range(looks):
            m = self._look(env, config, full=i == looks - 1)
            probes.append(m)
            if not m.ok:
                break
            if self._passes(m, record.throughput * scale):
                return probes, True, ""
            if then and self.policy.load_scaled and scale == 1.0 and hasattr(env, "capacity"):
                scale = min(1.0, env.capacity() / then)
                if scale < 1.0:
                    self.notes.append(f"this machine gives {scale:.0%} of the CPU it gave when "
                                      "the record was written; verified against that")
                if self._passes(m, record.throughput * scale):
                    return probes, True, ""
        ok = [m.throughput for m in probes if m.ok]
        if not ok:
            m = probes[-1]
            return probes, False, f"verification probe failed ({m.status}: {str(m.error)[:200]})"
        best, expected = max(ok), record.throughput * scale
        return probes, False, (f"verification probe measured {best:,.0f}/s, "
                               f"{best / expected:.0%} of the {expected:,.0f}/s expected "
                               f"(recorded {record.throughput:,.0f}/s)")

    def _passes(self, m: Measurement, expected: float) -> bool:
        return m.ok and m.throughput >= self.policy.drift_threshold * expected

    def _look(self, env, config: dict, full: bool = False) -> Measurement:
        """A short probe of ``config``, or with ``full`` one of the search's own window."""
        if full:
            return env.measure(config)
        return env.measure(config, window_s=min(self.policy.verify_window_s, env.window_s),
                           warmup_s=min(self.policy.verify_warmup_s, env.warmup_s))

    # -- searching -----------------------------------------------------------------------
    def _search(self, env, *, start, budget_s: float, policy, prior=()):
        """Run the method; (outcome, confirming re-measure of its best, capacity then)."""

        if self.options.window_s is None:
            self._set_window(env, self.policy.search_window(budget_s))
        outcome = run_search(env, self.options.method, start=start, budget_s=budget_s,
                             policy_state=policy, seed=self.options.seed,
                             progress=self.options.progress)
        self.history = list(prior) + list(outcome.history)
        if outcome.best is None or not outcome.best.ok:
            last = outcome.best or (outcome.history[-1] if outcome.history else None)
            detail = f"{last.status}: {last.error}" if last is not None else "nothing measured"
            raise RuntimeError(f"every probe failed ({detail})")
        confirm = self._look(env, outcome.best.config)
        if self.options.method in SEARCHING:
            outcome, confirm = self._second_opinion(env, outcome, confirm)
        capacity = env.capacity() if hasattr(env, "capacity") else None
        return outcome, confirm, capacity

    def _second_opinion(self, env, outcome, confirm):
        """Where the confirming probe doubts the search's best (:meth:`TuningPolicy.doubted`),
        the runner-up (the best other config the search read above that probe) gets a probe
        too and is chosen if it reads higher: one lucky window must not choose the config (a
        generality search on a busy 2-core machine read 39,473 records/s for a config that
        runs at 5,000, and returned it). (outcome, confirm), the runner-up's where it won."""
        best = outcome.best
        if not self.policy.doubted(best, confirm):
            return outcome, confirm
        others = [m for m in outcome.history
                  if m.ok and m.config != best.config and m.throughput > confirm.throughput]
        if not others:
            return outcome, confirm
        runner = max(others, key=lambda m: m.throughput)
        second = self._look(env, runner.config)
        if not second.ok or second.throughput <= confirm.throughput:
            return replace(outcome, history=[*outcome.history, second]), confirm
        note = (f"the search's best config {fmt_config(best.config)} read "
                f"{confirm.throughput:,.0f} records/s on its confirming probe, "
                f"{confirm.throughput / best.throughput:.2f} of the window that chose it "
                f"({best.throughput:,.0f}); the runner-up {fmt_config(runner.config)} read "
                f"{second.throughput:,.0f} on its own probe and is returned instead")
        return replace(outcome, best=runner, history=[*outcome.history, confirm],
                       extra={**outcome.extra, "second_opinion": note}), second

    def _searched(self, outcome, confirm, intent: WriteIntent, source: str, reason, prior=()):
        """The result of a search, and its write intent unless only the start was measured."""
        best, start = outcome.best, outcome.start
        result = self._result(source=source, config=dict(best.config),
                              throughput=best.throughput,
                              start_config=dict(start.config) if start else {},
                              start_throughput=start.throughput if start and start.ok else 0.0,
                              reason=reason,
                              history=list(prior) + list(outcome.history) + [confirm])
        if self.options.method not in SEARCHING:
            return result, intent
        self._warn_at_max(result, best, summarize_history(result.history)["best"])
        _warn_failed(result, outcome.history)
        if "second_opinion" in outcome.extra:
            _warn(result, outcome.extra["second_opinion"])
        doubt = self.policy.doubted(best, confirm)
        if doubt:
            _warn(result, doubt)
        measured = len(outcome.history)
        per = outcome.seconds / max(1, measured)
        if not _moved(outcome) and outcome.stopped != "converged":
            # Caching the start would make the next run a hit on an untuned (or, after
            # drift, stale) config: say so and let the next run search. A search that
            # converged without a move open (an all-AUTOTUNE start whose choices the probe
            # did not read) has its answer in the start: cached with today's figure, so a
            # lucky night's record is not verified against again and again.
            _warn(result, f"the budget of this search held no step beyond the start config "
                          f"(it took {outcome.seconds:.1f} s, measurements {self._cost(per)}), "
                          "so the start config is returned as it was and "
                          f"nothing was cached; give budget_s at least "
                          f"{self._enough(per, source):.0f} s"
                          f"{_share_note(source, self.policy)}, or a shorter window_s")
            return result, None
        if source == "tuned" and outcome.stopped == "budget" \
                and measured < self.policy.few_measurements:
            _warn(result, f"the budget of this search held only {measured} measurements "
                          f"({self._cost(per)}): it ended in its first whole-config "
                          "jumps, before the single-knob walk, so a longer search may find a "
                          f"faster config; give budget_s at least "
                          f"{self._enough(per, source):.0f} s")
        return result, intent

    def _warn_at_max(self, result: TuneResult, m: Measurement, looks=()) -> None:
        """Warn of each knob ``result.config`` holds at its max, where ``m`` (the config's
        measurement) left the CPU room: on a busy CPU a bound binds nothing, more calls only
        take turns. This process's own use decides (calls that wait need no core); where
        other processes kept the CPU busy the warning says that it may be the CPU. A stage
        whose calls outnumber the thread pool's threads, and whose signal (a tf.data map's:
        its calls run on the pool) read them as not all busy, is not named: the pool held it,
        not the bound (README-only trial 70: 16 parse and 16 feature calls on a pool of 3
        threads, both named). The signal alone does not decide: it under-reads CPU-bound
        maps of many small ops. Nor is a knob whose lower value read the same in ``looks``
        (the search's best few, as its cache record keeps them: :func:`flat_below_max`)."""
        if m.ok and m.cpu_util < BUSY_CPU:
            space = self.description.space
            pool = pool_threads(space, m.config, self.cpu_budget)
            idle = [name for name, share in trusted_signals(space, m).items()
                    if share < SATURATED and pool is not None and m.config.get(name, 0) > pool]
            idle += flat_below_max(space, result.config, looks) + list(self.description.inert)
            for msg in at_their_max(space, result.config, self.description.implicit,
                                    contended=contended(m), idle=idle,
                                    one_core=one_core(m, self.cpu_budget,
                                                      self.description.framework)):
                _warn(result, msg)

    # -- writing -------------------------------------------------------------------------
    def _write(self, result: TuneResult, intent: WriteIntent) -> None:
        """Store the new best unless a better record is there (never a worse over a better)."""
        try:
            written = self.cache.call(write_best, self._record(result, intent),
                                      stale=intent.stale)
        except TuningError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed write must not fail the run
            if self.options.strict:
                raise TuningError(f"writing the cache record failed: "
                                  f"{describe_error(exc)}") from exc
            _warn(result, f"could not store the tuning record: {describe_error(exc)}")
            return
        if written is not None:
            log.info("cache %s: %s %s (stored %.0f/s)", self.cache.uri, written.action,
                     self.key, written.stored_throughput)

    def _record(self, result: TuneResult, intent: WriteIntent) -> Record:
        """The record to store. Its figure is the lower of the search's best (the max of
        noisy windows, biased upward) and the confirming re-measure by the same short probe
        a warm start verifies with: a conservative record makes noise less likely to look
        like drift, and a better record must beat it by a real measurement."""
        outcome = intent.outcome
        cold = intent.cold_seconds if intent.cold_seconds is not None else result.tuning_seconds
        history = summarize_history(result.history)
        history.update(steps=outcome.steps, search_seconds=outcome.seconds,
                       stopped=outcome.stopped, source=result.source, cold_tuning_seconds=cold,
                       search_best_throughput=float(result.throughput))
        if intent.capacity:
            history["machine_capacity"] = float(intent.capacity)
        if result.autotune_throughput:
            history["autotune_throughput"] = float(result.autotune_throughput)
        recorded = result.throughput
        if intent.confirm is not None and intent.confirm.ok:
            recorded = min(recorded, intent.confirm.throughput)
        return self._record_of(result, recorded, history, outcome.policy_state)

    def _record_of(self, result: TuneResult, recorded: float, history: dict,
                   weights=None) -> Record:
        """The record of ``result`` under this run's key, stored at the figure ``recorded``."""
        return Record(
            key=self.key, config=dict(result.config), throughput=float(recorded),
            knob_space=self.description.space.to_json(),
            start_config=dict(result.start_config),
            start_throughput=float(result.start_throughput),
            tuning_seconds=float(result.tuning_seconds), method=result.method,
            hardware=hardware_info(self.hardware, self.cpu_budget, self.ram_budget),
            history=history, pipeline=result.pipeline,
            weights=dict(weights) if weights else None)

    # -- helpers -------------------------------------------------------------------------
    def _identity(self) -> dict:
        """The fields every result of this run carries."""
        kept, not_kept = portable_kwargs(self.pipeline.kwargs)
        return dict(cpu_budget=self.cpu_budget, ram_budget=self.ram_budget,
                    method=self.options.method, pipeline=self.pipeline.ref,
                    hardware_class=self.hardware, pipeline_kwargs=kept,
                    pipeline_kwargs_not_kept=not_kept, history=list(self.history),
                    fingerprint=getattr(self.description, "fingerprint", None),
                    cache_key=str(self.key) if self.key is not None else None)

    def _result(self, *, source, config, throughput, start_config, start_throughput, reason,
                history=None) -> TuneResult:
        fields = self._identity()
        if history is not None:
            fields["history"] = history
        autotune, versus = self._autotune(fields["history"]), None
        space = self.description.search_space
        if (self.description.framework == "tf.data" and any(k.autotune for k in space.knobs)
                and dict(config) == space.autotune()):
            autotune, versus = throughput, 1.0      # AUTOTUNE over itself: one figure, not two
        elif source == "cache":
            versus = self._night_vs_autotune()
        return TuneResult(config=dict(config), throughput=throughput,
                          start_config=dict(start_config), start_throughput=start_throughput,
                          source=source, reason=reason or None, autotune_throughput=autotune,
                          vs_autotune=versus, **fields)

    def _autotune(self, history: list[Measurement]) -> float | None:
        """All-AUTOTUNE's throughput: measured in this run, else carried by the record."""
        autotune = self.description.search_space.autotune()
        seen = [m.throughput for m in history if m.ok and m.config == autotune]
        if seen:
            return max(seen)
        if self.started_from is not None and self.started_from is self.record:
            return _positive(self.started_from.history.get("autotune_throughput"))
        return None

    def _night_vs_autotune(self) -> float | None:
        """On a cache hit, the record's config over AUTOTUNE in the search that wrote it (its
        best window over AUTOTUNE's): today's verification probe is a shorter look, on a
        machine that may be busier, and over that night's AUTOTUNE it would read low."""
        night = self.record.history if self.record is not None else {}
        best, autotune = (_positive(night.get(k)) for k in ("search_best_throughput",
                                                             "autotune_throughput"))
        return best / autotune if best and autotune else None

    def _finish(self, result: TuneResult, started: float) -> TuneResult:
        result.tuning_seconds = time.perf_counter() - started
        if result.source in ("cache", "refined", "transferred") and self.started_from:
            cold = self._cold_seconds(self.started_from)
            result.seconds_saved = max(0.0, cold - result.tuning_seconds)
        result.cache_uri = self.cache.uri
        found = [*(getattr(self.description, "warnings", ()) or ()),
                 *getattr(self.pipeline, "late_knob_warnings", ())]
        described = [w for w in found if w not in result.warnings]
        result.warnings = self.cache.warnings + described + result.warnings
        log.info("tune %s: %s", self.pipeline.name, result.summary())
        return result

    def _env(self):
        kw = {} if self.options.window_s is None else {"window_s": self.options.window_s}
        if self.options.timeout_s is not None:
            kw["timeout_s"] = self.options.timeout_s
        env = self.make_env(**kw)
        self._set_window(env, env.window_s)
        return env

    def _set_window(self, env, window_s: float) -> None:
        env.window_s = window_s
        env.warmup_s = min(self.policy.probe_warmup_s, window_s / 2)
        self.window_s = window_s

    def _cost(self, per: float) -> str:
        """What one measurement of the search cost, in words: more than its window (a
        README-only trial read 'about 2.9 s each' at a 0.75 s window and took it for a bug)."""
        if self.window_s is None:
            return f"about {per:.1f} s each"
        return (f"about {per:.1f} s each: a {self.window_s:.2f} s window, the rest "
                "building, warming up and stopping the pipeline")

    def _warm_budget(self, per_measurement: float = 0.0) -> float:
        return self.policy.warm_budget(self.options.budget_s, per_measurement)

    def _enough(self, per_measurement: float, source: str) -> float:
        """A budget_s that holds about eight measurements in a search of this ``source``."""
        need = 8 * per_measurement
        if source != "tuned":
            need = max(self.policy.warm_min_s, need) / self.policy.warm_fraction
        return need + self.spent_s

    def _valid_config(self, config) -> dict | None:
        """``config`` validated against this pipeline's knob space, or None if it does not fit."""
        try:
            return self.description.space.validate(config)
        except KnobError:
            return None

    def _config_error(self, config) -> str:
        """Why ``config`` does not fit this pipeline's knob space ("" when it does)."""
        try:
            self.description.space.validate(config)
        except KnobError as exc:
            return str(exc) or type(exc).__name__
        return ""

    def _quarantine(self, found: Lookup, why: str) -> None:
        self.cache.call(lambda c: c.quarantine(str(self.key), why, if_version=found.version))

    def _cached_policy(self, found: Lookup):
        policy = _valid_policy(found.record.weights)
        if policy is None and found.record.weights is not None:
            self._quarantine(found, "policy weights do not fit the network")
        return policy

    @staticmethod
    def _cold_seconds(record: Record) -> float:
        """The record's cold tuning seconds (what a warm start saves against)."""
        value = _positive(record.history.get("cold_tuning_seconds"), zero_ok=True)
        return value if value is not None else float(record.tuning_seconds)


def _warn(result: TuneResult, msg: str) -> None:
    """Log ``msg`` as a warning and keep it in ``result.warnings``, which hold every warning
    the run logged."""
    log.warning(msg)
    result.warnings.append(msg)


def _warn_failed(result: TuneResult, history) -> None:
    """Warn of the configs a search measured that raised, hung or ran empty: the search
    steers away from them, so the result does not show them (README-only trial 71: a
    factory that refused 8 lookups left only a status in ``result.history``)."""
    failed = [m for m in history if m.status in (STATUS_ERROR, STATUS_TIMEOUT, STATUS_EMPTY)]
    if failed:
        first = failed[0]
        _warn(result, f"{len(failed)} of the {len(history)} configs this search measured "
                      f"failed (the first, {fmt_config(first.config)}: {first.status}: "
                      f"{first.error}); the returned config ran, but where a knob's value "
                      "causes it, bound that knob (max=, min=) so the search stays where "
                      "the pipeline works")


def _share_note(source: str, policy: TuningPolicy) -> str:
    """Why a warm search's advice asks for more than eight measurements' worth."""
    if source == "tuned":
        return ""
    return f" (a {source} search gets {policy.warm_fraction:.0%} of budget_s)"


def _moved(outcome) -> bool:
    """Whether the search measured any config besides its start."""
    start = outcome.start.config
    return any(m.config != start for m in outcome.history)


def _positive(value, zero_ok: bool = False) -> float | None:
    """A finite, positive (or with ``zero_ok`` non-negative) number from a record, else None."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    ok = math.isfinite(value) and (value >= 0 if zero_ok else value > 0)
    return value if ok else None


@functools.lru_cache(maxsize=1)
def _shipped_shapes() -> dict[str, tuple] | None:
    """Names and shapes of the shipped policy's weights, read without importing torch (once
    per process: the shipped file does not change)."""
    from importlib import resources

    try:
        from safetensors.numpy import load

        data = resources.files("intune_flow.policies").joinpath("default.safetensors").read_bytes()
        return {k: tuple(v.shape) for k, v in load(data).items()}
    except Exception:  # noqa: BLE001 - no shipped policy yet: skip the shape check
        return None


def _valid_policy(weights):
    """Cached weights checked against the agent's network, or None (use the shipped policy)."""
    if weights is None:
        return None
    from .agent.policy_io import PolicyError, validate_policy

    try:
        return validate_policy(weights)
    except PolicyError as exc:
        log.warning("cached policy weights do not fit the network (%s); using the shipped policy",
                    exc)
        return None
