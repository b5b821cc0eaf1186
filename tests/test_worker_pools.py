"""The WorkerPool contract (intune_flow/scaleout/pools/base.py), written once, run against the
local-process pool and the Ray pool: real DispatchServer in this process, real WorkerServer
processes / Ray actors on loopback, a real local Ray. Nothing mocked."""

from __future__ import annotations

import collections
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time

import psutil
import pytest

from benchmarks.worker_loss import read_until
from intune_flow.errors import OptionsError, PipelineError, WorkerPoolError
from intune_flow.scaleout.pools import (LocalProcessPool, PoolSpec, RayPool, WorkerPool,
                                        cpu_share, make_pool, parse_pool_spec)

tf = pytest.importorskip("tensorflow")
service = tf.data.experimental.service
REGISTER_S = 180     # generous: two TensorFlow imports on 2 busy cores took up to a minute


def _worker_procs(pid: int | None = None) -> list[psutil.Process]:
    """The worker processes below ``pid`` (default: this process)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if any("intune_flow.scaleout.worker" in part for part in child.cmdline()):
                found.append(child)
        except psutil.Error:
            pass
    return found


def _gone(pids, timeout=20.0) -> list[int]:
    """The pids of ``pids`` still alive after ``timeout`` (zombies count as gone)."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for pid in pids:
            try:
                if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                    alive.append(pid)
            except psutil.NoSuchProcess:
                pass
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.2)


def _make(kind: str, max_workers: int = 2, **kwargs) -> WorkerPool:
    kwargs.setdefault("registration_timeout_s", REGISTER_S)
    if kind == "local":
        return LocalProcessPool(max_workers=max_workers, **kwargs)
    pytest.importorskip("ray")
    return RayPool(max_workers=max_workers, num_cpus=max_workers, **kwargs)


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.slow)])
def kind(request):
    return request.param


def _assert_nothing_left(kind, pids, temp_dir=None):
    assert _gone(pids) == [], f"{kind} workers left running: {pids}"
    if kind == "local":
        assert [p.pid for p in _worker_procs()] == []
    else:
        import ray

        assert not ray.is_initialized()
        assert temp_dir is not None and not os.path.exists(temp_dir)
        ray_procs = [c.pid for c in psutil.Process().children(recursive=True)
                     if any("ray" in part for part in _cmdline(c))]
        assert _gone(ray_procs) == [], f"Ray processes left: {ray_procs}"


def _cmdline(proc) -> list[str]:
    try:
        return proc.cmdline()
    except psutil.Error:
        return []


def _worker_children(pid: int, timeout: float = 30.0) -> list[int]:
    """The pids of the workers below ``pid`` (:func:`_worker_procs`), polled until one shows:
    one CI run on a loaded machine found none right after the launch returned (not traced;
    the worker's command line is read from /proc, and an unreadable one counts as not a
    worker)."""
    deadline = time.monotonic() + timeout
    while True:
        found = [c.pid for c in _worker_procs(pid)]
        if found or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def _children_seen(pid: int) -> list:
    """What ``pid``'s children are, for an assertion message."""
    out = []
    for c in psutil.Process(pid).children():
        try:
            out.append((c.pid, c.status(), _cmdline(c)))
        except psutil.Error as e:
            out.append((c.pid, repr(e)))
    return out


def _read(pool, mode, n):
    ds = tf.data.Dataset.range(n).apply(service.distribute(processing_mode=mode,
                                                           service=pool.target))
    return [int(x) for x in ds.as_numpy_iterator()]


@pytest.mark.slow
def test_pool_contract(kind):
    """Start 2, registered; every record arrives in both modes; resize down and up; stop."""
    pool = _make(kind, 2)
    with pool:
        assert pool.start(2) is pool
        assert pool.workers == 2 and pool.registered() >= 2
        infos = pool.worker_info
        assert len(infos) == 2 and all(i.address and i.pid for i in infos)
        assert len({i.address for i in infos}) == 2
        if kind == "local":
            assert [i.cores for i in infos] == [cpu_share(0, 1), cpu_share(1, 1)]
            for info in infos:
                assert psutil.Process(info.pid).cpu_affinity() == list(info.cores)
        assert pool.target.startswith("grpc://")

        # parallel_epochs: every worker runs the whole dataset -> each record once per worker
        counts = collections.Counter(_read(pool, "parallel_epochs", 300))
        assert set(counts) == set(range(300)) and set(counts.values()) == {2}
        # distributed_epoch: one epoch split across the workers -> each record exactly once
        assert sorted(_read(pool, "distributed_epoch", 300)) == list(range(300))

        first = infos[0].pid
        pool.resize(1)
        assert pool.workers == 1 and _gone([infos[1].pid]) == []
        pool.resize(2)
        assert pool.workers == 2 and pool.worker_info[0].pid == first
        pids = [i.pid for i in pool.worker_info] + [infos[1].pid]
        temp_dir = getattr(pool, "_temp_dir", None)
    _assert_nothing_left(kind, pids, temp_dir)
    assert pool.workers == 0
    with pytest.raises(WorkerPoolError, match="stopped"):
        pool.start(1)


@pytest.mark.slow
def test_exception_inside_with_stops_every_worker(kind):
    pool = _make(kind, 1)
    with pytest.raises(RuntimeError, match="boom"):
        with pool:
            pool.start(1)
            pids = [i.pid for i in pool.worker_info]
            temp_dir = getattr(pool, "_temp_dir", None)
            raise RuntimeError("boom")
    _assert_nothing_left(kind, pids, temp_dir)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_worker_that_never_registers_times_out_clearly():
    """Workers pointed at an address nothing listens on: a clear error within the bound."""
    pool = LocalProcessPool(max_workers=1, registration_timeout_s=4,
                            dispatcher_address=f"127.0.0.1:{_free_port()}")
    t0 = time.monotonic()
    with pytest.raises(WorkerPoolError) as err:
        with pool:
            pool.start(1)
    assert time.monotonic() - t0 < 4 + 15          # the bound, plus stopping the worker
    text = str(err.value)
    assert "registration_timeout_s=4 s" in text and "did not register" in text
    assert "dispatcher_address=" in text             # the fix
    assert _worker_procs() == []


def test_bad_sizes_are_options_errors():
    with pytest.raises(OptionsError, match="max_workers"):
        LocalProcessPool(max_workers=0)
    pool = LocalProcessPool(max_workers=1)
    with pytest.raises(OptionsError, match="0 to max_workers=1"):
        pool.resize(2)
    pool.stop()


@pytest.mark.slow
def test_worker_killed_mid_epoch():
    """SIGKILL one of two workers mid-epoch, in each mode; assert what the service guarantees:

    * parallel_epochs: the surviving worker still delivers its whole epoch (every record at
      least once) and reading goes on; the end of the epoch waits for the lost worker;
    * distributed_epoch: no record twice (at-most-once); the survivor keeps taking splits;
      records the lost worker had taken are missing.
    """
    from tensorflow.python.data.experimental.ops import testing

    n = 6000
    with LocalProcessPool(max_workers=2, registration_timeout_s=REGISTER_S) as pool:
        for mode in ("parallel_epochs", "distributed_epoch"):
            pool.resize(2)                               # restores the one killed before
            victim = pool.worker_info[0].pid
            ds = tf.data.Dataset.range(n).apply(testing.sleep(300)).apply(
                service.distribute(processing_mode=mode, service=pool.target))
            killed = {}

            def stop_when(seen, mode=mode, victim=victim, killed=killed):
                if len(seen) == 500 and not killed:
                    os.kill(victim, signal.SIGKILL)
                    killed["at"] = len(seen)
                return mode == "parallel_epochs" and len(set(seen)) == n

            # distributed_epoch ends by a stall (the epoch waits for the lost worker): 10 s of
            # no record, longer than a loaded machine's pauses in the survivor's reads
            seen, ended = read_until(ds, stop_when, 120, stall_s=10)
            assert killed and _gone([victim]) == []
            assert pool.workers == 1, mode
            if mode == "parallel_epochs":
                assert set(seen) == set(range(n))
            else:
                assert len(seen) == len(set(seen)) and set(seen) <= set(range(n))
                assert len(seen) >= 500 + 1000       # the survivor kept taking splits
            print(f"{mode}: {len(seen)} records read, {len(set(seen))} distinct of {n}, "
                  f"epoch ended: {ended}")
    assert _worker_procs() == []


@pytest.mark.slow
def test_sigterm_of_the_process_stops_its_workers(tmp_path):
    script = textwrap.dedent("""
        import sys, time
        from intune_flow.scaleout.pools import LocalProcessPool
        with LocalProcessPool(max_workers=1, registration_timeout_s=%d) as pool:
            pool.start(1)
            print("PIDS", pool.worker_info[0].pid, flush=True)
            time.sleep(600)
    """ % REGISTER_S)
    _sigterm_stops_the_worker(script, settle_s=0, exit_within_s=30)


def _sigterm_stops_the_worker(script: str, *, settle_s: float, exit_within_s: float) -> None:
    """Run ``script`` (it prints "PIDS <worker pid>" once its pool runs), send it SIGTERM
    ``settle_s`` later: it must exit with 143 and take its worker with it."""
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        line = proc.stdout.readline()
        assert line.startswith("PIDS"), line
        worker = int(line.split()[1])
        assert psutil.pid_exists(worker)
        time.sleep(settle_s)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=exit_within_s) == 143
        assert _gone([worker]) == []
    finally:
        proc.kill()
        proc.wait()


@pytest.mark.slow
def test_sigterm_ends_a_process_whose_main_thread_is_stuck_in_a_tf_data_read():
    """No Python handler runs while the main thread waits in native code: the watcher
    thread stops the workers and ends the process after the grace period."""
    script = textwrap.dedent("""
        import time
        import tensorflow as tf
        from intune_flow.scaleout.pools import LocalProcessPool, base
        base.SIGTERM_GRACE_S = 1.0
        with LocalProcessPool(max_workers=1, registration_timeout_s=%d) as pool:
            pool.start(1)
            stuck = tf.data.Dataset.range(1).map(
                lambda x: tf.py_function(lambda v: time.sleep(600) or v, [x], tf.int64))
            print("PIDS", pool.worker_info[0].pid, flush=True)
            next(iter(stuck))      # the main thread waits in TensorFlow's C++
    """ % REGISTER_S)
    _sigterm_stops_the_worker(script, settle_s=1, exit_within_s=60)   # 1 s: into the read


@pytest.mark.slow
def test_sigkill_of_the_parent_kills_its_workers(tmp_path, monkeypatch):
    """PR_SET_PDEATHSIG: a parent killed with no chance to clean up takes its workers; the
    temp dir it could not remove goes when the next pool opens."""
    script = textwrap.dedent("""
        import sys, time
        from intune_flow.scaleout.pools import LocalProcessPool
        pool = LocalProcessPool(max_workers=1, registration_timeout_s=%d)
        pool.open()
        pool._launch(__import__("intune_flow.scaleout.pools", fromlist=["WorkerInfo"]).WorkerInfo(0))
        print("UP", flush=True)
        time.sleep(600)
    """ % REGISTER_S)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "TMPDIR": str(tmp_path)})
    try:
        assert proc.stdout.readline().startswith("UP")
        workers = _worker_children(proc.pid)
        assert len(workers) == 1, _children_seen(proc.pid)
        proc.kill()
        proc.wait()
        assert _gone(workers) == []
    finally:
        proc.kill()
        proc.wait()
    import tempfile
    stale = list(tmp_path.glob(f"intune-workers-{proc.pid}-*"))
    assert len(stale) == 1                      # SIGKILL left it
    alive = tmp_path / f"intune-workers-{os.getpid()}-x"      # a running owner's: kept
    alive.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    with LocalProcessPool(max_workers=1):
        assert not stale[0].exists() and alive.exists()
        assert len(list(tmp_path.glob(f"intune-workers-{os.getpid()}-*"))) == 2   # its own
    assert [p.name for p in tmp_path.glob("intune-workers-*")] == [alive.name]


# -- the py_function check --------------------------------------------------------------------
def test_python_stage_on_the_worker_side_is_refused_naming_it():
    from intune_flow.scaleout.worker_side import check_worker_side

    def decode_row(x):
        return x * 2

    def parse(x):
        return tf.py_function(decode_row, [x], tf.int64)

    ds = (tf.data.Dataset.range(10).map(lambda x: x + 1)
          .map(lambda x: tf.numpy_function(decode_row, [x], tf.int64)).batch(2))
    with pytest.raises(PipelineError) as err:
        check_worker_side(ds)
    text = str(err.value)
    # Named as the factory wrote it, with tf.data's graph node beside it.
    assert "map(lambda) calls tf.numpy_function (graph node MapDataset" in text
    assert "trainer side" in text and "TF ops" in text
    eager = tf.data.Dataset.range(4).map(parse, num_parallel_calls=2)
    with pytest.raises(PipelineError, match=r"map\(parse\) calls tf.py_function \(graph node "
                                            r"ParallelMapDataset"):
        check_worker_side(eager)
    nested = tf.data.Dataset.range(4).interleave(
        lambda x: tf.data.Dataset.from_tensors(x).map(
            lambda y: tf.numpy_function(decode_row, [y], tf.int64)))
    with pytest.raises(PipelineError, match=r"map\(lambda\) calls tf.numpy_function \(graph "
                                            r"node InterleaveDataset"):
        check_worker_side(nested)     # found inside the interleave's own function


def test_pure_tf_pipeline_passes_the_check():
    from intune_flow.scaleout.worker_side import check_worker_side

    ds = (tf.data.Dataset.range(100).map(lambda x: tf.strings.as_string(x))
          .map(lambda s: tf.strings.to_hash_bucket_fast(s, 1000))
          .shuffle(10).batch(8).prefetch(2))
    check_worker_side(ds)


# -- specs ----------------------------------------------------------------------------------
@pytest.mark.parametrize("text, spec", [
    ("local:4", PoolSpec("local", 4, 1)),
    ("local:4x1", PoolSpec("local", 4, 1)),
    (" LOCAL:3x2 ", PoolSpec("local", 3, 2)),
    ("ray:8x2", PoolSpec("ray", 8, 2)),
    ("ray:8", PoolSpec("ray", 8, 1)),
    ("ray://head.example:10001:8", PoolSpec("ray", 8, 1, "ray://head.example:10001")),
    ("ray://10.0.0.5:10001:32x4", PoolSpec("ray", 32, 4, "ray://10.0.0.5:10001")),
])
def test_parse_pool_spec(text, spec):
    assert parse_pool_spec(text) == spec
    assert parse_pool_spec(str(spec)) == spec


@pytest.mark.parametrize("text", ["", "local", "local:0", "local:4x0", "local:-1", "k8s:4",
                                  "ray:x2", "ray://host:8", "local:4x1x2", None, 4])
def test_bad_pool_spec_is_an_options_error_naming_the_fix(text):
    with pytest.raises(OptionsError) as err:
        parse_pool_spec(text, name="workers")
    assert "workers=" in str(err.value) and "local:4x1" in str(err.value)


def test_make_pool_builds_each_kind_without_starting_anything():
    local = make_pool("local:3x2", registration_timeout_s=5)
    assert isinstance(local, LocalProcessPool)
    assert (local.max_workers, local.cores_per_worker, local.registration_timeout_s) == (3, 2, 5)
    remote = make_pool("ray://head:10001:8x4")
    assert isinstance(remote, RayPool) and remote.address == "ray://head:10001"
    assert (remote.max_workers, remote.num_cpus_per_worker) == (8, 4)
    assert make_pool(local) is local
    with pytest.raises(OptionsError):
        make_pool("nope")
    assert _worker_procs() == []


def test_cpu_share_round_robin():
    assert cpu_share(0, 1, [0, 1]) == (0,) and cpu_share(1, 1, [0, 1]) == (1,)
    assert cpu_share(2, 1, [0, 1]) == (0,)                    # 3 workers on 2 cores share
    assert cpu_share(1, 2, [0, 1, 2, 3]) == (2, 3)
    assert cpu_share(1, 2, [0, 1, 2]) == (0, 2)


# -- Ray: missing, unreachable ------------------------------------------------------------------
def test_ray_not_installed_is_a_clear_error():
    code = textwrap.dedent("""
        import sys
        sys.modules["ray"] = None
        from intune_flow.errors import WorkerPoolError
        from intune_flow.scaleout.pools import make_pool
        try:
            make_pool("ray:2x1").start(1)
        except WorkerPoolError as exc:
            print("ERR", exc)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=120)
    assert "ERR Ray is not installed" in out.stdout, out.stderr[-2000:]
    assert "pip install 'intune-flow[ray]'" in out.stdout


@pytest.mark.slow
def test_unreachable_ray_cluster_is_a_clear_error():
    pytest.importorskip("ray")
    pool = RayPool(address=f"ray://127.0.0.1:{_free_port()}", max_workers=1)
    with pytest.raises(WorkerPoolError, match="could not connect to the Ray cluster"):
        pool.start(1)
    import ray

    assert not ray.is_initialized()
    # ...and it leaves the process able to start a local Ray (a failed ray:// connect used to
    # leave Ray's client mode on, which failed the next local start).
    from ray._private import client_mode_hook

    assert not client_mode_hook.is_client_mode_enabled
