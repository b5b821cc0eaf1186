"""Criteo with tf.data reading remote-store-like objects: the I/O-latency-bound pipeline.

The same records as :mod:`examples.criteo`, fetched in objects of ``records_per_object``
records by a blocking GET that waits ``latency_ms`` (the first-byte latency of a remote
object store) before reading its byte range from the local shard. No server needed:
this models :mod:`examples.criteo_s3` on any machine.

    objects -> GET (parallel map, knob "read") -> records -> batch -> parse -> transform -> prefetch

A blocking GET occupies one tf.data thread for ``latency_ms``, so throughput grows with
the ``read`` parallelism *and* the ``threadpool`` size (tf.data's default pool has one
thread per core) until parsing binds the CPU. Elements are those of ``examples.criteo``.
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from .criteo import parse, record_ranges, split_records, transform
from intune_flow.data import default_dataset


def _objects(files, records_per_object):
    paths, offsets, lengths = [], [], []
    for path in files:
        for offset, length in record_ranges(path, records_per_object):
            paths.append(path)
            offsets.append(offset)
            lengths.append(length)
    return paths, offsets, lengths


def criteo_remote_pipeline(knobs, files=None, batch_size=1024, epochs=None, latency_ms=20.0,
                           records_per_object=256):
    """tf.data over byte-range "objects" of local TFRecord shards, each GET ``latency_ms`` slow."""
    files = list(files) if files is not None else default_dataset("tfrecord")
    delay = float(latency_ms) / 1000.0

    def get(path, offset, length):
        time.sleep(delay)
        with open(path.decode(), "rb") as f:
            f.seek(int(offset))
            blob = f.read(int(length))
        return np.array(split_records(blob), dtype=object)

    def fetch(path, offset, length):
        records = tf.numpy_function(get, [path, offset, length], tf.string, stateful=True)
        return tf.reshape(records, [-1])

    ds = tf.data.Dataset.from_tensor_slices(_objects(files, records_per_object)).repeat(epochs)
    ds = ds.map(fetch, num_parallel_calls=knobs.parallelism("read", max=64), deterministic=False)
    ds = ds.unbatch().batch(batch_size)
    ds = ds.map(parse, num_parallel_calls=knobs.parallelism("parse", max=16))
    ds = ds.map(transform, num_parallel_calls=knobs.parallelism("transform", max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=64))
