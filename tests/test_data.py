"""Generated Criteo-shaped data: deterministic, correctly encoded, written atomically."""

import json
import os
import subprocess
import sys
import threading

import numpy as np
import pyarrow.parquet as pq
import pytest

from intune_flow import data
from intune_flow.data import DataError


def test_columns_deterministic_by_seed_and_criteo_shaped():
    a, b, c = data.columns(5000, seed=3), data.columns(5000, seed=3), data.columns(5000, seed=4)
    assert list(a) == ["label", *data.DENSE, *data.CATEGORICAL]
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not all(np.array_equal(a[k], c[k]) for k in a)
    assert all(v.dtype == np.int64 for v in a.values())
    assert set(np.unique(a["label"])) == {0, 1}
    dense = np.stack([a[n] for n in data.DENSE])
    assert dense.min() == -1 and (dense == -1).any() and (dense == 0).any()
    assert np.median(dense[dense >= 0]) < dense.max() / 20  # skewed: a long right tail
    for name, card in zip(data.CATEGORICAL, data.CARDINALITIES):
        assert 0 <= a[name].min() and a[name].max() < card
    # Zipf-like: the most frequent id of a large-cardinality feature is far above uniform.
    counts = np.unique(a["C3"], return_counts=True)[1]
    assert counts.max() > 50 * len(a["C3"]) / data.CARDINALITIES[2]


def test_example_encoding_matches_protobuf():
    from tensorflow.core.example import example_pb2

    cols = {"x": np.array([0, 1, 127, 128, 300, -1, 2**62, -2**63], dtype=np.int64),
            "long_name_feature": np.arange(8, dtype=np.int64) * 10**12}
    for i, raw in enumerate(data.encode_examples(cols)):
        ex = example_pb2.Example.FromString(raw)
        for name, values in cols.items():
            assert list(ex.features.feature[name].int64_list.value) == [values[i]]


def test_generate_writes_tfrecord_parquet_and_manifest(tmp_path):
    import tensorflow as tf

    out = tmp_path / "ds"
    manifest = data.generate(out, rows=1000, shards=3, seed=7)
    on_disk = json.loads((out / "manifest.json").read_text())
    assert on_disk == manifest
    assert manifest["rows"] == 1000 and manifest["shards"] == 3 and manifest["seed"] == 7
    assert sum(manifest["rows_per_shard"]) == 1000
    assert set(manifest["schema"]) == set(data.COLUMNS)
    umask = os.umask(0)
    os.umask(umask)
    assert (out.stat().st_mode & 0o777) == 0o777 & ~umask  # not mkdtemp's 0700
    tf_files, pq_files = data.files(out, "tfrecord"), data.files(out, "parquet")
    assert len(tf_files) == len(pq_files) == 3
    cols = data.columns(1000, seed=7)
    spec = {n: tf.io.FixedLenFeature([], tf.int64) for n in data.COLUMNS}
    parsed = [tf.io.parse_example(tf.stack(list(tf.data.TFRecordDataset(f))), spec) for f in tf_files]
    table = [pq.read_table(f) for f in pq_files]
    for name in ("label", "I5", "C3"):
        from_tf = np.concatenate([p[name].numpy() for p in parsed])
        from_pq = np.concatenate([t.column(name).to_numpy() for t in table])
        assert np.array_equal(from_tf, cols[name]) and np.array_equal(from_pq, cols[name])


def test_generate_refuses_to_overwrite_and_validates_args(tmp_path):
    data.generate(tmp_path / "ds", rows=10, shards=1, formats="parquet")
    with pytest.raises(DataError, match="already exists"):
        data.generate(tmp_path / "ds", rows=10, shards=1, formats="parquet")
    data.generate(tmp_path / "ds", rows=20, shards=2, formats="parquet", overwrite=True)
    assert data.load_manifest(tmp_path / "ds")["rows"] == 20
    with pytest.raises(DataError, match="unknown data format"):
        data.generate(tmp_path / "x", rows=10, formats="csv")
    with pytest.raises(DataError, match="rows must be"):
        data.generate(tmp_path / "x", rows=0)
    with pytest.raises(DataError, match="at least shards"):
        data.generate(tmp_path / "x", rows=2, shards=5)
    with pytest.raises(DataError, match="no 'tfrecord' files"):
        data.files(tmp_path / "ds", "tfrecord")
    with pytest.raises(DataError, match="intune-flow data generate"):
        data.files(tmp_path / "nothing")
    assert not list(tmp_path.glob(".*tmp-*")), "temporary directories were left behind"


def test_concurrent_default_dataset_is_whole_for_everyone(tmp_path, monkeypatch):
    monkeypatch.setenv("INTUNE_FLOW_DATA_DIR", str(tmp_path / "data"))
    results, errors = [], []

    def worker():
        try:
            results.append(data.default_dataset("parquet"))
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(results) == 4 and all(r == results[0] for r in results)
    rows = sum(pq.ParquetFile(f).metadata.num_rows for f in results[0])
    assert rows == data.DEFAULT_ROWS and len(results[0]) == data.DEFAULT_SHARDS
    assert [p.name for p in (tmp_path / "data").iterdir()] == [f"{data._DEFAULT_NAME}-parquet"]


def test_cli_generate(tmp_path):
    out = tmp_path / "cli"
    proc = subprocess.run([sys.executable, "-m", "intune_flow", "data", "generate", "--out",
                           str(out), "--rows", "300", "--shards", "2", "--seed", "1",
                           "--format", "parquet"], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert data.load_manifest(out)["files"].keys() == {"parquet"}
    again = subprocess.run([sys.executable, "-m", "intune_flow", "data", "generate", "--out",
                            str(out), "--format", "parquet"], capture_output=True, text=True)
    assert again.returncode == 2 and "already exists" in again.stderr
