"""``tune()``: the orchestrator. Cache lookup, verification, search, write-back, fallback.

::

    result = intune_flow.tune("examples.criteo:criteo_pipeline", budget_s=60,
                              cache="s3://ml-bucket/intune")
    ds = result.build()

Warm-start semantics (each visible in ``result.source``): an exact hit is verified by a
short probe and used (``"cache"``); if it now delivers < ``DRIFT_THRESHOLD`` of its
recorded throughput it is fine-tuned from the cached policy on a short budget
(``"refined"``); a record of the same schema and knob space on another hardware class
seeds a short search (``"transferred"``); a miss tunes from the shipped policy
(``"tuned"``). Any failure returns ``"fallback"`` with the cached config or the factory
defaults unless ``strict=True``. A cache outage falls back to a local cache, with a warning.
"""

from __future__ import annotations

import logging
import math
import time
from dataclasses import dataclass, field

from .cache import Cache, CacheUnavailable, MemoryCache, get_cache
from .cache.keys import CacheKey, make_key
from .cache.outage import fallback_cache as _fallback_cache
from .cache.outage import publish_fallback
from .cache.records import (Lookup, Record, hardware_info, read, summarize_history,
                            transfer_candidates, write_best)
from .errors import IntuneError, KnobError, TuningError, describe_error
from .measurement import Measurement
from .resources import (current_rss, default_ram_budget, hardware_class, machine_ram,
                        parse_bytes, usable_cpus)
from .result import TuneResult, portable_kwargs

log = logging.getLogger(__name__)

METHODS = ("intune", "ones", "autotune", "heuristic", "hillclimb", "random", "optuna")
"""Search methods (the same list as ``intune_flow.search.METHODS``, kept here so a warm
start does not import torch just to check an argument; a test keeps the two equal)."""

DRIFT_THRESHOLD = 0.80
"""A cached config verified below this fraction of its recorded throughput is refined.

Not tighter: on a shared 2-core machine one config's short windows range about +-20%
around their median, and a slow stretch can last several windows
(``intune-flow probe PIPELINE --config ... --repeat 20`` shows a pipeline's own spread).
At 90% with two short looks, warm nights refined on noise alone (one in ten in
``python -m benchmarks.warm_start --budget-s 8 --repeats 10``, at 79% of the record)."""

VERIFY_LOOKS = 3
"""Drift counts only when every look reads below the threshold: short looks first, the
last one the search's full window (one noisy window is not drift)."""

WARM_FRACTION = 0.25
"""Refining and transferring get this fraction of ``budget_s`` (at least ``WARM_MIN_S``)."""
WARM_MIN_S = 5.0

SEARCH_WINDOW_S = (0.75, 2.0)
"""A search's probe window when the caller sets no ``window_s``: 1/20 of its budget,
within these bounds, so that a short budget (a 10 s cold search, a 5 s refine) still holds
several measurements instead of one or two."""

PROBE_WARMUP_S = 0.5
"""A search probe's warm-up before its window: at most half the window."""

SEARCHING = ("intune", "hillclimb", "random", "optuna")
"""Methods that search; the others pick their config by a rule and measure only it."""

VERIFY_WINDOW_S = 0.75
VERIFY_WARMUP_S = 0.2
"""The verification probe of a cached config: a short window after a short warm-up
(about 1.5 s in all on the Criteo reference pipeline)."""



DISCOVERY_TIMEOUT_S = 60.0
"""Knob discovery and the schema fingerprint run the user's factory: a factory that does not
return within this many seconds is abandoned (a daemon thread) and the run falls back."""


class _Failure(IntuneError):
    """Internal: tuning failed; carries the reason and the cause."""


def _check_args(budget_s, cpu_budget, ram_budget, method, window_s, timeout_s, pipeline_kwargs,
                seed, strict=False, progress=None):
    """User errors raise whatever ``strict`` says. Returns (cpu_budget, ram_budget)."""
    if isinstance(budget_s, bool) or not isinstance(budget_s, (int, float)) \
            or not math.isfinite(budget_s) or budget_s <= 0:
        raise IntuneError(f"budget_s must be a positive number of seconds, got {budget_s!r}; "
                          "e.g. budget_s=60")
    if method not in METHODS:
        raise IntuneError(f"unknown method {method!r}; choose one of {list(METHODS)}")
    usable = usable_cpus()
    if cpu_budget is not None:
        if isinstance(cpu_budget, bool) or not isinstance(cpu_budget, (int, float)) \
                or not math.isfinite(cpu_budget) or cpu_budget <= 0:
            raise IntuneError(f"cpu_budget must be a positive number of cores, got {cpu_budget!r}")
        if cpu_budget > usable + 1e-9:
            raise IntuneError(f"cpu_budget={cpu_budget:g} is more than the {usable:g} cores this "
                              f"process may use (CPU affinity / cgroup quota); pass at most "
                              f"{usable:g} or leave it None")
    if ram_budget is not None:
        try:
            ram_budget = parse_bytes(ram_budget)
        except ValueError as exc:
            raise IntuneError(f"ram_budget: {exc}") from None
        rss = current_rss()
        if ram_budget <= rss:
            raise IntuneError(f"ram_budget={ram_budget / 2**20:,.0f} MiB is below what this process "
                              f"already holds ({rss / 2**20:,.0f} MiB RSS), so no config could "
                              f"fit; give more (e.g. ram_budget=\"{(rss + 2**30) / 2**30:.0f}GiB\") "
                              "or leave it None")
        total = machine_ram()
        if ram_budget > total:
            raise IntuneError(f"ram_budget={ram_budget / 2**30:.1f} GiB is more than this "
                              f"machine's {total / 2**30:.1f} GiB (physical RAM / cgroup limit), "
                              f"so the memory guard could not stop a config before the machine "
                              f"runs out; pass at most \"{total / 2**30:.1f}GiB\" or leave it None")
    if not isinstance(strict, bool):
        raise IntuneError(f"strict must be True or False, got {strict!r}")
    if not (progress is None or isinstance(progress, bool) or callable(progress)):
        raise IntuneError(f"progress must be None (a live line on a terminal, log lines "
                          f"elsewhere), False (silent) or a callable taking an event dict, got "
                          f"{progress!r}")
    for name, value in (("window_s", window_s), ("timeout_s", timeout_s)):
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                                  or not math.isfinite(value) or value <= 0):
            raise IntuneError(f"{name} must be a positive number of seconds, got {value!r}")
    if pipeline_kwargs is not None and not isinstance(pipeline_kwargs, dict):
        raise IntuneError(f"pipeline_kwargs must be a dict of factory arguments, got "
                          f"{type(pipeline_kwargs).__name__}")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int)):
        raise IntuneError(f"seed must be an integer or None, got {seed!r}")
    cpu = float(cpu_budget) if cpu_budget is not None else usable
    ram = int(ram_budget) if ram_budget is not None else default_ram_budget()
    return cpu, ram


def _shipped_shapes() -> dict[str, tuple] | None:
    """Names and shapes of the shipped policy's weights, read without importing torch."""
    from importlib import resources

    try:
        from safetensors.numpy import load

        data = resources.files("intune_flow.policies").joinpath("default.safetensors").read_bytes()
        return {k: tuple(v.shape) for k, v in load(data).items()}
    except Exception:  # noqa: BLE001 - no shipped policy yet: skip the shape check
        return None


@dataclass
class _Run:
    """Mutable state of one tune() call."""

    primary: Cache
    cache: Cache
    strict: bool
    warnings: list[str] = field(default_factory=list)

    def outage(self, exc: CacheUnavailable) -> None:
        """Switch to the local fallback cache (or raise when strict)."""
        if self.strict:
            raise TuningError(f"cache unavailable: {exc}") from exc
        if self.cache is not self.primary:  # the fallback failed too: keep going without one
            msg = f"fallback cache {self.cache.uri} unavailable too ({exc}); not caching this run"
            self.cache = MemoryCache()
        else:
            self.cache = _fallback_cache(self.primary)
            msg = (f"cache {self.primary.uri} unavailable ({exc}); continuing with the local "
                   f"fallback cache {self.cache.uri}")
        log.warning(msg)
        self.warnings.append(msg)

    def call(self, fn, *args, **kwargs):
        """Run a cache operation on the current cache, falling back once per outage."""
        for _ in range(3):
            try:
                return fn(self.cache, *args, **kwargs)
            except CacheUnavailable as exc:
                self.outage(exc)
        return None


def tune(pipeline, *, budget_s: float = 60.0, cpu_budget: float | None = None,
         ram_budget=None, cache=None, method: str = "intune", strict: bool = False,
         pipeline_kwargs: dict | None = None, window_s: float | None = None,
         timeout_s: float | None = None, progress=None,
         seed: int | None = None, s3_client=None) -> TuneResult:
    """Tune ``pipeline`` (a ``"module:attr"`` string, a factory or a Pipeline) and return the result.

    ``budget_s`` bounds a cold search; warm starts use a fraction of it. ``cpu_budget``
    (cores, default: what this process may use) and ``ram_budget`` (bytes or "4GiB",
    default: :func:`~intune_flow.resources.default_ram_budget`) bound every probe.
    ``cache`` is ``None`` (``$INTUNE_FLOW_CACHE`` or the local default), a URI
    (``s3://bucket/prefix``, a directory, ``memory://``) or a Cache; ``s3_client`` is
    an optional boto3 client for S3. ``timeout_s`` bounds every step that could hang: a
    probe that sees no element for that long, and the factory's first build (default:
    the probe's 30 s and ``DISCOVERY_TIMEOUT_S``). ``window_s`` is the measurement window of each
    probe. Bad arguments raise :class:`~intune_flow.errors.IntuneError`; failures while
    tuning return ``source="fallback"``, or raise :class:`TuningError` with ``strict=True``.
    """
    cpu, ram = _check_args(budget_s, cpu_budget, ram_budget, method, window_s, timeout_s,
                           pipeline_kwargs, seed, strict, progress)
    primary = get_cache(cache, s3_client=s3_client)

    from .pipeline import Pipeline

    pipe = Pipeline.load(pipeline, **(pipeline_kwargs or {}))
    started = time.perf_counter()
    run = _Run(primary=primary, cache=primary, strict=strict)
    hw = hardware_class(cpu)
    kept, not_kept = portable_kwargs(pipe.kwargs)
    base = dict(cpu_budget=cpu, ram_budget=ram, method=method, pipeline=pipe.ref,
                hardware_class=hw, pipeline_kwargs=kept, pipeline_kwargs_not_kept=not_kept,
                _pipeline=pipe)
    state = {"record": None, "key": None, "fingerprint": None, "space": None}
    try:
        result = _tune(pipe, run, state, base, budget_s=float(budget_s), window_s=window_s,
                       timeout_s=timeout_s,
                       progress=progress, seed=seed)
    except TuningError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure: fall back (or raise when strict)
        if isinstance(exc, KnobError) and state["space"] is None:
            raise   # the factory declares its knobs wrongly: no config could build, not even defaults
        reason = describe_error(exc)
        if strict:
            raise TuningError(f"tuning {pipe.name} failed: {reason}") from exc
        result = _fallback(state, base, reason)
    result.tuning_seconds = time.perf_counter() - started
    if state.get("write") is not None and result.source != "fallback":
        try:
            _write_back(run, state, result)
        except TuningError:
            raise
        except Exception as exc:  # noqa: BLE001 - a failed write must not fail the run
            if strict:
                raise TuningError(f"writing the cache record failed: {describe_error(exc)}") from exc
            msg = f"could not store the tuning record: {describe_error(exc)}"
            log.warning(msg)
            result.warnings.append(msg)
        result.tuning_seconds = time.perf_counter() - started   # the write is part of tuning
    if result.source in ("cache", "refined", "transferred") and state.get("cold_seconds"):
        result.seconds_saved = max(0.0, state["cold_seconds"] - result.tuning_seconds)
    result.cache_uri = run.cache.uri
    result.warnings = run.warnings + result.warnings
    log.info("tune %s: %s", pipe.name, result.summary())
    return result


def _fallback(state: dict, base: dict, reason: str) -> TuneResult:
    record: Record | None = state.get("record")
    if record is not None:
        config, what = dict(record.config), "the cached config"
    elif state.get("space") is not None:
        config, what = state["space"].defaults(), "the factory defaults"
    else:
        config, what = {}, "the factory defaults"
    log.warning("tuning failed (%s); using %s so training can go on", reason, what)
    return TuneResult(config=config, source="fallback", reason=f"{reason}; using {what}",
                      fingerprint=state.get("fingerprint"), cache_key=state.get("key"),
                      history=list(state.get("history") or []), **base)


def _tune(pipe, run: _Run, state: dict, base: dict, *, budget_s, window_s, timeout_s, progress,
          seed):
    from .real_env import PipelineEnv

    space = _bounded(lambda: pipe.space, "knob discovery (the factory's dry build)", timeout_s)
    state["space"] = space
    fingerprint = _bounded(pipe.fingerprint, "the schema fingerprint", timeout_s)
    state["fingerprint"] = fingerprint
    # Locating the stages for per-stage signals builds the pipeline twice more: like discovery,
    # on top of the budget, not inside the first probe. It never fails: no signals is fine.
    from .probe import run_bounded
    run_bounded(lambda: pipe.stages, DISCOVERY_TIMEOUT_S if timeout_s is None else timeout_s)
    key = make_key(fingerprint, space, base["hardware_class"])
    state["key"] = str(key)
    shapes = _shipped_shapes()
    run.call(publish_fallback, key, expected_shapes=shapes)   # records of an earlier outage
    found: Lookup = run.call(read, key, expected_shapes=shapes) or Lookup()
    notes = []
    if found.damage:
        notes.append(f"cached record was damaged ({found.damage}); quarantined and re-tuned")
    env_kw = {} if window_s is None else {"window_s": float(window_s)}
    if timeout_s is not None:
        env_kw["timeout_s"] = float(timeout_s)
    env = PipelineEnv(pipe, cpu_budget=base["cpu_budget"], ram_budget=base["ram_budget"], **env_kw)
    state["auto_window"] = window_s is None
    _set_window(env, env.window_s)
    common = dict(fingerprint=fingerprint, cache_key=str(key), **base)
    warm_budget = min(budget_s, max(WARM_MIN_S, WARM_FRACTION * budget_s))

    record = found.record
    if record is not None:
        try:
            config = space.validate(record.config)
        except IntuneError as exc:  # signed and well-formed, but not a config of this space
            run.call(lambda c: c.quarantine(str(key), f"config invalid: {exc}",
                                            if_version=found.version))
            notes.append(f"cached config was invalid ({exc}); quarantined and re-tuned")
            record = None
    if record is not None:
        state["record"] = record
        state["cold_seconds"] = _seconds(record.history.get("cold_tuning_seconds"),
                                         record.tuning_seconds)
        recorded = record.throughput
        probes = [_verify(pipe, env, config)]
        while probes[-1].ok and not _passes(probes[-1], recorded) and len(probes) < VERIFY_LOOKS:
            probes.append(_verify(pipe, env, config, full=len(probes) == VERIFY_LOOKS - 1))
        state["history"] = probes
        verify = max(probes, key=lambda m: m.throughput if m.ok else -1.0)
        if _passes(verify, recorded):
            return TuneResult(config=config, throughput=verify.throughput, start_config=config,
                              start_throughput=verify.throughput, source="cache",
                              reason="; ".join(notes) or None, history=probes, **common)
        measured = verify.throughput if verify.ok else 0.0
        why = (f"verification probe measured {measured:,.0f}/s, {measured / recorded:.0%} of "
               f"the recorded {recorded:,.0f}/s" if verify.ok and recorded > 0 else
               f"verification probe failed ({verify.status}: {str(verify.error)[:200]})")
        policy = _usable_policy(run, found, key, record)
        outcome = _search(env, base["method"], start=config, budget_s=warm_budget,
                          policy=policy, seed=seed, progress=progress, state=state,
                          prior=probes)
        # The stored figure was just shown wrong, and the search started from its config
        # and keeps the best it measured: replace that version whatever its recorded figure
        # (a record written meanwhile by another run is compared as usual).
        state["write"] = dict(stale=(found.version, 0.0), cold=state["cold_seconds"])
        return _from_outcome(outcome, "refined", f"{why}; refined from the cached policy", common,
                             state, prior=probes)

    candidates = run.call(transfer_candidates, key, cpu_budget=base["cpu_budget"],
                          expected_shapes=shapes) or []
    for cand in candidates:
        try:
            config = space.validate(cand.config)
        except IntuneError:
            continue
        state["cold_seconds"] = _seconds(cand.history.get("cold_tuning_seconds"),
                                         cand.tuning_seconds)
        policy = _valid_policy(cand.weights)
        outcome = _search(env, base["method"], start=config, budget_s=warm_budget, policy=policy,
                          seed=seed, progress=progress, state=state)
        state["write"] = dict(stale=None, cold=state["cold_seconds"])
        why = (f"no record for {base['hardware_class']}; started from the record for "
               f"{cand.key.hardware}")
        return _from_outcome(outcome, "transferred", "; ".join(notes + [why]), common, state)

    outcome = _search(env, base["method"], start=None, budget_s=budget_s, policy=None, seed=seed,
                      progress=progress, state=state)
    state["write"] = dict(stale=None, cold=None)
    return _from_outcome(outcome, "tuned", "; ".join(notes) or None, common, state)


def _bounded(fn, what: str, timeout_s: float | None = None):
    """``fn()`` bounded by ``timeout_s`` (default DISCOVERY_TIMEOUT_S); its exception re-raised."""
    from .probe import run_bounded

    limit = DISCOVERY_TIMEOUT_S if timeout_s is None else timeout_s
    value, error, hung = run_bounded(fn, limit)
    if hung:
        raise _Failure(f"{what} did not return within {limit:g}s; the pipeline "
                       "factory hangs (check its inputs and any blocking call in it)")
    if error is not None:
        raise error
    return value


def _seconds(value, default: float) -> float:
    """A finite, non-negative number of seconds from a record, else ``default``."""
    try:
        value = float(value)
    except (TypeError, ValueError):
        return float(default)
    return value if math.isfinite(value) and value >= 0 else float(default)


def _passes(m: Measurement, recorded: float) -> bool:
    return m.ok and m.throughput >= DRIFT_THRESHOLD * recorded


def _verify(pipe, env, config, full: bool = False) -> Measurement:
    """A short probe of ``config``, or with ``full`` one of the search's own window."""
    from .probe import probe

    window, warmup = (env.window_s, env.warmup_s) if full else (
        min(VERIFY_WINDOW_S, env.window_s), min(VERIFY_WARMUP_S, env.warmup_s))
    return probe(pipe, config, window_s=window, warmup_s=warmup, ram_budget=env.ram_budget,
                 cpu_budget=env.cpu_budget, timeout_s=env.timeout_s)


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


def _usable_policy(run: _Run, found: Lookup, key: CacheKey, record: Record):
    policy = _valid_policy(record.weights)
    if policy is None and record.weights is not None:
        run.call(lambda c: c.quarantine(str(key), "policy weights do not fit the network",
                                        if_version=found.version))
    return policy


def search_window(budget_s: float) -> float:
    """The probe window of a search of ``budget_s`` seconds when the caller sets none."""
    low, high = SEARCH_WINDOW_S
    return min(high, max(low, budget_s / 20))


def _set_window(env, window_s: float) -> None:
    """The env's probe window, and a warm-up of at most half of it."""
    env.window_s = window_s
    env.warmup_s = min(PROBE_WARMUP_S, window_s / 2)


def _search(env, method, *, start, budget_s, policy, seed, progress, state, prior=()):
    from .search import run_search

    if state.get("auto_window"):
        _set_window(env, search_window(budget_s))
    outcome = run_search(env, method, start=start, budget_s=budget_s, policy_state=policy,
                         seed=seed, progress=progress)
    state["history"] = list(prior) + list(outcome.history)
    if outcome.best is None or not outcome.best.ok:
        last = outcome.best or (outcome.history[-1] if outcome.history else None)
        detail = f"{last.status}: {last.error}" if last is not None else "nothing measured"
        raise _Failure(f"every probe failed ({detail})")
    state["outcome"] = outcome
    state["confirm"] = _verify(env.pipeline, env, outcome.best.config)
    return outcome


def _from_outcome(outcome, source, reason, common, state, prior=()) -> TuneResult:
    best, start = outcome.best, outcome.start
    confirm = [state["confirm"]] if state.get("confirm") is not None else []
    result = TuneResult(config=dict(best.config), throughput=best.throughput,
                        start_config=dict(start.config) if start else {},
                        start_throughput=start.throughput if start and start.ok else 0.0,
                        source=source, reason=reason or None,
                        history=list(prior) + list(outcome.history) + confirm, **common)
    if common["method"] in SEARCHING and start is not None and not _moved(outcome):
        # Only the start was measured: caching it would make the next run a hit on an
        # untuned (or, after drift, stale) config. Say so and let the next run search.
        state["write"] = None
        per = outcome.seconds / max(1, len(outcome.history))
        msg = (f"the budget of this search ({outcome.seconds:.1f} s) held no step beyond the "
               f"start config (about {per:.1f} s per measurement), so the start config is "
               f"returned as it was and nothing was cached; give budget_s at least "
               f"{_enough(per, source):.0f} s, or a shorter window_s")
        log.warning(msg)
        result.warnings.append(msg)
    return result


def _moved(outcome) -> bool:
    """Whether the search measured any config besides its start."""
    start = outcome.start.config
    return any(m.config != start for m in outcome.history)


def _enough(per_measurement: float, source: str) -> float:
    """A budget_s that holds about eight measurements in a search of this ``source``."""
    need = 8 * per_measurement
    return need if source == "tuned" else max(WARM_MIN_S, need) / WARM_FRACTION


def _write_back(run: _Run, state: dict, result: TuneResult) -> None:
    """Store the new best unless a better record is there (never a worse over a better)."""
    outcome = state.get("outcome")
    if outcome is None or result.source == "fallback":
        return
    spec = state["write"]
    key = CacheKey.parse(state["key"])
    cold = spec["cold"] if spec["cold"] is not None else result.tuning_seconds
    history = summarize_history(result.history)
    history.update(steps=outcome.steps, search_seconds=outcome.seconds, stopped=outcome.stopped,
                   source=result.source, cold_tuning_seconds=cold)
    weights = outcome.policy_state
    # Recorded: the best config re-measured by the same short probe a warm start verifies
    # with, so drift detection compares like with like (the search's best is the max of
    # noisy windows, biased upward).
    # The lower of the two figures: a conservative record makes noise less likely to look
    # like drift on the next run, and a better record must beat it by a real measurement.
    confirm = state.get("confirm")
    recorded = result.throughput
    if confirm is not None and confirm.ok:
        recorded = min(recorded, confirm.throughput)
    history["search_best_throughput"] = float(result.throughput)
    record = Record(
        key=key, config=dict(result.config), throughput=float(recorded),
        knob_space=state["space"].to_json(), start_config=dict(result.start_config),
        start_throughput=float(result.start_throughput),
        tuning_seconds=float(result.tuning_seconds), method=result.method,
        hardware=hardware_info(result.hardware_class, result.cpu_budget, result.ram_budget),
        history=history, pipeline=result.pipeline,
        weights={k: v for k, v in weights.items()} if weights else None)
    written = run.call(write_best, record, stale=spec["stale"])
    if written is not None:
        log.info("cache %s: %s %s (stored %.0f/s)", run.cache.uri,
                 written.action, key, written.stored_throughput)
