"""A small PyTorch DLRM and a training loop that measures how long it waits for input.

The model (Naumov et al., 2019, scaled down to run on two cores): one embedding table
per categorical feature, a bottom MLP for the dense features, pairwise dot-product
interactions between all the resulting vectors, and a top MLP on the interactions.

:func:`train` consumes batches from any iterable: a ``tf.data.Dataset`` built by
``examples.criteo:criteo_pipeline``, a torchdata loader built by
``examples.criteo_torch:criteo_torch_pipeline``, or a plain list. A batch is a dict
with ``dense`` (float32 ``[B, 13]``), ``sparse`` (int64 ``[B, 26]``) and ``label``
(``[B]``), or the tuples ``(dense, sparse, label)`` / ``((dense, sparse), label)``;
TensorFlow tensors and NumPy arrays are converted on the fly.

Shared by the Metaflow flow (``flows/nightly_retrain.py``) and the Airflow DAG.
"""

from __future__ import annotations

import math
import time
from dataclasses import asdict, dataclass, field
from typing import Any, Iterable, Sequence

import numpy as np
import torch
from torch import nn

from intune_flow.data import CARDINALITIES

NUM_DENSE = 13
NUM_SPARSE = 26
MAX_TABLE_ROWS = 1 << 14
TABLE_SIZES = tuple(min(card, MAX_TABLE_ROWS) for card in CARDINALITIES)
"""Rows per embedding table by default: the ranges the reference pipelines hash ids into."""


@dataclass
class TrainStats:
    """What one training run measured. ``to_dict()`` is JSON-serializable."""

    steps: int                      # optimizer steps taken
    seconds: float                  # wall seconds of the whole loop (input wait + compute)
    steps_per_s: float
    records_per_s: float            # training examples per second
    input_wait_s: float             # seconds blocked waiting for (and converting) the next batch
    input_wait_fraction: float      # input_wait_s / seconds, in [0, 1]
    first_loss: float               # mean loss over the first few steps
    final_loss: float               # mean loss over the last few steps
    batch_size: int                 # records in the last batch
    epochs: int                     # times the input was iterated from the start
    losses: list[float] = field(default_factory=list)  # loss every ``log_every`` steps

    def to_dict(self) -> dict:
        return asdict(self)


class DLRM(nn.Module):
    """Embeddings + bottom MLP + pairwise dot interactions + top MLP -> one logit per record."""

    def __init__(self, *, num_embeddings: int | Sequence[int] = TABLE_SIZES, embedding_dim: int = 16,
                 bottom: Sequence[int] = (64,), top: Sequence[int] = (64, 32),
                 num_dense: int = NUM_DENSE, num_sparse: int = NUM_SPARSE):
        super().__init__()
        rows = ([int(num_embeddings)] * num_sparse if isinstance(num_embeddings, int)
                else [int(n) for n in num_embeddings])
        if len(rows) != num_sparse or min(rows) < 1:
            raise ValueError(f"num_embeddings needs {num_sparse} positive sizes, got {rows}")
        self.num_sparse = num_sparse
        # All tables in one matrix: table j owns rows [offsets[j], offsets[j] + rows[j]).
        self.register_buffer("rows", torch.tensor(rows, dtype=torch.int64), persistent=False)
        self.register_buffer("offsets", torch.tensor([0, *np.cumsum(rows)[:-1]], dtype=torch.int64),
                             persistent=False)
        # Sparse gradients: a step touches B x 26 rows, not the whole table (SparseAdam in train()).
        self.embedding = nn.Embedding(sum(rows), embedding_dim, sparse=True)
        nn.init.uniform_(self.embedding.weight, -1 / math.sqrt(embedding_dim),
                         1 / math.sqrt(embedding_dim))
        self.bottom = _mlp([num_dense, *bottom, embedding_dim], last_activation=True)
        n_vectors = num_sparse + 1
        n_pairs = n_vectors * (n_vectors - 1) // 2
        self.top = _mlp([embedding_dim + n_pairs, *top, 1], last_activation=False)
        iu = torch.triu_indices(n_vectors, n_vectors, offset=1)
        self.register_buffer("pair_i", iu[0], persistent=False)
        self.register_buffer("pair_j", iu[1], persistent=False)

    def forward(self, dense: torch.Tensor, sparse: torch.Tensor) -> torch.Tensor:
        x = self.bottom(dense)                                     # [B, D]
        # Ids are hashed by the pipeline; the modulo keeps any id inside its table.
        ids = torch.remainder(sparse, self.rows) + self.offsets    # [B, 26]
        vectors = torch.cat([x.unsqueeze(1), self.embedding(ids)], dim=1)  # [B, 27, D]
        dots = torch.bmm(vectors, vectors.transpose(1, 2))          # [B, 27, 27]
        pairs = dots[:, self.pair_i, self.pair_j]                  # [B, 351]
        return self.top(torch.cat([x, pairs], dim=1)).squeeze(1)   # [B]


def _mlp(sizes: Sequence[int], *, last_activation: bool) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(sizes[:-1], sizes[1:])):
        layers.append(nn.Linear(a, b))
        if i < len(sizes) - 2 or last_activation:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def _tensor(value: Any, dtype: torch.dtype) -> torch.Tensor:
    if hasattr(value, "numpy") and not isinstance(value, (np.ndarray, torch.Tensor)):
        value = value.numpy()                       # tf.Tensor -> np.ndarray (zero-copy on CPU)
    return torch.as_tensor(value).to(dtype)


def to_tensors(batch: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One pipeline element -> ``(dense float32 [B,13], sparse int64 [B,26], label float32 [B])``."""
    if isinstance(batch, dict):
        try:
            dense, sparse, label = batch["dense"], batch["sparse"], batch["label"]
        except KeyError as exc:
            raise ValueError(f"a batch dict needs keys dense, sparse, label; got {sorted(batch)}") from exc
    elif isinstance(batch, (tuple, list)) and len(batch) == 3:
        dense, sparse, label = batch
    elif isinstance(batch, (tuple, list)) and len(batch) == 2:
        features, label = batch
        if isinstance(features, dict):
            dense, sparse = features["dense"], features["sparse"]
        else:
            dense, sparse = features
    else:
        raise ValueError(f"unrecognised batch structure: {type(batch).__name__}; "
                         "expected a dict with dense/sparse/label or a (dense, sparse, label) tuple")
    dense_t = _tensor(dense, torch.float32)
    sparse_t = _tensor(sparse, torch.int64)
    label_t = _tensor(label, torch.float32).reshape(-1)
    if dense_t.dim() != 2 or sparse_t.dim() != 2 or dense_t.shape[0] != sparse_t.shape[0]:
        raise ValueError(f"dense {tuple(dense_t.shape)} and sparse {tuple(sparse_t.shape)} must be "
                         "[B, features] with the same B")
    return dense_t, sparse_t, label_t


def train(batches: Iterable, *, steps: int, lr: float = 3e-3, seed: int | None = 0,
          model: DLRM | None = None, log_every: int = 10, **model_kwargs) -> TrainStats:
    """Train ``model`` (a fresh :class:`DLRM` by default) for ``steps`` batches from ``batches``.

    The input is iterated again from the start when it runs out before ``steps``.
    Time spent in ``next()`` and converting the batch counts as input wait; the rest of
    each step (forward, backward, optimizer) as compute.
    """
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    if seed is not None:
        torch.manual_seed(seed)
    if model is None:
        model = DLRM(**model_kwargs)
    elif model_kwargs:
        raise ValueError(f"model given: model options {sorted(model_kwargs)} have no effect")
    model.train()
    sparse = [p for m in model.modules() if isinstance(m, nn.Embedding) and m.sparse
              for p in m.parameters()]
    dense = [p for p in model.parameters() if all(p is not q for q in sparse)]
    optimizers = [torch.optim.Adam(dense, lr=lr)]
    if sparse:
        optimizers.append(torch.optim.SparseAdam(sparse, lr=lr))
    loss_fn = nn.BCEWithLogitsLoss()

    losses: list[float] = []
    window = max(1, min(10, steps // 5))
    head: list[float] = []
    tail: list[float] = []
    wait = 0.0
    epochs = 0
    batch_size = 0
    records = 0
    iterator = None
    start = time.perf_counter()
    for step in range(steps):
        t0 = time.perf_counter()
        batch = None
        while batch is None:
            if iterator is None:
                iterator = iter(batches)
                epochs += 1
                fresh = True
            else:
                fresh = False
            try:
                batch = next(iterator)
            except StopIteration:
                iterator = None
                if fresh:
                    raise ValueError("the input pipeline yielded no batches") from None
        dense_x, sparse_x, label = to_tensors(batch)
        wait += time.perf_counter() - t0

        for optimizer in optimizers:
            optimizer.zero_grad(set_to_none=True)
        loss = loss_fn(model(dense_x, sparse_x), label)
        loss.backward()
        for optimizer in optimizers:
            optimizer.step()

        value = float(loss.detach())
        batch_size = int(label.shape[0])
        records += batch_size
        if step < window:
            head.append(value)
        tail = (tail + [value])[-window:]
        if step % log_every == 0 or step == steps - 1:
            losses.append(value)
    seconds = time.perf_counter() - start
    return TrainStats(
        steps=steps, seconds=seconds, steps_per_s=steps / seconds, records_per_s=records / seconds,
        input_wait_s=wait, input_wait_fraction=min(1.0, max(0.0, wait / seconds)),
        first_loss=float(np.mean(head)), final_loss=float(np.mean(tail)), batch_size=batch_size,
        epochs=epochs, losses=losses)
