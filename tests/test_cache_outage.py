"""Records stored in the local fallback during an outage of the primary reach it later:
once, by the same compare-and-swap rule (the better record wins, never the reverse).

The primary is a bucket on the real seaweedfs server; the unreachable primary is the same
bucket behind an endpoint nothing answers on."""

from __future__ import annotations

import pytest

from intune_flow.cache import CacheUnavailable, LocalCache, MemoryCache
from intune_flow.cache.outage import OutageCache, fallback_cache, publish_fallback
from intune_flow.cache.records import read, write_best
from intune_flow.cache.s3 import S3Cache
from tests.s3server import _free_port
from tests.test_cache_records import SHAPES, make_record


@pytest.fixture
def local(tmp_path, monkeypatch):
    """The local default cache (where an outage's records go), in this test's temp dir."""
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(tmp_path / "local"))
    return tmp_path / "local"


@pytest.fixture
def primary(s3_server, s3_bucket):
    return S3Cache(s3_bucket, "intune", client=s3_server.client())


def _unreachable(s3_server, bucket: str) -> S3Cache:
    """The same bucket and URI, through an endpoint nothing listens on."""
    dead = s3_server.client(endpoint_url=f"http://127.0.0.1:{_free_port(set())}",
                            connect_timeout=0.5, max_attempts=1)
    return S3Cache(bucket, "intune", client=dead, attempts=2, backoff_s=0.01)


def test_the_fallback_of_a_primary_notes_what_it_stores(local, primary):
    fallback = fallback_cache(primary)
    assert isinstance(fallback, OutageCache) and fallback.uri == str(local)
    rec = make_record(1000.0)
    assert write_best(fallback, rec).action == "created"
    assert fallback.pending(str(rec.key)) == read(fallback, rec.key).version
    assert fallback.records() == [str(rec.key)]        # the notes are not keys of the cache
    assert LocalCache(local).records() == [str(rec.key)]
    # another primary's fallback (same directory) has nothing pending for it
    assert fallback_cache(S3Cache("other-bucket")).pending(str(rec.key)) is None
    # the local default directory as the primary: its fallback is memory, nothing to publish
    assert isinstance(fallback_cache(LocalCache(local)), MemoryCache)
    assert publish_fallback(LocalCache(local), rec.key) is None


def test_an_outage_record_is_published_once_and_a_newer_one_again(local, primary):
    key = make_record().key
    assert publish_fallback(primary, key) is None                  # nothing pending
    write_best(fallback_cache(primary), make_record(1000.0))       # stored during an outage
    first = publish_fallback(primary, key, expected_shapes=SHAPES)
    assert first is not None and first.action == "created"
    assert read(primary, key, expected_shapes=SHAPES).record.throughput == 1000.0
    assert fallback_cache(primary).pending(str(key)) is None       # marked published
    assert publish_fallback(primary, key) is None                  # not offered again
    # A later outage stores a better record: pending again, and it replaces the worse one.
    write_best(fallback_cache(primary), make_record(1500.0, config={"read": 8, "prefetch": 8}))
    assert publish_fallback(primary, key).action == "replaced"
    stored = read(primary, key).record
    assert (stored.throughput, stored.config) == (1500.0, {"read": 8, "prefetch": 8})


def test_a_worse_outage_record_never_replaces_a_better_one(local, primary):
    key = make_record().key
    write_best(primary, make_record(2000.0, config={"read": 16, "prefetch": 4}))
    write_best(fallback_cache(primary), make_record(500.0))
    assert publish_fallback(primary, key).action == "kept"
    stored = read(primary, key).record
    assert (stored.throughput, stored.config) == (2000.0, {"read": 16, "prefetch": 4})
    assert fallback_cache(primary).pending(str(key)) is None       # offered once, then done


def test_an_unreachable_primary_keeps_the_record_pending(local, primary, s3_server, s3_bucket):
    key = make_record().key
    write_best(fallback_cache(primary), make_record(1000.0))
    down = _unreachable(s3_server, s3_bucket)
    assert down.uri == primary.uri
    with pytest.raises(CacheUnavailable):
        publish_fallback(down, key)
    assert fallback_cache(primary).pending(str(key)) is not None
    assert publish_fallback(primary, key).action == "created"     # the store is back


def test_a_damaged_outage_record_is_not_published(local, primary):
    key = make_record().key
    fallback = fallback_cache(primary)
    write_best(fallback, make_record(1000.0))
    path = local / (str(key) + ".rec")
    path.write_bytes(path.read_bytes()[:-7])                       # truncated on disk
    assert publish_fallback(primary, key) is None
    assert primary.get(str(key)) is None
    assert fallback.pending(str(key)) is None and any(".quarantine/" in k for k in fallback.list())
