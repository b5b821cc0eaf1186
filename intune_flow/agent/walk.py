"""The agent's MDP: a walk over configs, one measurement per action, anchored at the best so far.

The state is the walk (observation and legal-action mask: :meth:`Walk.observe`),
an action raises or lowers one knob or stops, and :meth:`Walk.step` measures and
returns the reward. The heuristics that move the walk outside its action space
(smart start, bottleneck moves, the memory guard) live in :mod:`.moves`.
Shared by pretraining (on the simulator) and by online search (on any env), so
the policy is trained on exactly the dynamics it meets when tuning:

* an action raises or lowers one knob (``Knob.step``); repeating a move that just
  improved doubles its step count (1, 2, 4 grid steps), which crosses a wide range
  in a few measurements and falls back to one step after a miss; buffers move two
  grid steps at a time (about doubling, as tf.data grows its buffers);
* on a framework with its own tuner (``autotune=True``: tf.data), a knob's third move
  hands it to AUTOTUNE, and from there takes it back at the value AUTOTUNE chose
  (the measurement's ``autotune_choices``; without one, the value it had before);
  a knob at AUTOTUNE has no up or down move;
* a move that beats the best by more than ``accept`` becomes the new best; one
  within ``plateau`` of the current config is kept as the current config (the walk
  can cross flat ground), except a twin (``same_as``: it builds what a measured config
  built, so the knob it moved changes nothing there, and each of its values would open
  the same other moves again, each a real measurement); from there the same knob does not
  move further the same way (its up or down move counts as tried: in 9 of the 26 real
  searches of a generality run on 2 cores the walk had moved one knob the same way twice
  or more running over flat ground, a prefetch buffer 2 -> 4 -> 8 -> 16 taking three of a
  20 s search's eleven measurements); a worse one is remembered and the walk stays;
* an OOM, error or timeout is abandoned at once, penalized, and the walk returns
  to the best config; moves already tried from a config are masked;
* a move that cost ``LOST`` or more of the rate it left is not made again from another
  config (the same knob from the same value to the same value): the other knobs' moves
  seldom turn such a loss into a gain, and the walk repeated them after each gain (a
  ``py_function`` pipeline's 60 s search measured its thread pool 1 -> 2 and 1 ->
  AUTOTUNE three times each, at 0.65-0.72 of the config it left each time; a waiting
  pipeline's its GETs back from AUTOTUNE to 128 calls three times, at 0.51).
"""

from __future__ import annotations

import math

from ..knobs import AUTOTUNE, KnobSpace
from ..measurement import STATUS_OOM, Measurement
from .observation import (AUTO, MOVES, WalkView, action_mask, effective, encode, hands_over,
                          total_threads)

OOM_PENALTY = 1.0
ERROR_PENALTY = 0.5
STEP_COST = 0.01
OVERSUB_PENALTY = 0.02
MAX_STREAK = 4
LOST = 0.25


def log_gain(throughput: float, ref: float) -> float:
    """A move's gain, ``log(throughput / ref)`` clipped to [-1, 1] (1 from a reference of 0
    to any throughput, -1 to none): the reward of a move before its costs and penalties."""
    if ref > 0 and throughput > 0:
        return max(-1.0, min(1.0, math.log(throughput / ref)))
    return 1.0 if throughput > 0 else -1.0


def config_key(config: dict) -> tuple:
    return tuple(sorted(config.items()))


class Walk:
    """Search state from a measured start; :meth:`step` applies one action.

    :meth:`jump` (measure a whole config) and :meth:`restart` (walk on from a given
    measurement) are the two ways to move it outside the action space.
    """

    def __init__(self, space: KnobSpace, start: Measurement, *, cpu_budget: float,
                 ram_budget: float, max_steps: int | None = None, accept: float = 0.005,
                 plateau: float = 0.02, autotune: bool = False, keep=()):
        self.space = space
        self.autotune = autotune
        self.keep = tuple(keep)     # knobs never handed to AUTOTUNE (observation.hands_over)
        self.handed: dict[str, int] = {}    # knob -> the static value it had when handed over
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
        self.lost: set[tuple] = set()   # (knob, from, to) of moves that lost LOST or more
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
        obs = encode(self.space, self.cpu_budget, self.ram_budget, self.view(), self.autotune,
                     self.keep)
        return obs, action_mask(self.space, self.current.config, self._tried_here(), allow_stop,
                                self.autotune, self.keep)

    # -- moves -------------------------------------------------------------------------
    def decode(self, action: int) -> tuple[str, int] | None:
        """(knob name, direction in :data:`MOVES`) for a move index, None for stop."""
        if action >= len(MOVES) * len(self.space):
            return None
        i, j = divmod(action, len(MOVES))
        return self.space.knobs[i].name, MOVES[j]

    def candidate(self, name: str, direction: int) -> dict | None:
        """The config a move leads to (None when every step size lands on a visited config
        or repeats a lost move, or the move is not open: up or down at AUTOTUNE, AUTOTUNE
        where there is none)."""
        knob = self.space[name]
        if direction == AUTO:
            return self._handed_over(knob)
        if self.current.config[name] == AUTOTUNE:
            return None
        n = self.streak.get((name, direction), 2 if knob.kind == "buffer" else 1)
        while n >= 1:
            v = self.current.config[name]
            for _ in range(n):
                v = knob.step(v, direction)
            cfg = {**self.current.config, name: v}
            if v != self.current.config[name] and self._open(cfg, name):
                return cfg
            n //= 2
        return None

    def _open(self, cfg: dict, name: str) -> bool:
        """Whether moving ``name`` to ``cfg`` measures something new: the config was not
        visited and the same move did not lose ``LOST`` or more from another config."""
        return config_key(cfg) not in self.visited and \
            (name, self.current.config[name], cfg[name]) not in self.lost

    def _handed_over(self, knob) -> dict | None:
        """The AUTOTUNE move's config: ``knob`` at AUTOTUNE, or back from it at the value
        AUTOTUNE chose (None when the move is not open or leads to a visited config)."""
        cur, chose = self.current.config, self.current.autotune_choices
        if not hands_over(knob, cur[knob.name], self.autotune, self.keep):
            return None
        if cur[knob.name] != AUTOTUNE:
            value = AUTOTUNE
        elif knob.name in chose:
            value = knob.clamp(chose[knob.name])
        else:
            value = self.handed.get(knob.name, effective(self.space, self.current,
                                                         self.cpu_budget)[knob.name])
        cfg = {**cur, knob.name: value}
        return cfg if self._open(cfg, knob.name) else None

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
        if direction == AUTO and cfg[name] == AUTOTUNE:
            self.handed[name] = self.current.config[name]
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
        gain = log_gain(m.throughput, ref)
        self.last_gain = gain
        if m.throughput < ref * (1 - LOST):
            self.lost.add((name, self.current.config[name], cfg[name]))
        reward += gain
        if m.throughput > self.best.throughput * (1 + self.accept):
            self.best = self.current = m
            if direction != AUTO:
                first = 2 if self.space[name].kind == "buffer" else 1
                self.streak[move] = min(MAX_STREAK, 2 * self.streak.get(move, first))
            self.since_improvement = 0
        else:
            self.streak.pop(move, None)
            self.since_improvement += 1
            threads = total_threads(self.space, effective(self.space, m, self.cpu_budget))
            if direction > 0 and threads > 2 * self.cpu_budget:
                reward -= OVERSUB_PENALTY
            if m.throughput >= ref * (1 - self.plateau) and not m.same_as:
                self.current = m
                if direction != AUTO:
                    self._tried_here().add(move)    # moved nothing: not further this way
        return reward, False, m

    def jump(self, config: dict, measure) -> Measurement | None:
        """Measure a whole new config (not a single-knob move); it becomes the best if better.

        None, measuring nothing, when the config was visited already or holds at least as
        much of every knob as one that ran out of memory (:meth:`outgrows_oom`).
        """
        if config_key(config) in self.visited or self.outgrows_oom(config):
            return None
        m = measure(config)
        self.steps += 1
        self.visited[config_key(m.config)] = m
        self.last = m
        if m.ok and (not self.best.ok or m.throughput > self.best.throughput * (1 + self.accept)):
            self.best = self.current = m
            self.since_improvement = 0
        return m

    def outgrows_oom(self, config: dict) -> bool:
        """Whether ``config`` is at least every knob of a visited config that ran out of
        memory: more calls, threads and buffered elements never hold less memory, so the
        memory guard's failures say in advance that the smart start's jumps there fail too
        (AUTOTUNE values compare as unknown, never as larger)."""
        for m in self.visited.values():
            if m.status == STATUS_OOM and all(
                    config.get(k, -1) >= v >= 0 for k, v in m.config.items()):
                return True
        return False

    def restart(self, measurement: Measurement, *, cpu_budget: float | None = None,
                forget: bool = False) -> None:
        """Walk on from ``measurement``: it becomes the current and the best config.

        Moves tried from any config (and those that lost) are forgotten and the count of
        measurements without improvement starts again, so the walk may retry its moves
        (continuous mode re-measures the best config and walks on from the new figure).
        ``forget=True`` also forgets every visited config and move streak, for when
        old results no longer describe the machine; ``cpu_budget`` sets the new
        machine's budget. The last move and its gain are kept for the observation.
        """
        if cpu_budget is not None:
            self.cpu_budget = cpu_budget
        self.best = self.current = measurement
        self.tried.clear()
        self.lost.clear()
        if forget:
            self.visited = {config_key(measurement.config): measurement}
            self.streak.clear()
        self.since_improvement = 0
