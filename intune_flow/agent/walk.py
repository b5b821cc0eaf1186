"""The agent's walk over configs: one measurement per action, always anchored at the best so far.

Shared by pretraining (on the simulator) and by online search (on any env), so
the policy is trained on exactly the dynamics it meets when tuning:

* an action raises or lowers one knob (``Knob.step``); repeating a move that just
  improved doubles its step count (1, 2, 4 grid steps), which crosses a wide range
  in a few measurements and falls back to one step after a miss; buffers move two
  grid steps at a time (about doubling, as tf.data grows its buffers);
* a move that beats the best by more than ``accept`` becomes the new best; one
  within ``plateau`` of the current config is kept as the current config (the walk
  can cross flat ground); a worse one is remembered and the walk stays;
* an OOM, error or timeout is abandoned at once, penalized, and the walk returns
  to the best config; moves already tried from a config are masked.
"""

from __future__ import annotations

import math

from ..knobs import THREAD_KINDS, KnobSpace
from ..measurement import STATUS_OOM, Measurement
from .observation import WalkView, action_mask, encode, total_threads

OOM_PENALTY = 1.0
ERROR_PENALTY = 0.5
STEP_COST = 0.01
OVERSUB_PENALTY = 0.02
MAX_STREAK = 4


REBALANCE_ROUNDS = 3
HEADROOM = 1.5
SATURATED = 0.9
MAX_GROWTH = 16
SCALE_FACTOR = 4
SCALE_ROUNDS = 4


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
    """
    sig = m.stage_signals or {}
    par = [k for k in space if k.kind in THREAD_KINDS and k.name in sig]
    if not par:
        return None
    headroom = cpu_headroom(m.cpu_util)
    grow = max(2.0, headroom)
    expected = headroom if any(sig[k.name] >= SATURATED for k in par) else 1.0
    # A saturated pool holds back every stage it serves: their calls wait for a thread,
    # so a stage's low busy share then says nothing about what it needs.
    starved = any(k.kind == "threads" and sig[k.name] >= SATURATED for k in par)
    cfg = dict(m.config)
    for k in par:   # a knob without a signal keeps its value
        v, u = m.config[k.name], float(sig[k.name])
        if u >= SATURATED:
            want = v * grow
        elif starved and k.kind == "parallelism":
            want = v
        else:
            want = v * u * HEADROOM * expected
        cfg[k.name] = _snap_up(k, want)
    if m.cpu_util < SATURATED:
        # With cores to spare the pool must not starve the stages it serves: at least the
        # calls they will keep busy (a stage that grows, all of its new parallelism).
        busy = sum(cfg[k.name] if sig.get(k.name, 0.0) >= SATURATED
                   else m.config[k.name] * float(sig.get(k.name, 1.0)) * expected
                   for k in space if k.kind == "parallelism" and m.config[k.name] > 0)
        for k in par:
            if k.kind == "threads":
                cfg[k.name] = max(cfg[k.name], _snap_up(k, busy))
    return cfg if cfg != m.config else None


def cpu_headroom(cpu_util: float) -> float:
    """How many times more work the CPU can take before it saturates (1 to ``MAX_GROWTH``).

    Busy calls on a mostly idle CPU wait (on I/O, a remote GET): throughput can follow
    their number until the CPU saturates, so a read that needs 50 calls gets there in
    two jumps instead of crawling by fours.
    """
    return min(MAX_GROWTH, max(1.0, SATURATED / max(cpu_util, 1e-3)))


def _snap_up(knob, want: float) -> int:
    """The smallest grid value of ``knob`` at or above ``want`` (its maximum if none is)."""
    grid = knob.grid()
    return next((g for g in grid if g >= want), grid[-1])


def scaled(space: KnobSpace, config: dict, factor: float) -> dict | None:
    """Every parallelism and thread-pool knob multiplied by ``factor``, snapped to its grid.

    The signal-free counterpart of :func:`rebalanced`: when the probe cannot say
    which stage waits, moving all of them together finds the right order of
    magnitude (an I/O-latency-bound read wants 50 calls, not 2) in a few
    measurements; the single-knob walk then trims what is not needed.
    None when no knob moves.
    """
    cfg = dict(config)
    for k in space:
        if k.kind not in THREAD_KINDS:
            continue
        v = config[k.name]
        want = v * factor
        if factor > 1:
            cfg[k.name] = max((g for g in k.grid() if g <= want), default=k.min)
            cfg[k.name] = max(cfg[k.name], v)
        else:
            cfg[k.name] = min(_snap_up(k, want), v)
    return cfg if cfg != config else None


def config_key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


class Walk:
    """Search state from a measured start; :meth:`step` applies one action."""

    def __init__(self, space: KnobSpace, start: Measurement, *, cpu_budget: float,
                 ram_budget: float, max_steps: int | None = None, accept: float = 0.005,
                 plateau: float = 0.02):
        self.space = space
        self.cpu_budget, self.ram_budget = cpu_budget, ram_budget
        self.max_steps = max_steps
        self.accept, self.plateau = accept, plateau
        self.start = start
        self.best = start
        self.current = start
        self.last: Measurement | None = None
        self.last_move: tuple[str, int] | None = None
        self.last_gain = 0.0
        self.tried: dict[tuple, set] = {}
        self.visited: dict[tuple, Measurement] = {config_key(start.config): start}
        self.streak: dict[tuple[str, int], int] = {}
        self.steps = 0
        self.since_improvement = 0
        self.budget_left = 1.0

    # -- observation -----------------------------------------------------------------
    def _tried_here(self) -> set:
        return self.tried.setdefault(config_key(self.current.config), set())

    def view(self) -> WalkView:
        return WalkView(start=self.start, best=self.best, current=self.current, last=self.last,
                        last_move=self.last_move, last_gain=self.last_gain,
                        tried=self._tried_here(), budget_left=self.budget_left,
                        since_improvement=self.since_improvement)

    def observe(self, allow_stop: bool = True):
        obs = encode(self.space, self.cpu_budget, self.ram_budget, self.view())
        return obs, action_mask(self.space, self.current.config, self._tried_here(), allow_stop)

    # -- moves -------------------------------------------------------------------------
    def decode(self, action: int) -> tuple[str, int] | None:
        """(knob name, +1/-1) for a move index, None for stop."""
        if action >= 2 * len(self.space):
            return None
        return self.space.knobs[action // 2].name, (1 if action % 2 == 0 else -1)

    def candidate(self, name: str, direction: int) -> dict | None:
        """The config a move leads to (None when every step size lands on a visited config)."""
        knob = self.space[name]
        n = self.streak.get((name, direction), 2 if knob.kind == "buffer" else 1)
        while n >= 1:
            v = self.current.config[name]
            for _ in range(n):
                v = knob.step(v, direction)
            cfg = {**self.current.config, name: v}
            if v != self.current.config[name] and config_key(cfg) not in self.visited:
                return cfg
            n //= 2
        return None

    def bottleneck_action(self, mask) -> int | None:
        """Raise the most saturated stage (or pool) of the current config, if that move is
        open: the one move per-stage signals make obvious, taken before asking the policy."""
        sig = self.current.stage_signals or {}
        best = None
        for i, k in enumerate(self.space):
            u = sig.get(k.name)
            if (k.kind in THREAD_KINDS and u is not None and u >= SATURATED
                    and mask[2 * i] and (best is None or u > best[0])):
                best = (u, 2 * i)
        return None if best is None else best[1]

    def set_budget_left(self, fraction: float) -> None:
        self.budget_left = float(min(1.0, max(0.0, fraction)))

    def step(self, action: int, measure) -> tuple[float, bool, Measurement | None]:
        """Apply ``action`` using ``measure(config) -> Measurement``; (reward, stopped, measurement)."""
        move = self.decode(action)
        if move is None:
            return 0.0, True, None
        name, direction = move
        cfg = self.candidate(name, direction)
        self._tried_here().add(move)
        if cfg is None:
            self.last_move, self.last_gain = move, 0.0
            return -STEP_COST, False, None
        m = measure(cfg)
        self.steps += 1
        self.visited[config_key(m.config)] = m
        self.last, self.last_move = m, move
        ref = self.current.throughput
        reward = -STEP_COST
        if not m.ok:
            reward -= OOM_PENALTY if m.status == STATUS_OOM else ERROR_PENALTY
            self.last_gain = -1.0
            self.current = self.best
            self.streak.pop(move, None)
            self.since_improvement += 1
            return reward, False, m
        gain = math.log(m.throughput / ref) if ref > 0 and m.throughput > 0 else (
            1.0 if m.throughput > 0 else -1.0)
        gain = max(-1.0, min(1.0, gain))
        self.last_gain = gain
        reward += gain
        if m.throughput > self.best.throughput * (1 + self.accept):
            self.best = self.current = m
            first = 2 if self.space[name].kind == "buffer" else 1
            self.streak[move] = min(MAX_STREAK, 2 * self.streak.get(move, first))
            self.since_improvement = 0
        else:
            self.streak.pop(move, None)
            self.since_improvement += 1
            if direction > 0 and total_threads(self.space, m.config) > 2 * self.cpu_budget:
                reward -= OVERSUB_PENALTY
            if m.throughput >= ref * (1 - self.plateau):
                self.current = m
        return reward, False, m

    def jump(self, config: dict, measure) -> Measurement | None:
        """Measure a whole new config (not a single-knob move); it becomes the best if better."""
        if config_key(config) in self.visited:
            return None
        m = measure(config)
        self.steps += 1
        self.visited[config_key(m.config)] = m
        self.last = m
        if m.ok and (not self.best.ok or m.throughput > self.best.throughput * (1 + self.accept)):
            self.best = self.current = m
            self.since_improvement = 0
        return m

    def rebalance(self, measure, rounds: int = REBALANCE_ROUNDS) -> bool:
        """Smart start: a few signal-driven re-allocations before the single-knob walk.

        Returns whether the probe had per-stage signals to act on.
        """
        if not self.best.ok or not self.best.stage_signals:
            return False
        for _ in range(rounds):
            cfg = rebalanced(self.space, self.best)   # best stays ok: jump keeps only ok ones
            if cfg is None:
                break
            before = self.best
            m = self.jump(cfg, measure)
            if m is None or self.best is before:
                break
        return True

    def smart_start(self, measure) -> None:
        """Whole-allocation jumps before the single-knob walk.

        By per-stage signals first. If there are none, or they do not explain the
        best config (no stage or pool saturated, yet the CPU not busy: a real
        probe's signals can miss a bottleneck, e.g. the per-element hand-off in a
        parallel interleave), by scaling every stage together, and then once more
        by signals, to trim what the scaling over-provisioned.
        """
        if self.rebalance(measure) and self.explained(self.best):
            return
        before = self.best
        self.scale_out(measure)
        if self.best is not before:
            self.rebalance(measure, rounds=1)

    def explained(self, m: Measurement) -> bool:
        """Whether ``m``'s signals name what limits it: a saturated stage or pool, or the CPU."""
        if m.cpu_util >= SATURATED:
            return True
        return any(m.stage_signals.get(k.name, 0.0) >= SATURATED
                   for k in self.space if k.kind in THREAD_KINDS)

    def scale_out(self, measure, factor: float = SCALE_FACTOR,
                  rounds: int = SCALE_ROUNDS) -> None:
        """Smart start without per-stage signals: scale every stage together while it pays.

        Parallelism and pool sizes go up by ``factor`` per round; when a round does
        not improve, one half-size step (``sqrt(factor)``) is tried from the best.
        If the very first rounds fail (the start is already over-provisioned), the
        stages are scaled down instead. Each jump is one measurement; an OOM is
        abandoned like any other.
        """
        if not self.best.ok:
            return
        half = math.sqrt(factor)
        for i in range(rounds):
            cfg = scaled(self.space, self.best.config, factor)
            if cfg is None:
                return
            before = self.best
            self.jump(cfg, measure)
            if self.best is not before:
                continue
            cfg = scaled(self.space, self.best.config, half)
            if cfg is not None:
                self.jump(cfg, measure)
            if i == 0 and self.best is before:
                cfg = scaled(self.space, self.best.config, 1 / half)
                if cfg is not None:
                    self.jump(cfg, measure)
            return

    def recover(self, measure, max_steps: int) -> None:
        """Memory guard for a start that fails (OOM): halve every knob until a config runs.

        Halving parallelism, buffers and pool together shrinks every memory term of
        the pipeline at once; the agent then climbs back from the first config that fits.
        """
        while not self.current.ok and self.steps < max_steps:
            cfg = {}
            for k in self.space:
                v = self.current.config[k.name]
                cfg[k.name] = max((g for g in k.grid() if g <= max(k.min, v // 2)), default=k.min)
            if cfg == self.current.config:
                return
            m = measure(cfg)
            self.steps += 1
            self.visited[config_key(m.config)] = m
            self.last = m
            self.best = self.current = m
            if m.ok:
                self.since_improvement = 0

    def rebase(self, measurement: Measurement, cpu_budget: float) -> None:
        """Restart from a re-measured config after the machine changed (continuous mode)."""
        self.cpu_budget = cpu_budget
        self.best = self.current = measurement
        self.tried.clear()
        self.visited = {config_key(measurement.config): measurement}
        self.streak.clear()
        self.since_improvement = 0
