"""Whole-config proposals: the configs the search's jumps go to, computed from a knob space, a
config and a measurement's signals, without measuring anything.

Each returns a new config (None where nothing would change): :func:`rebalanced` sizes every
stage by its busy share; :func:`scaled` moves every stage together; :func:`buffered` deepens
shallow buffers; :func:`rescaled` carries a config to another core count;
:func:`hybrid_autotune` and :func:`autotune_held_back` hand parallelism to tf.data's
AUTOTUNE and grow what held it back; the ``pool*`` functions hold, cut, double or size the
thread pools; :func:`halved` shrinks everything for the memory guard. The moves that
measure them, and the reasons each exists, are in :mod:`intune_flow.agent.moves`.
"""

from __future__ import annotations

import math

from ..knobs import AUTOTUNE, THREAD_KINDS, KnobSpace
from ..measurement import Measurement
from .signals import SATURATED, hidden_stages, trusted_signals

HEADROOM = 1.5
MAX_GROWTH = 16
SCALE_FACTOR = 4
BUSY_CPU = 0.8
POOL_PER_CORE = 1.5
"""After scaling out, a thread pool over twice the cores on a busy CPU (``cpu_util`` at or
above ``BUSY_CPU``) is tried at ``POOL_PER_CORE`` threads per core: the scaling grew it with
the stages, and on a CPU-bound pipeline threads beyond the cores only take turns."""
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


def explained(space: KnobSpace, m: Measurement) -> bool:
    """Whether ``m``'s signals name what limits it: a saturated stage or pool, or the CPU
    (``cpu_busy``: no idle core, whoever keeps the cores busy)."""
    if m.cpu_busy >= SATURATED:
        return True
    return any(m.stage_signals.get(k.name, 0.0) >= SATURATED
               for k in space if k.kind in THREAD_KINDS)


def stage_calls(space: KnobSpace, config: dict) -> int:
    """The calls ``config`` sets its parallelism knobs to (those at AUTOTUNE not counted)."""
    return sum(config[k.name] for k in space if k.kind == "parallelism" and config[k.name] > 0)


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
        cfg[k.name] = min(cfg[k.name], max(before[k.name], cores_pool(k, cores)))
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


def cores_pool(knob, cores: float) -> int:
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
    return pools_doubled(space, m.config, upto=lambda k: cores_pool(k, cores))


def pools_doubled(space: KnobSpace, config: dict, upto=None) -> dict | None:
    """``config`` with every static thread pool (at or below ``upto(knob)`` where given)
    doubled, the grid value at or above; None when nothing grows."""
    cfg = dict(config)
    for k in static_pools(space, cfg):
        if upto is None or cfg[k.name] <= upto(k):
            cfg[k.name] = _snap_up(k, 2 * cfg[k.name])
    return cfg if cfg != config else None


def pool_grown(space: KnobSpace, m: Measurement, cores: float) -> bool:
    """Whether ``m`` kept the CPU busy (the share of it other processes left it) on static
    thread pools all past ``POOL_PER_CORE`` threads per core: the smart start holds a busy
    CPU's pools there, so a best past it got there by a growth that won."""
    pools = static_pools(space, m.config)
    return bool(m.ok and m.own_share >= BUSY_CPU and pools
                and all(m.config[k.name] > cores_pool(k, cores) for k in pools))


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


def halved(space: KnobSpace, config: dict) -> dict:
    """Every static knob at the grid value at or below half of it (at least its minimum)."""
    return {k.name: config[k.name] if config[k.name] == AUTOTUNE else
            max((g for g in k.grid() if g <= max(k.min, config[k.name] // 2)), default=k.min)
            for k in space}
