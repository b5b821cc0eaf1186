"""Per-stage signals on real tf.data probes: which stage waits, read from tf.data's own model."""

import logging
import subprocess
import sys
import time

import numpy as np
import pytest
import tensorflow as tf

from intune_flow.adapters.tfdata_stages import tag_configs, tag_rounds
from intune_flow.knobs import AUTOTUNE, Knob, KnobSpace
from intune_flow.pipeline import Pipeline
from intune_flow.probe import probe


def slow_then_cheap(knobs, delay_ms=4.0):
    """A blocking read (``delay_ms`` per element), a map with a fixed parallelism of 3 (no
    knob), a cheap knobbed map, and an interleave whose knob sets cycle and parallelism."""
    def work(i):
        time.sleep(delay_ms / 1000.0)
        return np.float32(i)

    ds = tf.data.Dataset.range(4).repeat()
    ds = ds.interleave(lambda i: tf.data.Dataset.range(10**9),
                       cycle_length=knobs.parallelism("open", max=8),
                       num_parallel_calls=knobs.parallelism("open"), deterministic=False)
    ds = ds.map(lambda i: tf.reshape(tf.numpy_function(work, [i], tf.float32), []),
                num_parallel_calls=knobs.parallelism("read", max=32))
    ds = ds.map(lambda x: x + 1.0, num_parallel_calls=3)
    ds = ds.map(lambda x: x * 2.0, num_parallel_calls=knobs.parallelism("cheap", max=16))
    return ds.batch(8).prefetch(knobs.buffer("prefetch", max=8))


def test_tag_configs_give_each_parallelism_knob_two_distinct_values():
    maps = tuple(Knob(f"m{i}", "parallelism", 1, 8, 1) for i in range(16))
    space = KnobSpace((Knob("a", "parallelism", 1, 64, 1), Knob("b", "parallelism", 1, 2, 1),
                       Knob("c", "parallelism", 1, 64, 1), Knob("buf", "buffer", 1, 8, 1),
                       Knob("fixed", "parallelism", 4, 4, 4)) + maps)
    rounds = tag_rounds(space)
    names = [k.name for group in rounds for k in group]
    assert sorted(names) == sorted(["a", "b", "c", *(k.name for k in maps)])   # each once
    for group in rounds:
        for flip in (False, True):
            first, second = tag_configs(group, space.defaults(), flip)
            par = [k.name for k in group]
            assert len({first[k] for k in par}) == len({second[k] for k in par}) == len(par)
            assert all(first[k] != second[k] for k in par)
            assert all(space[k].min <= c[k] <= space[k].max for k in par for c in (first, second))
            # Same order in both builds (an interleave's parallelism stays <= its cycle).
            assert sorted(par, key=first.get) == sorted(par, key=second.get)
            assert first["buf"] == second["buf"] == 1 and first["fixed"] == 4


def test_knobs_are_located_on_their_own_nodes_and_fixed_stages_are_not():
    p = Pipeline.load(slow_then_cheap)
    stages = p.stages
    assert set(stages) == {"open", "read", "cheap"}
    assert {where.param for where in stages["open"]} == {"cycle_length", "parallelism"}
    positions = {name: {at.pos for at in where} for name, where in stages.items()}
    assert len(set().union(*positions.values())) == 3       # one node each, all different
    assert positions["open"] != positions["read"] != positions["cheap"]


def test_the_probe_reports_the_blocking_stage_as_saturated():
    m = probe(slow_then_cheap, {"open": 2, "read": 1, "cheap": 2, "prefetch": 2, "threadpool": 8},
              window_s=1.0, warmup_s=0.3)
    assert m.ok, m.error
    sig = m.stage_signals
    assert sig["read"] >= 0.8                      # its one call is always sleeping
    assert sig["cheap"] < 0.5
    assert 0 < sig["threadpool"] <= 1.0
    assert "prefetch" not in sig                   # buffers have no busy share
    assert "open" not in sig                       # an interleave's model time is not its work


def test_more_read_calls_lower_its_busy_share():
    config = {"open": 2, "cheap": 2, "prefetch": 2, "threadpool": 64}
    one = probe(slow_then_cheap, {**config, "read": 1}, window_s=1.0, warmup_s=0.3)
    many = probe(slow_then_cheap, {**config, "read": 32}, window_s=1.0, warmup_s=0.3)
    assert one.ok and many.ok
    # 32 sleeping calls no longer all wait at once: the stage is no longer what waits.
    assert many.stage_signals["read"] < one.stage_signals["read"]


def test_autotune_values_are_read_back_not_trusted_blindly():
    auto = probe(slow_then_cheap, {k: AUTOTUNE for k in ("open", "read", "cheap")},
                 window_s=1.0, warmup_s=0.3)
    assert auto.ok
    assert set(auto.stage_signals) <= {"read", "cheap"}
    assert "threadpool" not in auto.stage_signals   # tf.data's own pool: size unknown
    # What AUTOTUNE chose, which tf.data itself does not show (interleave included).
    assert set(auto.autotune_choices) == {"open", "read", "cheap"}
    assert all(v >= 1 for v in auto.autotune_choices.values())
    fixed = probe(slow_then_cheap, {"open": AUTOTUNE, "read": 4, "cheap": AUTOTUNE},
                  window_s=0.5, warmup_s=0.2)
    assert set(fixed.autotune_choices) == {"open", "cheap"}   # "read" was not AUTOTUNE


def test_the_probe_command_prints_busy_shares_and_autotune_choices():
    out = subprocess.run([sys.executable, "-m", "intune_flow", "probe",
                          "tests.test_stage_signals:slow_then_cheap", "--config", "autotune",
                          "--window-s", "1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "busy share of each stage's calls: read " in out.stdout
    assert "AUTOTUNE held open=" in out.stdout


def test_a_pipeline_that_changes_shape_with_its_config_gets_no_wrong_signal():
    def shape_shifter(knobs):
        par = knobs.parallelism("map", max=8)
        ds = tf.data.Dataset.range(10**9)
        if par > 4:    # a factory may build a different graph for some values
            ds = ds.map(lambda x: x + 1, num_parallel_calls=2)
        return ds.map(lambda x: x * 2, num_parallel_calls=par).batch(4)

    p = Pipeline.load(shape_shifter)
    assert p.stages  # located on the small tagging values
    m = probe(p, {"map": 8}, window_s=0.5, warmup_s=0.2)
    assert m.ok
    # The node at the tagged position no longer carries the knob's value: no signal.
    assert "map" not in m.stage_signals


@pytest.mark.parametrize("torch_pipeline", ["torch"])
def test_torchdata_probes_report_no_signals_and_still_measure(torch_pipeline):
    nodes = pytest.importorskip("torchdata.nodes")

    def small(knobs):
        src = nodes.IterableWrapper(range(10**9))
        mapped = nodes.ParallelMapper(src, lambda x: x * 2,
                                      num_workers=knobs.parallelism("map", max=4),
                                      method="thread")
        return nodes.Batcher(mapped, batch_size=8)

    p = Pipeline.load(small)
    assert p.stages == {}
    m = probe(p, {"map": 2}, window_s=0.5, warmup_s=0.2)
    assert m.ok and m.stage_signals == {}


def test_a_pipeline_with_autotune_disabled_has_no_model_and_still_measures():
    def no_model(knobs):
        ds = tf.data.Dataset.range(10**9).map(
            lambda x: x * 2, num_parallel_calls=knobs.parallelism("map", max=8)).batch(16)
        options = tf.data.Options()
        options.autotune.enabled = False   # tf.data keeps no model: nothing to read
        return ds.with_options(options)

    p = Pipeline.load(no_model)
    assert p.stages == {}
    m = probe(p, {"map": 2}, window_s=0.5, warmup_s=0.2)
    assert m.ok and m.throughput > 0 and m.stage_signals == {}


def interleave_and_map(knobs, cycle_first=True):
    """An interleave with a knob on each of cycle_length and num_parallel_calls (declared in
    either order; tf.data rejects num_parallel_calls > cycle_length), then a map."""
    def par(name):
        return knobs.parallelism(name, max=4)

    src = tf.data.Dataset.range(4)
    make = lambda i: tf.data.Dataset.range(10**9)   # noqa: E731
    if cycle_first:
        ds = src.interleave(make, cycle_length=par("cycle"), num_parallel_calls=par("calls"))
    else:
        ds = src.interleave(make, num_parallel_calls=par("calls"), cycle_length=par("cycle"))
    ds = ds.map(lambda x: x + 1, num_parallel_calls=knobs.parallelism("map", max=8))
    return ds.batch(8)


@pytest.mark.parametrize("cycle_first", [True, False])
def test_an_interleave_with_a_knob_on_cycle_and_on_calls_still_gets_signals(cycle_first):
    p = Pipeline.load(interleave_and_map, cycle_first=cycle_first)
    stages = p.stages
    assert set(stages) == {"cycle", "calls", "map"}
    assert {where.param for where in stages["cycle"]} == {"cycle_length"}
    m = probe(p, {"cycle": 2, "calls": 2, "map": 2}, window_s=0.5, warmup_s=0.2)
    assert m.ok, m.error
    assert "map" in m.stage_signals


def shuffled_then_mapped(knobs):
    ds = tf.data.Dataset.range(10**9)
    ds = ds.map(lambda x: x * 3, num_parallel_calls=knobs.parallelism("decode", max=8))
    ds = ds.shuffle(knobs.buffer("shuffle", min=16, max=256, default=32))
    ds = ds.map(lambda x: x + 1, num_parallel_calls=knobs.parallelism("feat", max=8))
    return ds.batch(16)


def test_stages_below_and_above_a_shuffle_are_located_and_get_signals():
    # A shuffle opens its input only for its first element: located on a model without
    # the nodes below it, every position would be off by the nodes it hides.
    p = Pipeline.load(shuffled_then_mapped)
    assert set(p.stages) == {"decode", "feat"}
    m = probe(p, {"decode": 2, "feat": 3}, window_s=0.5, warmup_s=0.2)
    assert m.ok, m.error
    assert {"decode", "feat"} <= set(m.stage_signals)


def parsed_cached_then_augmented(knobs, n=512):
    """A parse under ``cache()``: once the first epoch is cached, the parse stops and
    leaves tf.data's model, and the augment fused with the batch moves nearer the source."""
    ds = tf.data.Dataset.range(n)
    ds = ds.map(lambda x: x * 3, num_parallel_calls=knobs.parallelism("parse", max=8))
    ds = ds.cache().shuffle(64).repeat()
    ds = ds.map(lambda x: x + 1, num_parallel_calls=knobs.parallelism("augment", max=8))
    return ds.batch(16)


def test_once_a_cache_is_filled_the_stage_above_keeps_its_signal_and_the_parse_reads_idle():
    p = Pipeline.load(parsed_cached_then_augmented)
    assert set(p.stages) == {"parse", "augment"}
    for augment in (3, AUTOTUNE):
        config = {"parse": 2, "augment": augment, "threadpool": 4}
        # The warm-up reads the 512 records many times over: the window sees a filled cache.
        m = probe(p, config, window_s=0.5, warmup_s=0.3)
        assert m.ok, m.error
        assert m.stage_signals["parse"] == 0.0      # its calls did no work in the window
        assert 0.0 < m.stage_signals["augment"] <= 1.0
        if augment == AUTOTUNE:
            assert m.autotune_choices["augment"] >= 1 and "parse" not in m.autotune_choices


def finite_batch_first(knobs, n=1600):
    """One epoch (about 0.8 s at one call) of batches of 32 through a 16 ms map, then
    ``unbatch`` and a batch of 8; no repeat. At the epoch's end ``unbatch`` lets go of its
    input, and tf.data's model drops the map with it."""
    def work(batch):
        time.sleep(0.016)
        return batch.astype(np.float32)

    ds = tf.data.Dataset.range(n).batch(32)
    ds = ds.map(lambda b: tf.reshape(tf.numpy_function(work, [b], tf.float32), [-1]),
                num_parallel_calls=knobs.parallelism("slow", max=8))
    return ds.unbatch().batch(8)


def test_a_stage_of_a_finite_dataset_keeps_its_signal_across_epoch_ends():
    # A README-only trial's finite pipeline (a heavy map after batch, 3.4 s epochs) read its
    # limiting map 0% busy in every window: at an epoch's end tf.data drops the ops whose
    # input ran out from its model, and a stretch of readings closed there found them gone.
    p = Pipeline.load(finite_batch_first)
    assert set(p.stages) == {"slow"}
    m = probe(p, {"slow": 1, "threadpool": 2}, window_s=2.0, warmup_s=0.3)
    assert m.ok, m.error
    assert m.stage_signals["slow"] >= 0.5      # one call, nearly always sleeping: busy
    assert m.stage_signals["threadpool"] > 0.0


def many_maps(knobs, n=16):
    ds = tf.data.Dataset.range(10**9)
    for i in range(n):
        ds = ds.map(lambda x: x + 1, num_parallel_calls=knobs.parallelism(f"m{i}", max=8))
    return ds.batch(16)


def test_sixteen_parallel_maps_each_get_a_signal():
    p = Pipeline.load(many_maps)
    assert len({at.pos for where in p.stages.values() for at in where}) == 16
    m = probe(p, {f"m{i}": 2 for i in range(16)}, window_s=0.5, warmup_s=0.2)
    assert m.ok, m.error
    assert {f"m{i}" for i in range(16)} <= set(m.stage_signals)


def test_a_knob_whose_tagging_build_fails_is_logged_and_the_others_are_located(caplog):
    def picky(knobs):
        ds = tf.data.Dataset.range(10**9)
        ds = ds.map(lambda x: x + 1, num_parallel_calls=knobs.parallelism("a", max=8))
        if knobs.parallelism("picky", max=8) not in (1, 8):
            raise ValueError("picky takes 1 or 8")
        return ds.map(lambda x: x * 2, num_parallel_calls=knobs.parallelism("b", max=8))

    with caplog.at_level(logging.INFO, logger="intune_flow"):
        stages = Pipeline.load(picky).stages
    assert set(stages) == {"a", "b"}
    failed = [r.getMessage() for r in caplog.records if "tagging builds failed" in r.getMessage()]
    assert len(failed) == 1 and "picky" in failed[0] and "picky takes 1 or 8" in failed[0]
