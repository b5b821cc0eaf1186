"""Cache faults against the real seaweedfs server: outages before/during/after a write, slow
responses, refused credentials, a missing bucket, and SIGKILL in the middle of a local write."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from intune_flow.cache import CacheUnavailable, LocalCache
from intune_flow.cache.records import decode, read, write_best
from intune_flow.cache.s3 import S3Cache
from tests.s3server import SECRET_KEY, FaultProxy
from tests.test_cache_records import make_record

ROOT = Path(__file__).resolve().parents[1]
KEY = str(make_record().key)


def s3_cache(server, bucket, *, endpoint_url=None, attempts=3, **client_kw) -> S3Cache:
    client = server.client(endpoint_url=endpoint_url, max_attempts=1, **client_kw)
    return S3Cache(bucket, "faults", client=client, attempts=attempts, backoff_s=0.05)


def big_record(throughput):
    rec = make_record(throughput)
    rec.weights = {"layer.weight": np.random.default_rng(0).random((512, 1024), np.float32),
                   "layer.bias": np.ones(4, np.float32)}
    return rec


def test_server_stopped_before_write(s3_outage):
    server = s3_outage
    bucket = server.make_bucket()
    cache = s3_cache(server, bucket)
    write_best(cache, make_record(1000.0))
    server.stop()
    with pytest.raises(CacheUnavailable) as err:
        write_best(cache, make_record(2000.0))
    assert "unavailable after 3 attempt" in str(err.value)
    assert f"endpoint {server.endpoint_url}: check that the store is up" in str(err.value)
    with pytest.raises(CacheUnavailable):
        cache.get(KEY)
    server.start()
    assert read(cache, KEY).record.throughput == 1000.0        # previous good record intact
    assert write_best(cache, make_record(2000.0)).action == "replaced"  # next good run repairs


def test_server_stopped_after_write(s3_outage):
    server = s3_outage
    bucket = server.make_bucket()
    cache = s3_cache(server, bucket)
    write_best(cache, make_record(1500.0))
    server.stop()
    with pytest.raises(CacheUnavailable):
        read(cache, KEY)
    server.start()
    assert read(cache, KEY).record.throughput == 1500.0


@pytest.mark.slow
def test_server_stopped_during_writes(s3_outage):
    """A writer keeps writing bigger and bigger records while the server goes down mid-upload."""
    import threading

    server = s3_outage
    bucket = server.make_bucket()
    cache = s3_cache(server, bucket, attempts=2)
    write_best(cache, big_record(1.0))
    failures, successes = [], []
    stop = threading.Event()

    def writer():
        tp = 2.0
        while not stop.is_set():
            try:
                write_best(cache, big_record(tp))
                successes.append(tp)
            except CacheUnavailable:
                failures.append(tp)
            tp += 1.0

    def wait_for(seen, seconds=60.0):   # a loaded machine's writes take their time
        deadline = time.monotonic() + seconds
        while not seen and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.05)

    thread = threading.Thread(target=writer)
    thread.start()
    try:
        wait_for(successes)
        server.stop()
        wait_for(failures)
    finally:
        stop.set()
        thread.join(60)
        server.start()
    assert successes and failures
    rec = read(cache, KEY).record                   # a whole, valid record survived
    assert rec is not None and rec.throughput >= max(successes)
    assert cache.list(make_record().key.family) == [KEY]   # nothing damaged had to be quarantined


def test_upload_cut_mid_transfer_leaves_previous_record(s3_server):
    bucket = s3_server.make_bucket()
    direct = s3_cache(s3_server, bucket)
    write_best(direct, make_record(1000.0))
    proxy = FaultProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1]), cut_after=200_000)
    try:
        cut = s3_cache(s3_server, bucket, endpoint_url=proxy.endpoint_url, attempts=1)
        with pytest.raises(CacheUnavailable):
            write_best(cut, big_record(5000.0))   # ~2 MiB upload dropped after 200 kB
        assert proxy.cuts == 1
    finally:
        proxy.close()
    found = read(direct, KEY)
    assert found.record is not None and found.record.throughput == 1000.0
    assert found.damage is None


def test_slow_store_bounded_retries(s3_server):
    bucket = s3_server.make_bucket()
    write_best(s3_cache(s3_server, bucket), make_record(1000.0))
    proxy = FaultProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1]), delay_s=2.0)
    try:
        slow = s3_cache(s3_server, bucket, endpoint_url=proxy.endpoint_url, attempts=3,
                        read_timeout=1.0, connect_timeout=1.0)
        with pytest.raises(CacheUnavailable) as err:
            slow.get(KEY)
        assert "after 3 attempt" in str(err.value)
        assert proxy.requests == 3                  # bounded: exactly `attempts` requests
        proxy.delay_s = 0.1                         # slow but within the timeout: works
        assert read(slow, KEY).record.throughput == 1000.0
    finally:
        proxy.close()


def test_wrong_credentials_refused_without_retry_and_without_leaking(s3_server):
    bucket = s3_server.make_bucket()
    proxy = FaultProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1]))
    try:
        client = s3_server.client(endpoint_url=proxy.endpoint_url, access_key="wrong-key",
                                  secret_key="wrong-secret-value", max_attempts=1)
        cache = S3Cache(bucket, "x", client=client, attempts=3, backoff_s=0.05)
        with pytest.raises(CacheUnavailable) as err:
            cache.get(KEY)
        assert "access denied" in str(err.value) and "credentials" in str(err.value)
        assert proxy.requests == 1                  # a refusal is not retried
        assert "wrong-secret-value" not in str(err.value) and SECRET_KEY not in str(err.value)
        with pytest.raises(CacheUnavailable):
            write_best(cache, make_record())
    finally:
        proxy.close()


def test_missing_bucket(s3_server):
    cache = s3_cache(s3_server, "no-such-bucket-intune")
    for op in (lambda: cache.get(KEY), lambda: write_best(cache, make_record())):
        with pytest.raises(CacheUnavailable) as err:
            op()
        assert "does not exist" in str(err.value)


def test_unreachable_endpoint_nothing_listening():
    import boto3
    from botocore.config import Config

    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    client = boto3.client("s3", endpoint_url=f"http://127.0.0.1:{port}", region_name="us-east-1",
                          aws_access_key_id="a", aws_secret_access_key="b",
                          config=Config(connect_timeout=0.5, retries={"max_attempts": 1}))
    cache = S3Cache("some-bucket", client=client, attempts=2, backoff_s=0.01)
    with pytest.raises(CacheUnavailable):
        cache.get(KEY)


# -- SIGKILL in the middle of a local write ---------------------------------------------------
KILLED_WRITER = textwrap.dedent("""
    import os, sys, time
    from pathlib import Path
    from intune_flow.cache import LocalCache
    from intune_flow.cache.records import write_best
    from tests.test_faults_cache import big_record
    import intune_flow.cache.local as local

    root, ready, phase = sys.argv[1], Path(sys.argv[2]), sys.argv[3]
    real_fdopen = os.fdopen

    class HalfFile:
        # writes half the bytes, signals, then hangs: killed mid-write of the temp file
        def __init__(self, fh): self.fh = fh
        def __enter__(self): return self
        def __exit__(self, *a): return self.fh.__exit__(*a)
        def write(self, data):
            self.fh.write(data[: len(data) // 2]); self.fh.flush()
            ready.touch(); time.sleep(600)
        def __getattr__(self, name): return getattr(self.fh, name)

    def hang(*a, **k):
        ready.touch(); time.sleep(600)

    if phase == "write":
        local.os.fdopen = lambda fd, mode: HalfFile(real_fdopen(fd, mode))
    elif phase == "before_rename":
        local.os.replace = hang          # temp file complete and fsynced, not renamed
    write_best(LocalCache(root), big_record(9999.0))
""")


@pytest.mark.parametrize("phase", ["write", "before_rename"])
def test_sigkill_mid_local_write_keeps_previous_record(tmp_path, phase):
    root = tmp_path / "cache"
    cache = LocalCache(root)
    write_best(cache, make_record(1000.0))
    before = cache.get(KEY)
    ready = tmp_path / "ready"
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, str(root), str(ready), phase],
                            cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT)),
                            stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 120
        while not ready.exists():
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert list(root.rglob(".tmp-*"))          # it really was mid-write
        proc.send_signal(signal.SIGKILL)
        proc.wait(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert cache.get(KEY) == before
    assert decode(cache.get(KEY)[0]).throughput == 1000.0
    assert cache.list() == [KEY]                    # the orphan temp file is not a record
    assert write_best(cache, make_record(2000.0)).action == "replaced"   # and the lock is free


# -- the same faults seen from tune(): a warning, the local fallback, training goes on ---------
@pytest.mark.parametrize("fault", ["slow", "denied", "no_bucket"])
def test_tune_survives_store_faults(s3_server, tmp_path, monkeypatch, caplog, fault):
    import logging

    from intune_flow.tune import tune

    local = tmp_path / "local"
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(local))
    bucket = s3_server.make_bucket()
    proxy = FaultProxy(int(s3_server.endpoint_url.rsplit(":", 1)[1]),
                       delay_s=2.0 if fault == "slow" else 0.0)
    try:
        # only the slow store times out: a loaded machine's seaweedfs can take 0.5 s too
        timeout = 0.5 if fault == "slow" else 10.0
        kw = dict(endpoint_url=proxy.endpoint_url, read_timeout=timeout, connect_timeout=timeout)
        if fault == "denied":
            kw.update(access_key="intruder", secret_key="not-the-secret")
        cache = s3_cache(s3_server, "no-such-bucket-here" if fault == "no_bucket" else bucket,
                         attempts=2, **kw)
        with caplog.at_level(logging.WARNING, logger="intune_flow"):
            result = tune("tests.test_tune:tiny_pipeline", budget_s=4, cache=cache, window_s=0.3,
                          progress=False, seed=0, method="heuristic")   # always written
    finally:
        proxy.close()
    assert result.source == "tuned" and result.throughput > 0
    assert result.cache_uri == str(local)
    fallback = [w for w in result.warnings if "local fallback cache" in w]
    assert fallback, result.warnings
    assert {"slow": "unavailable after 2 attempt", "denied": "access denied",
            "no_bucket": "does not exist"}[fault] in fallback[0]
    assert "continuing with the local fallback cache" in caplog.text
    assert read(LocalCache(local), result.cache_key).record is not None
    next(iter(result.build()))
    if fault == "slow":
        assert proxy.requests <= 2 * 3    # bounded: get, maybe list, put; 2 attempts each at most
