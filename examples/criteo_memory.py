"""Criteo with tf.data, large remote objects and large elements: memory binds first.

Whole shards (``records_per_object`` records, ~4.8 MB each by default) are fetched as
objects from a store with ``latency_ms`` transfer time, during which each GET holds its
buffer (as a streaming download does). Batches are big and a feature-cross stage, as DLRM
variants with explicit crosses use, hashes every pair of the 26 categoricals into a
cross id: each element carries a ``crosses`` int64 [B, 325] tensor (B=16384: ~42 MiB per
element, several times that while it is computed).

    GET objects (knob "read") -> records -> batch -> parse -> transform -> cross -> prefetch

Throughput grows with ``read`` parallelism (and ``threadpool``), like any latency-bound
read, but so does memory: every in-flight GET and every buffered element is held in RAM
(``cross`` parallelism and ``prefetch`` add whole elements). The throughput-optimal
config needs more RAM than a modest budget allows, so the RAM budget, not the CPU, is
what must stop the tuner. AUTOTUNE caps parallelism at the core count and grows the
prefetch buffer by doubling when the consumer finds it empty.

Elements: the dict of :mod:`examples.criteo` plus ``"crosses": int64 [B, 325]``.
"""

from __future__ import annotations

import itertools
import time

import numpy as np
import tensorflow as tf

from .criteo import parse, record_ranges, split_records, transform
from intune_flow.data import default_dataset

PAIRS = tuple(itertools.combinations(range(26), 2))
CROSS_BUCKETS = 1 << 20


def cross(batch):
    """Add hashed pairwise crosses of the categorical ids: int64 [B, 325]."""
    sparse = batch["sparse"]
    left = tf.gather(sparse, [i for i, _ in PAIRS], axis=1)
    right = tf.gather(sparse, [j for _, j in PAIRS], axis=1)
    mixed = tf.bitwise.bitwise_xor(left * 1000003, right + tf.range(len(PAIRS), dtype=tf.int64))
    return {**batch, "crosses": tf.math.floormod(mixed, CROSS_BUCKETS)}


def criteo_memory_pipeline(knobs, files=None, batch_size=16384, epochs=None, latency_ms=50.0,
                           records_per_object=8192):
    """tf.data over big byte-range objects of local TFRecord shards, with feature crosses."""
    files = list(files) if files is not None else default_dataset("tfrecord")
    objects = [(path, offset, length) for path in files
               for offset, length in record_ranges(path, records_per_object)]
    delay = float(latency_ms) / 1000.0

    def get(path, offset, length):
        with open(path.decode(), "rb") as f:
            f.seek(int(offset))
            blob = f.read(int(length))
        records = np.array(split_records(blob), dtype=object)
        time.sleep(delay)  # the transfer: the buffer is held while the object streams in
        return records

    def fetch(path, offset, length):
        records = tf.numpy_function(get, [path, offset, length], tf.string, stateful=True)
        return tf.reshape(records, [-1])

    paths, offsets, lengths = (list(col) for col in zip(*objects))
    ds = tf.data.Dataset.from_tensor_slices((paths, offsets, lengths)).repeat(epochs)
    ds = ds.map(fetch, num_parallel_calls=knobs.parallelism("read", max=64), deterministic=False)
    ds = ds.unbatch().batch(batch_size)
    ds = ds.map(parse, num_parallel_calls=knobs.parallelism("parse", max=16))
    ds = ds.map(transform, num_parallel_calls=knobs.parallelism("transform", max=16))
    ds = ds.map(cross, num_parallel_calls=knobs.parallelism("cross", max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=64))
