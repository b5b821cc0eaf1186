"""The measurement probe: build a pipeline with a config, run it for a window, report.

One probe, used by the tuner, the baselines, the benchmarks and the integrations::

    m = probe("intune_flow.examples.criteo:criteo_pipeline", {"read": 4, "parse": 2}, window_s=3)
    m.records_per_s, m.cpu_util, m.peak_rss, m.status

How it measures: the pipeline is built and iterated in a worker thread; the calling
thread samples the process's RSS and the progress counters every ~25 ms. Timing starts
at the first element: ``warmup_s`` seconds are discarded, then ``window_s`` seconds are
split into ``subwindows`` equal parts; the reported rates are the median over the parts
and ``spread`` is (max - min) / median. ``cpu_util`` is process CPU seconds over the
window / (window wall seconds * cpu_budget); ``machine_busy`` is the share of the
``cpu_budget`` cores the machine left no idle CPU for, whoever used it (Linux
``/proc/stat``), so that a process starved by others is not read as one with cores to
spare. ``peak_rss`` is the highest sampled RSS
over the whole probe (build included). Worker processes the pipeline starts (torchdata
``method="process"``) count too: their CPU time, and the memory they add after they start
(:class:`~intune_flow.resources.WorkerProcesses`).

It stops early with status ``"oom"`` when RSS passes ``ram_budget`` or, growing at the
rate of its last ~0.1 s, would pass it before the sampler's next look (twice its recent
longest gap between samples, at most 0.25 s: under CPU contention the sampler wakes late
and looks further ahead); the worker thread also reads RSS at element boundaries (every
2 ms at most), so a starved sampler does not leave a leak unchecked. A config does not
run at all (``"oom"``) when the process already holds more than ``ram_budget`` (what an
earlier config's leak left behind), since running it could only add to that. It stops early with
``"timeout"`` when no element arrives for ``timeout_s`` (a hung factory or stage),
``"error"`` when building or iterating raises, and ``"empty"`` when the dataset yields
nothing. Elements slower than the window (a latency-bound stage at low parallelism under a
large batch: one batch of 256 records of 100 ms GETs at parallelism 1 takes 26 s) are not
waited for where the framework counts each stage's elements (tf.data): one ``window_s``
after the warm-up, a probe that has seen fewer than ``MIN_ARRIVALS`` elements reports the
records/s the stages under the last batch produced over that window, with stage signals
over the same window, and abandons its worker thread (it stops after its element). A
finite dataset that ends before the window does is read again from the start, epoch after
epoch, as training reads it: the figure includes each epoch's start-up cost, and stage
signals weigh each epoch's stretch of the window by its length.
A worker thread that hangs inside the framework cannot be interrupted from Python: it is
abandoned (a daemon thread; it stops at its next element) and the caller gets the
``"timeout"`` measurement. After each probe the iterator and dataset are dropped and
garbage-collected (a collection of what the probe made only: :func:`_young_heap`), and
glibc is asked to return freed heap pages (``malloc_trim``), so RSS falls back as far as
the framework allows (TensorFlow keeps some caches and threads).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import inspect
import math
import statistics
import threading
import time
from typing import Mapping

from .bounded import Hung
from .errors import IntuneError, OptionsError, not_taken
from .measurement import (STATUS_EMPTY, STATUS_ERROR, STATUS_OK, STATUS_OOM, STATUS_TIMEOUT,
                          Measurement)
from .resources import (WorkerProcesses, current_rss, default_ram_budget, idle_cpu_seconds,
                        usable_cpus)

SAMPLE_S = 0.025
JOIN_S = 5.0  # how long to wait for the worker to let go of the pipeline after a stop
MIN_ARRIVALS = 3  # fewer elements than this a window after the warm-up: measure the stages
STRETCH_GAP_S = 0.25
"""A finite dataset's next stretch of stage readings starts at least this long after the
last one closed: each reading costs about a millisecond, and epochs of a few milliseconds
read at each boundary would slow the pipeline being measured."""
ROLL_S = 0.1
"""While a stretch is open, its latest stage reading is renewed at an element boundary this
long after the last: an epoch's end closes the stretch on it (:meth:`_Worker._close_stretch`)."""
ELEMENT_CHECK_S = 0.002
"""The worker reads RSS at an element boundary when this long has passed since its last read."""
GROWTH_SPAN_S = 0.1
"""The RAM guard's growth rate is measured over the samples of about this many seconds."""
LOOKAHEAD = 2.0
LOOKAHEAD_MAX_S = 0.25
"""The guard stops a config whose RSS, at its current growth rate, would pass the budget
within LOOKAHEAD times the sampler's recent longest gap between samples (so a sampler
that wakes late under CPU contention looks further ahead), at most LOOKAHEAD_MAX_S."""


class _RamGuard:
    """Whether a probe passed its RAM budget: fed by the sampler (every sample, with a
    projection of the growth) and by the worker (a plain check at element boundaries, for
    when the sampler thread is starved). ``tripped`` holds the first verdict."""

    def __init__(self, budget: int, memory=None):
        self.budget = budget
        self.memory = memory     # a reader of the bytes held, replacing RSS + extra
        self.extra = 0           # RSS of the pipeline's worker processes, as last sampled
        self.peak = 0
        self.tripped: str | None = None
        self._samples: list[tuple[float, int]] = []

    def _trip(self, rss: int, why: str) -> None:
        self.peak = max(self.peak, rss)
        if self.tripped is None:
            self.tripped = why

    def reading(self) -> int:
        """The bytes held now: ``memory()``, else this process's RSS plus its workers'."""
        return int(self.memory()) if self.memory is not None else current_rss() + self.extra

    def check(self) -> bool:
        """The worker's check: this process's RSS (plus the workers') against the budget."""
        rss = self.reading()
        self.peak = max(self.peak, rss)
        if rss > self.budget:
            self._trip(rss, f"RSS {rss / 2**20:.0f} MiB passed the RAM budget "
                            f"{self.budget / 2**20:.0f} MiB")
        return self.tripped is not None

    def sample(self, now: float, rss: int) -> bool:
        """The sampler's check: over the budget, or bound to pass it before a late next sample."""
        self.peak = max(self.peak, rss)
        samples = self._samples
        samples.append((now, rss))
        while len(samples) > 2 and samples[1][0] <= now - GROWTH_SPAN_S:
            samples.pop(0)
        if rss > self.budget:
            self._trip(rss, f"RSS {rss / 2**20:.0f} MiB passed the RAM budget "
                            f"{self.budget / 2**20:.0f} MiB")
        elif len(samples) >= 2:
            (t0, r0) = samples[0]
            rate = (rss - r0) / max(now - t0, 1e-6)
            gap = max(b[0] - a[0] for a, b in zip(samples, samples[1:]))
            ahead = min(LOOKAHEAD * max(gap, SAMPLE_S), LOOKAHEAD_MAX_S)
            if rate > 0 and rss + rate * ahead > self.budget:
                self._trip(rss, f"RSS {rss / 2**20:.0f} MiB, growing {rate / 2**20:.0f} MiB/s, "
                                f"would pass the RAM budget {self.budget / 2**20:.0f} MiB "
                                f"within {ahead * 1000:.0f} ms")
        return self.tripped is not None


class _Worker(threading.Thread):
    """Builds and iterates the pipeline, counting elements and records, until told to stop."""

    def __init__(self, pipeline, config, snapshot_after: float | None = None,
                 guard: _RamGuard | None = None):
        super().__init__(name="intune-flow-probe", daemon=True)
        self.pipeline, self.config = pipeline, config
        self.guard = guard
        # Per-stage timings are snapshotted this long after the first element and at the end.
        self.snapshot_after = snapshot_after
        self.snapshots: list[tuple[float, object]] = []
        self.latest: tuple[float, object] | None = None     # the open stretch's last reading
        self.stretches: list[tuple[float, object, object]] = []  # (seconds, before, after)
        self.next_stretch_at = 0.0
        self.stage_signals: dict[str, float] = {}
        self.autotune_choices: dict[str, int] = {}
        self.stop = threading.Event()
        self.elements = 0
        self.records = 0
        self.first_at: float | None = None
        self.first_n = 0
        self.iterator = None            # the epoch's iterator, for the probe's own snapshots
        self.iterating_at: float | None = None
        self.last_at = time.perf_counter()
        self.progress = (self.last_at, 0, 0)  # (time, elements, records), replaced atomically
        self.done = False       # iteration ended: an epoch yielded no element
        self.error: BaseException | None = None
        self.finished = threading.Event()

    def run(self):
        ds = it = None
        try:
            ds = self.pipeline.build(self.config)
            it = self.iterator = self.pipeline.iterate(ds)
            self.iterating_at = time.perf_counter()
            in_epoch = 0
            checked = time.perf_counter()
            while not self.stop.is_set():
                try:
                    element = next(it)
                except StopIteration:
                    if in_epoch == 0:   # nothing at all, or an epoch that yields nothing
                        self.done = True
                        break
                    if self.snapshots:
                        self._close_stretch(it, ended=True)
                    it = self.iterator = None   # let the finished iterator go first
                    it = self.iterator = self._next_epoch(ds)
                    in_epoch = 0
                    continue
                in_epoch += 1
                n = self.pipeline.records_in(element)
                del element
                now = time.perf_counter()
                if self.first_at is None:
                    self.first_at, self.first_n = now, n
                self.records += n
                self.elements += 1
                self.last_at = now
                self.progress = (now, self.elements, self.records)
                if self.guard is not None and now - checked >= ELEMENT_CHECK_S:
                    checked = now
                    if self.guard.check():
                        break       # over the RAM budget: stop pulling (the sampler reports it)
                if (self.snapshot_after is not None and not self.snapshots
                        and now >= max(self.first_at + self.snapshot_after,
                                       self.next_stretch_at)):
                    self._snapshot(it)
                elif self.snapshots and now >= (self.latest or self.snapshots[0])[0] + ROLL_S:
                    snap = _read_stages(self.pipeline, it)
                    if snap is not None and not _lost_stages(self.snapshots[0][1], snap):
                        self.latest = (now, snap)
            if self.snapshots:
                self._close_stretch(it)
            if self.stretches:
                self.stage_signals = self._signals()
                self.autotune_choices = self._choices()
        except BaseException as exc:  # noqa: BLE001 - reported as status "error"
            self.error = exc
        finally:
            it = ds = self.iterator = None  # noqa: F841 - release the iterator in this thread
            self.pipeline = None
            self.finished.set()

    def _next_epoch(self, ds):
        """A finite dataset ended: read it again, as training reads epochs (a new iterator,
        with its start-up cost). Stage timings do not carry over to the new iterator: the
        stretch on the old one was closed, and the next starts at the new epoch's first
        element (its model is whole then); signals weigh the stretches by their length."""
        return self.pipeline.iterate(ds)

    def _close_stretch(self, it, ended: bool = False) -> None:
        """End the stretch the first snapshot began, on iterator ``it``; where its epoch
        ``ended`` and the reading then lost some of the first's nodes, on the stretch's
        latest reading that held them all (none: the stretch tells nothing).

        At an epoch's end tf.data has dropped from the model the ops whose input ran out,
        so a reading then finds them gone, which reads as idle: a finite tf.data pipeline
        of 3.4 s epochs (a heavy map after ``batch``) had its limiting map read 0% busy in
        every window while it was 73% busy."""
        (t0, before), self.snapshots = self.snapshots[0], []
        latest, self.latest = self.latest, None
        now = time.perf_counter()
        self.next_stretch_at = now + STRETCH_GAP_S
        at, after = now, _read_stages(self.pipeline, it)
        if ended and after is not None and _lost_stages(before, after):
            at, after = latest if latest is not None else (now, None)
        if after is not None:       # None: this stretch tells nothing
            self.stretches.append((at - t0, before, after))

    def _snapshot(self, it) -> None:
        snap = _read_stages(self.pipeline, it)
        if snap is None:
            self.snapshot_after, self.snapshots = None, []
        else:
            self.snapshots.append((time.perf_counter(), snap))

    def _signals(self) -> dict:
        """Per-stage busy shares over the stretches, each weighed by its seconds ({} when
        none could be read)."""
        busy, seconds = {}, {}
        for length, before, after in self.stretches:
            try:
                signals = self.pipeline.stage_signals(before, after, length, self.config)
            except Exception:  # noqa: BLE001
                continue
            for name, share in signals.items():
                busy[name] = busy.get(name, 0.0) + share * length
                seconds[name] = seconds.get(name, 0.0) + length
        return {name: busy[name] / seconds[name] for name in busy if seconds[name] > 0}

    def _choices(self) -> dict:
        try:
            return self.pipeline.autotune_choices(self.stretches[-1][2], self.config)
        except Exception:  # noqa: BLE001
            return {}


class _SlowWatch:
    """The probe's own stage snapshots, for outputs slower than its window: one a warm-up
    after iteration starts, one a window later; only while fewer than ``MIN_ARRIVALS``
    elements have arrived (an output fast enough to count switches it off)."""

    def __init__(self, pipeline, config: dict, warmup_s: float, window_s: float,
                 off: bool = False):
        self.pipeline, self.config = pipeline, config
        self.warmup_s, self.window_s = warmup_s, window_s
        self.first: tuple[float, object] | None = None
        self.off = off      # records per element stated by the factory: counted at the output

    def poll(self, worker: _Worker, now: float) -> tuple[float, float, dict, dict] | None:
        """(window start, records/s, stage signals, AUTOTUNE choices) once the window has
        passed and the stages tell the rate; None meanwhile, and for good once they cannot."""
        if self.off or worker.iterating_at is None:
            return None
        if worker.elements >= MIN_ARRIVALS:
            self.off = True
            return None
        if self.first is None:
            if now >= worker.iterating_at + self.warmup_s:
                snap = self._snap(worker)
                self.first = (now, snap) if snap is not None else None
                self.off = snap is None
            return None
        t0, before = self.first
        if now < t0 + self.window_s:
            return None
        self.off = True
        after = self._snap(worker)
        if after is None:
            return None
        try:
            rate = self.pipeline.records_rate(before, after, now - t0)
            if not rate:
                return None
            return (t0, rate, self.pipeline.stage_signals(before, after, now - t0, self.config),
                    self.pipeline.autotune_choices(after, self.config))
        except Exception:  # noqa: BLE001 - no estimate: the output is waited for
            return None

    def _snap(self, worker: _Worker):
        it = worker.iterator
        return None if it is None else _read_stages(self.pipeline, it)


def _lost_stages(before, after) -> bool:
    """Whether reading ``after`` of an iterator holds fewer stages than its earlier
    ``before`` (some left the model with their input: an epoch's end, a filled cache)."""
    return len(after) < len(before)


def _read_stages(pipeline, it):
    """The framework's per-stage readings of iterator ``it``; None where it keeps none or
    the reading fails (signals are optional; throughput is not)."""
    try:
        return pipeline.snapshot(it)
    except Exception:  # noqa: BLE001
        return None


def _trim_heap() -> None:
    """Hand freed heap pages back to the OS (glibc malloc_trim) so RSS falls between probes."""
    global _LIBC
    if _LIBC is None:
        try:
            _LIBC = ctypes.CDLL("libc.so.6")
            _LIBC.malloc_trim
        except (OSError, AttributeError):
            _LIBC = False
    if _LIBC:
        _LIBC.malloc_trim(0)


_LIBC = None


@contextlib.contextmanager
def _young_heap():
    """Keep the objects alive before the probe out of its garbage collections (``gc.freeze``),
    and put them back after: the probe's ``gc.collect()`` then scans only what the probe
    made, the dataset and iterator it drops among them. With TensorFlow and torch imported,
    a full collection scans over half a million objects, about 0.23 s on 2 cores: one
    measurement in ten of a 20 s search. Left as it is where something else froze objects
    (``gc.get_freeze_count()``) or turned the collector off: their freeze is theirs to undo."""
    if gc.get_freeze_count() or not gc.isenabled():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _interp(points, t: float, idx: int) -> float:
    """Column ``idx`` of ``points`` (sorted by column 0) at time ``t``, linearly interpolated."""
    prev = points[0]
    if t <= prev[0]:
        return prev[idx]
    for p in points:
        if p[0] >= t:
            if p[0] == prev[0]:
                return p[idx]
            return prev[idx] + (t - prev[0]) / (p[0] - prev[0]) * (p[idx] - prev[idx])
        prev = p
    return points[-1][idx]


def probe(pipeline, config: Mapping[str, int] | None = None, *, window_s: float = 2.0,
          warmup_s: float = 0.5, subwindows: int = 4, ram_budget: int | str | None = None,
          cpu_budget: float | None = None, timeout_s: float = 30.0,
          memory=None, **unknown) -> Measurement:
    """Measure ``pipeline`` (a Pipeline, factory or ``"module:attr"``) at ``config``.

    ``memory()``, if given, is what the RAM guard holds against ``ram_budget`` instead of
    this process's RSS: a pool's largest worker RSS when the pipeline runs on workers.

    Invalid arguments and an invalid config raise; everything that goes wrong inside the
    pipeline is reported in ``Measurement.status`` / ``.error``.
    """
    from .options import coerce
    from .pipeline import Pipeline

    where = "probe()"
    if unknown:     # named, with the near miss, where Python would only say "unexpected"
        takes = [n for n in inspect.signature(probe).parameters if n != "unknown"]
        raise OptionsError(not_taken(where, unknown, takes))
    window_s = coerce("window_s", window_s, where=where) or 2.0
    timeout_s = coerce("timeout_s", timeout_s, where=where) or 30.0
    cpu_budget = coerce("cpu_budget", cpu_budget, where=where) or usable_cpus()
    ram_budget = coerce("ram_budget", ram_budget, where=where) or default_ram_budget()
    if isinstance(warmup_s, bool) or not isinstance(warmup_s, (int, float)) or warmup_s < 0:
        raise IntuneError(f"probe(): warmup_s must be >= 0 seconds, got {warmup_s!r}")
    if isinstance(subwindows, bool) or not isinstance(subwindows, int) or subwindows < 1:
        raise IntuneError(f"probe(): subwindows must be a positive integer, got {subwindows!r}")
    pipeline = Pipeline.load(pipeline)
    started = time.perf_counter()
    try:   # discovery runs the user's factory: bounded like everything else
        desc = pipeline.describe(timeout_s)
    except Hung as exc:
        return _failed(config, STATUS_TIMEOUT, str(exc), started)
    except Exception as exc:  # noqa: BLE001 - reported as the measurement's status
        return _failed(config, STATUS_ERROR, f"{type(exc).__name__}: {exc}", started)
    with _young_heap():     # its collection scans what the probe made, not the whole heap
        return _measure(pipeline, desc, config, started, window_s=window_s, warmup_s=warmup_s,
                        subwindows=subwindows, ram_budget=ram_budget, cpu_budget=cpu_budget,
                        timeout_s=timeout_s, memory=memory)


def _measure(pipeline, desc, config, started: float, *, window_s: float, warmup_s: float,
             subwindows: int, ram_budget: int, cpu_budget: float, timeout_s: float,
             memory) -> Measurement:
    """Run the described ``pipeline`` at ``config`` for the probe (:func:`probe`)."""
    full = desc.space.validate(config or {})  # KnobError on unknown knobs / bad values
    guard = _RamGuard(ram_budget, memory)
    worker = _Worker(pipeline, full, snapshot_after=warmup_s if desc.stages else None,
                     guard=guard)
    # (t, elements, records, cpu seconds, time of the latest element, idle CPU seconds)
    samples: list[tuple[float, int, int, float, float, float]] = []
    if guard.check():
        # Running it would only add to what is held (a leak earlier probes left behind).
        return _failed(full, STATUS_OOM,
                       f"RSS {guard.peak / 2**20:.0f} MiB was already past the RAM budget "
                       f"{ram_budget / 2**20:.0f} MiB before this config ran (held by "
                       f"earlier work in this process, such as an earlier config that "
                       f"leaked); the config was not run: raise ram_budget or free that "
                       f"memory", started, peak_rss=guard.peak)
    status, error = STATUS_OK, None
    processes = WorkerProcesses()
    watch = _SlowWatch(pipeline, full, warmup_s, window_s, off=desc.records_stated)
    slow = None
    worker.start()
    try:
        while True:
            time.sleep(SAMPLE_S)
            now = time.perf_counter()
            guard.extra, workers_cpu = processes.sample(now)
            rss = guard.reading()
            at, elements, records = worker.progress
            idle = idle_cpu_seconds()
            samples.append((now, elements, records, time.process_time() + workers_cpu, at,
                            math.nan if idle is None else idle))
            if guard.sample(now, rss):
                status, error = STATUS_OOM, guard.tripped
                break
            if worker.error is not None:
                status, error = STATUS_ERROR, f"{type(worker.error).__name__}: {worker.error}"
                break
            slow = watch.poll(worker, now)
            if slow is not None:
                break
            end = worker.first_at + warmup_s + window_s if worker.first_at is not None else None
            if end is not None:
                # Run on to the first element after the window (bounded), so the count at
                # the window's end is interpolated between two real arrivals.
                if now >= end and (worker.last_at >= end or now >= end + window_s / subwindows):
                    break
            if worker.done and worker.first_at is not None and now >= end:
                break  # ended just after the window: the window itself was measured
            if worker.done:
                status = STATUS_EMPTY
                error = (f"the pipeline yielded no elements (check its input files and "
                         f"filters)" if worker.elements == 0 else
                         f"the pipeline ended after {worker.elements} element(s) and its next "
                         f"epoch yielded none, before the {warmup_s + window_s:g} s warm-up "
                         f"and window; make it re-iterable (a dataset, not a one-shot "
                         f"generator) or repeat it (.repeat())")
                break
            if now - max(worker.last_at, started) > timeout_s:
                status = STATUS_TIMEOUT
                what = "first element" if worker.first_at is None else "next element"
                error = (f"no {what} within {timeout_s:g} s (a stage blocks or is far too "
                         f"slow, or a filter drops everything); the probe abandoned its "
                         f"worker thread")
                break
    finally:
        worker.stop.set()
    if slow is not None:
        m = _from_stages(full, samples, slow, desc, cpu_budget)
    else:
        m = _summarize(full, samples, worker.first_at, worker.first_n, warmup_s, window_s,
                       subwindows, cpu_budget)
    m.status, m.error, m.peak_rss = status, error, int(guard.peak)
    if status != STATUS_TIMEOUT and slow is None:   # a slow worker is inside its element
        worker.finished.wait(JOIN_S)
    if status == STATUS_OK and worker.finished.is_set():
        m.stage_signals = dict(worker.stage_signals)
        m.autotune_choices = dict(worker.autotune_choices)
    del worker
    gc.collect()
    _trim_heap()
    m.seconds = time.perf_counter() - started
    return m


def _failed(config, status: str, error: str, started: float,
            peak_rss: int | None = None) -> Measurement:
    """The measurement of a probe whose config did not run (its pipeline could not be
    described, or the process was already past its RAM budget)."""
    return Measurement(config=dict(config or {}),
                       peak_rss=current_rss() if peak_rss is None else int(peak_rss),
                       status=status, error=error, seconds=time.perf_counter() - started)


def _from_stages(config, samples, slow, desc, cpu_budget) -> Measurement:
    """The measurement of a probe whose output was slower than its window: the records/s
    the stages under the last batch produced (:class:`_SlowWatch`), CPU over that window,
    in the unit the output is counted in (elements, where discovery found no batching)."""
    t0, rate, signals, choices = slow
    elements = float(rate) / max(1, desc.batch_size or 1)
    records = float(rate) if desc.batched else elements
    m = Measurement(config=dict(config), throughput=records, records_per_s=records,
                    elements_per_s=elements, stage_signals=dict(signals),
                    autotune_choices=dict(choices))
    t1 = samples[-1][0]
    if t1 > t0 and len(samples) >= 2:
        _cpu_over(m, samples, t0, t1, cpu_budget)
    return m


def _summarize(config, samples, first_at, first_n, warmup_s, window_s, subwindows,
               cpu_budget) -> Measurement:
    m = Measurement(config=dict(config))
    if first_at is None or len(samples) < 2:
        return m
    start = first_at + warmup_s
    end = min(start + window_s, samples[-1][0])
    if end <= start:
        return m
    step = window_s / subwindows
    bounds = [start + i * step for i in range(subwindows + 1) if start + i * step <= end + 1e-9]
    if len(bounds) < 2:
        bounds = [start, end]
    # Counters are exact at element arrivals: interpolate between arrivals, not samples.
    events = sorted({(s[4], s[1], s[2]) for s in samples if s[1] > 0})
    events = [(first_at, 1, first_n)] + [e for e in events if e[0] > first_at]
    e_rates, r_rates = [], []
    for a, b in zip(bounds, bounds[1:]):
        e_rates.append((_interp(events, b, 1) - _interp(events, a, 1)) / (b - a))
        r_rates.append((_interp(events, b, 2) - _interp(events, a, 2)) / (b - a))
    m.elements_per_s = float(statistics.median(e_rates))
    m.records_per_s = float(statistics.median(r_rates))
    m.throughput = m.records_per_s
    if m.records_per_s > 0:
        m.spread = float((max(r_rates) - min(r_rates)) / m.records_per_s)
    if bounds[-1] > bounds[0]:
        _cpu_over(m, samples, bounds[0], bounds[-1], cpu_budget)
    return m


def _cpu_over(m: Measurement, samples, t0: float, t1: float, cpu_budget: float) -> None:
    """``m.cpu_util`` and ``m.machine_busy`` over ``t0..t1``: this process's CPU seconds,
    and the cores the machine left idle (the idle time of all the CPUs this process may run
    on, of which a budget smaller than those CPUs can use only its own share)."""
    wall = (t1 - t0) * cpu_budget
    m.cpu_util = float((_interp(samples, t1, 3) - _interp(samples, t0, 3)) / wall)
    idle = _interp(samples, t1, 5) - _interp(samples, t0, 5)
    if not math.isnan(idle):
        m.machine_busy = float(min(1.0, max(0.0, 1.0 - idle / wall)))
