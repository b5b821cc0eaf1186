"""Knob declaration, knob spaces and configs: the contract every pipeline factory relies on."""

import pytest

from intune_flow.errors import KnobError
from intune_flow.knobs import AUTOTUNE, Knob, Knobs, KnobSpace, at_their_max


def _factory(knobs):
    read = knobs.parallelism("read", max=32)
    assert knobs.parallelism("read") == read  # a repeat may omit the bounds
    knobs.parallelism("parse", max=16, default=2)
    knobs.buffer("prefetch", max=64)
    return read


def test_discovery_records_each_knob_once_in_declaration_order():
    knobs = Knobs()
    _factory(knobs)
    assert knobs.space.names == ("read", "parse", "prefetch")
    assert knobs.space["parse"] == Knob("parse", "parallelism", 1, 16, 2)
    assert knobs.config == {"read": 1, "parse": 2, "prefetch": 1}


def test_build_mode_hands_out_config_values():
    knobs = Knobs({"read": 12, "prefetch": AUTOTUNE})
    assert _factory(knobs) == 12
    assert knobs.config == {"read": 12, "parse": 2, "prefetch": AUTOTUNE}


@pytest.mark.parametrize("kwargs, message", [
    ({"min": 4, "max": 2}, "greater than max"),
    ({"max": 2.5}, "must be an integer"),
    ({"min": "1"}, "must be an integer"),
    ({"min": 0}, "at least 1"),
    ({"max": 8, "default": 9}, "outside"),
])
def test_bad_bounds_name_the_problem(kwargs, message):
    with pytest.raises(KnobError, match=message):
        Knobs().parallelism("read", **kwargs)


def test_conflicting_redeclaration_is_an_error():
    knobs = Knobs()
    knobs.parallelism("read", max=32)
    with pytest.raises(KnobError, match="different max"):
        knobs.parallelism("read", max=16)
    with pytest.raises(KnobError, match="declared as parallelism and as buffer"):
        knobs.buffer("read")


def _space():
    knobs = Knobs()
    _factory(knobs)
    return knobs.space


def test_validate_rejects_unknown_knobs_and_out_of_range_values():
    space = _space()
    with pytest.raises(KnobError, match=r"unknown knob.*\['raed'\].*declares"):
        space.validate({"raed": 4})
    with pytest.raises(KnobError, match="outside its bounds"):
        space.validate({"read": 33})
    with pytest.raises(KnobError, match="needs an integer"):
        space.validate({"read": "four"})
    assert space.validate({"read": "4"}) == {"read": 4, "parse": 2, "prefetch": 1}
    assert space.validate({"read": AUTOTUNE})["read"] == AUTOTUNE


def test_baseline_configs():
    space = _space()
    assert space.ones() == {"read": 1, "parse": 1, "prefetch": 1}
    assert set(space.autotune().values()) == {AUTOTUNE}
    concrete = space.concretize(space.autotune(), cpu_budget=8)
    assert concrete == {"read": 8, "parse": 8, "prefetch": 2}


def test_grid_steps_are_geometric_and_clamped():
    knob = Knob("read", "parallelism", 1, 32, 1)
    assert knob.grid()[:6] == (1, 2, 3, 4, 6, 8)
    assert knob.step(32, +1) == 32 and knob.step(1, -1) == 1
    assert knob.step(5, +1) == 6 and knob.step(5, -1) == 4
    odd = Knob("x", "buffer", 3, 10, 3)
    assert odd.grid() == (3, 4, 6, 8, 10)
    # A shuffle buffer of thousands steps geometrically too (the grid once ended at 1,024,
    # so a 1,024-16,384 buffer jumped from its min straight to its max).
    shuffle = Knob("shuffle", "buffer", 1024, 16384, 1024)
    assert shuffle.grid() == (1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384)
    assert shuffle.step(1024, +1) == 1536


def test_space_fingerprint_depends_on_bounds_not_defaults():
    space = _space()
    same = KnobSpace.from_json(space.to_json())
    assert same == space and same.fingerprint() == space.fingerprint()
    moved_default = KnobSpace(tuple(Knob(k.name, k.kind, k.min, k.max, k.max) for k in space))
    assert moved_default.fingerprint() == space.fingerprint()
    wider = KnobSpace(tuple(Knob(k.name, k.kind, k.min, k.max * 2, k.default) for k in space))
    assert wider.fingerprint() != space.fingerprint()
    with pytest.raises(KnobError, match="malformed"):
        KnobSpace.from_json([{"name": "x"}])


def test_declared_thread_knobs_tuned_to_their_max_are_named_with_the_fix():
    space = KnobSpace((Knob("get", "parallelism", 1, 8, 1), Knob("pool", "threads", 1, 16, 1),
                       Knob("prefetch", "buffer", 1, 4, 1), Knob("threadpool", "threads", 1, 256, 1),
                       Knob("fixed", "parallelism", 2, 2, 2)))
    config = {"get": 8, "pool": 16, "prefetch": 4, "threadpool": 256, "fixed": 2}
    out = at_their_max(space, config, implicit=("threadpool",))
    assert len(out) == 2, out      # not a buffer, an implicit knob or a knob with one value
    assert "knob 'get' was tuned to its max (8)" in out[0] and "knobs.parallelism('get'" in out[0]
    assert "knobs.threads('pool', max=...)" in out[1]
    assert at_their_max(space, {**config, "get": AUTOTUNE, "pool": 15}, ("threadpool",)) == []
    # Measured while other processes kept the CPU busy: the warning says the CPU may be it.
    shared = at_their_max(space, config, implicit=("threadpool",), contended=True)
    assert [w.startswith(o) for w, o in zip(shared, out)] == [True, True]
    assert all("other processes kept the CPU busy" in w for w in shared)
    assert not any("other processes" in w for w in out)


def test_a_knob_at_its_max_in_a_process_held_to_one_core_is_named_with_the_gil_doubt():
    # README-only trial 90: a torchdata pipeline of thread mappers used 0.96 of 2 cores; its
    # collate, named at its max of 8 ("raise the bound"), read the same at 1-8 calls.
    from intune_flow.measurement import Measurement
    from intune_flow.tune import one_core as cores_if_one_used

    space = KnobSpace((Knob("collate", "parallelism", 1, 8, 1),))
    plain = at_their_max(space, {"collate": 8})
    held = at_their_max(space, {"collate": 8}, one_core=2)
    assert len(held) == 1 and held[0].startswith(plain[0])
    assert "used about one core of 2" in held[0] and "the GIL, not the bound" in held[0]
    assert "GIL" not in plain[0]
    # Both doubts at once: one parenthesis, a clause for each kind of call (trial 93 read two
    # parentheses in a row as contradicting each other).
    [both] = at_their_max(space, {"collate": 8}, contended=True, one_core=2)
    assert ") (" not in both and both.startswith(plain[0] + " (if its calls compute")
    assert "; if its calls run Python in threads" in both and both.endswith("in parallel)")

    def one_core(framework, cores, util):
        return cores_if_one_used(Measurement(config={}, cpu_util=util), cores, framework)
    assert one_core("torchdata", 2, 0.48) == 2 and one_core("tf.data", 4, 0.26) == 4
    assert one_core("torchdata", 2, 0.75) is None          # 1.5 cores: threads ran in parallel
    assert one_core("torchdata", 1, 0.9) is None           # one core is all it had
    assert one_core("torch.utils.data", 2, 0.5) is None    # worker processes, no shared GIL


def test_a_knob_at_its_max_whose_calls_were_not_all_busy_is_not_named():
    # README-only trial 70: 16 parse and 16 feature calls on a pool of 3 threads were named
    # ("raise the bound") though the pool held them; their stage signals read them idle.
    from types import SimpleNamespace

    from intune_flow.measurement import Measurement
    from intune_flow.result import TuneResult
    from intune_flow.tune import TuningRun

    space = KnobSpace((Knob("read", "parallelism", 1, 8, 1), Knob("parse", "parallelism", 1, 16, 1),
                       Knob("threadpool", "threads", 1, 256, 1)))
    config = {"read": 8, "parse": 16, "threadpool": 3}
    assert len(at_their_max(space, config, ("threadpool",))) == 2
    assert [w[:12] for w in at_their_max(space, config, ("threadpool",), idle=["parse"])] == \
        ["knob 'read' "]
    run = SimpleNamespace(description=SimpleNamespace(space=space, implicit=("threadpool",), inert=(),
                                                      framework="tf.data"), cpu_budget=2)

    def named(signals, pool=3):
        cfg = {**config, "threadpool": pool}
        m = Measurement(config=cfg, throughput=1.0, cpu_util=0.7, stage_signals=signals)
        result = TuneResult(config=cfg, throughput=1.0)
        TuningRun._warn_at_max(run, result, m)
        return sorted(w.split("'")[1] for w in result.warnings)

    # The interleave has no signal (not timed): named; parse's 3 of 16 calls busy: not.
    assert named({"parse": 3 / 16, "threadpool": 1.0}) == ["read"]
    assert named({"parse": 3 / 16, "threadpool": 1.0}, pool=AUTOTUNE) == ["read"]  # 2 cores
    assert named({"parse": 0.95, "threadpool": 1.0}) == ["parse", "read"]
    assert named({}) == ["parse", "read"]
    # On a pool as large as its calls a low share is not the pool's doing (the signal
    # under-reads CPU-bound maps of many small ops): named.
    assert named({"parse": 0.1, "threadpool": 0.2}, pool=16) == ["parse", "read"]


def test_a_config_built_by_hand_with_a_misspelled_knob_warns_and_names_it():
    import warnings

    with pytest.warns(UserWarning, match=r"knob 'clicks' is not in the config, which has "
                                         r"'click': a misspelling\? 'clicks' gets its default"):
        assert Knobs({"click": 8}).parallelism("clicks", max=64) == 1
    # README-only trial 74: 'lite' for 'light' gave the knob its default without a word.
    with pytest.warns(UserWarning, match=r"knob 'light' is not in the config, which has 'lite'"):
        assert Knobs({"lite": 2, "heavy": 2}).parallelism("light", max=8) == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert Knobs({"read": 8}).parallelism("map") == 1      # nothing like it: no warning
        assert Knobs().parallelism("clicks") == 1               # discovery: no config
        assert Knobs({"clicks": 4}).parallelism("clicks") == 4
    # A name is blamed on the knob it is closest to, not on every knob like it.
    knobs = Knobs({"parse_aa": 4})
    with pytest.warns(UserWarning, match="knob 'parse_a' is not in the config") as caught:
        knobs.parallelism("parse_a")
        knobs.parallelism("parse_b")
    assert ["parse_b" in str(w.message) for w in caught] == [False]


def test_the_max_warning_blames_other_processes_only_where_they_took_a_share():
    # A 2-core machine this process alone kept at 0.78 read 0.81 busy (kernel, background):
    # not others' load. Another job's 0.3 is.
    from intune_flow.measurement import Measurement
    from intune_flow.tune import contended
    alone = Measurement(config={}, cpu_util=0.78, machine_busy=0.81)
    shared = Measurement(config={}, cpu_util=0.55, machine_busy=0.85)
    assert alone.others_busy == pytest.approx(0.03) and not contended(alone)
    assert shared.others_busy == pytest.approx(0.30) and contended(shared)
    assert Measurement(config={}, cpu_util=0.5).others_busy == 0.0     # not known
    assert not contended(Measurement(config={}, cpu_util=0.3, machine_busy=0.6))  # room left


def test_a_knob_at_its_max_whose_lower_value_read_the_same_is_not_named():
    from intune_flow.knobs import flat_below_max
    knobs = Knobs()
    knobs.parallelism("get", max=64)
    knobs.parallelism("parse", max=8)
    space = knobs.space
    config = {"get": 64, "parse": 8}
    looks = [{"config": config, "throughput": 4230.0},
             {"config": {"get": 64, "parse": 6}, "throughput": 4221.0},     # flat: not the bound
             {"config": {"get": 48, "parse": 8}, "throughput": 3200.0},     # the bound held it
             {"config": {"get": 32, "parse": 6}, "throughput": 4229.0},     # two knobs moved
             {"config": "damaged"}]
    assert flat_below_max(space, config, looks) == ["parse"]
    assert at_their_max(space, config, idle=flat_below_max(space, config, looks))[0].startswith(
        "knob 'get' was tuned to its max (64)")
    assert len(at_their_max(space, config)) == 2
    assert flat_below_max(space, config, looks[1:]) == []      # no look of the config itself
    assert flat_below_max(space, config, [looks[0], {**looks[1], "throughput": 4100.0}]) == []


def test_a_held_knob_keeps_its_default_and_a_start_config_is_fitted_to_it():
    space = KnobSpace((Knob("map", "parallelism", 1, 16, 1), Knob("shuffle", "buffer", 1, 1024, 8)))
    held = space.held(["shuffle"])
    assert held["shuffle"].grid() == (8,) and not held["shuffle"].autotune
    assert held.autotune() == {"map": AUTOTUNE, "shuffle": 8}
    assert held.ones() == {"map": 1, "shuffle": 8}
    assert held.fit({"map": 4, "shuffle": 6}) == {"map": 4, "shuffle": 8}
    assert space.fit({"map": 4, "shuffle": 6}) == {"map": 4, "shuffle": 6}
    assert space.held([]) == space and space.fingerprint() == KnobSpace(space.knobs).fingerprint()
