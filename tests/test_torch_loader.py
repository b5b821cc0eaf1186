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


class WhoReads(Blocking):
    """Each item says which DataLoader worker read it (-1: the loading process itself)."""

    def __getitem__(self, i):
        info = torch.utils.data.get_worker_info()
        return torch.full((8,), float(-1 if info is None else info.id))


def who_reads(knobs, batch_size=16):
    workers = knobs.parallelism("workers", max=9) - 1
    prefetch = knobs.buffer("prefetch", max=8)
    return DataLoader(WhoReads(), batch_size=batch_size, num_workers=workers,
                      prefetch_factor=prefetch if workers else None)


def test_a_dataloader_is_a_pipeline_and_its_workers_share_the_reads():
    p = Pipeline(loader)
    assert p.framework == "torch.utils.data" and p.batch_size == 16
    assert p.space.names == ("workers", "prefetch")
    assert p.schema() == {"0": {"dtype": "float32", "shape": [None, 8]}}
    one = probe(p, {"workers": 1}, window_s=1.0, warmup_s=0.2)
    many = probe(p, {"workers": 5, "prefetch": 2}, window_s=1.0, warmup_s=0.5)
    assert one.ok and many.ok, (one.error, many.error)
    # The knob is the number of processes reading (what they buy in records/s is for a
    # benchmark): "workers": 1 reads in-process, 5 reads in four worker processes.
    readers = Pipeline(who_reads)

    def ids(config):
        return {int(v) for batch in readers.build(config) for v in batch[:, 0].tolist()}

    assert ids({"workers": 1}) == {-1}
    assert ids({"workers": 5, "prefetch": 2}) == {0, 1, 2, 3}


def test_tune_searches_dataloader_workers_and_the_next_run_hits_the_cache(tmp_path, lenient):
    cache = str(tmp_path / "cache")
    cold = tune(loader, budget_s=10, cache=cache, window_s=0.5, progress=False, seed=0)
    assert cold.source == "tuned", cold.reason
    # The search measured worker processes (which count wins on this machine, under its
    # load, is a measurement: on a busy 2-core box one worker has been read fastest).
    tried = [m for m in cold.history if m.config["workers"] > 1]
    assert tried and all(m.ok for m in tried), [(m.config, m.status) for m in cold.history]
    assert cold.throughput > 0
    warm = tune(loader, budget_s=10, cache=cache, window_s=0.5, progress=False, seed=0)
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


def test_probing_more_workers_than_cores_does_not_show_torchs_warning_but_the_users_loop_does():
    import os
    import warnings

    p = Pipeline(loader)
    workers = len(os.sched_getaffinity(0)) + 2      # past torch's suggested maximum
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        m = probe(p, {"workers": workers + 1}, window_s=0.5, warmup_s=0.2)
        assert m.ok, m.error
        probed = [str(w.message) for w in seen]
        users_own = p.build({"workers": workers + 1})
        iter(users_own)                             # the user's own loop over it
    assert not [w for w in probed if "worker processes" in w], probed
    assert any("worker processes" in str(w.message) for w in seen[len(probed):])


def ignores_its_prefetch(knobs, batch_size=16):
    knobs.buffer("prefetch", max=8)            # declared, never passed on
    return DataLoader(Blocking(), batch_size=batch_size,
                      num_workers=knobs.parallelism("workers", max=3) - 1)


def test_a_config_that_builds_a_loader_already_measured_is_not_measured_again(monkeypatch):
    import dataclasses
    import importlib

    from intune_flow.real_env import PipelineEnv

    probe_module = importlib.import_module("intune_flow.probe")  # the module, not probe()

    probed = []      # the real probe runs; each call is counted

    def counted(*args, **kwargs):
        probed.append(args[1])
        return real_probe(*args, **kwargs)

    real_probe = probe_module.probe
    monkeypatch.setattr(probe_module, "probe", counted)

    # The README's pattern: without workers the prefetch factor is not passed on. That is
    # not a knob that changes nothing (it does with workers), so no warning says it is.
    p = Pipeline(loader)
    assert not [w for w in p.describe().warnings if "changes nothing" in w]
    assert any("'prefetch' changes nothing" in w
               for w in Pipeline(ignores_its_prefetch).describe().warnings)
    env = PipelineEnv(p, window_s=0.3, warmup_s=0.1)
    first = env.measure({"workers": 1, "prefetch": 2})
    twin = env.measure({"workers": 1, "prefetch": 8})       # the same in-process loader
    assert first.ok and first.same_as is None
    assert twin.same_as == first.config and twin.config == {"workers": 1, "prefetch": 8}
    assert probed == [first.config]                           # the twin was not probed
    # The twin is first's measurement, under its own config.
    assert dataclasses.replace(twin, config=first.config, same_as=None,
                               seconds=first.seconds) == first
    again = env.measure({"workers": 1, "prefetch": 2})      # a new look is a real one
    assert again.same_as is None and probed == [first.config] * 2
    with_workers = [env.measure({"workers": 3, "prefetch": f}) for f in (2, 4)]
    assert [m.same_as for m in with_workers] == [None, None] and len(probed) == 4


def test_the_probe_command_says_what_autotune_stands_for_on_a_dataloader(capsys):
    """A DataLoader has no AUTOTUNE: ``probe --config autotune`` runs the values it stands
    for here (one worker per core, two batches per worker) and prints them."""
    from intune_flow.cli import main

    assert main(["probe", "tests.test_torch_loader:loader", "--config", "autotune",
                 "--cpu-budget", "2", "--window-s", "0.3", "--warmup-s", "0.1"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert head.endswith("config workers=autotune,prefetch=autotune "
                         "(runs as workers=2,prefetch=2)"), head
