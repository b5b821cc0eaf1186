"""Pipelines of other shapes than the reference ones, written as a user would from the README.

Each is a factory ``f(knobs, **kwargs)`` asking its knobs where they are used; none is a
reference pipeline. :func:`prepare` generates the data the file-reading ones need into a
directory (the suite passes a temp dir and removes it) and returns each case's keyword
arguments. Sized for a 2-core machine: a probe window of a second sees thousands of records.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np


@dataclass
class GenCase:
    name: str
    factory: object
    kind: str
    kwargs: dict = field(default_factory=dict)
    ram_headroom_mib: int | None = None   # a RAM budget: RSS now + this (memory-tight case)


# -- tf.data ---------------------------------------------------------------------------------

def interleave_files(knobs, files=(), batch_size=256):
    """Interleave-bound: many small generated text files, read in parallel, parsed, batched."""
    import tensorflow as tf
    reads = knobs.parallelism("read", max=16)
    ds = tf.data.Dataset.from_tensor_slices(list(files)).repeat()
    ds = ds.interleave(tf.data.TextLineDataset, cycle_length=reads, num_parallel_calls=reads,
                       deterministic=False)
    ds = ds.map(lambda line: tf.strings.to_number(tf.strings.split(line, ","), tf.float32),
                num_parallel_calls=knobs.parallelism("parse", max=16))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def _heavy(x, rounds):
    import tensorflow as tf
    for _ in range(rounds):
        x = tf.math.sin(x) * 1.01 + tf.math.cos(x)
    return x


def tfrecord_lookup(knobs, files=(), batch_size=128):
    """TFRecords read by an interleave, batched, parsed with parse_example, then a
    feature-store lookup (0.5 ms per record, numpy_function) and normalization: the read's
    interleave has no busy share, so only scaling finds it."""
    import tensorflow as tf
    reads = knobs.parallelism("read", max=8)
    ds = tf.data.Dataset.from_tensor_slices(list(files)).repeat()
    ds = ds.interleave(tf.data.TFRecordDataset, cycle_length=reads, num_parallel_calls=reads)
    spec = {"dense": tf.io.FixedLenFeature([13], tf.float32),
            "sparse": tf.io.FixedLenFeature([26], tf.int64)}
    ds = ds.batch(batch_size).map(lambda s: tf.io.parse_example(s, spec),
                                  num_parallel_calls=knobs.parallelism("parse", max=16))

    def lookup(sparse):
        time.sleep(0.0005 * sparse.shape[0])
        return np.sqrt((sparse % 1000).astype(np.float32) + 1.0).mean(axis=1, keepdims=True)

    def normalize(e):
        emb = tf.reshape(tf.numpy_function(lookup, [e["sparse"]], tf.float32), [-1, 1])
        dense = tf.math.log1p(e["dense"])
        dense = (dense - tf.reduce_mean(dense, 0)) / (tf.math.reduce_std(dense, 0) + 1e-6)
        ids = tf.strings.to_hash_bucket_fast(tf.strings.as_string(e["sparse"]), 1 << 20)
        return {"dense": tf.concat([dense, emb], 1), "sparse": ids}

    ds = ds.map(normalize, num_parallel_calls=knobs.parallelism("normalize", max=32))
    return ds.prefetch(knobs.buffer("prefetch", max=32))


def mixed_sources(knobs, clicks=(), views=(), batch_size=256, click_share=0.3):
    """Two TFRecord sources (clicks and views), each parsed in its own parallel map, mixed by
    ``sample_from_datasets``, batched, then a hashing transform: the stages in the mixed
    branches get no busy share (README-only trial 62's shape)."""
    import tensorflow as tf
    spec = {"dense": tf.io.FixedLenFeature([13], tf.float32),
            "sparse": tf.io.FixedLenFeature([26], tf.int64)}

    def source(files, knob, label):
        ds = tf.data.TFRecordDataset(list(files)).repeat()
        ds = ds.map(lambda r: tf.io.parse_single_example(r, spec),
                    num_parallel_calls=knobs.parallelism(knob, max=16))
        return ds.map(lambda x: dict(x, label=tf.constant(label)))

    ds = tf.data.Dataset.sample_from_datasets(
        [source(clicks, "parse_clicks", 1.0), source(views, "parse_views", 0.0)],
        weights=[click_share, 1 - click_share], seed=0)

    def transform(b):
        ids = b["sparse"]
        for _ in range(3):
            ids = tf.strings.to_hash_bucket_fast(tf.strings.as_string(ids), 1 << 18)
        return {"dense": tf.math.log1p(b["dense"]), "sparse": ids, "label": b["label"]}

    ds = ds.batch(batch_size).map(transform, num_parallel_calls=knobs.parallelism("transform",
                                                                                 max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def two_maps(knobs, n=1 << 16, width=256, batch_size=128):
    """Two CPU-bound maps competing for the cores: the second costs about twice the first."""
    import tensorflow as tf
    ds = tf.data.Dataset.range(n).repeat()
    ds = ds.map(lambda i: tf.fill([width], tf.cast(i % 101, tf.float32)) + _heavy(
        tf.linspace(0.0, 1.0, width), 20), num_parallel_calls=knobs.parallelism("first", max=8))
    ds = ds.map(lambda x: _heavy(x, 40), num_parallel_calls=knobs.parallelism("second", max=8))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def _py_parse(i):
    rng = np.random.default_rng(int(i))
    v = rng.random(64).astype(np.float32)
    return np.sort(v)


def py_function_stage(knobs, n=1 << 16, batch_size=64):
    """A Python stage (tf.py_function, holds the GIL) between two tf maps."""
    import tensorflow as tf
    ds = tf.data.Dataset.range(n).repeat()
    ds = ds.map(lambda i: tf.py_function(_py_parse, [i], tf.float32),
                num_parallel_calls=knobs.parallelism("python", max=8))
    ds = ds.map(lambda v: tf.reshape(v, [64]) * 2.0 + 1.0,
                num_parallel_calls=knobs.parallelism("scale", max=8))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def _fetch(key):
    time.sleep(0.004)   # a remote GET: waits, uses no CPU
    return np.full(128, key % 89, np.float32)


def latency_and_cpu(knobs, n=1 << 16, batch_size=64):
    """4 ms GETs (numpy_function) feeding a CPU-bound transform."""
    import tensorflow as tf
    ds = tf.data.Dataset.range(n).repeat()
    ds = ds.map(lambda k: tf.reshape(tf.numpy_function(_fetch, [k], tf.float32), [128]),
                num_parallel_calls=knobs.parallelism("fetch", max=64))
    ds = ds.map(lambda x: _heavy(x, 30), num_parallel_calls=knobs.parallelism("transform", max=8))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def _npy_blocks(path, block=32):
    """A shard reader in Python: yields blocks of ``block`` rows and their row ids."""
    arr = np.load(path.decode() if isinstance(path, bytes) else path)
    for i in range(0, arr.shape[0] - block + 1, block):
        yield arr[i:i + block], np.arange(i, i + block, dtype=np.int64)


def generator_sources(knobs, files=(), batch_size=256):
    """Python generators (``from_generator``) read shards in an interleave, unbatched into
    records, then a CPU-heavy per-record map (a small MLP, 4,096 feature crosses projected,
    a spectrum, a hash): a README-only trial's pipeline."""
    import tensorflow as tf
    rng = np.random.default_rng(2)
    w = tf.constant(rng.standard_normal((64, 64)).astype(np.float32) / 8.0)
    w2 = tf.constant(rng.standard_normal((4096, 64)).astype(np.float32) / 64.0)
    sig = (tf.TensorSpec((32, 64), tf.float32), tf.TensorSpec((32,), tf.int64))

    def shard(path):
        return tf.data.Dataset.from_generator(_npy_blocks, args=(path,), output_signature=sig)

    def features(x, row):
        h = x[None, :]
        for _ in range(4):
            h = tf.tanh(tf.matmul(h, w))
        crosses = tf.reshape(x[:, None] * x[None, :], [1, -1])
        return {"mlp": h[0], "cross": tf.nn.relu(tf.matmul(crosses, w2))[0],
                "spectrum": tf.abs(tf.signal.rfft(x)),
                "top": tf.math.top_k(crosses[0], k=32).values,
                "key": tf.strings.to_hash_bucket_fast(tf.strings.as_string(row), 1 << 20)}

    readers = knobs.parallelism("readers", max=8)
    ds = tf.data.Dataset.from_tensor_slices(list(files)).repeat()
    ds = ds.interleave(shard, cycle_length=readers, num_parallel_calls=readers,
                       deterministic=False)
    ds = ds.unbatch().map(features, num_parallel_calls=knobs.parallelism("features", max=16))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=32))


def memory_tight(knobs, n=1 << 12, side=256, batch_size=16):
    """Big elements (256 KiB images) in a wide buffer before the augment: a RAM budget binds."""
    import tensorflow as tf
    ds = tf.data.Dataset.range(n).repeat()
    ds = ds.map(lambda i: tf.random.stateless_uniform([side, side], seed=[i, 1]),
                num_parallel_calls=knobs.parallelism("decode", max=16))
    ds = ds.prefetch(knobs.buffer("elements", max=512))
    ds = ds.map(lambda x: tf.nn.avg_pool2d(x[None, :, :, None], 2, 2, "VALID")[0],
                num_parallel_calls=knobs.parallelism("augment", max=16))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=64))


def shuffle_cache(knobs, n=1 << 13, batch_size=128):
    """A parse cached after the first epoch, then a shuffle buffer and a per-epoch augment."""
    import tensorflow as tf
    ds = tf.data.Dataset.range(n)
    ds = ds.map(lambda i: _heavy(tf.fill([64], tf.cast(i, tf.float32)), 30),
                num_parallel_calls=knobs.parallelism("parse", max=8))
    ds = ds.cache()
    ds = ds.shuffle(knobs.buffer("shuffle", min=16, max=4096, default=256))
    ds = ds.repeat()
    ds = ds.map(lambda x: _heavy(x, 10), num_parallel_calls=knobs.parallelism("augment", max=8))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=16))



def _slow_get(key):
    time.sleep(0.1)     # a 100 ms remote GET: waits, uses no CPU
    return np.int64(key)


def own_pool(knobs, n=1 << 20):
    """100 ms GETs (numpy_function) and CPU string crosses; the factory sets its own
    ``private_threadpool_size`` from its own knob, as the issue's first unseen pipeline did."""
    import tensorflow as tf
    ds = tf.data.Dataset.range(n)
    ds = ds.map(lambda k: tf.numpy_function(_slow_get, [k], tf.int64),
                num_parallel_calls=knobs.parallelism("get", max=128))
    ds = ds.map(lambda k: tf.strings.to_hash_bucket_fast(tf.strings.join(
        [tf.strings.as_string(k), "x", tf.strings.as_string(k % 7)]), 1 << 20),
        num_parallel_calls=knobs.parallelism("cross", max=8))
    ds = ds.prefetch(knobs.buffer("prefetch", max=64))
    options = tf.data.Options()
    options.threading.private_threadpool_size = knobs.threads("pool", max=256)
    return ds.with_options(options)


def prebatched_blocks(knobs, n=1 << 14, rows=1024, width=16):
    """Elements are blocks of 1024 rows (a row group read whole: features and labels), no
    ``batch()``: a decode and a normalize per block. Throughput counts rows."""
    import tensorflow as tf

    def read(i):
        x = tf.random.stateless_uniform([rows, width], seed=tf.stack([i, 7]))
        return {"dense": x, "label": tf.cast(x[:, 0] > 0.5, tf.float32)}

    def normalize(e):
        x = e["dense"]
        x = (x - tf.reduce_mean(x, 0)) / (tf.math.reduce_std(x, 0) + 1e-6) + _heavy(x, 4)
        return {"dense": x, "label": e["label"]}

    ds = tf.data.Dataset.range(n).repeat()
    ds = ds.map(read, num_parallel_calls=knobs.parallelism("read", max=16))
    ds = ds.map(normalize, num_parallel_calls=knobs.parallelism("normalize", max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=32))

# -- torch -----------------------------------------------------------------------------------

def _get_item(i):
    time.sleep(0.003)   # a remote GET
    return i


def _parse_item(i):
    x = np.random.default_rng(i).random(4096)
    return float(np.fft.rfft(x).real.sum())


def torchdata_threads(knobs, batch_size=32):
    """torchdata.nodes: 3 ms GETs on thread workers, a numpy parse, batches."""
    from torchdata.nodes import Batcher, IterableWrapper, ParallelMapper, Prefetcher
    from itertools import count
    node = IterableWrapper(count())
    node = ParallelMapper(node, _get_item, num_workers=knobs.parallelism("get", max=64),
                          method="thread")
    node = ParallelMapper(node, _parse_item, num_workers=knobs.parallelism("parse", max=8),
                          method="thread")
    node = Batcher(node, batch_size=batch_size)
    return Prefetcher(node, prefetch_factor=knobs.buffer("prefetch", max=16))


def _cpu_item(i):
    x = np.random.default_rng(i).random((48, 48))
    return float(np.linalg.svd(x, compute_uv=False)[0])


def torchdata_processes(knobs, batch_size=32):
    """torchdata.nodes: a CPU-bound numpy stage on process workers."""
    from itertools import count

    from torchdata.nodes import Batcher, IterableWrapper, ParallelMapper, Prefetcher
    node = IterableWrapper(count())
    node = ParallelMapper(node, _cpu_item, num_workers=knobs.parallelism("compute", max=8),
                          method="process")
    node = Batcher(node, batch_size=batch_size)
    return Prefetcher(node, prefetch_factor=knobs.buffer("prefetch", max=16))


class _Images:
    """A map-style dataset: each item a 2 ms read and a small numpy decode."""

    def __len__(self):
        return 1 << 20

    def __getitem__(self, i):
        import torch
        time.sleep(0.002)
        x = np.random.default_rng(i).random((32, 32)).astype(np.float32)
        return torch.from_numpy(np.cumsum(x, axis=0))


def dataloader(knobs, batch_size=32):
    """A torch DataLoader: worker processes and their prefetch factor are the knobs."""
    from torch.utils.data import DataLoader
    workers = knobs.parallelism("workers", max=9) - 1
    prefetch = knobs.buffer("prefetch", max=16)
    return DataLoader(_Images(), batch_size=batch_size, num_workers=workers,
                      prefetch_factor=prefetch if workers else None)


CASES = {c.name: c for c in (
    GenCase("interleave", interleave_files, "tf.data: interleave-bound reads of 64 text files"),
    GenCase("tfrecord_lookup", tfrecord_lookup,
            "tf.data: TFRecord interleave + parse_example + 0.5 ms/record lookup"),
    GenCase("two_maps", two_maps, "tf.data: two CPU-bound maps competing"),
    GenCase("mixed_sources", mixed_sources,
            "tf.data: two parsed TFRecord sources mixed by sample_from_datasets"),
    GenCase("py_function", py_function_stage, "tf.data: a tf.py_function (GIL) stage"),
    GenCase("latency_cpu", latency_and_cpu, "tf.data: 4 ms GETs + a CPU transform"),
    GenCase("own_pool", own_pool, "tf.data: 100 ms GETs + string crosses, its own pool knob"),
    GenCase("prebatched", prebatched_blocks, "tf.data: pre-batched 1024-row blocks, no batch()"),
    GenCase("generator", generator_sources,
            "tf.data: Python generator shards interleaved + a per-record CPU map"),
    GenCase("memory", memory_tight, "tf.data: 256 KiB elements, RAM budget binds",
            ram_headroom_mib=160),
    GenCase("shuffle_cache", shuffle_cache, "tf.data: cache + shuffle buffer + augment"),
    GenCase("td_threads", torchdata_threads, "torchdata.nodes: 3 ms GETs, thread workers"),
    GenCase("td_processes", torchdata_processes, "torchdata.nodes: CPU stage, process workers"),
    GenCase("dataloader", dataloader, "torch DataLoader: 2 ms reads, worker processes"),
)}


def prepare(root: Path, names=None) -> dict:
    """Generate what the cases read under ``root``; {case name: its factory kwargs}."""
    names = list(names or CASES)
    kwargs = {n: dict(CASES[n].kwargs) for n in names}
    if "interleave" in names:
        rng = np.random.default_rng(0)
        d = Path(root) / "text"
        d.mkdir(parents=True, exist_ok=True)
        files = []
        for i in range(64):
            path = d / f"part{i:03d}.csv"
            rows = rng.random((2000, 8))
            path.write_text("\n".join(",".join(f"{v:.5f}" for v in r) for r in rows) + "\n")
            files.append(str(path))
        kwargs["interleave"]["files"] = files
    if "generator" in names:
        rng = np.random.default_rng(3)
        d = Path(root) / "npy"
        d.mkdir(parents=True, exist_ok=True)
        kwargs["generator"]["files"] = []
        for i in range(8):
            path = d / f"shard{i}.npy"
            np.save(path, rng.standard_normal((8192, 64)).astype(np.float32))
            kwargs["generator"]["files"].append(str(path))
    if "tfrecord_lookup" in names or "mixed_sources" in names:
        files = _tfrecords(Path(root) / "tfrecord")
        if "tfrecord_lookup" in names:
            kwargs["tfrecord_lookup"]["files"] = files
        if "mixed_sources" in names:
            kwargs["mixed_sources"].update(clicks=files[:4], views=files[4:])
    return kwargs


def _tfrecords(d: Path, shards: int = 8, rows: int = 4000) -> list[str]:
    import tensorflow as tf
    rng = np.random.default_rng(1)
    d.mkdir(parents=True, exist_ok=True)
    files = []
    for s in range(shards):
        path = d / f"part-{s:03d}.tfrecord"
        with tf.io.TFRecordWriter(str(path)) as w:
            for dense, sparse in zip(rng.lognormal(size=(rows, 13)).astype(np.float32),
                                     rng.integers(0, 1 << 30, size=(rows, 26))):
                w.write(tf.train.Example(features=tf.train.Features(feature={
                    "dense": tf.train.Feature(float_list=tf.train.FloatList(value=dense)),
                    "sparse": tf.train.Feature(int64_list=tf.train.Int64List(value=sparse)),
                })).SerializeToString())
        files.append(str(path))
    return files
