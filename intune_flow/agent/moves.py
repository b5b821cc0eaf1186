"""Allocation heuristics around the policy's single-knob moves, kept apart from the MDP (walk.py).

They read per-stage signals and CPU utilization and propose what the signals make
obvious in whole-config jumps; the single-knob moves after them are the policy's:

* :func:`smart_start`: whole-allocation jumps, by signals (:func:`rebalanced`) or, without
  them, by scaling every stage together (:func:`scaled`); both deepen one-element buffers,
  and where elements come fast a buffer to 10 ms of them (:func:`buffered`); on a busy CPU
  the scaling stops where it would grow only the pools (:func:`pools_only`) and grows the
  pools only to the cores (:func:`pools_capped`); where the stages wait on something
  else, on any CPU, to the calls they serve (:func:`pools_sized`); on tf.data the signals'
  allocation gets one scaling jump of its stages, pools held as in a scaling
  (:func:`deepened`); after scaling, a pool grown far past the cores of a busy CPU is cut
  back once (:func:`pool_trimmed`), a half step that beat a lost round steps on once at
  that round's stages (:func:`step_past`), and when a re-allocation or a scaling did not
  pay on an idle CPU its stages are tried on a one-thread pool (:func:`pool_serialized`: GIL
  contention); last, on a busy CPU, a pool held near the cores whose busy share misses
  stages the signals do not see is tried at twice its size (:func:`pool_doubled`), and a
  best whose pools grew past the cores is tried at twice them and between
  (:func:`follow_pool`);
* :func:`recover`: the memory guard for a start that does not run;
* :func:`rescaled`: a config carried to a machine with another core count;
* :func:`hybrid_autotune`: a static config with its parallelism handed to the framework's
  own tuner (tf.data AUTOTUNE), its pool and buffers kept;
* :func:`autotune_held_back`: that hybrid with what held AUTOTUNE back grown, when it left
  the CPU idle: its pool, when AUTOTUNE ran a stage at the pool's size, and the knobs it
  kept static;
* :func:`unpin`: after the smart start, that hybrid and its growth measured early where a
  stage is saturated at its knob's maximum on an idle CPU (:func:`pinned_stages`).

Functions that measure take the :class:`~intune_flow.agent.walk.Walk` and a
``measure(config) -> Measurement`` and move the walk through :meth:`Walk.jump`
and :meth:`Walk.restart` only. A knob the walk has handed to AUTOTUNE stays there:
the jumps, scalings and halvings move static values only.
"""

from __future__ import annotations

import math

from ..knobs import AUTOTUNE, THREAD_KINDS, KnobSpace
from ..measurement import Measurement
from .signals import SATURATED, hidden_stages, trusted_signals

REBALANCE_ROUNDS = 3
HEADROOM = 1.5
MAX_GROWTH = 16
SCALE_FACTOR = 4
SCALE_ROUNDS = 4
BUSY_CPU = 0.8
POOL_PER_CORE = 1.5
"""After scaling out, a thread pool over twice the cores on a busy CPU (``cpu_util`` at or
above ``BUSY_CPU``) is tried at ``POOL_PER_CORE`` threads per core: the scaling grew it with
the stages, and on a CPU-bound pipeline threads beyond the cores only take turns."""
# The smart start's jumps gaining less than FLAT_GAIN over its start, with the calls grown
# to SCALE_FACTOR times or more and the CPU below FLAT_CPU, left the throughput flat for a
# reason other than the CPU (:func:`unflatten`).
FLAT_GAIN = 1.25
FLAT_CPU = 0.7
BUFFER_FLOOR = 2
"""The smart start's jumps raise a buffer shallower than this to it: with room for one
element the producer waits while the consumer holds it, so the stages barely overlap
(2 is DataLoader's default ``prefetch_factor``). Only memory bounds it: the RAM guard
abandons a jump that does not fit."""
BUFFER_SECONDS = 0.01
"""Where elements come fast, the smart start's jumps raise a buffer further, to what the
pipeline delivers in this long: a buffer hides a producer's stall only as long as it holds
elements for, and a thread the OS preempts waits a scheduling period (milliseconds). Two
elements of 1,024-row blocks at 4,000 elements/s last half a millisecond: on 2 cores such a
pipeline read 0.87 of its best at a prefetch of 2, 0.95 at 8 and 1.00 at 32 (same stages,
side by side). Batches of a few hundred records (under 200 a second) keep the floor of two.
At most ``BUFFER_TIME_CAP`` elements: their size is not known here, and the RAM guard
abandons a whole jump that does not fit."""
BUFFER_TIME_CAP = 32


def rebalanced(space: KnobSpace, m: Measurement) -> dict | None:
    """A whole new allocation from per-stage utilization signals (None without any).

    A stage whose calls are busy a share ``u`` of the time needs about ``p * u``
    calls at today's throughput (Little's law). Saturated stages (and a saturated
    pool) grow: at least double, up to the CPU's headroom (:func:`cpu_headroom`),
    and the throughput is expected to follow them up to that headroom, so every
    other stage is sized, with some slack, for the expected throughput: shrunk
    when it is over-provisioned, grown before it becomes the next bottleneck.
    Over-provisioned stages are what makes runnable threads outnumber the cores,
    and single-knob moves undo that slowly: each one alone gains less than the
    measurement noise.

    On a busy CPU the calls of a stage that runs on a thread pool the space sizes (tf.data's)
    are not cut: they are tasks, not threads, so fewer calls free no core, and they
    are also the stage's output buffer. A busy share read there under-reads the need: the
    calls wait for a thread and for a core, and tf.data times only their work. Every such
    cut measured on 2 cores lost, whether the calls outnumbered the pool or not: a CSV
    pipeline's 16 calls per map on 3 threads read 13,000 records/s, cut to 6, 3 and 1 call
    11,800, 10,200 and 6,700; a cached pipeline's augment, 8 calls on 2 threads read 12%
    busy, 34,700, cut to 3 and 2 calls 23,600 and 18,300 (side by side). The pool itself
    still follows its own use. Stages with threads of their own (worker processes) shrink.
    """
    sig = trusted_signals(space, m)
    par = [k for k in space if k.kind in THREAD_KINDS and k.name in sig
           and m.config[k.name] != AUTOTUNE]
    if not par:
        return None
    headroom = cpu_headroom(m.cpu_util)
    grow = max(2.0, headroom)
    expected = headroom if any(sig[k.name] >= SATURATED for k in par) else 1.0
    # A saturated pool holds back every stage it serves: their calls wait for a thread,
    # so a stage's low busy share then says nothing about what it needs.
    starved = any(k.kind == "threads" and sig[k.name] >= SATURATED for k in par)
    on_busy_pool = m.cpu_busy >= BUSY_CPU and any(k.kind == "threads" for k in space)
    cfg = dict(m.config)
    for k in par:   # a knob without a signal keeps its value
        v, u = m.config[k.name], float(sig[k.name])
        if u >= SATURATED:
            want = v * grow
        elif k.kind == "parallelism" and starved:
            want = v
        else:
            want = v * u * HEADROOM * expected
            if k.kind == "parallelism" and on_busy_pool:
                want = max(v, want)
        cfg[k.name] = _snap_up(k, want)
    if m.cpu_util < BUSY_CPU:
        # With cores to spare the pool must not starve the stages it serves: at least the
        # calls they will keep busy (a stage that grows, all of its new parallelism). Not on
        # a busy CPU, where threads past the cores take turns (on 2 cores at 88% a pool
        # grown to 16 threads for two 8-call maps read 25,000 records/s against 37,300 on 3).
        busy = sum(cfg[k.name] if sig.get(k.name, 0.0) >= SATURATED
                   else m.config[k.name] * float(sig.get(k.name, 1.0)) * expected
                   for k in space if k.kind == "parallelism" and m.config[k.name] > 0)
        for k in par:
            if k.kind == "threads":
                cfg[k.name] = max(cfg[k.name], _snap_up(k, busy))
    return buffered(space, cfg, m.elements_per_s) if cfg != m.config else None


def cpu_headroom(cpu_util: float) -> float:
    """How many times more work this process can give the CPU before its own work
    saturates it (1 to ``MAX_GROWTH``).

    Busy calls on a mostly idle CPU wait (on I/O, a remote GET): throughput can follow
    their number until the CPU saturates, so a read that needs 50 calls gets there in
    two jumps instead of crawling by fours. This process's own ``cpu_util``, not
    ``cpu_busy``: calls that wait need no core whoever else keeps them busy.
    """
    return min(MAX_GROWTH, max(1.0, SATURATED / max(cpu_util, 1e-3)))


def _snap_up(knob, want: float) -> int:
    """The smallest grid value of ``knob`` at or above ``want`` (its maximum if none is)."""
    grid = knob.grid()
    return next((g for g in grid if g >= want), grid[-1])


def scaled(space: KnobSpace, config: dict, factor: float,
           elements_per_s: float = 0.0) -> dict | None:
    """Every parallelism and thread-pool knob multiplied by ``factor``, snapped to its grid
    (growing, its buffers deepened for ``elements_per_s``: :func:`buffered`).

    The signal-free counterpart of :func:`rebalanced`: when the probe cannot say
    which stage waits, moving all of them together finds the right order of
    magnitude (an I/O-latency-bound read wants 50 calls, not 2) in a few
    measurements; the single-knob walk then trims what is not needed.
    None when no knob moves.
    """
    cfg = dict(config)
    for k in space:
        if k.kind not in THREAD_KINDS or config[k.name] == AUTOTUNE:
            continue
        v = config[k.name]
        want = v * factor
        if factor > 1:
            cfg[k.name] = max((g for g in k.grid() if g <= want), default=k.min)
            cfg[k.name] = max(cfg[k.name], v)
        else:
            cfg[k.name] = min(_snap_up(k, want), v)
    if factor > 1:
        cfg = buffered(space, cfg, elements_per_s)
    return cfg if cfg != config else None


def buffered(space: KnobSpace, config: dict, elements_per_s: float = 0.0) -> dict:
    """``config`` with every buffer knob below its floor raised to it (the grid value at or
    above it, within the knob's bounds): :data:`BUFFER_FLOOR`, or for a buffer that takes
    AUTOTUNE (not a shuffle's) the elements delivered in :data:`BUFFER_SECONDS` at
    ``elements_per_s`` where that is more (up to :data:`BUFFER_TIME_CAP`). AUTOTUNE values
    are left as they are."""
    by_time = min(BUFFER_TIME_CAP, elements_per_s * BUFFER_SECONDS)

    def floor(k):
        return max(BUFFER_FLOOR, by_time if k.autotune else 0.0)

    return {k.name: _snap_up(k, floor(k))
            if k.kind == "buffer" and 0 <= config[k.name] < floor(k) else config[k.name]
            for k in space}


def rescaled(space: KnobSpace, config: dict, ratio: float) -> dict:
    """Parallelism and pool scaled by the change in cores, snapped to each knob's nearest value."""
    out = dict(config)
    for k in space:
        if k.kind in THREAD_KINDS and config[k.name] != AUTOTUNE:
            want = config[k.name] * ratio
            out[k.name] = min(k.grid(), key=lambda g: abs(g - want))
    return out


def hybrid_autotune(space: KnobSpace, config: dict, keep=()) -> dict | None:
    """``config`` with every parallelism knob that accepts AUTOTUNE at AUTOTUNE and the thread
    pools and buffers as they are: tf.data's AUTOTUNE re-balances the stages while running,
    which a static value cannot, but leaves the pool and buffers to whoever sets them. The
    knobs in ``keep`` stay too (:func:`~intune_flow.env.kept_from_autotune`). None when that
    is ``config`` itself or all-AUTOTUNE (measured on their own)."""
    cfg = {k.name: AUTOTUNE if k.kind == "parallelism" and k.autotune and k.name not in keep
           else config[k.name] for k in space}
    if cfg == {k.name: config[k.name] for k in space} or cfg == space.autotune():
        return None
    return cfg


def static_pools(space: KnobSpace, config: dict) -> list:
    """The thread-pool knobs ``config`` sets itself (not handed to AUTOTUNE)."""
    return [k for k in space if k.kind == "threads" and config[k.name] != AUTOTUNE]


def pool_threads(space: KnobSpace, config: dict, cores: float) -> float | None:
    """The threads ``config``'s thread pools hold (a pool at AUTOTUNE is the framework's own,
    one thread per core); None where the space has no thread-pool knob."""
    pools = [k for k in space if k.kind == "threads" and k.name in config]
    if not pools:
        return None
    return float(sum(cores if config[k.name] == AUTOTUNE else config[k.name] for k in pools))


def autotune_held_back(space: KnobSpace, m: Measurement, keep=()) -> dict | None:
    """``m``'s config (a hybrid: parallelism at AUTOTUNE) with what held AUTOTUNE back grown,
    when it left the CPU below ``BUSY_CPU`` (its own ``cpu_util``: calls that wait need no
    core). Two things can: its static thread pools, when AUTOTUNE ran a stage at as many
    calls as the pool has threads (tf.data caps a stage's parallelism at its runner pool),
    so its calls wait on something else (a remote GET) and more would pay; and the knobs
    ``keep`` held static (an interleave's ``cycle_length``, kept because tf.data sizes an
    AUTOTUNE one from the CPU), at the walk's value, which a faster hybrid can outgrow (on
    2 cores a TFRecord read kept at 1 file held a hybrid to 59,000 records/s; at 2 files
    it read 140,000). Each grows by the CPU's headroom (:func:`cpu_headroom`), at least
    double, up to its maximum. None when nothing held it back or nothing can grow."""
    if not m.ok or m.cpu_util >= BUSY_CPU:
        return None
    held = [k for k in space
            if k.name in keep and k.kind in THREAD_KINDS and m.config[k.name] != AUTOTUNE]
    pools = static_pools(space, m.config)
    if pools and m.autotune_choices:
        smallest = min(m.config[k.name] for k in pools)
        if any(m.config[k.name] == AUTOTUNE
               and int(m.autotune_choices.get(k.name, 0)) >= smallest
               for k in space if k.kind == "parallelism"):
            held += pools
    grow = max(2.0, cpu_headroom(m.cpu_util))
    cfg = dict(m.config)
    for k in held:
        cfg[k.name] = _snap_up(k, m.config[k.name] * grow)
    return cfg if cfg != m.config else None


def pinned_stages(space: KnobSpace, m: Measurement, keep=()) -> list:
    """The static parallelism knobs of ``m`` saturated at their maximum (the grid's last
    value) while ``m`` left the CPU below ``BUSY_CPU``, that accept AUTOTUNE and are not in
    ``keep``: the static values cannot grow them, and their calls wait on something other
    than the CPU, so the throughput is capped by the knob's bound, not by the machine."""
    if not m.ok or m.cpu_util >= BUSY_CPU:
        return []
    sig = trusted_signals(space, m)
    return [k for k in space if k.kind == "parallelism" and k.autotune and k.name not in keep
            and m.config[k.name] == k.grid()[-1] and sig.get(k.name, 0.0) >= SATURATED]


def unpin(walk, measure, keep=()) -> None:
    """Where the best config has stages pinned at their maximum (:func:`pinned_stages`), one
    jump to its hybrid (:func:`hybrid_autotune`) and, when that ran, one to the hybrid with
    what held AUTOTUNE back grown (:func:`autotune_held_back`).

    tf.data's AUTOTUNE bounds a stage's calls by its thread pool, not by the knob's
    maximum, so the hybrid is the one config that can grow such a stage. The end of the
    search measures the hybrid anyway; measuring it here gives the walk's remaining moves
    its neighbourhood instead: on 2 cores a feature-store lookup of 64 ms per batch
    (``numpy_function``) declared ``max=32`` read 62,500 records/s at 32 calls, its hybrid
    on a 64-thread pool 123,700 and on 192 threads 178,200, where the 60 s search that met
    the hybrid only at its end kept 147,000 (``python -m benchmarks.generality --cases
    tfrecord_lookup --compare ...``, 2026-12-06 00:42 UTC)."""
    if not pinned_stages(walk.space, walk.best, keep):
        return
    cfg = hybrid_autotune(walk.space, walk.best.config, keep=keep)
    if cfg is None:
        return
    m = walk.jump(cfg, measure)
    grown = autotune_held_back(walk.space, m, keep=keep) if m is not None else None
    if grown is not None:
        walk.jump(grown, measure)


def explained(space: KnobSpace, m: Measurement) -> bool:
    """Whether ``m``'s signals name what limits it: a saturated stage or pool, or the CPU
    (``cpu_busy``: no idle core, whoever keeps the cores busy)."""
    if m.cpu_busy >= SATURATED:
        return True
    return any(m.stage_signals.get(k.name, 0.0) >= SATURATED
               for k in space if k.kind in THREAD_KINDS)


def smart_start(walk, measure, trim: bool = True, deepen: bool = False) -> None:
    """Whole-allocation jumps before the single-knob walk.

    By per-stage signals first. If there are none, or they do not explain the
    best config (no stage or pool saturated, yet the CPU not busy: a real
    probe's signals can miss a bottleneck, e.g. the per-element hand-off in a
    parallel interleave), or a round they drove lost on a CPU it left idle
    (a stage whose calls wait on a lock or on memory reads as saturated, and
    growing it alone does not pay, or the stage that limits has no signal), by
    scaling every stage together, and then once more by signals, to trim what
    the scaling over-provisioned. ``trim=False`` lets the scaling grow the pools past the
    cores (:func:`scale_out`) and skips the pool searches after it.

    When the signals held and the best keeps the CPU busy, more capacity cannot come from
    threads; with ``deepen`` (tf.data) the stages get one scaling jump all the same
    (:func:`deepened`), and the scaling goes on only if it wins.

    Last, where the pools were held near the cores, a pool whose busy share misses stages
    the signals do not see is tried at twice its size once (:func:`unhide_pool`), a
    best whose pools grew past the cores has them searched a little further
    (:func:`follow_pool`), and one that still holds them near the cores has them tried at
    the cores (:func:`pool_to_cores`). Where all of that left the throughput flat on an
    idle CPU, the best's stages are tried on a one-thread pool (:func:`unflatten`).
    """
    start = walk.best
    if rebalance(walk, measure) and explained(walk.space, walk.best) and not (
            walk.best is start and start.cpu_busy < BUSY_CPU):
        if deepen and walk.best.cpu_busy >= BUSY_CPU:
            deepen_stages(walk, measure, trim=trim)
    else:
        before = walk.best
        scale_out(walk, measure, trim=trim)
        if walk.best is not before:
            rebalance(walk, measure, rounds=1)
    if trim:
        unhide_pool(walk, measure)
        follow_pool(walk, measure)
        pool_to_cores(walk, measure)
    unflatten(walk, measure, start)


def unflatten(walk, measure, start: Measurement) -> None:
    """Where the smart start's jumps grew the calls ``SCALE_FACTOR`` times or more from
    ``start`` on a CPU left idle and gained less than ``FLAT_GAIN``, one jump to the best's
    stages on a one-thread pool (:func:`uncontend`): neither calls nor cores limit such a
    pipeline, a lock does (the GIL), and more threads only add hand-offs. The other
    one-thread-pool jumps follow a round that lost; a run of rounds that each won by a
    window's noise skips them: the suite's ``py_function`` went from 2,244 records/s to
    2,562 through six such jumps in its 20 s search and returned pool 8 at 0.54 of the
    best known, its 60 s search's stages on one thread (full run of 3990821, 14:26-15:12
    UTC 2026-12-07). Not where a one-thread pool was tried already, nor from a CPU near busy
    (``FLAT_CPU``): there the cores are what holds it (a simulated pipeline started at its
    best config, flat at 79% of the CPU, read 7% of that on one thread)."""
    best = walk.best
    if not best.ok or not start.ok or best.cpu_busy >= FLAT_CPU \
            or best.throughput >= FLAT_GAIN * start.throughput:
        return
    pools = static_pools(walk.space, best.config)
    if not pools or any(all(m.config.get(k.name) == k.min for k in pools)
                        for m in walk.visited.values()):
        return      # no pool to cut, or a one-thread pool was tried already
    before = _calls(walk.space, start.config)
    if before and _calls(walk.space, best.config) >= SCALE_FACTOR * before:
        uncontend(walk, measure, 1.0)


def _calls(space: KnobSpace, config: dict) -> int:
    """The calls ``config`` sets its parallelism knobs to (those at AUTOTUNE not counted)."""
    return sum(config[k.name] for k in space if k.kind == "parallelism" and config[k.name] > 0)


def rebalance(walk, measure, rounds: int = REBALANCE_ROUNDS) -> bool:
    """Up to ``rounds`` signal-driven re-allocations of the best config, while they improve it.

    A round that loses on an idle CPU with a stage still saturated is tried once more with
    its pools at one thread (:func:`uncontend`): a stage waiting on the GIL reads as
    saturated, so the signals grow it, and more calls on more pool threads only add lock
    hand-offs.

    Returns whether the signals held: the probe had them, and no round they drove lost on
    an idle CPU (then a stage they do not see, such as an interleave, may be what limits).
    """
    if not walk.best.ok or not walk.best.stage_signals:
        return False
    for i in range(rounds):
        if i and not explained(walk.space, walk.best):
            # Nothing the signals see limits the best and the CPU is idle: another round
            # could only trim; the stage they miss is for the scaling to find.
            break
        cfg = rebalanced(walk.space, walk.best)   # best stays ok: jump keeps only ok ones
        if cfg is None:
            break
        before = walk.best
        m = walk.jump(cfg, measure)
        if m is not None and walk.best is before:
            idle = m.ok and m.cpu_busy < BUSY_CPU
            if idle and not explained(walk.space, m):
                # What it grew now has slack and nothing seen limits: not the GIL (a stage
                # waiting on it still reads as saturated) but a stage without a signal.
                return False
            uncontend(walk, measure, 1.0, m)
            if idle and walk.best is before:
                return False
        if m is None or walk.best is before:
            break
    return True


def scale_out(walk, measure, factor: float = SCALE_FACTOR, rounds: int = SCALE_ROUNDS,
              trim: bool = True) -> None:
    """Smart start without per-stage signals: scale every stage together while it pays.

    Parallelism and pool sizes go up by ``factor`` per round, while the CPU is idle or a
    round grows a stage (:func:`pools_only`); from a best that keeps the CPU busy (of what
    other processes left it, ``own_share``: threads past the cores only win share from
    them), the pools grow no further than the cores (:func:`pools_capped`), or with
    ``trim=False`` than the calls they serve can keep busy (:func:`pools_sized`). When a round does
    not improve, its pool (else the best's) is cut back to the cores if it kept the CPU
    busy (:func:`trim_pool`) and one half-size step (``sqrt(factor)``) is tried from the
    best. If that fails too, the half-size stages are tried on a one-thread pool when the
    CPU is idle (:func:`uncontend`), after any round: a noisy window can keep a first round
    that did not really pay. When the very first round lost on an idle CPU and the half step
    won, its own stages are tried on a one-thread pool too: a pipeline more threads did not
    speed up may be held by contention, and one window of the half step (on 2 cores they
    spread by 20-40%) does not rule that out. Otherwise a half step that won goes one half
    step further, its pools held as the lost round's were (:func:`step_past`). If the very
    first round and all of that fail (the start is already over-provisioned), the stages are
    scaled down. Each jump is one measurement; an OOM is abandoned like any other.

    Where the framework has its own tuner and the best holds a stage saturated at its
    declared maximum on an idle CPU (:func:`pinned_stages`), a round that did not pay ends
    the scaling there: the bound, not contention or over-provisioning, held it, and the
    hybrid after the smart start (:func:`unpin`) is what grows that stage. The suite's
    ``tfrecord_lookup`` (a lookup declared ``max=32``) spent its 20 s search's last
    measurements on the half step and a one-thread pool (1,936 records/s) instead, and
    returned 0.40 of the best known (full run of 9f02ef2, 21:31-22:19 UTC 2026-12-06).

    ``trim=False`` skips the cap at the cores: where the framework's own tuner, on one
    thread per core, left the CPU idle, a stage waits on something other than the CPU, and a
    pool cut to the cores caps its calls in flight (on 2 cores a read of 4 ms GETs at 64
    calls read 5,000 records/s on 256 threads and 690 on 3); such a pool grows with the
    calls it serves instead (:func:`pools_sized`), on every round: its CPU headroom lets it
    grow on an idle CPU, and a CPU just under ``BUSY_CPU`` has little left (those GETs with
    a CPU transform, the CPU at 77%: on 48 threads 44 busy, 7,000 records/s; on 192 threads
    46 busy, 6,350). The pool cut after scaling rounds that all paid stays: it is tried
    only where the best holds a pool past twice the cores on a busy CPU
    (:func:`pool_trimmed`), one measurement that matters where AUTOTUNE's one window
    misread the CPU as idle (a round that lost is not cut: at 64 calls on 128 threads a
    latency-bound read can keep the CPU busy and lose, and 3 threads would starve it).
    The suite's ``interleave`` put AUTOTUNE's window at 0.80 of the CPU in one search and
    0.76 in another, whose scaling then kept 32 threads on 2 cores at 0.91 busy (29,300
    records/s) and ended at 0.68 of the best known, 16 calls per stage on 3 threads (full
    run of 29ea074, 03:52-04:37 UTC 2026-12-07).
    """
    if not walk.best.ok:
        return
    half = math.sqrt(factor)
    for i in range(rounds):
        cfg = scaled(walk.space, walk.best.config, factor, walk.best.elements_per_s)
        busy = walk.best.own_share >= BUSY_CPU
        if cfg is None or (busy and pools_only(walk.space, walk.best.config, cfg)):
            break
        cfg = round_pools(walk, cfg, walk.best, trim)
        before = walk.best
        m = walk.jump(cfg, measure)
        if walk.best is not before:
            continue
        if trim:
            trim_pool(walk, measure, m)
        if walk.autotune and pinned_stages(walk.space, walk.best, walk.keep):
            return      # a stage at its declared maximum held the round: unpin's to grow
        cfg = scaled(walk.space, walk.best.config, half, walk.best.elements_per_s)
        stepped = walk.jump(cfg, measure) if cfg is not None else None
        if walk.best is before:
            uncontend(walk, measure, half)
        elif i == 0 and stepped is walk.best and m is not None and m.ok \
                and m.cpu_busy < BUSY_CPU:
            uncontend(walk, measure, 1.0, stepped)
        elif stepped is walk.best:
            step_past(walk, measure, half, trim)
        if i == 0 and walk.best is before:
            cfg = scaled(walk.space, walk.best.config, 1 / half)
            if cfg is not None:
                walk.jump(cfg, measure)
        return
    trim_pool(walk, measure)


def round_pools(walk, config: dict, m: Measurement, trim: bool = True) -> dict:
    """``config``, a scaling round of ``m``'s config, with its pools held
    (:func:`pools_held`) where ``m`` kept the CPU busy or ``trim`` is off; as scaled
    otherwise."""
    if m.own_share >= BUSY_CPU or not trim:
        return pools_held(walk.space, config, m, walk.cpu_budget, trim)
    return config


def step_past(walk, measure, half: float, trim: bool = True) -> None:
    """From a half step (a scaling by ``half``) that won after a lost scaling round, one
    more: the stages at the lost round's size, the pools as a round's
    (:func:`round_pools`); nothing where that config is the lost round itself (visited).

    A round scaled from a busy best holds its pools near the cores, and the half step after
    it, scaled alone, doubles them: the round may have lost to the pool it held, not to its
    stages. The generality suite's ``mixed_sources`` on 2 cores (its parses, in the branches
    of ``sample_from_datasets``, have no signal) read 18,100 records/s at 16 calls per stage
    on 3 threads and 25,900 at 8 on 6; its 60 s search ended on 8 calls, 0.88 of the 16
    calls on 8 threads that its 20 s search, whose pool had grown from an idle start, found
    (full run of 50bff09, 05:32-06:19 UTC 2026-12-07)."""
    best = walk.best
    cfg = scaled(walk.space, best.config, half, best.elements_per_s)
    if cfg is not None and not pools_only(walk.space, best.config, cfg):
        walk.jump(round_pools(walk, cfg, best, trim), measure)


def deepened(space: KnobSpace, m: Measurement, cores: float, trim: bool = True,
             factor: float = SCALE_FACTOR) -> dict | None:
    """``m``'s config with every stage scaled by ``factor`` (:func:`scaled`) and its
    thread pools held as a busy CPU's are (:func:`pools_held`); None when no stage grows.

    For a busy CPU on tf.data: a parallel map's calls are also its output buffer (it runs
    up to ``num_parallel_calls`` elements ahead), so calls past the cores keep the stages
    after it fed while a bursty producer (Python generators, an interleave) stalls. On 2
    cores a per-record map after ``from_generator`` shards read 15,300 records/s at 2 calls
    on 2 threads (AUTOTUNE's choice) and 18,000 at 8 calls on 4.
    """
    cfg = scaled(space, m.config, factor, m.elements_per_s)
    if cfg is None or pools_only(space, m.config, cfg):
        return None
    return pools_held(space, cfg, m, cores, trim)


def deepen_stages(walk, measure, trim: bool = True) -> None:
    """One jump to the best config's stages scaled x4, its pools held (:func:`deepened`);
    if it wins, the scaling goes on from there (:func:`scale_out`).

    A jump that lands within the walk's plateau of the best (the noise) goes one half step
    (x2) further first, as the walk's own moves cross flat ground: one window on 2 cores
    spreads by 20-40%, and a lost x4 jump left the search on the signals' allocation (a
    per-record map after ``from_generator`` shards: the x4 jump read 3% under it, the 60 s
    search ended at 0.86 of the best known, where a 20 s search whose jump won scaled on
    to x8 and the best known)."""
    cfg = deepened(walk.space, walk.best, walk.cpu_budget, trim)
    if cfg is None:
        return
    before = walk.best
    m = walk.jump(cfg, measure)
    if walk.best is before and m is not None and m.ok and \
            m.throughput >= before.throughput * (1 - walk.plateau):
        further = deepened(walk.space, m, walk.cpu_budget, trim, factor=math.sqrt(SCALE_FACTOR))
        if further is not None:
            walk.jump(further, measure)
    if walk.best is not before:
        scale_out(walk, measure, trim=trim)


def pools_held(space: KnobSpace, config: dict, m: Measurement, cores: float,
               trim: bool = True) -> dict:
    """``config``, a scaling of ``m``'s config that kept the CPU busy, with its pools held:
    near the cores (:func:`pools_capped`) or, with ``trim=False`` (the stages wait on
    something else), at the calls they serve (:func:`pools_sized`)."""
    if trim:
        return pools_capped(space, config, m.config, cores)
    return pools_sized(space, config, m)


def pools_capped(space: KnobSpace, config: dict, before: dict, cores: float) -> dict:
    """``config`` (a scaling of ``before``) with every static thread pool it grew past
    ``POOL_PER_CORE`` threads per core cut back there, never below ``before``'s: scaling a
    config that keeps the CPU busy, pool threads beyond the cores only take turns."""
    cfg = dict(config)
    for k in static_pools(space, cfg):
        cfg[k.name] = min(cfg[k.name], max(before[k.name], _cores_pool(k, cores)))
    return cfg


def pools_sized(space: KnobSpace, config: dict, m: Measurement) -> dict:
    """``config`` (a scaling of ``m``'s) with every static thread pool that has a busy share
    in ``m`` grown only to the threads its calls are expected to keep busy: the calls in
    flight it served (its busy share times its size) with ``HEADROOM``, times what the CPU
    has left (:func:`cpu_headroom`), as :func:`rebalanced` sizes a stage; never below
    ``m``'s pool nor above ``config``'s.

    For stages that wait on something else (all-AUTOTUNE on one thread per core left the
    CPU idle, so the pools are not cut to the cores), busy or not: more parallelism keeps
    more calls in flight, but throughput, and so the calls busy at once, can grow only with
    the CPU left; pool threads past that only take turns (on 2 cores 4 ms GETs at 64 calls
    and a CPU transform at 4 read 5,600 records/s on 48 threads and 4,800 on 192). On an
    idle CPU the headroom is large and only a pool with idle threads is held.
    """
    cfg = dict(config)
    sig = trusted_signals(space, m)
    for k in static_pools(space, cfg):
        if k.name in sig:
            want = m.config[k.name] * float(sig[k.name]) * HEADROOM * cpu_headroom(m.cpu_util)
            cfg[k.name] = min(cfg[k.name], max(m.config[k.name], _snap_up(k, want)))
    return cfg


def _cores_pool(knob, cores: float) -> int:
    """The pool size a busy CPU gets: ``POOL_PER_CORE`` threads per core, on ``knob``'s grid."""
    return _snap_up(knob, POOL_PER_CORE * cores)


def pools_only(space: KnobSpace, config: dict, scaled_config: dict) -> bool:
    """Whether scaling ``config`` to ``scaled_config`` grows no stage, only thread pools (and
    buffers): every parallelism knob is at its maximum or AUTOTUNE. On a busy CPU such a
    round cannot pay (threads beyond the cores only take turns), so the scaling stops there
    and the pool is trimmed instead (:func:`trim_pool`)."""
    return all(scaled_config[k.name] == config[k.name] for k in space if k.kind == "parallelism")


def pool_serialized(space: KnobSpace, m: Measurement, factor: float) -> dict | None:
    """``m``'s config with its stages scaled by ``factor`` and every static thread pool at
    its minimum, when ``m`` left the CPU below ``BUSY_CPU``; None when there is no pool to cut
    or nothing changes.

    A pipeline that leaves the CPU idle and gets no faster with more calls and threads is
    held by contention, not capacity: a Python stage (``tf.py_function``, a
    ``numpy_function`` that does not release the GIL) serializes on the GIL, and every
    pool thread that runs it adds lock hand-offs. One pool thread runs that work without
    them while the stages' parallelism keeps calls in flight behind it.
    """
    if not m.ok or m.cpu_busy >= BUSY_CPU:
        return None
    pools = static_pools(space, m.config)
    if not pools:
        return None
    cfg = scaled(space, m.config, factor, m.elements_per_s) or dict(m.config)
    for k in pools:
        cfg[k.name] = k.min
    return cfg if cfg != m.config else None


def uncontend(walk, measure, factor: float, m: Measurement | None = None) -> None:
    """One jump to the stages of ``m`` (default: the best config) scaled by ``factor``, with
    its pools at their minimum, one thread (:func:`pool_serialized`): growing stages and
    pool did not pay on an idle CPU."""
    cfg = pool_serialized(walk.space, m or walk.best, factor)
    if cfg is not None:
        walk.jump(cfg, measure)


def pool_trimmed(space: KnobSpace, m: Measurement, cores: float) -> dict | None:
    """``m``'s config with every thread pool above twice ``cores`` cut to ``POOL_PER_CORE``
    threads per core (the grid value at or above), when ``m`` kept the CPU busy; None when
    nothing is cut."""
    return _pools_cut(space, m, above=2 * cores, threads=POOL_PER_CORE * cores)


def pool_at_cores(space: KnobSpace, m: Measurement, cores: float) -> dict | None:
    """``m``'s config with every static thread pool above ``cores`` cut to them (the grid
    value at or above), when ``m`` kept the CPU busy; None when nothing is cut. The end of
    the search races it against ``m``: ``POOL_PER_CORE`` threads per core is the best
    known on most busy pipelines, but not on all (trial 61's tf.data ``filter`` +
    ``padded_batch`` pipeline read 14,400-16,300 records/s on pools of 3-4 threads against
    21,900-22,600 on tf.data's pool of one thread per core, in a grid), and one window
    each, as the walk draws them, cannot tell them apart."""
    return _pools_cut(space, m, above=cores, threads=cores)


def pool_doubled(space: KnobSpace, m: Measurement, cores: float) -> dict | None:
    """``m``'s config with every static thread pool at or below ``POOL_PER_CORE`` threads per
    core doubled (the grid value at or above), when ``m`` kept the CPU busy and its signals
    miss stages (:func:`hidden_stages`); None otherwise or when nothing grows."""
    if not m.ok or m.cpu_util < BUSY_CPU or not hidden_stages(space, m):
        return None
    return _pools_doubled(space, m.config, upto=lambda k: _cores_pool(k, cores))


def _pools_doubled(space: KnobSpace, config: dict, upto=None) -> dict | None:
    """``config`` with every static thread pool (at or below ``upto(knob)`` where given)
    doubled, the grid value at or above; None when nothing grows."""
    cfg = dict(config)
    for k in static_pools(space, cfg):
        if upto is None or cfg[k.name] <= upto(k):
            cfg[k.name] = _snap_up(k, 2 * cfg[k.name])
    return cfg if cfg != config else None


def unhide_pool(walk, measure) -> None:
    """One jump to the best config with its pool doubled (:func:`pool_doubled`): on a busy
    CPU the smart start holds pools near the cores, since threads past them mostly take
    turns, and the pool's busy share would say when more are needed, but not when it misses
    the stages it serves. On 2 cores two TFRecord sources parsed in their own maps and mixed
    by ``sample_from_datasets`` (the parses off the main chain, so without a signal) read
    19,800 records/s on 3 threads and 25,600 on 6, the pool's share reading 0.41; where the
    hidden stage runs on its own threads (an interleave) 6 read 0.95 of 3, Python generator
    shards level (``python -m benchmarks.generality --cases CASE --compare ...``, figures
    in docs/tuner.md)."""
    cfg = pool_doubled(walk.space, walk.best, walk.cpu_budget)
    if cfg is not None:
        walk.jump(cfg, measure)


def pool_grown(space: KnobSpace, m: Measurement, cores: float) -> bool:
    """Whether ``m`` kept the CPU busy (the share of it other processes left it) on static
    thread pools all past ``POOL_PER_CORE`` threads per core: the smart start holds a busy
    CPU's pools there, so a best past it got there by a growth that won."""
    pools = static_pools(space, m.config)
    return bool(m.ok and m.own_share >= BUSY_CPU and pools
                and all(m.config[k.name] > _cores_pool(k, cores) for k in pools))


def pools_between(space: KnobSpace, low: dict, high: dict) -> dict | None:
    """``low`` with each static thread pool at the grid value strictly between its size in
    ``low`` and in ``high`` nearest their geometric mean (6 and 12 threads: 8); None when no
    pool has a value between."""
    cfg = dict(low)
    for k in static_pools(space, low):
        a, b = low[k.name], high[k.name]
        inner = [g for g in k.grid() if min(a, b) < g < max(a, b)]
        if inner:
            cfg[k.name] = min(inner, key=lambda g: abs(math.log(g / math.sqrt(a * b))))
    return cfg if cfg != low else None


def follow_pool(walk, measure) -> None:
    """Where the best holds a busy CPU's thread pools past the cores (:func:`pool_grown`),
    the pools are searched a little further: doubled once more, and, unless that clearly
    wins too, tried between the two sizes (:func:`pools_between`).

    The smart start holds a busy CPU's pools near the cores and grows them one doubling at a
    time (:func:`unhide_pool`, a saturated pool in :func:`rebalanced`, a half step of the
    scaling), and the policy's moves, trained where threads past the cores only take turns,
    rarely grow them further. Where a doubling paid, the best pool may lie past it: on 2
    cores the suite's ``mixed_sources`` read 27,900 records/s on 6 threads, 30,400 on 8 and
    27,800 on 12, and ``memory`` 4,380 / 4,480 / 4,550 (``python -m benchmarks.generality
    --cases CASE --compare ...``, 18:08-18:10 UTC 2026-12-06); both searches' doublings had
    stopped at 6, 0.94 and 0.93 of the best known at 60 s."""
    best = walk.best
    if not pool_grown(walk.space, best, walk.cpu_budget):
        return
    up = _pools_doubled(walk.space, best.config)
    if up is None:
        return
    m = walk.jump(up, measure)
    if m is not None and m.ok and m.throughput > best.throughput * (1 + walk.plateau):
        return
    mid = pools_between(walk.space, best.config, up)
    if mid is not None:
        walk.jump(mid, measure)


def pool_to_cores(walk, measure) -> None:
    """Where the best keeps a busy CPU on thread pools held near the cores (above them, at
    most ``POOL_PER_CORE`` threads per core: held, not grown by a move that won), one jump
    to them at the cores (:func:`pool_at_cores`).

    The busy-CPU hold is the best known on most such pipelines, but not on all, and the
    walk's one-knob moves from it rarely go down: README-only trial 79's CSV pipeline
    (interleaved reads, decode, filter, hashed crosses) read 13,300 records/s on 3 threads
    and 13,800 on tf.data's pool of 2, side by side, and its 60 s search tried 4, 6 and 8
    threads, never 2 (0.93 of the best known); trial 61's ``filter`` + ``padded_batch``
    pipeline read 14,400-16,300 on 3-4 threads and 21,900-22,600 on 2. The end race
    re-measures it with the other contenders."""
    best = walk.best
    pools = static_pools(walk.space, best.config)
    if not pools or any(best.config[k.name] > _cores_pool(k, walk.cpu_budget) for k in pools):
        return
    cfg = pool_at_cores(walk.space, best, walk.cpu_budget)
    if cfg is not None:
        walk.jump(cfg, measure)


def _pools_cut(space: KnobSpace, m: Measurement, above: float, threads: float) -> dict | None:
    """``m``'s config with every static thread pool above ``above`` cut to ``threads`` (the
    grid value at or above), when ``m`` kept the CPU busy (the share of it other processes
    left it: :attr:`~intune_flow.measurement.Measurement.own_share`); None when nothing is
    cut."""
    if not m.ok or m.own_share < BUSY_CPU:
        return None
    cfg = dict(m.config)
    for k in static_pools(space, cfg):
        if cfg[k.name] > above:
            cfg[k.name] = _snap_up(k, threads)
    return cfg if cfg != m.config else None


def trim_pool(walk, measure, lost: Measurement | None = None) -> None:
    """One jump to a config with its pool cut to the cores (:func:`pool_trimmed`): the
    scaling round that ``lost``, when its pool is what it overgrew (the stages it grew may
    pay on their own: on 2 cores an interleave read 25,900 records/s at 16 calls per stage
    on 32 threads and 31,600 on 3), else the best config."""
    cfg = pool_trimmed(walk.space, lost, walk.cpu_budget) if lost is not None else None
    cfg = cfg or pool_trimmed(walk.space, walk.best, walk.cpu_budget)
    if cfg is not None:
        walk.jump(cfg, measure)


def halved(space: KnobSpace, config: dict) -> dict:
    """Every static knob at the grid value at or below half of it (at least its minimum)."""
    return {k.name: config[k.name] if config[k.name] == AUTOTUNE else
            max((g for g in k.grid() if g <= max(k.min, config[k.name] // 2)), default=k.min)
            for k in space}


def recover(walk, measure, max_steps: int) -> None:
    """Memory guard for a start that fails (OOM): halve every knob until a config runs.

    Halving parallelism, buffers and pool together shrinks every memory term of
    the pipeline at once; the agent then climbs back from the first config that fits.
    Stops after the walk's ``max_steps`` measurements or when nothing can shrink.
    """
    while not walk.current.ok and walk.steps < max_steps:
        cfg = halved(walk.space, walk.current.config)
        if cfg == walk.current.config:
            return
        # Halving only shrinks, so ``cfg`` was never visited and jump measures it.
        m = walk.jump(cfg, measure)
        if not m.ok:
            walk.restart(m)   # the next halving starts from the failed config
