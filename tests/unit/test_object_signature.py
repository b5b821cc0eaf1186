"""Describing plain objects by value: equal only when every part is, None when unsure."""

import functools
import random
import threading

import numpy as np

from intune_flow.adapters.object_signature import MAX_ARRAY_BYTES, describe


class Shards:
    def __init__(self, files, block, rng=None):
        self.files, self.block, self.rng = files, block, rng


def parse(x, rows):
    return x * rows


def test_objects_are_equal_by_value_and_differ_where_any_part_does():
    assert describe(Shards(["a", "b"], 4)) == describe(Shards(["a", "b"], 4))
    assert describe(Shards(["a", "b"], 4)) != describe(Shards(["a", "b"], 8))
    assert describe(Shards(["a", "c"], 4)) != describe(Shards(["a", "b"], 4))
    # Random generators by their state: the same seed builds the same object.
    rng = np.random.default_rng
    assert describe(Shards([], 1, rng(0))) == describe(Shards([], 1, rng(0)))
    assert describe(Shards([], 1, rng(0))) != describe(Shards([], 1, rng(1)))
    assert describe(random.Random(3)) == describe(random.Random(3)) != describe(random.Random(4))
    # Small arrays by their bytes.
    assert describe(np.arange(4)) == describe(np.arange(4)) != describe(np.arange(5))


def test_a_knob_in_a_closure_a_default_or_a_partial_is_seen():
    def make(rows):
        return lambda x: x * rows

    assert describe(make(2)) == describe(make(2)) != describe(make(3))
    assert describe(functools.partial(parse, rows=2)) != describe(functools.partial(parse, rows=3))

    def with_default(x, rows=2):
        return x * rows

    def other_default(x, rows=3):
        return x * rows

    assert describe(with_default) != describe(other_default)

    def pick(n):     # a knob choosing between two lambdas of one qualname
        return (lambda x: x * 2) if n > 4 else (lambda x: x + 2)

    assert describe(pick(8)) != describe(pick(1)) and describe(pick(8)) == describe(pick(9))


def test_what_cannot_be_described_by_value_gives_no_signature(tmp_path):
    assert describe(Shards([threading.RLock()], 1)) is None
    (tmp_path / "a").write_text("a")
    with open(tmp_path / "a") as f:
        assert describe(Shards([f], 1)) is None
    assert describe(np.zeros(MAX_ARRAY_BYTES // 8 + 1)) is None
    nested = Shards([], 1)
    for _ in range(40):
        nested = Shards([nested], 1)
    assert describe(nested) is None
    loop = Shards([], 1)
    loop.files.append(loop)                         # a cycle is described, not followed
    assert describe(loop) is not None


def test_a_plain_lock_is_described_by_whether_it_is_held():
    # tf.data's from_generator keeps one beside the generator: a lock carries no knob value.
    held = threading.Lock()
    held.acquire()
    assert describe(Shards([threading.Lock()], 1)) == describe(Shards([threading.Lock()], 1))
    assert describe(Shards([threading.Lock()], 1)) != describe(Shards([held], 1))
