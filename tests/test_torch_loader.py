"""A plain torch.utils.data.DataLoader is a pipeline: its worker processes are knobs."""

import time

import pytest

torch = pytest.importorskip("torch")
from torch.utils.data import DataLoader, Dataset  # noqa: E402

from intune_flow import tune  # noqa: E402
from intune_flow.pipeline import Pipeline  # noqa: E402
from intune_flow.probe import probe  # noqa: E402


class Blocking(Dataset):
    """Each item waits 4 ms (a remote read): worker processes overlap the waits."""

    def __len__(self):
        return 256

    def __getitem__(self, i):
        time.sleep(0.004)
        return torch.full((8,), float(i))


def loader(knobs, batch_size=16):
    workers = knobs.parallelism("workers", max=9) - 1
    prefetch = knobs.buffer("prefetch", max=8)
    return DataLoader(Blocking(), batch_size=batch_size, num_workers=workers,
                      prefetch_factor=prefetch if workers else None)


def test_a_dataloader_is_a_pipeline_and_its_workers_pay():
    p = Pipeline(loader)
    assert p.framework == "torch.utils.data" and p.batch_size == 16
    assert p.space.names == ("workers", "prefetch")
    assert p.schema() == {"0": {"dtype": "float32", "shape": [None, 8]}}
    one = probe(p, {"workers": 1}, window_s=1.0, warmup_s=0.2)
    many = probe(p, {"workers": 5, "prefetch": 2}, window_s=1.0, warmup_s=0.5)
    assert one.ok and many.ok, (one.error, many.error)
    assert many.records_per_s > 2 * one.records_per_s     # four processes wait at once


def test_tune_finds_workers_for_a_dataloader_and_the_next_run_hits_the_cache(tmp_path):
    cache = str(tmp_path / "cache")
    cold = tune(loader, budget_s=6, cache=cache, window_s=0.5, progress=False, seed=0)
    assert cold.source == "tuned", cold.reason
    assert cold.config["workers"] > 1 and cold.throughput > cold.start_throughput
    warm = tune(loader, budget_s=6, cache=cache, window_s=0.5, progress=False, seed=0)
    assert warm.source == "cache" and warm.config == cold.config
    assert isinstance(warm.build(), DataLoader)


class Pairs(Dataset):
    """(features, label) items: default_collate yields a *list* [features, labels]."""

    def __len__(self):
        return 1000

    def __getitem__(self, i):
        return torch.full((8,), float(i)), torch.tensor(i % 2)


def test_a_collated_tuple_is_one_batch_of_two_features_not_two_records():
    from torch.utils.data import BatchSampler, SequentialSampler

    by_size = Pipeline(lambda knobs: DataLoader(
        Pairs(), batch_size=64, num_workers=knobs.parallelism("workers", max=4) - 1))
    by_sampler = Pipeline(lambda knobs: DataLoader(
        Pairs(), batch_sampler=BatchSampler(SequentialSampler(range(1000)), 32, False),
        num_workers=knobs.parallelism("workers", max=4) - 1))
    for p, size in ((by_size, 64), (by_sampler, 32)):
        assert p.schema() == {"0": {"dtype": "float32", "shape": [None, 8]},
                              "1": {"dtype": "int64", "shape": [None]}}
        assert p.batch_size == size
        ds = p.build({"workers": 1})
        assert sum(p.records_in(batch) for batch in p.iterate(ds)) == 1000
