"""examples/dlrm.py: the small DLRM learns, and the input-wait figure means what it says."""

import json
import time

import numpy as np
import pytest
import torch

from examples.dlrm import DLRM, TrainStats, to_tensors, train


def _batches(n, batch_size=256, seed=0):
    """Criteo-shaped batches whose label depends on one dense and one sparse feature."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        dense = rng.random((batch_size, 13), dtype=np.float32)
        sparse = rng.integers(0, 2**40, (batch_size, 26))
        logit = 4 * (dense[:, 0] - 0.5) + 2 * ((sparse[:, 3] % 2) * 2 - 1)
        label = (rng.random(batch_size) < 1 / (1 + np.exp(-logit))).astype(np.float32)
        out.append({"dense": dense, "sparse": sparse, "label": label})
    return out


def test_loss_decreases_on_fresh_generated_batches():
    stats = train(_batches(120), steps=120, seed=0, num_embeddings=1000)
    assert isinstance(stats, TrainStats)
    assert stats.steps == 120 and stats.epochs == 1
    assert stats.final_loss < stats.first_loss - 0.1
    assert 0.0 <= stats.input_wait_fraction <= 1.0
    assert stats.batch_size == 256 and stats.steps_per_s > 0
    json.dumps(stats.to_dict())  # JSON-serializable as promised


def test_input_is_reiterated_when_it_runs_out():
    stats = train(_batches(3, batch_size=32), steps=10)
    assert stats.epochs == 4  # 3 + 3 + 3 + 1


class _SlowInput:
    """An input pipeline that makes the trainer wait ``delay`` seconds per batch."""

    def __init__(self, batches, delay):
        self.batches, self.delay = batches, delay

    def __iter__(self):
        for batch in self.batches:
            time.sleep(self.delay)
            yield batch


def test_input_wait_fraction_reflects_a_slow_pipeline():
    data = _batches(8, batch_size=64)
    fast = train(data, steps=8)
    slow = train(_SlowInput(data, 0.1), steps=8)
    assert 0.0 <= fast.input_wait_fraction <= 1.0 and 0.0 <= slow.input_wait_fraction <= 1.0
    assert slow.input_wait_s >= 8 * 0.1
    assert slow.input_wait_fraction > fast.input_wait_fraction


def test_accepts_tuples_and_tf_tensors():
    tf = pytest.importorskip("tensorflow")
    b = _batches(1, batch_size=16)[0]
    ds = tf.data.Dataset.from_tensor_slices(((b["dense"], b["sparse"]), b["label"])).batch(8)
    stats = train(ds, steps=4)
    assert stats.steps == 4 and stats.batch_size == 8
    dense, sparse, label = to_tensors((b["dense"], b["sparse"], b["label"]))
    assert dense.dtype == torch.float32 and sparse.dtype == torch.int64 and label.shape == (16,)


def test_bad_inputs_name_the_problem():
    with pytest.raises(ValueError, match="no batches"):
        train([], steps=1)
    with pytest.raises(ValueError, match="dense/sparse/label"):
        train([42], steps=1)
    with pytest.raises(ValueError, match="26 positive sizes"):
        DLRM(num_embeddings=[10] * 3)


def test_default_tables_match_the_reference_pipelines_hash_ranges():
    pytest.importorskip("tensorflow")
    from examples.criteo import TABLE_SIZES as tf_sizes
    from examples.criteo_torch import TABLE_SIZES as torch_sizes
    from examples.dlrm import TABLE_SIZES

    assert TABLE_SIZES == tuple(tf_sizes) == tuple(int(n) for n in torch_sizes)
    assert DLRM().embedding.num_embeddings == sum(TABLE_SIZES)
