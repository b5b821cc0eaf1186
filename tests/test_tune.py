"""tune(): cold and warm starts on the real reference pipeline, drift, transfer, damage,
fallback, strict mode, argument errors, and no secrets anywhere."""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import tensorflow as tf

import intune_flow
from intune_flow.cache import LocalCache, get_cache
from intune_flow.cache.records import MAGIC, read
from intune_flow.errors import IntuneError, KnobError, PipelineError, TuningError
from intune_flow.result import TuneResult
from intune_flow.tune import tune

tune_module = importlib.import_module("intune_flow.tune")  # the module, not the function

CRITEO = "examples.criteo:criteo_pipeline"
TINY = "tests.test_tune:tiny_pipeline"
FAST = dict(window_s=0.3, progress=False, seed=0)
# For the cache's plumbing: a rule-picked config is measured once and always written, while a
# searching method writes nothing when its budget held no step beyond the start (which a busy
# machine can make true of a 3 s budget). The searches are tested in test_search_real.py.
CACHED = dict(FAST, method="heuristic")


# -- small factories (importable as tests.test_tune:NAME) -------------------------------------
def tiny_pipeline(knobs, n=200_000):
    """A small CPU-bound tf.data pipeline: quick to build and measure."""
    ds = tf.data.Dataset.range(n).repeat()
    ds = ds.batch(256)
    ds = ds.map(lambda x: tf.reduce_sum(tf.sqrt(tf.cast(x, tf.float32) + 1.0)),
                num_parallel_calls=knobs.parallelism("work", max=8))
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def finite_pipeline(knobs, n=4096):
    """One short epoch (no repeat), as a Keras ``fit(ds, epochs=...)`` input is written."""
    ds = tf.data.Dataset.range(n).batch(256)
    ds = ds.map(lambda x: tf.reduce_sum(tf.sqrt(tf.cast(x, tf.float32) + 1.0)),
                num_parallel_calls=knobs.parallelism("work", max=8))
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def named_pipeline(knobs, name="x", scale=1, where=None, api_token=None):
    """Elements whose feature name and values show which factory arguments built them."""
    ds = tf.data.Dataset.range(1 << 20).repeat().map(lambda i: {name: i * scale},
                                                     num_parallel_calls=knobs.parallelism("work", max=4))
    return ds.batch(4)


def raising_factory(knobs):
    knobs.parallelism("work", max=8)
    raise RuntimeError("factory exploded on purpose")


def failing_iteration(knobs):
    """Builds fine, fails on every element: every probe fails."""
    def bad(x):
        tf.debugging.assert_less(x, tf.constant(-1, tf.int64), message="broken element")
        return x
    ds = tf.data.Dataset.range(10**9).map(bad, num_parallel_calls=knobs.parallelism("work", max=4))
    return ds.prefetch(knobs.buffer("prefetch", max=8))


def resign(data: bytes, **changes) -> bytes:
    """Edit fields of a stored record and re-sign it (a valid record with other figures)."""
    head, _, body = data.partition(b"\n")
    _, ver, _, n = head.split(b" ")
    doc = json.loads(body[:int(n)])
    doc.update(changes)
    doc_bytes, weights = json.dumps(doc).encode(), body[int(n):]
    digest = hashlib.sha256(doc_bytes + weights).hexdigest().encode()
    return b"%s %s %s %d\n" % (MAGIC, ver, digest, len(doc_bytes)) + doc_bytes + weights


@pytest.fixture
def cache_dir(tmp_path):
    return str(tmp_path / "cache")


# -- argument errors: raise even when strict=False ----------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"budget_s": 0}, "budget_s"),
    ({"budget_s": -5}, "budget_s"),
    ({"budget_s": float("nan")}, "budget_s"),
    ({"budget_s": "sixty"}, "budget_s"),
    ({"method": "gradient-descent"}, "method must be one of intune, "),
    ({"cache": "gs://bucket/x"}, "not supported"),
    ({"cache": "s3://"}, "no bucket"),
    ({"ram_budget": "lots"}, "ram_budget"),
    ({"ram_budget": -1}, "ram_budget"),
    ({"cpu_budget": 0}, "cpu_budget"),
    ({"cpu_budget": 10_000}, "cores this process may use"),
    ({"window_s": 0}, "window_s"),
    ({"pipeline_kwargs": ["files"]}, "pipeline_kwargs"),
    ({"pipeline_kwargs": {"n_rows": 5}}, "takes no argument(s) ['n_rows']"),
    ({"seed": "x"}, "seed"),
    ({"ram_budget": "1KiB"}, "below what this process already holds"),
    ({"ram_budget": "1000TiB"}, "more than this machine's"),
    ({"strict": "maybe"}, "strict must be True or False"),
    ({"progress": 3}, "progress must be None"),
])
def test_bad_arguments_raise_clear_errors(kwargs, words):
    with pytest.raises(IntuneError) as err:
        tune(TINY, **{"strict": False, **kwargs})
    assert words in str(err.value)


def badly_declared(knobs):
    return tf.data.Dataset.range(8).repeat().prefetch(knobs.buffer("prefetch", min=8, max=4))


def misspells_a_knob_method(knobs):
    return tf.data.Dataset.range(8).repeat().prefetch(knobs.bufer("prefetch"))


def test_a_factory_that_declares_its_knobs_wrongly_raises_instead_of_falling_back(cache_dir):
    # Nothing could build, not even the defaults to fall back to: the message says what to fix.
    with pytest.raises(IntuneError, match=r"min \(8\) is greater than max \(4\); swap them"):
        tune("tests.test_tune:badly_declared", budget_s=2, cache=cache_dir, **FAST)
    # A misspelt knob method is the same mistake: no build could succeed.
    with pytest.raises(KnobError, match=r"did you mean 'bufer' -> 'buffer'"):
        tune(misspells_a_knob_method, budget_s=2, cache=cache_dir, **FAST)
    # The same for a factory that returns no dataset: build() would hand training a list.
    with pytest.raises(intune_flow.FactoryError,   # a PipelineError, named as the README does
                       match=r"returned builtins.list, which is not a dataset"):
        tune(returns_a_list, budget_s=2, cache=cache_dir, **FAST)
    assert issubclass(intune_flow.FactoryError, PipelineError)


def returns_a_list(knobs):
    return [1, 2, 3] * knobs.parallelism("x", max=4)


def test_bad_pipeline_reference_raises():
    with pytest.raises(IntuneError) as err:
        tune("no_such_module_xyz:factory", budget_s=1)
    assert "no_such_module_xyz" in str(err.value)


def test_package_attribute_is_callable_after_submodule_import():
    import intune_flow.tune  # noqa: F401 - would bind the package attribute to the submodule
    assert intune_flow.tune is tune and intune_flow.probe.__module__ == "intune_flow.probe"


# -- fallback and strict ----------------------------------------------------------------
def test_a_fallback_reason_is_one_line_without_an_embedded_traceback():
    from intune_flow.errors import describe_error

    # TensorFlow's message for a py_function that raised, as a fallback reason once carried it
    tf_text = ("{{function_node __wrapped__IteratorGetNext_output_types_1_device_/job:localhost}} "
               "RuntimeError: storage is down\nTraceback (most recent call last):\n\n  File "
               "\"/x/script_ops.py\", line 269, in __call__\n    ret = func(*args)\n\n"
               "RuntimeError: storage is down\n\n\t [[{{node PyFunc}}]] [Op:IteratorGetNext]")
    assert describe_error(tf.errors.UnknownError(None, None, tf_text)) == \
        "UnknownError: RuntimeError: storage is down"
    assert describe_error(RuntimeError("k\nTraceback (most recent call last):\n  File x\nOSError: y")) \
        == "RuntimeError: k (OSError: y)"
    assert describe_error(IntuneError("our  own\nsentence")) == "our own sentence"
    assert len(describe_error(ValueError("x" * 1000), limit=50)) == 50


def test_fallback_when_factory_raises(cache_dir, caplog):
    with caplog.at_level(logging.WARNING, logger="intune_flow"):
        result = tune("tests.test_tune:raising_factory", budget_s=2, cache=cache_dir, **FAST)
    assert result.source == "fallback"
    assert "factory exploded on purpose" in result.reason
    assert result.config == {}
    assert "tuning failed" in caplog.text
    assert "which failed in this run too: training will fail the same way" in caplog.text
    assert get_cache(cache_dir).list() == []          # nothing written on failure


def test_strict_raises_tuning_error(cache_dir):
    with pytest.raises(TuningError) as err:
        tune("tests.test_tune:raising_factory", budget_s=2, cache=cache_dir, strict=True, **FAST)
    assert "factory exploded on purpose" in str(err.value)


@pytest.mark.slow
def test_fallback_when_every_probe_fails(cache_dir):
    result = tune("tests.test_tune:failing_iteration", budget_s=3, cache=cache_dir,
                  method="random", **FAST)
    assert result.source == "fallback"
    assert "every probe failed" in result.reason
    defaults = intune_flow.Pipeline.load("tests.test_tune:failing_iteration").space.defaults()
    assert result.config == defaults and result.config["work"] == 1   # the factory defaults
    assert result.history and not any(m.ok for m in result.history)
    with pytest.raises(TuningError):
        tune("tests.test_tune:failing_iteration", budget_s=3, cache=cache_dir, method="random",
             strict=True, **FAST)
    # It raises at its defaults: the search stops there, not after a budget of the same error.
    result = tune("tests.test_tune:failing_iteration", budget_s=30, cache=cache_dir, **FAST)
    assert result.source == "fallback" and "broken element" in result.reason
    assert [m.status for m in result.history] == ["error"]


def filtered_empty(knobs):
    """A filter that keeps nothing: the pipeline is empty whatever its knobs."""
    ds = tf.data.Dataset.range(1000).filter(lambda i: i < 0)
    ds = ds.map(lambda i: i * 2, num_parallel_calls=knobs.parallelism("work", max=8))
    return ds.prefetch(knobs.buffer("prefetch", max=8))


def test_an_empty_pipeline_falls_back_after_one_probe(cache_dir):
    result = tune("tests.test_tune:filtered_empty", budget_s=30, cache=cache_dir, **FAST)
    assert result.source == "fallback" and "yielded no elements" in result.reason
    # No config changes what the data holds: the search stops at its start.
    assert [m.status for m in result.history] == ["empty"]


# -- progress off a terminal ------------------------------------------------------------------
_PROGRESS_SCRIPT = """
from intune_flow import tune
tune("tests.test_tune:tiny_pipeline", budget_s=2, window_s=0.3, cache="memory://p", seed=0)
"""


def test_progress_off_a_terminal_without_logging_configured_goes_to_stderr():
    """A batch job (stderr not a tty) that never configured logging still sees progress:
    Python's last-resort handler would drop the INFO lines, so they are printed plainly."""
    proc = subprocess.run([sys.executable, "-c", _PROGRESS_SCRIPT],
                          cwd=Path(__file__).resolve().parents[1], capture_output=True,
                          text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "] step " in line or "done after" in line]
    assert any("done after" in line for line in lines), proc.stderr
    assert all(line.startswith("[") for line in lines), lines


def test_progress_off_a_terminal_goes_through_the_apps_logging_once_configured(caplog):
    with caplog.at_level(logging.INFO, logger="intune_flow.search"):
        tune(TINY, budget_s=2, cache="memory://progress-logging", window_s=0.3, seed=0)
    lines = [r.getMessage() for r in caplog.records if r.name == "intune_flow.search"]
    assert any("done after" in line for line in lines), lines
    assert lines[0].startswith("[intune] start, budget 2 s: measuring the start config work=")


# -- short budgets ------------------------------------------------------------------------------
def test_the_search_window_follows_a_short_budget():
    from intune_flow.tune import search_window

    assert [search_window(b) for b in (5, 10, 20, 30, 60, 600)] == [0.75, 0.75, 1.0, 1.5, 2.0, 2.0]


def test_a_budget_that_holds_no_step_says_so_and_caches_nothing(cache_dir):
    # The start's measurement alone fills the budget: returning it as "tuned" and caching
    # it would make every later run a hit on an untuned config.
    first = tune(TINY, budget_s=0.5, cache=cache_dir, window_s=0.4, progress=False, seed=0)
    assert first.source == "tuned" and first.config == first.start_config
    assert len({tuple(sorted(m.config.items())) for m in first.history}) == 1
    assert any("held no step beyond the start config" in w and "nothing was cached" in w
               for w in first.warnings), first.warnings
    assert get_cache(cache_dir).records() == []
    again = tune(TINY, budget_s=0.5, cache=cache_dir, window_s=0.4, progress=False, seed=0)
    assert again.source == "tuned"


def _wait_and_return(i):
    time.sleep(0.005)
    return i


def capped_reads(knobs):
    """torchdata: reads that wait 5 ms each on at most 2 threads (the bound binds; torchdata
    has no AUTOTUNE to return instead of a number)."""
    from torchdata import nodes

    node = nodes.ParallelMapper(nodes.IterableWrapper(range(10**9)), _wait_and_return,
                                num_workers=knobs.parallelism("get", max=2, default=2),
                                method="thread")
    return nodes.Batcher(node, batch_size=8)


def test_a_knob_tuned_to_its_max_is_reported_with_the_fix(cache_dir):
    result = tune(capped_reads, budget_s=3, cache=cache_dir, **FAST)
    assert result.config["get"] == 2, result.history       # 1 thread waits twice as long
    assert any("knob 'get' was tuned to its max (2)" in w and "max=..." in w
               for w in result.warnings), result.warnings


def test_a_finite_dataset_is_tuned_over_epochs_and_builds_one_epoch(cache_dir):
    result = tune(finite_pipeline, budget_s=4, cache=cache_dir, **CACHED)
    assert result.source == "tuned", result.reason
    assert result.history and all(m.status == "ok" for m in result.history)
    assert sum(1 for _ in result.build()) == 4096 // 256   # the user's dataset: one epoch


# -- cold, warm, drift, transfer, damage on the tiny pipeline -------------------------------
def test_cold_then_warm_tiny(cache_dir, lenient):
    cold = tune(TINY, budget_s=4, cache=cache_dir, **CACHED)
    assert cold.source == "tuned" and cold.throughput > 0
    assert cold.cache_key and cold.cache_key.startswith("v1/")
    stored = read(get_cache(cache_dir), cold.cache_key).record
    assert stored is not None and stored.config == cold.config
    warm = tune(TINY, budget_s=4, cache=cache_dir, **CACHED)
    assert warm.source == "cache"
    assert warm.config == cold.config
    # saved: the record's cold tuning seconds minus this run's (no speed is asserted)
    recorded_cold = stored.history["cold_tuning_seconds"]
    assert warm.seconds_saved == pytest.approx(max(0.0, recorded_cold - warm.tuning_seconds))
    assert len(warm.history) == 1 and warm.history[0].config == cold.config  # verified once
    ds = warm.build()
    assert isinstance(ds, tf.data.Dataset)
    next(iter(ds))


def test_a_bare_memory_cache_tunes_afresh_each_call_and_a_named_one_is_shared(lenient):
    # README: cache="memory://" is a new empty store for each call, memory://name is shared
    first = tune(TINY, budget_s=3, cache="memory://", **CACHED)
    again = tune(TINY, budget_s=3, cache="memory://", **CACHED)
    assert (first.source, again.source) == ("tuned", "tuned")
    named = f"memory://shared-{uuid.uuid4().hex}"
    assert tune(TINY, budget_s=3, cache=named, **CACHED).source == "tuned"
    assert tune(TINY, budget_s=3, cache=named, **CACHED).source == "cache"


def test_vs_autotune_comes_from_one_search_and_a_cache_hit_reports_its_nights(cache_dir, lenient):
    # 8 s: a search writes nothing when its budget held no step beyond the start and its
    # AUTOTUNE look, which a busy machine can make true of 4 s
    cold = tune(TINY, budget_s=8, cache=cache_dir, **FAST)
    assert cold.source == "tuned" and cold.autotune_throughput, cold.history
    # (a knob at its max on an idle-looking CPU may be reported, a budget a busy machine let
    # hold only a few measurements, and a confirming probe a busy machine read low: not what
    # this is about)
    assert not [w for w in cold.warnings if "was tuned to its max" not in w
                and "held only" not in w and "confirming probe" not in w], cold.warnings
    assert cold.vs_autotune == pytest.approx(cold.throughput / cold.autotune_throughput)
    assert cold.to_dict()["vs_autotune"] == pytest.approx(cold.vs_autotune)   # in artifacts
    warm = tune(TINY, budget_s=8, cache=cache_dir, **FAST)
    assert warm.source == "cache"
    # Today's verification probe is not set against that night's AUTOTUNE window.
    assert warm.vs_autotune == pytest.approx(cold.vs_autotune)
    assert TuneResult.from_dict(warm.to_dict()).vs_autotune == pytest.approx(warm.vs_autotune)
    older = {k: v for k, v in cold.to_dict().items() if k != "vs_autotune"}
    assert TuneResult.from_dict(older).vs_autotune == pytest.approx(cold.vs_autotune)


def test_a_config_at_all_autotune_is_one_times_autotune_also_on_a_cache_hit(cache_dir):
    cold = tune(TINY, budget_s=3, cache=cache_dir, **CACHED)
    cache = get_cache(cache_dir)
    data, _ = cache.get(cold.cache_key)
    record = read(cache, cold.cache_key).record
    autotune = {name: tf.data.AUTOTUNE for name in cold.config}
    # the night that wrote it took the config's figure and AUTOTUNE's from different windows;
    # a recorded 1 record/s makes any look pass verification (a loaded machine once read
    # all-AUTOTUNE at 62% of the cold config's figure and refined)
    history = dict(record.history, search_best_throughput=0.97, autotune_throughput=1.0)
    cache.put(cold.cache_key, resign(data, config=autotune, throughput=1.0, history=history))
    warm = tune(TINY, budget_s=3, cache=cache_dir, **CACHED)
    assert warm.source == "cache" and warm.config == autotune
    assert warm.vs_autotune == 1.0
    assert warm.autotune_throughput == warm.throughput          # today's figure, not two


def test_damaged_record_logged_and_retuned(cache_dir, caplog):
    cold = tune(TINY, budget_s=3, cache=cache_dir, **CACHED)
    cache = get_cache(cache_dir)
    data, _ = cache.get(cold.cache_key)
    cache.put(cold.cache_key, data[: len(data) // 2])          # truncated by hand
    with caplog.at_level(logging.WARNING, logger="intune_flow"):
        again = tune(TINY, budget_s=3, cache=cache_dir, **CACHED)
    assert again.source == "tuned"
    assert "damaged" in again.reason and "quarantined" in again.reason
    assert "rejected cache record" in caplog.text
    assert any(".quarantine/" in k for k in cache.list())
    assert read(cache, cold.cache_key).record is not None     # repaired by the re-tune


def _inflated_record(cache_dir, factor: float, all_autotune: bool = False):
    """A cold run's record stored again with ``factor`` times its throughput (and its config
    at all-AUTOTUNE): (the cold result, the cache, the stored throughput)."""
    cold = tune(TINY, budget_s=3, cache=cache_dir, **CACHED)
    cache = get_cache(cache_dir)
    data, _ = cache.get(cold.cache_key)
    inflated = read(cache, cold.cache_key).record.throughput * factor
    changes = {"config": {n: tf.data.AUTOTUNE for n in cold.config}} if all_autotune else {}
    cache.put(cold.cache_key, resign(data, throughput=inflated, **changes))
    return cold, cache, inflated


@pytest.mark.slow
def test_drift_refines_and_replaces_the_stale_record(cache_dir):
    cold, cache, inflated = _inflated_record(cache_dir, 1000)
    drifted = tune(TINY, budget_s=3, cache=cache_dir, **CACHED)
    assert drifted.source == "refined"
    assert "verification probe measured" in drifted.reason
    # drift only after every look: two short probes, then one of the search's full window
    looks = drifted.history[:tune_module.POLICY.verify_looks]
    assert [m.config for m in looks] == [cold.config] * tune_module.POLICY.verify_looks
    stored = read(cache, cold.cache_key).record
    assert stored.throughput < inflated                        # the stale record was replaced


@pytest.mark.slow
def test_a_nightly_refine_at_twenty_seconds_replaces_a_lucky_all_autotune_record(cache_dir):
    # A README-only trial's nightly DAG: night 1 cached all-AUTOTUNE with a lucky figure; at
    # budget_s=20 the refine's 5 s held only that config again ("held no step"), so the
    # record stayed and every later night failed its verification anew.
    cold, cache, _ = _inflated_record(cache_dir, 30, all_autotune=True)
    night = tune(TINY, budget_s=20, cache=cache_dir, progress=False, seed=0)
    assert night.source == "refined"
    assert not any("held no step" in w for w in night.warnings), (
        night.warnings, [(m.seconds, m.status, dict(m.config)) for m in night.history])
    # the record replaced: the inflated one kept the cold night's "tuned"
    assert read(cache, cold.cache_key).record.history["source"] == "refined"


@pytest.mark.slow
def test_other_hardware_class_transfers(cache_dir):
    if intune_flow.resources.usable_cpus() < 2:
        pytest.skip("needs 2 usable cores to make two hardware classes")
    cold = tune(TINY, budget_s=3, cache=cache_dir, cpu_budget=2, **CACHED)
    moved = tune(TINY, budget_s=3, cache=cache_dir, cpu_budget=1, **CACHED)
    assert moved.source == "transferred"
    assert moved.cache_key != cold.cache_key
    assert cold.hardware_class in moved.reason
    assert moved.history[0].config == cold.config           # started from the other record
    keys = get_cache(cache_dir).records()
    assert set(keys) == {cold.cache_key, moved.cache_key}


def test_a_different_ram_budget_reuses_the_record_of_the_same_machine(cache_dir):
    # The default RAM budget follows the free memory; keying records on it made nightly
    # runs near a power-of-two edge miss their own record.
    cold = tune(TINY, budget_s=4, cache=cache_dir, ram_budget="20GiB", **CACHED)
    warm = tune(TINY, budget_s=4, cache=cache_dir, ram_budget="3GiB", **CACHED)
    assert warm.cache_key == cold.cache_key and warm.hardware_class == cold.hardware_class
    assert warm.source in ("cache", "refined")
    assert warm.ram_budget == 3 * 2**30


def test_a_record_serves_every_method_and_says_which_found_it(cache_dir, lenient):
    # The README: the key names no method; `cache show` prints the record's method.
    cold = tune(TINY, budget_s=4, cache=cache_dir, **CACHED)
    warm = tune(TINY, budget_s=4, cache=cache_dir, method="random", **FAST)
    assert warm.cache_key == cold.cache_key
    assert warm.source == "cache" and warm.config == cold.config
    assert read(get_cache(cache_dir), cold.cache_key).record.method == "heuristic"


def test_result_roundtrip_json(cache_dir):
    result = tune(TINY, budget_s=2, cache=cache_dir, **CACHED)
    data = json.loads(json.dumps(result.to_dict()))
    back = TuneResult.from_dict(data)
    assert back.config == result.config and back.source == result.source
    assert len(back.history) == len(result.history)
    assert back.pipeline == TINY
    assert isinstance(back.build(), tf.data.Dataset)
    assert "_pipeline" not in data


# -- the real reference pipeline ------------------------------------------------------------
@pytest.mark.slow
def test_criteo_cold_then_warm(cache_dir, lenient):
    cold = tune(CRITEO, budget_s=8, cache=cache_dir, window_s=0.5, progress=False, seed=0)
    assert cold.source == "tuned"
    assert cold.throughput >= cold.start_throughput > 0
    warm = tune(CRITEO, budget_s=8, cache=cache_dir, window_s=0.5, progress=False, seed=0)
    assert warm.source == "cache"
    assert warm.config == cold.config
    assert len(warm.history) <= 3 and {m.config == cold.config for m in warm.history} == {True}


def test_a_cache_path_through_a_file_reads_and_writes_the_fallback(tmp_path, monkeypatch, lenient):
    # Before: the read was a plain miss and only the write failed over, so every run tuned
    # cold and wrote a fallback record that no run read.
    (tmp_path / "a-file").write_text("not a directory")
    broken = str(tmp_path / "a-file" / "cache")
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(tmp_path / "fallback"))
    first = tune(TINY, budget_s=4, cache=broken, **CACHED)
    assert first.source == "tuned" and first.cache_uri == str(tmp_path / "fallback")
    assert any("a file is in its path" in w and "give a writable directory" in w
               for w in first.warnings), first.warnings
    second = tune(TINY, budget_s=4, cache=broken, **CACHED)
    assert second.source == "cache" and second.config == first.config


# -- S3: outage fallback, repair, no secrets ----------------------------------------------
@pytest.mark.slow
def test_s3_outage_falls_back_to_local_and_training_runs(s3_outage, monkeypatch, caplog, tmp_path):
    server = s3_outage
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    local = tmp_path / "fallback"
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(local))
    bucket = server.make_bucket()
    uri = f"s3://{bucket}/intune"
    server.stop()
    with caplog.at_level(logging.WARNING, logger="intune_flow"):
        result = tune(TINY, budget_s=3, cache=uri, **CACHED)
    assert result.source == "tuned"
    assert result.cache_uri == str(local)
    assert any("unavailable" in w and "fallback" in w for w in result.warnings)
    assert "continuing with the local fallback cache" in caplog.text
    assert read(LocalCache(local), result.cache_key).record is not None
    next(iter(result.build()))                                 # training still gets its data
    with pytest.raises(TuningError):
        tune(TINY, budget_s=3, cache=uri, strict=True, **CACHED)
    server.start()
    repaired = tune(TINY, budget_s=3, cache=uri, **CACHED)       # the next good run repairs S3
    assert repaired.cache_uri == uri and not repaired.warnings
    assert read(get_cache(uri), result.cache_key).record is not None


def test_a_record_tuned_during_an_s3_outage_is_published_and_night_2_is_a_hit(
        s3_outage, monkeypatch, tmp_path, caplog, lenient):
    """Night 1: S3 is down, tune falls back to the local cache. Night 2: S3 is back; the
    night-1 record is published to S3 (and marked so) and night 2 is a cache hit."""
    from intune_flow.cache.outage import fallback_cache

    server = s3_outage
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    local = tmp_path / "fallback"
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(local))
    uri = f"s3://{server.make_bucket()}/intune"
    server.stop()
    night1 = tune(TINY, budget_s=2, cache=uri, **CACHED)
    assert night1.source == "tuned" and night1.cache_uri == str(local)
    server.start()
    assert get_cache(uri).records() == []          # night 1 reached only the local cache
    with caplog.at_level(logging.INFO, logger="intune_flow"):
        night2 = tune(TINY, budget_s=2, cache=uri, **CACHED)
    assert night2.source == "cache", (night2.source, night2.reason)
    assert night2.cache_uri == uri and not night2.warnings
    assert night2.config == night1.config
    stored = read(get_cache(uri), night1.cache_key).record
    assert stored is not None and stored.config == night1.config
    assert f"created {night1.cache_key} from the record the outage fallback" in caplog.text
    assert fallback_cache(get_cache(uri)).pending(night1.cache_key) is None   # published once


@pytest.mark.slow
def test_no_secret_in_logs_records_or_results(s3_server, monkeypatch, caplog, tmp_path):
    from tests.s3server import ACCESS_KEY, SECRET_KEY

    for name, value in s3_server.env().items():
        monkeypatch.setenv(name, value)
    uri = f"s3://{s3_server.make_bucket()}/intune"
    with caplog.at_level(logging.DEBUG):
        first = tune(TINY, budget_s=2, cache=uri, **CACHED)
        second = tune(TINY, budget_s=2, cache=uri, **CACHED)
        monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "definitely-wrong-secret-123")
        denied = tune(TINY, budget_s=2, cache=uri, **CACHED)     # refused: falls back
    assert any("access denied" in w for w in denied.warnings), denied.warnings
    cache = get_cache(uri, s3_client=s3_server.client())
    stored = b"".join(cache.get(k)[0] for k in cache.list())
    texts = [caplog.text, json.dumps(first.to_dict()), json.dumps(second.to_dict()),
             json.dumps(denied.to_dict()), repr(first), stored.decode("latin-1")]
    for secret in (SECRET_KEY, "definitely-wrong-secret-123"):
        assert all(secret not in t for t in texts)
    assert all(ACCESS_KEY not in t for t in texts[1:])


def test_a_result_rebuilt_elsewhere_uses_the_factory_arguments_it_was_tuned_with(cache_dir):
    kwargs = {"name": "feat", "scale": 3, "where": Path("/data"), "api_token": "s3cr3t"}
    result = tune("tests.test_tune:named_pipeline", budget_s=2, cache=cache_dir,
                  pipeline_kwargs=kwargs, **FAST)
    doc = json.loads(json.dumps(result.to_dict()))
    assert doc["pipeline_kwargs"] == {"name": "feat", "scale": 3}     # no Path, no secret
    assert doc["pipeline_kwargs_not_kept"] == ["where", "api_token"]
    assert "s3cr3t" not in json.dumps(doc)
    elsewhere = TuneResult.from_dict(doc)                   # as in another process
    with pytest.raises(PipelineError, match=r"\['where', 'api_token'\].*result.build\(where=\.\.\., "
                                            r"api_token=\.\.\.\)"):
        elsewhere.build()
    first = next(iter(elsewhere.build(where=Path("/data"), api_token="s3cr3t")))
    assert list(first) == ["feat"] and first["feat"].numpy().tolist() == [0, 3, 6, 9]
    first = next(iter(elsewhere.build(where=None, api_token=None, scale=2)))   # overrides win
    assert first["feat"].numpy().tolist() == [0, 2, 4, 6]


def test_signed_record_with_out_of_bounds_config_is_quarantined(cache_dir):
    cold = tune(TINY, budget_s=4, cache=cache_dir, **CACHED)
    cache = get_cache(cache_dir)
    data, _ = cache.get(cold.cache_key)
    cache.put(cold.cache_key, resign(data, config=dict(cold.config, work=999)))
    again = tune(TINY, budget_s=4, cache=cache_dir, **CACHED)
    assert again.source == "tuned" and "invalid" in again.reason
    assert again.config["work"] <= 8
    assert any(".quarantine/" in k for k in cache.list())


_RELEASE = __import__("threading").Event()


def hanging_factory(knobs):
    """Declares a knob, then blocks (until the test releases it)."""
    knobs.parallelism("work", max=4)
    _RELEASE.wait(600)
    return tf.data.Dataset.range(10)


def test_hanging_factory_is_bounded_and_falls_back(cache_dir, monkeypatch):
    monkeypatch.setattr("intune_flow.pipeline.DISCOVERY_TIMEOUT_S", 1.0)
    try:
        result = tune("tests.test_tune:hanging_factory", budget_s=2, cache=cache_dir, **FAST)
        assert result.source == "fallback" and "did not return within 1 s" in result.reason
        with pytest.raises(TuningError):
            tune("tests.test_tune:hanging_factory", budget_s=2, cache=cache_dir, strict=True,
                 **FAST)
    finally:
        _RELEASE.set()
