"""Records: encoding round trip, every kind of damage rejected + quarantined + a miss, no code runs."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import pickle

import numpy as np
import pytest

from intune_flow.cache import QUARANTINE
from intune_flow.cache.keys import FORMAT_VERSION, CacheKey, make_key
from intune_flow.cache.records import (MAGIC, Record, RecordError, decode, read, summarize_history,
                                       write_best)
from intune_flow.errors import CacheError
from intune_flow.knobs import Knob, KnobSpace
from intune_flow.measurement import Measurement

SPACE = KnobSpace((Knob("read", "parallelism", 1, 32, 1), Knob("prefetch", "buffer", 1, 64, 2)))
SHAPES = {"layer.weight": (4, 3), "layer.bias": (4,)}


def weights(scale=1.0):
    return {"layer.weight": np.full((4, 3), scale, np.float32),
            "layer.bias": np.arange(4, dtype=np.float32)}


def make_record(throughput=1000.0, hardware="cpu2-ram8g", config=None, **kw) -> Record:
    return Record(key=make_key("schema0123", SPACE, hardware),
                  config=config or {"read": 4, "prefetch": 8}, throughput=throughput,
                  knob_space=SPACE.to_json(), start_config={"read": 1, "prefetch": 2},
                  start_throughput=100.0, tuning_seconds=12.5,
                  hardware={"class": hardware, "cpu_budget": 2.0, "ram_budget": 2**33},
                  history={"measurements": 3}, pipeline="examples.x:y", weights=weights(), **kw)


def resign(data: bytes, *, doc=None, version=None, blob=None) -> bytes:
    """Rebuild a record with a valid checksum around edited parts (a 'careful' tamperer)."""
    head, _, body = data.partition(b"\n")
    _, ver, _, n = head.split(b" ")
    doc_bytes, weights_bytes = body[:int(n)], body[int(n):]
    if doc is not None:
        doc_bytes = doc if isinstance(doc, bytes) else json.dumps(doc).encode()
    if blob is not None:
        weights_bytes = blob
    ver = str(version).encode() if version is not None else ver
    digest = hashlib.sha256(doc_bytes + weights_bytes).hexdigest().encode()
    return b"%s %s %s %d\n" % (MAGIC, ver, digest, len(doc_bytes)) + doc_bytes + weights_bytes


def doc_of(data: bytes) -> dict:
    head, _, body = data.partition(b"\n")
    return json.loads(body[:int(head.split(b" ")[3])])


def test_roundtrip():
    rec = make_record()
    back = decode(rec.encode(), expected_key=rec.key, expected_shapes=SHAPES)
    assert back.config == rec.config and back.throughput == rec.throughput
    assert back.key == rec.key and back.pipeline == "examples.x:y"
    assert set(back.weights) == set(SHAPES)
    np.testing.assert_array_equal(back.weights["layer.bias"], np.arange(4, dtype=np.float32))
    assert back.versions["python"] and back.format_version == FORMAT_VERSION


def test_record_without_weights_roundtrips():
    rec = make_record()
    rec.weights = None
    assert decode(rec.encode()).weights is None


def test_key_layout_and_parse():
    key = make_key("abc", SPACE, "cpu2-ram8g")
    assert str(key) == f"v{FORMAT_VERSION}/abc/{SPACE.fingerprint()}/cpu2-ram8g"
    assert CacheKey.parse(str(key)) == key
    assert key.family == f"v{FORMAT_VERSION}/abc/{SPACE.fingerprint()}/"
    with pytest.raises(CacheError):
        CacheKey.parse("v1/only/three")
    with pytest.raises(CacheError):
        CacheKey("a/b", "c", "d")


def _pickle_bomb(marker) -> bytes:
    class Bomb:
        def __reduce__(self):
            return (open, (str(marker), "w"))
    return pickle.dumps({"layer.weight": Bomb()})


def damaged_variants(marker):
    good = make_record().encode()
    head_len = good.index(b"\n") + 1
    doc = doc_of(good)
    flipped_doc = bytearray(good)
    flipped_doc[head_len + 20] ^= 0x01
    flipped_weights = bytearray(good)
    flipped_weights[-3] ^= 0x40
    missing_field = dict(doc)
    del missing_field["throughput"]
    wrong_type = dict(doc, config={"read": "four", "prefetch": 8})
    negative = dict(doc, throughput=-5.0)
    wrong_key = dict(doc, key_parts=dict(doc["key_parts"], hardware="cpu64-ram512g"))
    wrong_key["key"] = "v1/schema0123/{}/cpu64-ram512g".format(doc["key_parts"]["space"])
    bad_decl = dict(doc, weights={"layer.weight": {"shape": [4, 3], "dtype": "float32"},
                                  "layer.bias": {"shape": [5], "dtype": "float32"}})
    wrong_shape_rec = make_record()
    wrong_shape_rec.weights = {"layer.weight": np.ones((8, 3), np.float32),
                               "layer.bias": np.ones(8, np.float32)}
    nan_rec = make_record()
    nan_rec.weights = {"layer.weight": np.full((4, 3), np.nan, np.float32),
                       "layer.bias": np.ones(4, np.float32)}
    bomb = _pickle_bomb(marker)
    return {
        "truncated": good[:len(good) // 2],
        "truncated_header": good[:10],
        "empty": b"",
        "bit_flip_json": bytes(flipped_doc),
        "bit_flip_weights": bytes(flipped_weights),
        "tampered_unsigned": good.replace(b'"throughput":1000.0', b'"throughput":9999.0'),
        "future_version": resign(good, version=FORMAT_VERSION + 1),
        "past_version": resign(good, version=FORMAT_VERSION - 1),
        "json_version_disagrees": resign(good, doc=dict(doc, format_version=FORMAT_VERSION + 1)),
        "not_json": resign(good, doc=b"{not json"),
        "json_array": resign(good, doc=b"[1, 2, 3]"),
        "missing_field": resign(good, doc=missing_field),
        "wrong_type": resign(good, doc=wrong_type),
        "negative_throughput": resign(good, doc=negative),
        "wrong_key": resign(good, doc=wrong_key),
        "weights_decl_mismatch": resign(good, doc=bad_decl),
        "wrong_weight_shapes": wrong_shape_rec.encode(),
        "nan_weights": nan_rec.encode(),
        "pickle_object": bomb,
        "pickle_as_weights": resign(good, blob=bomb),
        "random_bytes": os.urandom(4096),
    }


@pytest.mark.parametrize("kind", sorted(damaged_variants("/nonexistent")))
def test_damage_rejected_quarantined_and_a_miss(cache_backend, kind, tmp_path, caplog):
    marker = tmp_path / "PWNED"
    data = damaged_variants(marker)[kind]
    key = str(make_record().key)
    cache_backend.put(key, data)
    with caplog.at_level(logging.WARNING, logger="intune_flow.cache.records"):
        found = read(cache_backend, key, expected_shapes=SHAPES)
    assert found.record is None and found.damage
    assert "rejected cache record" in caplog.text and key in caplog.text
    assert cache_backend.get(key) is None                      # moved aside: a miss from now on
    assert found.quarantined_as and found.quarantined_as.startswith(key + QUARANTINE)
    assert cache_backend.get(found.quarantined_as)[0] == data  # kept for inspection
    assert not marker.exists()                                 # nothing executed
    # the next good run repairs the cache
    outcome = write_best(cache_backend, make_record(), expected_shapes=SHAPES)
    assert outcome.action == "created"
    assert read(cache_backend, key, expected_shapes=SHAPES).record.throughput == 1000.0


def test_pickle_payload_would_have_run(tmp_path):
    """Guard the guard: the crafted payload really does create the marker when unpickled."""
    marker = tmp_path / "PWNED"
    pickle.loads(_pickle_bomb(marker))
    assert marker.exists()


def test_damage_kinds_name_the_check():
    variants = damaged_variants("/nonexistent")
    expect = {"tampered_unsigned": "checksum", "future_version": "format version",
              "past_version": "format version", "wrong_weight_shapes": "shape",
              "missing_field": "missing field", "pickle_object": "magic",
              "pickle_as_weights": "safetensors"}
    for kind, words in expect.items():
        with pytest.raises(RecordError) as err:
            decode(variants[kind], expected_shapes=SHAPES)
        assert words in str(err.value), (kind, str(err.value))


def test_better_record_wins_never_the_reverse(cache_backend):
    assert write_best(cache_backend, make_record(1000.0)).action == "created"
    assert write_best(cache_backend, make_record(900.0)).action == "kept"
    assert write_best(cache_backend, make_record(1000.0)).action == "kept"
    assert write_best(cache_backend, make_record(1500.0, config={"read": 8, "prefetch": 8})
                      ).action == "replaced"
    rec = read(cache_backend, make_record().key).record
    assert rec.throughput == 1500.0 and rec.config == {"read": 8, "prefetch": 8}


def test_stale_record_replaced_by_remeasured_comparison(cache_backend):
    write_best(cache_backend, make_record(5000.0))
    found = read(cache_backend, make_record().key)
    # the cached config now measures 2000 (drift): a 3000 record replaces the stale 5000 one
    out = write_best(cache_backend, make_record(3000.0), stale=(found.version, 2000.0))
    assert out.action == "replaced"
    assert read(cache_backend, make_record().key).record.throughput == 3000.0
    # a stale token that no longer matches falls back to the recorded figure
    out = write_best(cache_backend, make_record(2500.0), stale=(found.version, 100.0))
    assert out.action == "kept"


def test_summarize_history():
    hist = [Measurement({"a": 1}, throughput=10.0, seconds=1.0),
            Measurement({"a": 2}, throughput=30.0, seconds=1.0),
            Measurement({"a": 3}, status="oom", seconds=0.5)]
    s = summarize_history(hist)
    assert s["measurements"] == 3 and s["statuses"] == {"ok": 2, "oom": 1}
    assert s["best"][0]["config"] == {"a": 2} and s["seconds"] == 2.5
    json.dumps(s)
