"""Generated Criteo-shaped click logs, offline and deterministic by seed.

Each record has a ``label`` (0/1), 13 integer dense features ``I1..I13`` (skewed
counts, ``-1`` where missing) and 26 categorical ids ``C1..C26`` (Zipf-skewed, with
Criteo-like differing cardinalities), all int64. :func:`generate` writes them as
sharded TFRecord (``tf.train.Example``) and/or Parquet files plus a ``manifest.json``::

    out/manifest.json
    out/tfrecord/part-00000-of-00004.tfrecord ...
    out/parquet/part-00000-of-00004.parquet ...

A dataset appears atomically: it is written to a temporary sibling directory and
renamed into place, so a concurrent reader sees all of it or none of it.

Only numpy and pyarrow are needed; TFRecord output imports TensorFlow just for its
record writer (the ``Example`` protos are encoded here, vectorized, which is ~100x
faster than building them one by one).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Iterable, Sequence

import numpy as np

from .errors import IntuneError

FORMAT_VERSION = 1
FORMATS = ("tfrecord", "parquet")
LABEL = "label"
DENSE = tuple(f"I{i}" for i in range(1, 14))
CATEGORICAL = tuple(f"C{i}" for i in range(1, 27))
COLUMNS = (LABEL, *DENSE, *CATEGORICAL)

# Cardinalities of the 26 categoricals in the Criteo Kaggle display-ads set.
CARDINALITIES = (1460, 583, 10131227, 2202608, 305, 24, 12517, 633, 3, 93145, 5683, 8351593,
                 3194, 27, 14992, 5461306, 10, 5652, 2173, 4, 7046547, 18, 15, 286181, 105,
                 142572)

DEFAULT_ROWS = 65536
DEFAULT_SHARDS = 8
DEFAULT_SEED = 0
_DEFAULT_NAME = f"criteo-v{FORMAT_VERSION}-{DEFAULT_ROWS}r-{DEFAULT_SHARDS}s-seed{DEFAULT_SEED}"


class DataError(IntuneError):
    """Generated data could not be written or found."""


# -- columns ---------------------------------------------------------------------------
def columns(rows: int, seed: int = DEFAULT_SEED) -> dict[str, np.ndarray]:
    """All ``rows`` records as int64 numpy columns, the same for the same seed."""
    if not isinstance(rows, int) or isinstance(rows, bool) or rows < 1:
        raise DataError(f"rows must be a positive integer, got {rows!r}")
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    out[LABEL] = (rng.random(rows) < 0.26).astype(np.int64)  # Criteo's ~26% click rate
    for j, name in enumerate(DENSE):
        # Counts with a heavy right tail; scale and missing rate differ per feature.
        mu, sigma = 0.5 + 0.35 * j, 1.0 + 0.1 * (j % 5)
        values = np.floor(np.expm1(rng.normal(mu, sigma, rows).clip(0, 20))).astype(np.int64)
        values[rng.random(rows) < 0.04 * (j % 6)] = -1
        out[name] = values
    for j, (name, card) in enumerate(zip(CATEGORICAL, CARDINALITIES)):
        ranks = rng.zipf(1.05 + 0.05 * (j % 8), rows).astype(np.uint64) - np.uint64(1)
        # Map popularity ranks to scattered ids: a multiplicative permutation mod card.
        ids = (ranks % np.uint64(card)) * np.uint64(2654435761) + np.uint64(j * 7919)
        out[name] = (ids % np.uint64(card)).astype(np.int64)
    return out


# -- tf.train.Example encoding, vectorized ---------------------------------------------
def _varints(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Protobuf varint bytes (n x 10, uint8) and lengths (n,) of int64 values."""
    u = values.astype(np.int64).view(np.uint64)
    groups = np.stack([(u >> np.uint64(7 * i)) & np.uint64(0x7F) for i in range(10)], axis=1)
    nonzero = groups != 0
    # length = index of the last non-zero 7-bit group + 1 (at least 1)
    lengths = np.where(nonzero.any(axis=1), 10 - np.argmax(nonzero[:, ::-1], axis=1), 1)
    cont = np.arange(10)[None, :] < (lengths[:, None] - 1)
    return (groups | (cont.astype(np.uint64) << np.uint64(7))).astype(np.uint8), lengths


def encode_examples(cols: dict[str, np.ndarray]) -> list[bytes]:
    """Serialized ``tf.train.Example`` protos, one int64 feature per column, per row."""
    names = list(cols)
    n = len(cols[names[0]])
    parts = []
    for name in names:
        key = name.encode()
        if len(key) > 100:
            raise DataError(f"column name too long for the encoder: {name!r}")
        vbytes, vlen = _varints(cols[name])
        parts.append((key, vbytes, vlen, len(key) + vlen + 10))  # bytes of this map entry
    body = np.sum([p[3] for p in parts], axis=0)               # Features message length
    head = np.where(body < 128, 2, 3)                           # 0x0A + varint(body)
    total = head + body
    ends = np.cumsum(total)
    starts = ends - total
    buf = np.zeros(int(ends[-1]), dtype=np.uint8)
    buf[starts] = 0x0A
    buf[starts + 1] = np.where(body < 128, body, (body & 0x7F) | 0x80)
    long_ = body >= 128
    buf[starts[long_] + 2] = body[long_] >> 7
    pos = starts + head
    for key, vbytes, vlen, seglen in parts:
        k = len(key)
        # Features.feature entry: 0A len { 0A k key 12 L+4 { 1A L+2 { 0A L varint } } }
        fixed = [0x0A, seglen - 2, 0x0A, k, *key, 0x12, vlen + 4, 0x1A, vlen + 2, 0x0A, vlen]
        for t, byte in enumerate(fixed):
            buf[pos + t] = byte
        vstart = pos + k + 10
        for i in range(10):
            sel = vlen > i
            buf[vstart[sel] + i] = vbytes[sel, i]
        pos = pos + seglen
    raw = buf.tobytes()
    return [raw[s:e] for s, e in zip(starts.tolist(), ends.tolist())]


def _write_tfrecord(path: Path, cols: dict[str, np.ndarray]) -> None:
    import tensorflow as tf  # the TFRecord framing (length + masked CRC32C) is TF's

    with tf.io.TFRecordWriter(str(path)) as writer:
        for record in encode_examples(cols):
            writer.write(record)


def _write_parquet(path: Path, cols: dict[str, np.ndarray]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({name: pa.array(values) for name, values in cols.items()})
    pq.write_table(table, str(path), row_group_size=8192)


_WRITERS = {"tfrecord": (_write_tfrecord, "tfrecord"), "parquet": (_write_parquet, "parquet")}


def _parse_formats(formats: str | Iterable[str]) -> tuple[str, ...]:
    if isinstance(formats, str):
        formats = [f.strip() for f in formats.split(",") if f.strip()]
    formats = tuple(dict.fromkeys(formats))
    bad = [f for f in formats if f not in FORMATS]
    if bad or not formats:
        raise DataError(f"unknown data format(s) {bad or formats!r}; use one or more of {FORMATS}")
    return formats


def schema() -> dict[str, str]:
    """Column name -> dtype of every generated record."""
    return {name: "int64" for name in COLUMNS}


def generate(out: str | os.PathLike, *, rows: int = DEFAULT_ROWS, shards: int = DEFAULT_SHARDS,
             seed: int = DEFAULT_SEED, formats: str | Sequence[str] = FORMATS,
             overwrite: bool = False) -> dict:
    """Write ``rows`` Criteo-shaped records into ``shards`` files per format under ``out``.

    Returns the manifest (also written to ``out/manifest.json``). If ``out`` already
    holds a dataset, raises :class:`DataError` unless ``overwrite`` is true.
    """
    formats = _parse_formats(formats)
    if not isinstance(shards, int) or isinstance(shards, bool) or shards < 1:
        raise DataError(f"shards must be a positive integer, got {shards!r}")
    if isinstance(rows, int) and not isinstance(rows, bool) and 0 < rows < shards:
        raise DataError(f"rows ({rows}) must be at least shards ({shards}); "
                        "lower --shards or raise --rows")
    out = Path(out)
    if out.exists() and not overwrite:
        raise DataError(f"{out} already exists; pick another --out or pass overwrite=True "
                        "(--overwrite on the command line)")
    cols = columns(rows, seed)
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.tmp-", dir=out.parent))
    try:
        bounds = np.linspace(0, rows, shards + 1).astype(int)
        files: dict[str, list[str]] = {}
        for fmt in formats:
            write, ext = _WRITERS[fmt]
            (tmp / fmt).mkdir()
            files[fmt] = []
            for i in range(shards):
                rel = f"{fmt}/part-{i:05d}-of-{shards:05d}.{ext}"
                write(tmp / rel, {k: v[bounds[i]:bounds[i + 1]] for k, v in cols.items()})
                files[fmt].append(rel)
        manifest = {
            "format_version": FORMAT_VERSION,
            "kind": "criteo-synthetic",
            "rows": rows,
            "shards": shards,
            "seed": seed,
            "rows_per_shard": np.diff(bounds).tolist(),
            "schema": schema(),
            "cardinalities": dict(zip(CATEGORICAL, CARDINALITIES)),
            "files": files,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o777 & ~umask)  # mkdtemp makes it 0700; a dataset gets normal modes
        _publish(tmp, out, overwrite)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return manifest


def _publish(tmp: Path, out: Path, overwrite: bool) -> None:
    """Rename ``tmp`` to ``out``; the loser of a race leaves the winner's dataset in place."""
    if overwrite and out.exists():
        old = out.with_name(f".{out.name}.old-{os.getpid()}")
        os.rename(out, old)
        shutil.rmtree(old, ignore_errors=True)
    try:
        os.rename(tmp, out)
    except OSError:
        if not (out / "manifest.json").exists():
            raise


def load_manifest(path: str | os.PathLike) -> dict:
    """The manifest of the dataset in directory ``path``."""
    try:
        return json.loads((Path(path) / "manifest.json").read_text())
    except (OSError, ValueError) as exc:
        raise DataError(f"no readable dataset at {path} ({exc}); generate one with "
                        "`intune-flow data generate --out DIR`") from None


def files(path: str | os.PathLike, fmt: str = "tfrecord") -> list[str]:
    """Absolute paths of the ``fmt`` shards of the dataset in directory ``path``."""
    manifest = load_manifest(path)
    if fmt not in manifest.get("files", {}):
        raise DataError(f"the dataset at {path} has no {fmt!r} files (it has "
                        f"{list(manifest.get('files', {}))}); regenerate it with --format {fmt}")
    return [str(Path(path) / rel) for rel in manifest["files"][fmt]]


def data_dir() -> Path:
    """Where generated demo data lives: $INTUNE_FLOW_DATA_DIR or the user cache dir."""
    env = os.environ.get("INTUNE_FLOW_DATA_DIR")
    if env:
        return Path(env)
    import platformdirs

    return Path(platformdirs.user_cache_dir("intune_flow")) / "data"


def default_dataset(fmt: str = "tfrecord") -> list[str]:
    """Files of the small default dataset (65,536 rows, 8 shards), generated on first use."""
    (fmt,) = _parse_formats([fmt])
    out = data_dir() / f"{_DEFAULT_NAME}-{fmt}"
    if not (out / "manifest.json").exists():
        try:
            generate(out, formats=(fmt,))
        except DataError:
            if not (out / "manifest.json").exists():  # lost a race? then the winner's is there
                raise
    return files(out, fmt)
