"""Pure-TF pipelines for scale-out (no Python in the graph, so they run on tf.data service
workers in other processes): what the scale-out benchmark, demo and tests tune.

* :func:`hash_pipeline`: CPU-bound, a string hash of every id in batches.
* :func:`sleep_pipeline`: latency-bound, each element waits ``delay_ms`` in a TF op (a
  stand-in for a remote read), then is hashed. It uses TensorFlow's test-only ``sleep``
  dataset op (``tensorflow.python.data.experimental.ops.testing``): fine for benchmarks,
  not an API to copy into training code.

Both repeat forever (``n=None``) as training reads them; ``n`` rows make one finite epoch.
The trainer side is marked with ``knobs.split``: the batches cross the service, the
prefetch runs on the trainer.
"""

from __future__ import annotations

import tensorflow as tf


def _hash(x):
    return tf.strings.to_hash_bucket_fast(tf.strings.as_string(x), 1 << 20)


def hash_pipeline(knobs, n=None, batch_size=256):
    """CPU-bound: range -> batch -> hash (map) on the workers; prefetch on the trainer."""
    ds = tf.data.Dataset.range(n) if n is not None else tf.data.Dataset.range(1 << 40)
    ds = ds.batch(batch_size)
    ds = ds.map(_hash, num_parallel_calls=knobs.parallelism("hash", max=8))
    ds = knobs.split(ds)
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def sleep_pipeline(knobs, n=None, batch_size=256, delay_ms=20):
    """Latency-bound: each batch waits ``delay_ms`` in a parallel map of sleeps
    (interleave of one-element sleep datasets), then is hashed."""
    from tensorflow.python.data.experimental.ops import testing

    ds = tf.data.Dataset.range(n) if n is not None else tf.data.Dataset.range(1 << 40)
    ds = ds.batch(batch_size)
    delay_us = int(delay_ms * 1000)
    ds = ds.interleave(lambda b: tf.data.Dataset.from_tensors(b).apply(testing.sleep(delay_us)),
                       cycle_length=knobs.parallelism("read", max=32),
                       num_parallel_calls=knobs.parallelism("read"), deterministic=False)
    ds = ds.map(_hash, num_parallel_calls=knobs.parallelism("hash", max=8))
    ds = knobs.split(ds)
    return ds.prefetch(knobs.buffer("prefetch", max=16))
