"""Criteo with PyTorch ``torchdata.nodes`` over the generated Parquet shards.

    row groups -> read (ParallelMapper, knob "read") -> records (Unbatcher)
      -> Batcher(batch_size) -> parse/transform (ParallelMapper, knob "transform")
      -> Prefetcher (knob "prefetch")

Each element has the structure of :mod:`examples.criteo`, as torch tensors::

    {"dense": float32 [B, 13], "sparse": int64 [B, 26], "label": float32 [B]}

The categorical hash differs from the tf.data pipeline's (a multiplicative integer hash
here, farmhash of the decimal string there); ranges (``TABLE_SIZES``) are the same.
torchdata has no AUTOTUNE: intune_flow resolves AUTOTUNE in a config to concrete values
(parallelism = usable cores, buffers = 2) before calling this factory.
"""

from __future__ import annotations

import itertools

import numpy as np
import pyarrow.parquet as pq
import torch
from torchdata.nodes import Batcher, IterableWrapper, ParallelMapper, Prefetcher, Unbatcher

from intune_flow.data import CARDINALITIES, CATEGORICAL, COLUMNS, DENSE, LABEL, default_dataset

MAX_TABLE_ROWS = 1 << 14
TABLE_SIZES = np.array([min(card, MAX_TABLE_ROWS) for card in CARDINALITIES], dtype=np.uint64)
_DENSE = slice(1, 1 + len(DENSE))
_SPARSE = slice(1 + len(DENSE), 1 + len(DENSE) + len(CATEGORICAL))


def row_groups(files, epochs=None):
    """(path, row group) pairs, ``epochs`` times (forever when None)."""
    pairs = [(path, i) for path in files for i in range(pq.ParquetFile(path).num_row_groups)]
    return itertools.chain.from_iterable(itertools.repeat(pairs, epochs) if epochs is not None
                                         else itertools.repeat(pairs))


def read_row_group(item):
    """One Parquet row group as a list of int64 records (label, I1..I13, C1..C26)."""
    path, index = item
    table = pq.ParquetFile(path).read_row_group(index, columns=list(COLUMNS))
    rows = np.stack([table.column(name).to_numpy() for name in COLUMNS], axis=1)
    return list(rows)


def parse_transform(records):
    """A list of records -> {"dense", "sparse", "label"} tensors (log1p, hashed ids)."""
    rows = np.stack(records)
    dense = np.log1p(np.maximum(rows[:, _DENSE], 0).astype(np.float32))
    ids = rows[:, _SPARSE].astype(np.uint64)
    hashed = (ids * np.uint64(0x9E3779B97F4A7C15)) >> np.uint64(17)
    return {"dense": torch.from_numpy(dense),
            "sparse": torch.from_numpy((hashed % TABLE_SIZES).astype(np.int64)),
            "label": torch.from_numpy(rows[:, 0].astype(np.float32))}


def criteo_torch_pipeline(knobs, files=None, batch_size=1024, epochs=None, method="thread"):
    """torchdata.nodes over Parquet shards (default: the generated default dataset)."""
    files = list(files) if files is not None else default_dataset("parquet")
    node = IterableWrapper(row_groups(files, epochs))
    node = ParallelMapper(node, read_row_group, method="thread",
                          num_workers=knobs.parallelism("read", max=16))
    node = Unbatcher(node)
    node = Batcher(node, batch_size=batch_size, drop_last=False)
    node = ParallelMapper(node, parse_transform, method=method,
                          num_workers=knobs.parallelism("transform", max=16))
    return Prefetcher(node, prefetch_factor=knobs.buffer("prefetch", max=64))
