"""Pipelines of our own for the @intune tests (not the reference ones): small and quick.

Imported by the flows in this directory as ``tiny_pipelines:<factory>`` (the flow's
directory is on sys.path when Metaflow runs it).
"""

import time

FETCH_S = 0.004


def _fetch(batch):
    time.sleep(FETCH_S)  # a remote read: latency, not CPU, so its speed holds on a busy machine
    return batch


def tiny_pipeline(knobs, records=1 << 14, batch_size=64):
    """Batches of a range behind a 4 ms "fetch": a latency-bound tf.data pipeline, two knobs."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(records).repeat().batch(batch_size)
    ds = ds.map(lambda b: tf.numpy_function(_fetch, [b], tf.int64),
                num_parallel_calls=knobs.parallelism("fetch", max=4))
    return ds.prefetch(knobs.buffer("prefetch", max=8))


class PipelineBroken(RuntimeError):
    """What ``broken_pipeline`` raises while it is iterated."""


def _fail(x):
    raise PipelineBroken("the tiny pipeline broke on purpose while producing elements")


def broken_pipeline(knobs, batch_size=64):
    """Builds fine, then raises on the first element: every measurement of it fails."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(1 << 10).repeat()
    ds = ds.map(lambda x: tf.numpy_function(_fail, [x], tf.int64),
                num_parallel_calls=knobs.parallelism("square", max=4))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=8))
