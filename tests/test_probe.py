"""The probe: figures that move with the pipeline's physics, and every early-stop status."""

import gc
import json
import subprocess
import sys
import threading
import time
import weakref

import numpy as np
import pytest
import tensorflow as tf

from intune_flow import KnobError
from intune_flow.env import TuningEnv
from intune_flow.pipeline import Pipeline
from intune_flow.probe import probe
from intune_flow.real_env import PipelineEnv
from intune_flow.resources import RSS_MARGIN, current_rss
from tests.concurrency import InFlight

RELEASE = threading.Event()  # set at the end of the session: unblocks "forever" stages


@pytest.fixture(autouse=True, scope="module")
def _release_blocked_threads():
    # Cleared on every setup: under pytest-xdist a worker may tear this module down, run
    # another, and come back to it, and a set event no longer blocks anything.
    RELEASE.clear()
    yield
    RELEASE.set()


def sleepy(knobs, delay_ms=5.0, batch_size=16, n=None, in_flight=None):
    """Each element costs one blocking ``delay_ms`` call: parallelism (and threads) pay."""
    def work(i):
        if in_flight is None:
            time.sleep(delay_ms / 1000.0)
        else:
            with in_flight:
                time.sleep(delay_ms / 1000.0)
        return np.full([4], i, dtype=np.float32)

    ds = tf.data.Dataset.range(n if n is not None else 10**9)
    ds = ds.map(lambda i: tf.reshape(tf.numpy_function(work, [i], tf.float32), [4]),
                num_parallel_calls=knobs.parallelism("read", max=64))
    return ds.batch(batch_size).prefetch(knobs.buffer("prefetch", max=8))


def blocks_forever(knobs):
    def wait(i):
        RELEASE.wait()
        return i

    ds = tf.data.Dataset.range(10).map(lambda i: tf.numpy_function(wait, [i], tf.int64),
                                       num_parallel_calls=knobs.parallelism("map"))
    return ds.batch(2)


def hangs_in_factory(knobs):
    knobs.parallelism("read")
    RELEASE.wait()
    return tf.data.Dataset.range(3)


def fails_on_element(knobs):
    def bad(i):
        if i >= 5:
            raise ValueError("corrupt record at offset 5")
        return i

    ds = tf.data.Dataset.range(10**6).map(lambda i: tf.numpy_function(bad, [i], tf.int64),
                                          num_parallel_calls=knobs.parallelism("map"))
    return ds.batch(1)


LEAKED = []


def leaky(knobs):
    """Keeps 8 MiB per element forever: a pipeline that leaks memory, at most ~270 MiB/s (so
    the guard's look-ahead, 0.25 s at most, spans under 70 MiB however late its sampler)."""
    def leak(i):
        LEAKED.append(np.ones(2**20, dtype=np.float64))
        time.sleep(0.03)
        return i

    ds = tf.data.Dataset.range(10**9).map(lambda i: tf.numpy_function(leak, [i], tf.int64),
                                          num_parallel_calls=knobs.parallelism("map"))
    return ds.batch(1)


def _probe_threads():
    return [t for t in threading.enumerate() if t.name == "intune-flow-probe" and t.is_alive()]


def test_measurement_fields_and_release():
    abandoned_earlier = set(_probe_threads())  # hung workers other tests abandoned on purpose
    m = probe(sleepy, {"read": 4}, window_s=1.0, warmup_s=0.2)
    assert m.status == "ok" and m.error is None
    assert m.config == {"read": 4, "prefetch": 1, "threadpool": -1}
    assert m.records_per_s == pytest.approx(16 * m.elements_per_s, rel=0.01)
    assert m.throughput == m.records_per_s > 0
    assert 0 < m.cpu_util and m.peak_rss >= 100 * 2**20 and m.spread >= 0
    assert m.seconds >= 1.2
    assert not set(_probe_threads()) - abandoned_earlier, "the probe left its worker running"


def test_parallelism_and_threadpool_put_blocking_calls_in_flight_together():
    # What the knobs do to a latency-bound stage: how many 5 ms calls wait at once. (What
    # that is worth in records/s is the benchmarks' business: benchmarks/real_pipelines.py.)
    def peak_in_flight(config):
        calls = InFlight()
        p = Pipeline(lambda knobs: sleepy(knobs, in_flight=calls))
        p.stages        # located by builds with other values of each knob: not counted
        calls.reset()
        m = probe(p, config, window_s=1.0, warmup_s=0.2)
        assert m.ok, m.error
        return calls.peak

    assert peak_in_flight({"read": 1, "threadpool": 1}) == 1
    assert 4 <= peak_in_flight({"read": 16, "threadpool": 16}) <= 16   # <= num_parallel_calls


class _Cycle:
    """An object only the cyclic garbage collector frees: it refers to itself."""

    def __init__(self):
        self.me = self


def test_the_probe_collects_what_it_built_and_leaves_the_collector_as_it_found_it():
    # The probe keeps the objects alive before it out of its collection (gc.freeze) and
    # puts them back after; what its build made is collected, a caller's freeze stays.
    built = []

    def cyclic(knobs):
        holder = _Cycle()
        built.append(weakref.ref(holder))
        return sleepy(knobs)

    p = Pipeline(cyclic)
    p.stages        # discovery's builds, before the probe: not what this test counts
    seen = len(built)
    assert gc.get_freeze_count() == 0, "something else froze the heap before this test"
    m = probe(p, {"read": 2}, window_s=0.5, warmup_s=0.1)
    assert m.ok, m.error
    assert len(built) > seen and all(ref() is None for ref in built[seen:]), \
        "a cycle the probe's build made outlived the probe"
    assert gc.get_freeze_count() == 0 and gc.isenabled(), "the probe left the heap frozen"

    gc.freeze()     # a caller's own freeze (as before forking workers) is not undone
    try:
        assert probe(p, {"read": 2}, window_s=0.5, warmup_s=0.1).ok
        assert gc.get_freeze_count() > 0, "the probe undid its caller's gc.freeze()"
    finally:
        gc.unfreeze()


@pytest.mark.timeout(120)   # a window the test never waits out: only an early stop passes
def test_a_config_is_not_run_when_the_process_is_already_past_the_ram_budget():
    # What an earlier config's leak leaves behind: running this one would only add to it.
    calls = []

    def counted(knobs):
        ds = tf.data.Dataset.range(10**9).map(
            lambda i: tf.numpy_function(lambda x: calls.append(x) or x, [i], tf.int64),
            num_parallel_calls=knobs.parallelism("read", max=8))
        return ds.batch(16)

    pipeline = Pipeline.load(counted)
    pipeline.describe()     # discovery reads a few elements; the config's run would read more
    calls.clear()
    held = current_rss()
    m = probe(pipeline, {"read": 4}, window_s=3600, ram_budget=held // 2)
    assert m.status == "oom" and "already past the RAM budget" in m.error
    assert "raise ram_budget" in m.error and m.config["read"] == 4
    assert calls == [] and m.peak_rss >= held // 2


def test_oom_stops_a_leaking_pipeline_within_budget_plus_margin():
    budget = current_rss() + 300 * 2**20
    try:
        m = probe(leaky, window_s=30, ram_budget=budget, timeout_s=10)
    finally:
        LEAKED.clear()
    assert m.status == "oom" and "RAM budget" in m.error
    # stopped near the budget (the growth projection looks 0.25 s ahead at most), not past
    # it by more than the margin
    assert budget - 150 * 2**20 < m.peak_rss <= budget * (1 + RSS_MARGIN)


# Two threads hashing 1 MiB buffers (hashlib lets go of the GIL): two busy cores.
HOG = """
import hashlib, os, threading
buf = b"x" * (1 << 20)
def spin():
    while True:
        hashlib.sha256(buf).digest()
threads = [threading.Thread(target=spin) for _ in range(max(2, len(os.sched_getaffinity(0))))]
for t in threads:
    t.start()
print("spinning", flush=True)
"""
"""Another process that keeps every core of this one's busy (hashlib releases the GIL)."""


def leaky_parallel(knobs):
    """8 MiB kept per element from four parallel Python calls: as fast as this machine leaks."""
    ds = tf.data.Dataset.range(10**9).map(
        lambda i: tf.numpy_function(lambda j: LEAKED.append(np.ones(2**20)) or j, [i], tf.int64),
        num_parallel_calls=knobs.parallelism("map", max=4, default=4))
    return ds.batch(1)


def filling_buffer(knobs):
    """4 MiB elements made by TensorFlow's own threads into a deep prefetch buffer (no
    Python, no GIL): the buffer grows while the sampler waits for a core."""
    ds = tf.data.Dataset.range(10**9).map(lambda i: tf.fill([2**20], tf.cast(i, tf.float32)),
                                          num_parallel_calls=2)
    return ds.prefetch(100_000)


def _kernel_peak_rss(reset: bool = False) -> int:
    """The kernel's own high-water mark of this process's RSS (VmHWM): exact, not sampled.
    ``reset``: set it to the current RSS first (``/proc/self/clear_refs``, Linux >= 4.0)."""
    if reset:
        with open("/proc/self/clear_refs", "w") as fh:
            fh.write("5")
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    raise OSError("no VmHWM in /proc/self/status")


# filling_buffer is left out: its buffer grows only while TensorFlow's producers outrun the
# probe's consumer, which a quiet machine does not guarantee (a CI run read "ok": the buffer
# never filled), so as a test it could not fail for the right reason.
@pytest.mark.parametrize("pipeline", [leaky_parallel])
def test_the_ram_guard_holds_its_margin_beside_a_cpu_hog(pipeline):
    """Another process keeps two threads busy on the same cores (README: once 25% over)."""
    try:
        _kernel_peak_rss(reset=True)
    except OSError as exc:
        pytest.skip(f"the kernel's peak RSS cannot be reset here ({exc})")
    hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL)
    try:
        budget = current_rss() + 300 * 2**20
        _kernel_peak_rss(reset=True)
        started = time.perf_counter()
        m = probe(pipeline, window_s=30, ram_budget=budget, timeout_s=20)
        peak = _kernel_peak_rss()
        stopped = time.perf_counter()
    finally:
        hog.kill()
        hog.wait(10)
        LEAKED.clear()
    assert hog.returncode is not None
    assert m.status == "oom", (m.status, m.error)
    grown = peak - (budget - 300 * 2**20)
    print(f"{pipeline.__name__}: kernel peak {peak / budget:.3f} of the budget; {m.error}")
    assert peak <= budget * (1 + RSS_MARGIN), (peak / 2**20, budget / 2**20, m.error)


def test_cores_another_process_keeps_busy_are_not_read_as_cores_to_spare():
    """A probe beside a process spinning on all its cores uses little CPU itself (its stage
    sleeps), yet the machine left it no idle core: the tuner's "CPU to spare" rules read
    ``cpu_busy``, not ``cpu_util`` alone."""
    hog = subprocess.Popen([sys.executable, "-c", HOG], stdin=subprocess.DEVNULL,
                           stdout=subprocess.PIPE, text=True)
    try:
        assert hog.stdout.readline().strip() == "spinning"
        m = probe(sleepy, {"read": 2}, window_s=1.0, warmup_s=0.2)
    finally:
        hog.kill()
        hog.wait(10)
        hog.stdout.close()
    assert m.status == "ok", m.error
    if m.machine_busy is None:
        pytest.skip("/proc/stat does not list the CPUs this process may run on")
    assert m.machine_busy > 0.8 > m.cpu_util, (m.machine_busy, m.cpu_util)
    assert m.cpu_busy == m.machine_busy
    assert m.to_dict()["machine_busy"] == m.machine_busy     # kept in histories and records


WORKER_HOLDS: list = []   # filled inside each forked worker process only


def _hold_and_work(i, hold_mib=0):
    if hold_mib and not WORKER_HOLDS:
        WORKER_HOLDS.append(np.ones(hold_mib * 2**20 // 8))    # touched: resident
    return float(np.sort(np.random.default_rng(i).random(50_000))[0])   # ~5 ms of CPU


def process_workers(knobs, hold_mib=0):
    """torchdata with process workers (forked): their CPU and memory are not this process's."""
    import functools

    nodes = pytest.importorskip("torchdata.nodes")
    node = nodes.ParallelMapper(nodes.IterableWrapper(range(10**9)),
                                functools.partial(_hold_and_work, hold_mib=hold_mib),
                                num_workers=knobs.parallelism("map", max=4), method="process")
    return nodes.Batcher(node, batch_size=8)


def test_process_workers_count_in_cpu_and_in_the_ram_guard():
    busy = probe(process_workers, {"map": 2}, window_s=1.5, warmup_s=0.5)
    assert busy.status == "ok", busy.error
    # Two busy workers on the budget's cores read ~0.5-1.0 on an idle machine and 0.02 if
    # their CPU went unseen; 0.1 leaves room for a machine other jobs keep busy.
    assert busy.cpu_util > 0.1
    # Each worker holds 400 MiB of its own: the guard sees them and stops the config.
    budget = current_rss() + 300 * 2**20
    held = probe(lambda knobs: process_workers(knobs, hold_mib=400), {"map": 2},
                 window_s=3, warmup_s=0.5, ram_budget=budget, timeout_s=20)
    assert held.status == "oom", (held.status, held.peak_rss / 2**20, budget / 2**20)


def test_process_workers_stop_when_a_built_node_is_released():
    # What the README tells a user measuring ``result.build()`` in a loop of their own:
    # dropping the node and its iterator stops the workers, with no gc pass needed.
    import multiprocessing as mp
    before = len(mp.active_children())
    node = Pipeline.load(process_workers).build({"map": 2})
    it = iter(node)
    next(it)
    assert len(mp.active_children()) >= before + 2
    del it, node
    deadline = time.monotonic() + 30
    while len(mp.active_children()) > before and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(mp.active_children()) <= before


def test_timeout_when_a_stage_blocks_forever():
    m = probe(blocks_forever, window_s=1, timeout_s=1.5)
    assert m.status == "timeout" and "no first element within 1.5 s" in m.error
    assert "a stage blocks" in m.error and "a filter drops everything" in m.error


def test_timeout_when_the_factory_hangs():
    m = probe(hangs_in_factory, window_s=1, timeout_s=1.0)
    assert m.status == "timeout" and "did not return within 1 s" in m.error


def test_error_when_the_pipeline_raises_keeps_message():
    m = probe(fails_on_element, window_s=1)
    assert m.status == "error" and "corrupt record at offset 5" in m.error


def test_error_when_the_factory_raises():
    def factory(knobs):
        raise OSError("no such file: shard-0")

    m = probe(factory, window_s=1)
    assert m.status == "error" and "no such file: shard-0" in m.error


def test_a_finite_dataset_is_measured_over_epochs_and_an_empty_one_is_reported():
    # 40 records of 5 ms each with 4 calls: an epoch of ~50 ms, far shorter than the window.
    m = probe(lambda knobs: sleepy(knobs, n=40), {"read": 4}, window_s=1.0, warmup_s=0.1)
    assert m.status == "ok", m.error
    # Counted over epochs, the 1 s window holds more than one epoch's 40 records (one read
    # at a time alone gives ~200); four 5 ms calls at a time cannot pass ~800/s.
    records_in_window = m.records_per_s * 1.0
    assert 40 < records_in_window < 1000
    # Signals span the epochs (before, a window across epochs reported none): the blocking
    # stage is the bottleneck, its calls busy, within each epoch.
    assert m.stage_signals.get("read", 0.0) >= 0.2, m.stage_signals
    nothing = probe(lambda knobs: sleepy(knobs, n=0), window_s=1)
    assert nothing.status == "empty" and "yielded no elements" in nothing.error


def test_a_finite_torchdata_node_is_read_again_and_a_one_shot_source_is_reported():
    nodes = pytest.importorskip("torchdata.nodes")

    def finite(knobs, source=lambda: range(64)):
        node = nodes.ParallelMapper(nodes.IterableWrapper(source()), lambda i: i * 2,
                                    num_workers=knobs.parallelism("map", max=4),
                                    method="thread")
        return nodes.Batcher(node, batch_size=8)

    m = probe(finite, window_s=0.5, warmup_s=0.1)
    assert m.status == "ok", m.error
    one_shot = probe(lambda knobs: finite(knobs, source=lambda: iter(range(64))),
                     window_s=0.5, warmup_s=0.1)
    assert one_shot.status == "empty"
    assert "ended after 8 element(s) and its next epoch yielded none" in one_shot.error


def _slow_get(key):
    time.sleep(0.03)        # a remote GET: waits, uses no CPU
    return np.int64(key)


def batched_gets(knobs, batch_size=2048):
    """30 ms GETs through numpy_function (unknown rank), then a large batch: at parallelism
    1 one element takes 61 s, far longer than a probe's window or its timeout below."""
    ds = tf.data.Dataset.range(10**9)
    ds = ds.map(lambda k: tf.numpy_function(_slow_get, [k], tf.int64),
                num_parallel_calls=knobs.parallelism("get", max=64))
    ds = ds.batch(batch_size)
    return ds.prefetch(knobs.buffer("prefetch", max=4))


def test_elements_slower_than_the_window_are_measured_from_the_stages():
    """Before, such a probe waited a whole element (here it timed out: 61 s per element, a
    20 s timeout) and otherwise reported 0 records/s with no signals (or zeros), and
    discovery waited one element per tagging build: a 20 s tune of a 100 ms GET pipeline
    under batch(256) ran 108 s and returned its start config."""
    p = Pipeline.load(batched_gets)
    desc = p.describe()
    assert desc.batched and desc.batch_size == 2048    # a batch of unknown-rank elements
    assert p.schema() == {"0": {"dtype": "int64", "shape": [None]}}
    slow = probe(p, {"get": 1, "prefetch": 1, "threadpool": 64}, window_s=0.5, warmup_s=0.1,
                 timeout_s=20)
    assert slow.ok, slow.error                      # measured before any element arrived
    assert slow.records_per_s > 0                   # counted in rows, as the output is
    assert slow.records_per_s == pytest.approx(slow.elements_per_s * 2048, rel=1e-9)
    assert slow.stage_signals["get"] >= 0.8         # its one call is always busy
    # A config fast enough to count at the output reports the same unit: rows.
    small = Pipeline.load(batched_gets, batch_size=16)
    fast = probe(small, {"get": 32, "prefetch": 2, "threadpool": 64}, window_s=0.5,
                 warmup_s=0.1)
    assert fast.ok and fast.records_per_s > 0
    assert fast.records_per_s == pytest.approx(fast.elements_per_s * 16, rel=1e-9)


def test_bad_config_and_arguments_raise():
    with pytest.raises(KnobError, match="unknown knob"):
        probe(sleepy, {"raed": 2})
    with pytest.raises(Exception, match="window_s must be a positive"):
        probe(sleepy, window_s=0)
    with pytest.raises(Exception, match="timeout_s must be a positive"):
        probe(sleepy, timeout_s=-1)
    with pytest.raises(Exception, match="cpu_budget must be a positive number of cores"):
        probe(sleepy, cpu_budget=0)
    with pytest.raises(Exception, match="ram_budget is not a memory size"):
        probe(sleepy, ram_budget=-5)


def test_pipeline_env_is_a_tuning_env_and_measures_concrete_configs():
    env = PipelineEnv(sleepy, cpu_budget=2, ram_budget="64GiB", window_s=0.5, warmup_s=0.1)
    assert isinstance(env, TuningEnv)
    assert env.space.names == ("read", "prefetch", "threadpool")
    assert env.cpu_budget == 2.0 and env.ram_budget == 64 * 2**30
    concrete = env.space.concretize(env.space.autotune(), env.cpu_budget)
    m = env.measure(concrete)
    assert m.ok and m.config == concrete and env.clock() >= 0.6
    with pytest.raises(Exception, match="cpu_budget must be a positive"):
        PipelineEnv(sleepy, cpu_budget=0)
    with pytest.raises(Exception, match="not a memory size"):
        PipelineEnv(sleepy, ram_budget="lots")


def test_cli_probe_json_and_errors(capsys):
    from intune_flow.cli import main

    args = ["probe", "tests.test_probe:sleepy", "--window-s", "0.5", "--warmup-s", "0.1"]
    # The real entry point once; the other cases in-process (each process start costs seconds).
    out = subprocess.run([sys.executable, "-m", "intune_flow", *args,
                          "--config", "read=4,threadpool=autotune", "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    m = json.loads(out.stdout)
    assert m["status"] == "ok" and m["config"]["read"] == 4 and m["config"]["threadpool"] == -1
    assert main(args + ["--config", "ones"]) == 0
    text = capsys.readouterr().out
    assert "records/s" in text and "read=1" in text
    assert main(args + ["--config", "reed=4"]) == 2
    assert "unknown knob" in capsys.readouterr().err
    assert main(["probe", "nomodule:f"]) == 2
    assert "cannot import module 'nomodule'" in capsys.readouterr().err


def test_cli_probe_repeat_shows_the_spread_across_windows(capsys):
    cmd = [sys.executable, "-m", "intune_flow", "probe", "tests.test_probe:sleepy",
           "--window-s", "0.3", "--warmup-s", "0.1", "--config", "ones"]
    text = subprocess.run(cmd + ["--repeat", "3"], capture_output=True, text=True)
    assert text.returncode == 0, text.stderr
    assert [line.split(":")[0].strip() for line in text.stdout.splitlines()
            if "window " in line and "/3" in line] == ["window 1/3", "window 2/3", "window 3/3"]
    assert "3 windows: median" in text.stdout and "of the median" in text.stdout
    from intune_flow.cli import main

    assert main(cmd[3:] + ["--repeat", "2", "--json"]) == 0
    runs = json.loads(capsys.readouterr().out)
    assert len(runs) == 2 and all(r["status"] == "ok" and r["throughput"] > 0 for r in runs)
