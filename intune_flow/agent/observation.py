"""What the agent sees: per-knob features plus global features, from KnobSpace, configs and Measurements only.

The same encoding serves the simulator and real pipelines, so the pretrained
policy transfers. Every feature is relative (to the knob's bounds, the CPU and RAM
budgets, the best and start throughput), so pipelines and machines of any size
share one scale. Stage signals are optional (a flag says whether one is present).
A knob handed to AUTOTUNE is seen at the value AUTOTUNE chose (or would start from),
with a flag that says so.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..knobs import AUTOTUNE, KINDS, KnobSpace
from ..measurement import Measurement
from .signals import trusted_signals

KNOB_FEATURES = 17
GLOBAL_FEATURES = 12
MOVES = (1, -1, 0)
"""A knob's moves in action order: up, down, and 0: hand the knob to the framework's own
tuner (AUTOTUNE), or take it back at the value AUTOTUNE chose. Action ``len(MOVES) * i + j``
is knob ``i``'s move ``MOVES[j]``; the last action stops."""
AUTO = 0


def action_index(knob: int, direction: int) -> int:
    """The action index of knob number ``knob``'s move ``direction`` (one of :data:`MOVES`)."""
    return len(MOVES) * knob + MOVES.index(direction)


def can_autotune(knob, autotune: bool) -> bool:
    """Whether ``knob`` may be handed to AUTOTUNE: the framework has it (``autotune``) and
    the op the knob feeds takes it."""
    return autotune and knob.autotune


def hands_over(knob, value: int, autotune: bool, keep=()) -> bool:
    """Whether the AUTOTUNE move is open for ``knob`` at ``value``: to AUTOTUNE where
    :func:`can_autotune` and the knob is not in ``keep`` (the knobs a hybrid keeps static:
    :func:`~intune_flow.env.kept_from_autotune`, an interleave's ``cycle_length``), and back
    from it always."""
    return can_autotune(knob, autotune) and (value == AUTOTUNE or knob.name not in keep)


@dataclass
class WalkView:
    """Search state the observation needs beyond the current measurement."""

    start: Measurement
    best: Measurement
    current: Measurement
    last: Measurement | None = None            # the most recent measurement (may be rejected)
    last_move: tuple[str, int] | None = None   # (knob, direction)
    last_gain: float = 0.0                     # log(last / reference) of the last move
    tried: set = field(default_factory=set)    # {(knob, direction)} already measured from current
    budget_left: float = 1.0                   # share of steps/seconds left, 0..1
    since_improvement: int = 0


def effective(space: KnobSpace, m: Measurement, cores: float) -> dict:
    """``m``'s config with each AUTOTUNE value replaced by what AUTOTUNE chose in ``m``
    (``autotune_choices``), or, unknown, the value it starts from (``concretize``)."""
    cfg = m.config
    if AUTOTUNE not in cfg.values():
        return cfg
    start = space.concretize(cfg, cores)
    return {n: (int(m.autotune_choices.get(n, start[n])) if v == AUTOTUNE else v)
            for n, v in cfg.items()}


def total_threads(space: KnobSpace, config: dict) -> float:
    """Threads a (static) config asks for: parallel calls, capped by the thread pool when
    there is one."""
    par = sum(config[k.name] for k in space if k.kind == "parallelism")
    pools = [config[k.name] for k in space if k.kind == "threads"]
    if pools:
        return float(min(sum(pools), par)) if par else float(sum(pools))
    return float(max(par, 1))


def _log_ratio(a: float, b: float, lo: float, hi: float) -> float:
    if b <= 0:
        return hi if a > 0 else 0.0
    if a <= 0:
        return lo
    return float(min(hi, max(lo, math.log(a / b))))


def encode(space: KnobSpace, cpu_budget: float, ram_budget: float,
           view: WalkView, autotune: bool = False, keep=()) -> tuple[np.ndarray, np.ndarray]:
    """(knob features [K, KNOB_FEATURES], global features [GLOBAL_FEATURES]) as float32;
    ``autotune``: the framework has its own tuner (the AUTOTUNE move is open, but not to
    the knobs in ``keep``: :func:`hands_over`)."""
    cur = view.current
    cores = max(cpu_budget, 1e-3)
    cfg = effective(space, cur, cores)
    kf = np.zeros((len(space), KNOB_FEATURES), dtype=np.float32)
    signals = trusted_signals(space, cur)
    for i, k in enumerate(space):
        v = max(k.min, cfg[k.name])
        span = math.log(k.max / k.min) if k.max > k.min else 1.0
        kf[i, 0] = math.log(v / k.min) / span
        kf[i, 1] = max(-2.0, min(2.0, math.log2(v / cores) / 4))
        kf[i, 2 + KINDS.index(k.kind)] = 1.0
        sig = signals.get(k.name)
        if sig is not None and math.isfinite(sig):
            kf[i, 5] = float(min(1.0, max(0.0, sig)))
            kf[i, 6] = 1.0
        kf[i, 7] = float(v <= k.min)
        kf[i, 8] = float(v >= k.max)
        kf[i, 9] = float((k.name, 1) in view.tried)
        kf[i, 10] = float((k.name, -1) in view.tried)
        if view.last_move and view.last_move[0] == k.name:
            kf[i, 11] = view.last_move[1]
            kf[i, 12] = view.last_gain
            kf[i, 16] = float(view.last_move[1] == AUTO)
        kf[i, 13] = float(cur.config[k.name] == AUTOTUNE)
        kf[i, 14] = float(hands_over(k, cur.config[k.name], autotune, keep))
        kf[i, 15] = float((k.name, AUTO) in view.tried)
    g = np.zeros(GLOBAL_FEATURES, dtype=np.float32)
    g[0] = _log_ratio(cur.throughput, view.best.throughput, -2.0, 0.0)
    g[1] = _log_ratio(cur.throughput, view.start.throughput, -2.0, 3.0) / 3
    g[2] = min(1.0, max(0.0, cur.cpu_util))
    g[3] = min(2.0, cur.peak_rss / ram_budget) if ram_budget > 0 else 0.0
    g[4] = max(-2.0, min(2.0, math.log2(total_threads(space, cfg) / cores) / 4))
    g[5] = view.budget_left
    g[6] = view.last_gain
    g[7] = float(view.last is not None and not view.last.ok)
    g[8] = min(1.0, view.since_improvement / 10)
    g[9] = math.log2(cores) / 7
    g[10] = len(space) / 12
    g[11] = float(cur is view.best or cur.config == view.best.config)
    return kf, g


def action_mask(space: KnobSpace, config: dict, tried: set, allow_stop: bool = True,
                autotune: bool = False, keep=()) -> np.ndarray:
    """Valid actions [len(MOVES) * K + 1]: per knob up and down (static, not at a bound) and
    the AUTOTUNE move (:func:`hands_over`), none tried from here; then stop."""
    mask = np.zeros(len(MOVES) * len(space) + 1, dtype=bool)
    for i, k in enumerate(space):
        v = config[k.name]
        static = v != AUTOTUNE
        mask[action_index(i, 1)] = static and v < k.max and (k.name, 1) not in tried
        mask[action_index(i, -1)] = static and v > k.min and (k.name, -1) not in tried
        mask[action_index(i, AUTO)] = hands_over(k, v, autotune, keep) and \
            (k.name, AUTO) not in tried
    mask[-1] = allow_stop
    return mask
