"""The Cache contract (intune_flow/cache/base.py), one suite run against every backend.

The S3 backend runs against a real seaweedfs server on loopback (tests/s3server.py).
"""

from __future__ import annotations

import threading
import uuid

import pytest

from intune_flow.cache import (CREATE_ONLY, QUARANTINE, Cache, CacheConflict, CacheError,
                               LocalCache, MemoryCache, get_cache)
from intune_flow.cache.s3 import S3Cache


@pytest.fixture(params=["local", "memory", "s3"])
def cache(request, tmp_path) -> Cache:
    if request.param == "local":
        return LocalCache(tmp_path / "cache")
    if request.param == "memory":
        return MemoryCache()
    server = request.getfixturevalue("s3_server")
    return S3Cache(server.make_bucket(), "some/prefix", client=server.client())


def test_miss_is_none(cache):
    assert cache.get("v1/nothing/here") is None
    assert cache.list("v1/") == []
    assert cache.delete("v1/nothing/here") is False
    assert cache.quarantine("v1/nothing/here", "why") is None


def test_put_get_roundtrip_and_versions(cache):
    v1 = cache.put("v1/a/b", b"one")
    data, token = cache.get("v1/a/b")
    assert data == b"one" and token == v1
    v2 = cache.put("v1/a/b", b"two")
    assert v2 != v1
    assert cache.get("v1/a/b") == (b"two", v2)


def test_binary_payload_survives(cache):
    blob = bytes(range(256)) * 1000
    cache.put("k/bin", blob)
    assert cache.get("k/bin")[0] == blob


def test_create_only(cache):
    cache.put("k/x", b"first", if_version=CREATE_ONLY)
    with pytest.raises(CacheConflict):
        cache.put("k/x", b"second", if_version=CREATE_ONLY)
    assert cache.get("k/x")[0] == b"first"


def test_if_version_compare_and_swap(cache):
    v1 = cache.put("k/cas", b"a")
    v2 = cache.put("k/cas", b"b", if_version=v1)
    with pytest.raises(CacheConflict):
        cache.put("k/cas", b"c", if_version=v1)          # stale token
    assert cache.get("k/cas") == (b"b", v2)
    with pytest.raises(CacheConflict):
        cache.put("k/absent", b"c", if_version=v2)       # replace of a missing key


def test_list_prefix_and_nesting(cache):
    for key in ("v1/s/a/cpu2", "v1/s/a/cpu4", "v1/s/b/cpu2", "v1/t/a/cpu2", "v1"):
        cache.put(key, key.encode())
    assert cache.list("v1/s/a/") == ["v1/s/a/cpu2", "v1/s/a/cpu4"]
    assert cache.list("v1/s/") == ["v1/s/a/cpu2", "v1/s/a/cpu4", "v1/s/b/cpu2"]
    assert set(cache.list()) == {"v1", "v1/s/a/cpu2", "v1/s/a/cpu4", "v1/s/b/cpu2", "v1/t/a/cpu2"}
    assert cache.get("v1")[0] == b"v1"


def test_delete(cache):
    cache.put("k/d", b"x")
    assert cache.delete("k/d") is True
    assert cache.get("k/d") is None
    assert cache.list("k/") == []


def test_quarantine_moves_aside(cache):
    token = cache.put("k/q", b"bad")
    qkey = cache.quarantine("k/q", "checksum mismatch", if_version=token)
    assert qkey is not None and qkey.startswith("k/q" + QUARANTINE)
    assert cache.get("k/q") is None
    assert cache.get(qkey)[0] == b"bad"
    assert cache.records("k/") == []
    assert qkey in cache.list("k/")


def test_quarantine_respects_version(cache):
    old = cache.put("k/q2", b"bad")
    cache.put("k/q2", b"good, written meanwhile")
    assert cache.quarantine("k/q2", "stale view", if_version=old) is None
    assert cache.get("k/q2")[0] == b"good, written meanwhile"


@pytest.mark.parametrize("key", ["", "/abs", "a//b", "a/../b", "../x", ".hidden", "a b", "a/"])
def test_bad_keys_rejected(cache, key):
    with pytest.raises(CacheError):
        cache.get(key)
    with pytest.raises(CacheError):
        cache.put(key, b"x")


def test_threads_racing_create_only_have_one_winner(cache):
    key = f"race/{uuid.uuid4().hex}"
    wins, conflicts = [], []
    barrier = threading.Barrier(8)

    def writer(i):
        barrier.wait()
        try:
            cache.put(key, f"writer {i}".encode(), if_version=CREATE_ONLY)
            wins.append(i)
        except CacheConflict:
            conflicts.append(i)

    threads = [threading.Thread(target=writer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and len(conflicts) == 7
    assert cache.get(key)[0] == f"writer {wins[0]}".encode()


def test_threads_cas_increments_lose_nothing(cache):
    key = "race/counter"
    cache.put(key, b"0")

    def bump():
        for _ in range(5):
            while True:
                data, token = cache.get(key)
                try:
                    cache.put(key, str(int(data) + 1).encode(), if_version=token)
                    break
                except CacheConflict:
                    continue

    threads = [threading.Thread(target=bump) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert cache.get(key)[0] == b"20"


# -- get_cache --------------------------------------------------------------------------------
def test_get_cache_default_is_env_dir(tmp_path, monkeypatch):
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(tmp_path / "envcache"))
    cache = get_cache(None)
    assert isinstance(cache, LocalCache) and cache.root == tmp_path / "envcache"


def test_get_cache_default_without_env_is_user_cache_dir(monkeypatch, tmp_path):
    monkeypatch.delenv("INTUNE_FLOW_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cache = get_cache()
    assert isinstance(cache, LocalCache)
    assert cache.root == tmp_path / "xdg" / "intune_flow" / "cache"


def test_get_cache_forms(tmp_path):
    obj = MemoryCache()
    assert get_cache(obj) is obj
    assert get_cache("memory://x") is get_cache("memory://x")
    private = get_cache("memory://")
    private.put("v1/k", b"{}")
    assert get_cache("memory://") is not private and get_cache("memory://").list() == []
    assert isinstance(get_cache(f"file://{tmp_path}"), LocalCache)
    assert isinstance(get_cache(tmp_path), LocalCache)
    s3 = get_cache("s3://my-bucket/team/intune")
    assert isinstance(s3, S3Cache) and (s3.bucket, s3.prefix) == ("my-bucket", "team/intune")
    assert s3.uri == "s3://my-bucket/team/intune"


@pytest.mark.parametrize("uri, words", [
    ("s3://", "no bucket"),
    ("s3:///prefix", "no bucket"),
    ("s3://Bad_Bucket/x", "bucket name"),
    ("s3://ab/x", "bucket name"),
    ("s3://bucket/a//b", "empty path part"),
    ("s3://bucket/p?x=1", "'?'"),
    ("gs://bucket/x", "not supported"),
    ("file://relative/dir", "absolute path"),
    ("", "empty"),
    ("s3:/bucket", "malformed"),
])
def test_get_cache_malformed_uris_name_the_fix(uri, words):
    with pytest.raises(CacheError) as err:
        get_cache(uri)
    msg = str(err.value)
    assert words in msg and ("use" in msg or "create" in msg)


def test_get_cache_rejects_other_types():
    with pytest.raises(CacheError):
        get_cache(42)


def test_s3_endpoint_from_env(monkeypatch, s3_server):
    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    bucket = s3_server.make_bucket()
    cache = get_cache(f"s3://{bucket}/p")
    cache.put("k/env", b"via env")
    assert s3_server.client().get_object(Bucket=bucket, Key="p/k/env")["Body"].read() == b"via env"
