"""Criteo click logs with tf.data, from local TFRecord shards: the reference pipeline.

    read (interleave TFRecord shards) -> batch -> parse -> transform -> prefetch

Every stage has a knob: ``read`` (interleave cycle_length and num_parallel_calls),
``parse`` and ``transform`` (map num_parallel_calls) and ``prefetch`` (buffer).
intune_flow adds the ``threadpool`` knob (tf.data's private thread-pool size).

Each element is a dict (the structure every example in this package produces)::

    {"dense":  float32 [B, 13]   log1p of the integer features I1..I13 (missing -> 0),
     "sparse": int64   [B, 26]   categorical C1..C26 hashed into [0, TABLE_SIZES[j]),
     "label":  float32 [B]}      click (0.0 or 1.0)

``B`` is ``batch_size`` (the last batch of a finite epoch may be smaller). With
``epochs=None`` (the default) the files repeat forever, as a training loop with
``steps_per_epoch`` expects; pass ``epochs=1`` for one pass.
"""

from __future__ import annotations

import struct

import tensorflow as tf

from intune_flow.data import CARDINALITIES, CATEGORICAL, DENSE, LABEL, default_dataset

MAX_TABLE_ROWS = 1 << 14
TABLE_SIZES = tuple(min(card, MAX_TABLE_ROWS) for card in CARDINALITIES)
"""Embedding-table rows per categorical feature: ids are hashed into these ranges."""

FEATURES = {name: tf.io.FixedLenFeature([], tf.int64) for name in (LABEL, *DENSE, *CATEGORICAL)}


def parse(serialized):
    """A batch of serialized tf.train.Example -> {"dense", "sparse", "label"} (raw ints)."""
    cols = tf.io.parse_example(serialized, FEATURES)
    return {"dense": tf.stack([cols[n] for n in DENSE], axis=1),
            "sparse": tf.stack([cols[n] for n in CATEGORICAL], axis=1),
            "label": cols[LABEL]}


def transform(batch):
    """log1p of dense counts; categorical ids hashed (as strings, like raw Criteo) into tables."""
    dense = tf.math.log1p(tf.cast(tf.maximum(batch["dense"], 0), tf.float32))
    hashed = tf.strings.to_hash_bucket_fast(tf.strings.as_string(batch["sparse"]), 1 << 62)
    sparse = tf.math.floormod(hashed, tf.constant(TABLE_SIZES, tf.int64))
    return {"dense": dense, "sparse": sparse, "label": tf.cast(batch["label"], tf.float32)}


def criteo_pipeline(knobs, files=None, batch_size=1024, epochs=None):
    """tf.data over local TFRecord shards (default: the generated default dataset)."""
    files = list(files) if files is not None else default_dataset("tfrecord")
    ds = tf.data.Dataset.from_tensor_slices(files).repeat(epochs)
    ds = ds.interleave(lambda f: tf.data.TFRecordDataset(f, buffer_size=1 << 18),
                       cycle_length=knobs.parallelism("read", max=32),
                       num_parallel_calls=knobs.parallelism("read"),
                       deterministic=False)
    ds = ds.batch(batch_size)
    ds = ds.map(parse, num_parallel_calls=knobs.parallelism("parse", max=16))
    ds = ds.map(transform, num_parallel_calls=knobs.parallelism("transform", max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=64))


# -- helpers shared by the object-store variants ------------------------------------------
def split_records(blob: bytes) -> list[bytes]:
    """The records of a TFRecord-framed byte string (length, crc, data, crc; CRCs not checked)."""
    out, pos, end = [], 0, len(blob)
    while pos < end:
        (length,) = struct.unpack_from("<Q", blob, pos)
        start = pos + 12
        out.append(blob[start:start + length])
        pos = start + length + 4
    return out


def record_ranges(path: str, records_per_object: int) -> list[tuple[int, int]]:
    """(offset, length) byte ranges of ``path`` holding ``records_per_object`` whole records each."""
    with open(path, "rb") as f:
        blob = f.read()
    ranges, pos, start, count = [], 0, 0, 0
    while pos < len(blob):
        (length,) = struct.unpack_from("<Q", blob, pos)
        pos += 16 + length
        count += 1
        if count == records_per_object:
            ranges.append((start, pos - start))
            start, count = pos, 0
    if count:
        ranges.append((start, pos - start))
    return ranges
