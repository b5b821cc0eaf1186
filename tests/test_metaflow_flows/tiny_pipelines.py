"""Pipelines of our own for the @intune tests (not the reference ones): small and quick.

Imported by the flows in this directory as ``tiny_pipelines:<factory>`` (the flow's
directory is on sys.path when Metaflow runs it).
"""


def tiny_pipeline(knobs, records=1 << 14, batch_size=64):
    """Squares of a range, batched: a CPU-light tf.data pipeline with two knobs."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(records).repeat()
    ds = ds.map(lambda x: x * x, num_parallel_calls=knobs.parallelism("square", max=4))
    ds = ds.batch(batch_size)
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
