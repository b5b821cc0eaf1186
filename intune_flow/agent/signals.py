"""What a measurement's per-stage signals can be trusted to say, read by the heuristics
(allocations.py) and by the policy's observation alike."""

from __future__ import annotations

from ..knobs import AUTOTUNE, KnobSpace
from ..measurement import Measurement

SATURATED = 0.9
"""A busy share at or above this: the stage (or pool) is a bottleneck."""


def hidden_stages(space: KnobSpace, m: Measurement) -> list:
    """The static parallelism knobs ``m``'s signals do not see, where they see its thread
    pool and some of its stages: a stage the probe cannot locate (tf.data: off the main
    input chain, such as the branches of ``sample_from_datasets``) or does not time (an
    interleave). The pool's busy share counts only the calls of the stages seen, so with
    any hidden it is a floor."""
    sig = m.stage_signals or {}
    if not any(k.kind == "threads" and k.name in sig for k in space) or \
            not any(k.kind == "parallelism" and k.name in sig for k in space):
        return []
    return [k for k in space if k.kind == "parallelism" and m.config[k.name] != AUTOTUNE
            and k.name not in sig]


def trusted_signals(space: KnobSpace, m: Measurement) -> dict[str, float]:
    """``m``'s stage signals without a thread pool's busy share below ``SATURATED`` where
    stages are hidden (:func:`hidden_stages`): that share counts only the calls of the
    stages seen, so a low one says nothing of the calls the pool serves (a saturated one
    still says the pool is saturated). The smart start's re-allocation, its pool sizing
    for calls in flight and the policy's observation read these."""
    sig = dict(m.stage_signals or {})
    if hidden_stages(space, m):
        for k in space:
            if k.kind == "threads" and sig.get(k.name, 1.0) < SATURATED:
                del sig[k.name]
    return sig
