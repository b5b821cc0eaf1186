"""Tuning records: what one key stores, how it is encoded, validated, read and written.

One object holds a header line, a JSON document and the policy weights in safetensors::

    INTUNEREC <format> <sha256 of json+weights> <json length>\\n<json><safetensors>

Nothing in it can execute code: JSON is parsed by ``json``, weights by safetensors (raw
tensors), and anything that fails a check (magic, format version, checksum, JSON schema,
key, weight names/shapes/dtypes) is quarantined and treated as a miss.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import platform
import time
from dataclasses import dataclass, field
from importlib import metadata

import numpy as np

from .base import CREATE_ONLY, Cache, CacheConflict
from .keys import FORMAT_VERSION, CacheKey

log = logging.getLogger(__name__)

MAGIC = b"INTUNEREC"
MAX_RECORD_BYTES = 64 * 2**20
_VERSIONED = ("intune-flow", "numpy", "tensorflow-cpu", "tensorflow", "torch", "torchdata",
              "safetensors")


class RecordError(ValueError):
    """A stored record failed validation (the message says which check)."""


def library_versions() -> dict[str, str]:
    """Versions of the libraries that shape a measurement (installed ones only)."""
    out = {"python": platform.python_version()}
    for name in _VERSIONED:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return out


def hardware_info(hardware_class: str, cpu_budget: float, ram_budget: int) -> dict:
    """The machine a record was measured on (no host names or user names: records are shared)."""
    import os

    return {"class": hardware_class, "cpu_budget": float(cpu_budget), "ram_budget": int(ram_budget),
            "cpu_count": os.cpu_count() or 0, "machine": platform.machine(),
            "system": platform.system(), "processor": platform.processor()[:64]}


@dataclass
class Record:
    """The best known config and policy for one key."""

    key: CacheKey
    config: dict[str, int]
    throughput: float
    knob_space: list[dict]
    start_config: dict[str, int] = field(default_factory=dict)
    start_throughput: float = 0.0
    tuning_seconds: float = 0.0
    method: str = "intune"
    hardware: dict = field(default_factory=dict)
    versions: dict = field(default_factory=library_versions)
    created_at: float = field(default_factory=time.time)
    history: dict = field(default_factory=dict)
    pipeline: str | None = None
    weights: dict[str, np.ndarray] | None = None
    format_version: int = FORMAT_VERSION

    # -- encoding ---------------------------------------------------------------------------
    def to_json(self) -> dict:
        return {
            "format_version": self.format_version, "key": str(self.key),
            "key_parts": self.key.to_dict(), "pipeline": self.pipeline,
            "config": dict(self.config), "throughput": float(self.throughput),
            "start_config": dict(self.start_config),
            "start_throughput": float(self.start_throughput),
            "tuning_seconds": float(self.tuning_seconds), "method": self.method,
            "knob_space": self.knob_space, "hardware": self.hardware, "versions": self.versions,
            "created_at": float(self.created_at), "history": self.history,
            "weights": None if self.weights is None else {
                k: {"shape": list(np.shape(v)), "dtype": str(np.asarray(v).dtype)}
                for k, v in sorted(self.weights.items())},
        }

    def encode(self) -> bytes:
        doc = json.dumps(self.to_json(), sort_keys=True, separators=(",", ":"),
                         allow_nan=False).encode()
        weights = b""
        if self.weights is not None:
            from safetensors.numpy import save

            weights = save({k: np.ascontiguousarray(v) for k, v in self.weights.items()})
        digest = hashlib.sha256(doc + weights).hexdigest()
        head = b"%s %d %s %d\n" % (MAGIC, self.format_version, digest.encode(), len(doc))
        return head + doc + weights

    # -- summary -------------------------------------------------------------------------
    @property
    def age_s(self) -> float:
        return max(0.0, time.time() - self.created_at)


# -- decoding and validation --------------------------------------------------------------------
def _require(doc: dict, name: str, kinds, *, optional: bool = False):
    if name not in doc:
        if optional:
            return None
        raise RecordError(f"schema: missing field {name!r}")
    value = doc[name]
    if optional and value is None:
        return None
    if isinstance(value, bool) and bool not in (kinds if isinstance(kinds, tuple) else (kinds,)):
        raise RecordError(f"schema: field {name!r} has type bool")
    if not isinstance(value, kinds):
        raise RecordError(f"schema: field {name!r} has type {type(value).__name__}")
    return value


def _number(doc: dict, name: str) -> float:
    value = float(_require(doc, name, (int, float)))
    if not math.isfinite(value) or value < 0:
        raise RecordError(f"schema: field {name!r}={value} must be a finite number >= 0")
    return value


def _config(doc: dict, name: str) -> dict[str, int]:
    value = _require(doc, name, dict)
    for k, v in value.items():
        if not isinstance(k, str) or isinstance(v, bool) or not isinstance(v, int):
            raise RecordError(f"schema: {name} must map knob names to integers")
    return dict(value)


def decode(data: bytes, *, expected_key: CacheKey | str | None = None,
           expected_shapes: dict[str, tuple] | None = None) -> Record:
    """Parse and validate stored bytes. Raises :class:`RecordError` naming the failed check."""
    if not isinstance(data, (bytes, bytearray)):
        raise RecordError("not bytes")
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError(f"record is {len(data)} bytes, over the {MAX_RECORD_BYTES} limit")
    data = bytes(data)
    nl = data.find(b"\n", 0, 256)
    if nl < 0 or not data.startswith(MAGIC + b" "):
        raise RecordError("not an intune_flow record (bad magic/header)")
    parts = data[:nl].split(b" ")
    if len(parts) != 4:
        raise RecordError("malformed header")
    try:
        version, digest, doc_len = int(parts[1]), parts[2].decode("ascii"), int(parts[3])
    except (ValueError, UnicodeDecodeError):
        raise RecordError("malformed header") from None
    if version != FORMAT_VERSION:
        raise RecordError(f"format version {version}, this intune_flow reads {FORMAT_VERSION}")
    body = data[nl + 1:]
    if doc_len < 2 or doc_len > len(body):
        raise RecordError(f"truncated: header says {doc_len} JSON bytes, {len(body)} present")
    if hashlib.sha256(body).hexdigest() != digest:
        raise RecordError("checksum mismatch (truncated, corrupted or tampered)")
    try:
        doc = json.loads(body[:doc_len].decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError(f"schema: JSON does not parse ({exc})") from None
    if not isinstance(doc, dict):
        raise RecordError("schema: the JSON document is not an object")
    record = _from_doc(doc)
    if record.format_version != version:
        raise RecordError(f"format version {record.format_version} in JSON, {version} in header")
    if expected_key is not None and str(record.key) != str(expected_key):
        raise RecordError(f"record is for key {record.key}, stored under {expected_key}")
    record.weights = _weights(body[doc_len:], doc.get("weights"), expected_shapes)
    return record


def _from_doc(doc: dict) -> Record:
    fmt = _require(doc, "format_version", int)
    parts = _require(doc, "key_parts", dict)
    try:
        key = CacheKey(parts["schema"], parts["space"], parts["hardware"], int(parts["format"]))
    except Exception as exc:  # noqa: BLE001 - anything malformed in key_parts
        raise RecordError(f"schema: bad key_parts ({exc})") from None
    if _require(doc, "key", str) != str(key):
        raise RecordError("schema: key and key_parts disagree")
    space = _require(doc, "knob_space", list)
    order = []
    for knob in space:
        if not isinstance(knob, dict) or not isinstance(knob.get("name"), str):
            raise RecordError("schema: knob_space entries need a name")
        order.append(knob["name"])
    config = _config(doc, "config")
    if set(config) != set(order):
        raise RecordError(f"schema: config knobs {sorted(config)} differ from the knob space "
                          f"{sorted(order)}")
    config = {name: config[name] for name in order}  # JSON is stored sorted: restore knob order
    history = _require(doc, "history", dict)
    return Record(
        key=key, config=config, throughput=_number(doc, "throughput"), knob_space=space,
        start_config=_config(doc, "start_config"), start_throughput=_number(doc, "start_throughput"),
        tuning_seconds=_number(doc, "tuning_seconds"), method=_require(doc, "method", str),
        hardware=_require(doc, "hardware", dict), versions=_require(doc, "versions", dict),
        created_at=_number(doc, "created_at"), history=history,
        pipeline=_require(doc, "pipeline", str, optional=True), format_version=fmt)


def _weights(blob: bytes, declared, expected_shapes) -> dict[str, np.ndarray] | None:
    if declared is None:
        if blob:
            raise RecordError("weights present but not declared")
        return None
    if not isinstance(declared, dict):
        raise RecordError("schema: weights must be an object of name -> shape/dtype")
    from safetensors.numpy import load

    try:
        weights = load(blob)
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own error types
        raise RecordError(f"weights are not valid safetensors ({type(exc).__name__})") from None
    if set(weights) != set(declared):
        raise RecordError(f"weights {sorted(weights)} differ from the declared {sorted(declared)}")
    for name, arr in weights.items():
        spec = declared[name]
        if not isinstance(spec, dict) or list(arr.shape) != spec.get("shape") \
                or str(arr.dtype) != spec.get("dtype"):
            raise RecordError(f"weight {name!r} has shape {list(arr.shape)} {arr.dtype}, declared {spec}")
        if arr.dtype.kind != "f" or not np.all(np.isfinite(arr)):
            raise RecordError(f"weight {name!r} is not finite floats")
    if expected_shapes is not None:
        want = {k: tuple(v) for k, v in expected_shapes.items()}
        have = {k: tuple(v.shape) for k, v in weights.items()}
        if want != have:
            bad = sorted(k for k in set(want) | set(have) if want.get(k) != have.get(k))
            raise RecordError(f"weights do not fit the policy network (wrong shapes/names: {bad[:5]})")
    return weights


# -- reading and writing through a cache -----------------------------------------------------
@dataclass
class Lookup:
    """What reading a key found: a valid record and its version, or a miss (with damage if any)."""

    record: Record | None = None
    version: str | None = None
    damage: str | None = None       # why a stored record was rejected and quarantined
    quarantined_as: str | None = None


def read(cache: Cache, key: CacheKey | str, *,
         expected_shapes: dict[str, tuple] | None = None) -> Lookup:
    """Read and validate ``key``. A damaged record is logged, quarantined and reported as a miss.

    :class:`~intune_flow.cache.CacheUnavailable` propagates (the caller falls back).
    """
    found = cache.get(str(key))
    if found is None:
        return Lookup()
    data, version = found
    try:
        return Lookup(decode(data, expected_key=key, expected_shapes=expected_shapes), version)
    except RecordError as exc:
        reason = f"rejected cache record {key}: {exc}"
        qkey = cache.quarantine(str(key), reason, if_version=version)
        log.warning("%s; moved aside to %s and treated as a miss", reason, qkey or "(already gone)")
        return Lookup(damage=str(exc), quarantined_as=qkey)


def transfer_candidates(cache: Cache, key: CacheKey, *, cpu_budget: float,
                        expected_shapes: dict[str, tuple] | None = None) -> list[Record]:
    """Valid records of the same schema and knob space on other hardware classes, nearest first."""
    out = []
    for other in cache.records(key.family):
        if other == str(key):
            continue
        try:
            CacheKey.parse(other)
        except Exception:  # noqa: BLE001 - a foreign object under the prefix
            continue
        found = read(cache, other, expected_shapes=expected_shapes)
        if found.record is not None:
            out.append(found.record)

    def distance(rec: Record) -> tuple:
        cores = float(rec.hardware.get("cpu_budget") or 1.0)
        return (abs(math.log(max(cores, 1e-3) / max(cpu_budget, 1e-3))), -rec.created_at)

    return sorted(out, key=distance)


@dataclass
class WriteOutcome:
    """``action`` is "created", "replaced" or "kept" (the stored record was at least as good)."""

    action: str
    version: str | None
    stored_throughput: float
    attempts: int


def write_best(cache: Cache, record: Record, *, stale: tuple[str, float] | None = None,
               expected_shapes: dict[str, tuple] | None = None,
               max_attempts: int = 64) -> WriteOutcome:
    """Store ``record`` unless the stored one is at least as good (compare-and-swap loop).

    ``stale=(version, measured)``: the stored record at ``version`` was just re-measured at
    ``measured`` records/s (drift), so it is compared by that figure instead of its
    recorded one. A damaged stored record is quarantined and replaced. Concurrent writers
    converge on the best record: each retry re-reads and re-compares.
    """
    data = record.encode()
    key = str(record.key)
    for attempt in range(1, max_attempts + 1):
        found = read(cache, key, expected_shapes=expected_shapes)
        try:
            if found.record is None:
                version = cache.put(key, data, if_version=CREATE_ONLY)
                return WriteOutcome("created", version, record.throughput, attempt)
            current = found.record.throughput
            if stale is not None and stale[0] == found.version:
                current = stale[1]
            if record.throughput <= current:
                return WriteOutcome("kept", found.version, found.record.throughput, attempt)
            version = cache.put(key, data, if_version=found.version)
            return WriteOutcome("replaced", version, record.throughput, attempt)
        except CacheConflict:
            time.sleep(0.001 * attempt)
            continue
    raise CacheConflict(f"could not store {key} after {max_attempts} conflicting attempts")


def summarize_history(history, top: int = 5) -> dict:
    """A small summary of a tuning history (Measurements): counts, best few, statuses."""
    rows = list(history or [])
    ok = [m for m in rows if getattr(m, "ok", False)]
    statuses: dict[str, int] = {}
    for m in rows:
        statuses[m.status] = statuses.get(m.status, 0) + 1
    ok = [m for m in ok if math.isfinite(m.throughput) and not getattr(m, "same_as", None)]
    best = sorted(ok, key=lambda m: m.throughput, reverse=True)[:top]
    return {"measurements": len(rows), "statuses": statuses,
            "seconds": float(sum(m.seconds for m in rows if math.isfinite(m.seconds))),
            "best": [{"config": dict(m.config), "throughput": float(m.throughput),
                      "peak_rss": int(m.peak_rss)} for m in best]}

