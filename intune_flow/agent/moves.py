"""The search's whole-config moves around the policy's single-knob ones, kept apart from the MDP
(walk.py).

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
* :func:`unpin`: after the smart start, the config with its parallelism handed to tf.data's
  AUTOTUNE (:func:`hybrid_autotune`) and that hybrid with what held AUTOTUNE back grown
  (:func:`autotune_held_back`), measured early where a stage is saturated at its knob's
  maximum on an idle CPU (:func:`pinned_stages`).

The configs they jump to are computed, without measuring, in
:mod:`intune_flow.agent.allocations`. These functions take the
:class:`~intune_flow.agent.walk.Walk` and a ``measure(config) -> Measurement`` and move the
walk through :meth:`Walk.jump` and :meth:`Walk.restart` only. A knob the walk has handed to AUTOTUNE stays there:
the jumps, scalings and halvings move static values only.
"""

from __future__ import annotations

import math

from ..measurement import Measurement
from .allocations import (BUSY_CPU, SCALE_FACTOR, autotune_held_back, cores_pool, deepened,
                          explained, halved, hybrid_autotune, pinned_stages, pool_at_cores,
                          pool_doubled, pool_grown, pool_serialized, pool_trimmed,
                          pools_between, pools_doubled, pools_held, pools_only, rebalanced,
                          scaled, stage_calls, static_pools)

REBALANCE_ROUNDS = 3
SCALE_ROUNDS = 4
# The smart start's jumps gaining less than FLAT_GAIN over its start, with the calls grown
# to SCALE_FACTOR times or more and the CPU below FLAT_CPU, left the throughput flat for a
# reason other than the CPU (:func:`unflatten`).
FLAT_GAIN = 1.25
FLAT_CPU = 0.7


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
    before = stage_calls(walk.space, start.config)
    if before and stage_calls(walk.space, best.config) >= SCALE_FACTOR * before:
        uncontend(walk, measure, 1.0)


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


def uncontend(walk, measure, factor: float, m: Measurement | None = None) -> None:
    """One jump to the stages of ``m`` (default: the best config) scaled by ``factor``, with
    its pools at their minimum, one thread (:func:`pool_serialized`): growing stages and
    pool did not pay on an idle CPU."""
    cfg = pool_serialized(walk.space, m or walk.best, factor)
    if cfg is not None:
        walk.jump(cfg, measure)


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
    up = pools_doubled(walk.space, best.config)
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
    if not pools or any(best.config[k.name] > cores_pool(k, walk.cpu_budget) for k in pools):
        return
    cfg = pool_at_cores(walk.space, best, walk.cpu_budget)
    if cfg is not None:
        walk.jump(cfg, measure)


def trim_pool(walk, measure, lost: Measurement | None = None) -> None:
    """One jump to a config with its pool cut to the cores (:func:`pool_trimmed`): the
    scaling round that ``lost``, when its pool is what it overgrew (the stages it grew may
    pay on their own: on 2 cores an interleave read 25,900 records/s at 16 calls per stage
    on 32 threads and 31,600 on 3), else the best config."""
    cfg = pool_trimmed(walk.space, lost, walk.cpu_budget) if lost is not None else None
    cfg = cfg or pool_trimmed(walk.space, walk.best, walk.cpu_budget)
    if cfg is not None:
        walk.jump(cfg, measure)


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
