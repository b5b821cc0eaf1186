"""Criteo with a plain PyTorch ``DataLoader`` over the generated Parquet shards.

    Dataset item i = row group i, read and parsed in a worker process
      -> DataLoader(num_workers=knob "workers" - 1, prefetch_factor=knob "prefetch")

``workers`` is 1 for loading in the training process (``num_workers=0``) and ``k`` for
``k - 1`` worker processes: knobs start at 1, a DataLoader's workers at 0. Each element
is one row group, with the structure of :mod:`examples.criteo` as torch tensors::

    {"dense": float32 [B, 13], "sparse": int64 [B, 26], "label": float32 [B]}
"""

from __future__ import annotations

import pyarrow.parquet as pq
from torch.utils.data import DataLoader, Dataset

from .criteo_torch import parse_transform, read_row_group
from intune_flow.data import default_dataset


class RowGroups(Dataset):
    """Map-style dataset: item i is row group i of the shards, parsed to tensors."""

    def __init__(self, files):
        self.items = [(path, i) for path in files for i in range(pq.ParquetFile(path).num_row_groups)]

    def __len__(self):
        return len(self.items)

    def __getitem__(self, i):
        return parse_transform(read_row_group(self.items[i]))


def criteo_dataloader_pipeline(knobs, files=None):
    """One epoch of row groups through a DataLoader (default: the generated dataset)."""
    files = list(files) if files is not None else default_dataset("parquet")
    workers = knobs.parallelism("workers", max=17) - 1
    prefetch = knobs.buffer("prefetch", max=16)  # asked always: knobs are found by one build
    return DataLoader(RowGroups(files), batch_size=None, num_workers=workers,
                      prefetch_factor=prefetch if workers else None)
