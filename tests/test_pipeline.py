"""Pipeline: loading, knob discovery, building, schema, fingerprint, and each user error."""

import json
import logging
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
import tensorflow as tf

from intune_flow import AUTOTUNE, KnobError, PipelineError
from intune_flow import pipeline as pipeline_module
from intune_flow.pipeline import Pipeline
from intune_flow.resources import usable_cpus


def tiny(knobs, n=256, batch_size=8, dtype="float32", map_max=8, width=3, repeat=True):
    """A small tf.data factory with two knobs (module-level: loadable by string)."""
    ds = tf.data.Dataset.range(n)
    ds = ds.repeat() if repeat else ds
    ds = ds.map(lambda i: {"x": tf.cast(tf.fill([width], i), dtype), "y": i},
                num_parallel_calls=knobs.parallelism("map", max=map_max))
    return ds.batch(batch_size).prefetch(knobs.buffer("prefetch", max=16))


def own_threadpool(knobs):
    ds = tf.data.Dataset.range(10).batch(2)
    options = tf.data.Options()
    options.threading.private_threadpool_size = knobs.threads("threadpool", max=8)
    return ds.with_options(options)


def raising(knobs):
    knobs.parallelism("read")
    raise RuntimeError("cannot open bucket")


def test_load_by_string_discovers_knobs_and_implicit_threadpool():
    p = Pipeline.load("tests.test_pipeline:tiny")
    assert p.framework == "tf.data"
    assert p.space.names == ("map", "prefetch", "threadpool")
    assert p.implicit_knobs == ("threadpool",)
    pool = p.space["threadpool"]
    assert (pool.kind, pool.min, pool.max, pool.default) == ("threads", 1, 256, AUTOTUNE)
    assert p.space["map"].max == 8 and p.space["prefetch"].kind == "buffer"
    assert p.ref == "tests.test_pipeline:tiny"
    assert Pipeline.load(tiny).ref == "tests.test_pipeline:tiny"


def test_load_pipeline_returns_it_or_merges_kwargs():
    p = Pipeline.load(tiny, batch_size=4)
    assert Pipeline.load(p) is p
    q = Pipeline.load(p, n=32)
    assert q.kwargs == {"batch_size": 4, "n": 32} and q.factory is tiny


def test_a_factory_without_an_importable_reference_is_named_by_module_and_qualname():
    def local(knobs):
        return tf.data.Dataset.range(4)

    p = Pipeline.load(local)
    assert p.ref is None    # not importable again: result.build() must not try
    assert p.name == f"{__name__}:test_a_factory_without_an_importable_reference_is_named_by_module_and_qualname.<locals>.local"
    assert "<function" not in p.name


def test_a_result_that_cannot_import_its_factory_says_how_to_give_it_back():
    from intune_flow.result import TuneResult

    def local(knobs):
        return tf.data.Dataset.range(4).batch(knobs.parallelism("map", max=4))

    elsewhere = TuneResult.from_dict(TuneResult(config={"map": 2}).to_dict())
    with pytest.raises(PipelineError, match=r"result\.bind\(factory\)\.build\(\)"):
        elsewhere.build()
    assert [len(b) for b in elsewhere.bind(local).build()] == [2, 2]


def test_build_applies_config_threadpool_and_autotune():
    p = Pipeline.load(tiny)
    ds = p.build({"map": 3, "threadpool": 7})
    assert ds.options().threading.private_threadpool_size == 7
    assert p.build().options().threading.private_threadpool_size in (None, 0)  # tf default
    batch = next(iter(p.build(p.space.autotune())))
    assert batch["x"].shape == (8, 3)
    own = Pipeline.load(own_threadpool)
    assert own.implicit_knobs == () and own.space["threadpool"].max == 8
    assert own.build({"threadpool": 5}).options().threading.private_threadpool_size == 5


def shuffled(knobs):
    ds = tf.data.Dataset.range(1000).repeat()
    ds = ds.shuffle(knobs.buffer("shuffle", min=16, max=1024, default=64))
    ds = ds.map(lambda i: i * 2, num_parallel_calls=knobs.parallelism("map", max=8))
    return ds.batch(8).prefetch(knobs.buffer("prefetch", max=16))


@pytest.fixture
def fresh_log_memory(monkeypatch):
    """A process that has not yet logged any pipeline's refusal of AUTOTUNE."""
    monkeypatch.setattr(pipeline_module, "_SAID_REJECTED", set())


def test_the_autotune_baseline_keeps_knobs_that_reject_autotune_at_their_default(
        caplog, fresh_log_memory):
    # tf.data's shuffle rejects buffer_size=AUTOTUNE when the dataset is built.
    with caplog.at_level(logging.INFO, logger="intune_flow"):
        p = Pipeline.load(shuffled)
        p.space
    # TensorFlow logs that failed dry build as an error line (not shown at
    # TF_CPP_MIN_LOG_LEVEL=2): the log line quotes the error and says it was expected.
    assert "['shuffle'] do not accept AUTOTUNE" in caplog.text and "expected" in caplog.text
    assert "InvalidArgumentError: buffer_size must be greater than zero" in caplog.text
    assert p.space.autotune() == {"shuffle": 64, "map": AUTOTUNE, "prefetch": AUTOTUNE,
                                  "threadpool": AUTOTUNE}
    assert next(iter(p.build(p.space.autotune()))).shape == (8,)
    with pytest.raises(Exception, match="buffer_size"):
        p.build({"shuffle": AUTOTUNE})          # the knob itself still takes what it is given
    # Not part of the knob's identity: the fingerprint and the space compare as before.
    assert p.space == p.space.without_autotune([]) == p.space.without_autotune(["map"])
    assert Pipeline.load(tiny).space.autotune() == {"map": AUTOTUNE, "prefetch": AUTOTUNE,
                                                    "threadpool": AUTOTUNE}


def test_a_refusal_of_autotune_is_said_at_info_once_per_process(caplog, fresh_log_memory):
    # TuneResult.from_dict(d).build() loads the pipeline by name, and discovers it, each call
    line = "['shuffle'] do not accept AUTOTUNE"
    for _ in range(3):
        with caplog.at_level(logging.DEBUG, logger="intune_flow"):
            space = Pipeline.load("tests.test_pipeline:shuffled").space
        assert space.autotune()["shuffle"] == 64        # found every time
    said = [r.levelno for r in caplog.records if line in r.getMessage()]
    assert said == [logging.INFO, logging.DEBUG, logging.DEBUG]


BUILDS = []


def counted(knobs, tag="a"):
    """``tiny`` that notes each call of the factory."""
    BUILDS.append(tag)
    return tiny(knobs)


def test_a_result_built_again_calls_the_factory_once_per_build():
    # README-only trial 90: each build() of a TuneResult.from_dict result made the knob
    # discovery's dry builds again (1.9 s a build on a zip of two file sources).
    from intune_flow.result import TuneResult

    d = TuneResult(config={"map": 3, "threadpool": 5}, pipeline="tests.test_pipeline:counted",
                   pipeline_kwargs={"tag": "a"}).to_dict()
    result = TuneResult.from_dict(d)
    BUILDS.clear()
    first = result.build()
    discovery = len(BUILDS)
    assert discovery > 1                         # the dry builds, then the build itself
    second = result.build()
    assert len(BUILDS) == discovery + 1 and BUILDS[-1] == "a"
    assert second.options().threading.private_threadpool_size == 5 == \
        first.options().threading.private_threadpool_size
    result.build(tag="b")                        # other arguments: discovered for them
    assert BUILDS[-1] == "b" and len(BUILDS) > discovery + 2
    at = len(BUILDS)
    result.build(tag="b")
    assert len(BUILDS) == at + 1
    # A build makes only the discovery's dry builds: fewer than tuning's description,
    # which also locates the stages and looks for inert knobs.
    BUILDS.clear()
    Pipeline.load(counted).describe()
    assert discovery < len(BUILDS)


def test_schema_and_batch_size():
    p = Pipeline.load(tiny, batch_size=5, width=4)
    assert p.schema() == {"x": {"dtype": "float32", "shape": [None, 4]},
                          "y": {"dtype": "int64", "shape": [None]}}
    assert p.batch_size == 5
    unbatched = Pipeline.load(lambda knobs: tf.data.Dataset.range(3).map(
        lambda i: tf.fill([4], i), num_parallel_calls=knobs.parallelism("m")))
    assert unbatched.schema() == {"0": {"dtype": "int64", "shape": [4]}}
    assert unbatched.batch_size == 1


def test_sparse_and_ragged_leaves_are_told_from_dense_ones_in_the_schema_and_fingerprint():
    def factory(knobs, kind="dense"):
        ds = tf.data.Dataset.range(64).map(lambda i: tf.fill([3], i),
                                           num_parallel_calls=knobs.parallelism("m"))
        if kind == "sparse":
            ds = ds.map(lambda v: tf.sparse.from_dense(v))
        elif kind == "ragged":
            ds = ds.map(lambda v: tf.RaggedTensor.from_tensor(v[None]))
        return ds.batch(8)

    dense, sparse, ragged = (Pipeline.load(factory, kind=k) for k in ("dense", "sparse", "ragged"))
    assert dense.schema() == {"0": {"dtype": "int64", "shape": [None, 3]}}
    assert sparse.schema() == {"0": {"dtype": "sparse int64", "shape": [None, 3]}}
    assert ragged.schema()["0"]["dtype"] == "ragged int64"
    assert len({dense.fingerprint(), sparse.fingerprint(), ragged.fingerprint()}) == 3


def test_torchdata_autotune_resolves_to_concrete_values():
    from torchdata.nodes import Batcher, IterableWrapper, ParallelMapper, Prefetcher

    seen = []

    def factory(knobs):
        workers, buffer = knobs.parallelism("work", max=8), knobs.buffer("prefetch", max=8)
        seen.append((workers, buffer))
        node = ParallelMapper(IterableWrapper(range(100)), lambda i: i * 2, num_workers=workers,
                              method="thread")
        return Prefetcher(Batcher(node, batch_size=10), prefetch_factor=buffer)

    p = Pipeline.load(factory)
    assert p.framework == "torchdata" and p.space.names == ("work", "prefetch")
    p.build(p.space.autotune())
    cores = max(1, int(round(usable_cpus())))
    assert seen[-1] == (min(cores, 8), 2)
    assert p.batch_size == 10


def test_a_torchdata_batch_without_collate_counts_its_items_as_records():
    # A Batcher yields a list of items; without a collate step each item stays a dict.
    from torchdata.nodes import Batcher, IterableWrapper, ParallelMapper

    from intune_flow.probe import probe

    def factory(knobs):
        node = ParallelMapper(IterableWrapper(range(10**9)),
                              lambda i: {"id": i, "dense": np.full(3, i, np.float32)},
                              num_workers=knobs.parallelism("work", max=4), method="thread")
        return Batcher(node, batch_size=16)

    p = Pipeline.load(factory)
    assert p.schema() == {"id": {"dtype": "int", "shape": [None]},
                          "dense": {"dtype": "float32", "shape": [None, 3]}}
    assert p.batch_size == 16 and p.records_in(p.first_element()) == 16
    m = probe(p, window_s=0.5, warmup_s=0.1)
    assert m.status == "ok" and m.records_per_s == pytest.approx(16 * m.elements_per_s, rel=0.05)


# -- errors a user can act on ------------------------------------------------------------
@pytest.mark.parametrize("ref", ["nocolon", ":x", "m:", "a:b:c", "  :  "])
def test_malformed_reference(ref):
    with pytest.raises(PipelineError, match=r"malformed.*package\.module:function"):
        Pipeline.load(ref)


def test_a_dotted_reference_is_answered_with_its_colon_form():
    # README-only trial 93 wrote "pipelines.block_pipeline".
    with pytest.raises(PipelineError, match=r"malformed \(did you mean 'my\.pipes:fn'\?\); "
                                            r"write it as \"package\.module:function\""):
        Pipeline.load("my.pipes.fn")
    with pytest.raises(PipelineError) as info:
        Pipeline.load("nocolon")
    assert "did you mean" not in str(info.value)


def test_reference_that_does_not_import():
    with pytest.raises(PipelineError) as info:
        Pipeline.load("no_such_module_xyz.sub:factory")
    msg = str(info.value)
    assert "no_such_module_xyz.sub" in msg and "ModuleNotFoundError" in msg
    assert "sys.path" in msg and "package.module:function" in msg
    with pytest.raises(PipelineError, match=r"has no attribute 'nope'.*criteo_pipeline"):
        Pipeline.load("examples.criteo:nope")
    with pytest.raises(PipelineError, match=r"did you mean 'criteo_pipe' -> 'criteo_pipeline'"):
        Pipeline.load("examples.criteo:criteo_pipe")


def test_a_module_shadowed_by_one_of_the_same_name_is_named_with_where_it_came_from(
        tmp_path, monkeypatch):
    # A user's json.py next to them: ``import json`` finds the standard library's.
    (tmp_path / "json.py").write_text("def make(knobs):\n    return None\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(PipelineError) as info:
        Pipeline.load("json:make")
    msg = str(info.value)
    assert "has no attribute 'make'" in msg and "shadowed" in msg and "rename it" in msg
    assert str(tmp_path / "json.py") in msg
    # Without a file of that name here, the message only says where the module came from
    # (README-only trial 72: a record's ref to a module since renamed found the stdlib's).
    (tmp_path / "json.py").unlink()
    with pytest.raises(PipelineError) as info:
        Pipeline.load("json:make")
    import json
    assert "shadowed" not in str(info.value)
    assert f"(the module imported from {json.__file__})" in str(info.value)


def test_reference_imports_from_working_directory(tmp_path, monkeypatch):
    (tmp_path / "my_local_pipe.py").write_text(
        "import tensorflow as tf\n"
        "def make(knobs):\n"
        "    return tf.data.Dataset.range(4).batch(2).prefetch(knobs.buffer('p'))\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "path", [p for p in sys.path if p not in ("", str(tmp_path))])
    p = Pipeline.load("my_local_pipe:make")
    assert p.space.names == ("p", "threadpool")


def test_factory_that_raises_names_factory_and_keeps_cause():
    with pytest.raises(PipelineError) as info:
        Pipeline.load(raising).space
    msg = str(info.value)
    assert "tests.test_pipeline:raising" in msg and "RuntimeError" in msg
    assert "cannot open bucket" in msg and "Fix the factory" in msg
    assert isinstance(info.value.__cause__, RuntimeError)


def test_factory_returning_a_non_dataset():
    with pytest.raises(PipelineError) as info:
        Pipeline.load(lambda knobs: [1, 2, 3]).space
    assert "builtins.list" in str(info.value) and "tf.data.Dataset" in str(info.value)
    assert "torchdata.nodes" in str(info.value)
    with pytest.raises(PipelineError, match="must be callable"):
        Pipeline.load(42)
    # A factory that builds its dataset and forgets to return it (README-only trial 93).
    with pytest.raises(PipelineError, match=r"returned builtins.NoneType \(a missing return\?\), "
                                            r"which is not a dataset"):
        Pipeline.load(lambda knobs: None).space


def _prefetch_without_workers(knobs):
    import torch

    workers = knobs.parallelism("workers", max=4) - 1
    return torch.utils.data.DataLoader(range(64), batch_size=8, num_workers=workers,
                                       prefetch_factor=knobs.buffer("prefetch"))


def test_a_dataloader_given_prefetch_factor_without_workers_is_told_how_to_ask_it():
    # torch's own message ends with a period, which the factory's error doubled, and says
    # nothing of asking the knob on every build (README-only trial 93).
    with pytest.raises(PipelineError) as info:
        Pipeline.load(_prefetch_without_workers).space
    msg = str(info.value)
    assert ".." not in msg and "set prefetch_factor to None. Fix the factory" not in msg
    assert "ask the knob on every build and pass it only then" in msg
    assert msg.endswith("else None). Fix the factory or its arguments")


def test_factory_that_yields_no_elements():
    p = Pipeline.load(tiny, n=0, repeat=False)
    assert p.schema()["x"]["shape"] == [None, 3]  # known without data
    with pytest.raises(PipelineError, match="yielded no elements.*files exist"):
        p.first_element()


@pytest.mark.parametrize("declare, match", [
    (lambda k: k.parallelism("read", max=2.5), "max must be an integer"),
    (lambda k: k.parallelism("read", min="1"), "min must be an integer"),
    (lambda k: k.buffer("prefetch", min=8, max=4), r"min \(8\) is greater than max \(4\)"),
    (lambda k: k.paralelism("read"), r"knobs.paralelism does not exist \(did you mean "
                                     r"'paralelism' -> 'parallelism'\?\)"),
    (lambda k: k.parallelism("read", maximum=8), r"got \['maximum'\] \(did you mean "
                                                 r"'maximum' -> 'max'\?\)"),
    (lambda k: k.threads("pool", 8), r"bounds are keyword arguments; write "
                                     r"knobs.threads\('pool', max=...\)"),
])
def test_bad_knob_bounds(declare, match):
    def factory(knobs):
        declare(knobs)
        return tf.data.Dataset.range(3)

    with pytest.raises(KnobError, match=match):
        Pipeline.load(factory).space


def test_config_naming_an_unknown_knob():
    p = Pipeline.load(tiny)
    with pytest.raises(KnobError, match=r"unknown knob.*\['reed'\].*declares"):
        p.build({"reed": 4})
    with pytest.raises(KnobError, match="outside its bounds"):
        p.build({"map": 99})


# -- fingerprint --------------------------------------------------------------------------
def test_fingerprint_stable_and_sensitive():
    base = Pipeline.load(tiny).fingerprint()
    assert Pipeline.load(tiny).fingerprint() == base
    assert len(base) == 32 and int(base, 16) >= 0
    # Not changed by: batch size, data size, config or defaults.
    assert Pipeline.load(tiny, batch_size=64, n=10).fingerprint() == base
    p = Pipeline.load(tiny)
    p.build({"map": 4})
    assert p.fingerprint() == base
    # Changed by: a dtype, a shape, knob bounds.
    assert Pipeline.load(tiny, dtype="float64").fingerprint() != base
    assert Pipeline.load(tiny, width=5).fingerprint() != base
    assert Pipeline.load(tiny, map_max=16).fingerprint() != base


def test_fingerprint_same_in_another_process():
    code = ("from intune_flow.pipeline import Pipeline; "
            "print(Pipeline.load('tests.test_pipeline:tiny').fingerprint())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip().splitlines()[-1] == Pipeline.load(tiny).fingerprint()


def test_a_reference_is_checked_from_its_source_without_importing_it(tmp_path, monkeypatch):
    from intune_flow.reference import check_reference

    (tmp_path / "src_only_pipes.py").write_text(
        "import no_such_dependency_xyz\n\n"
        "def fixed(knobs, files, *, batch_size=8):\n    pass\n\n"
        "def open_ended(knobs, **options):\n    pass\n\n"
        "alias = fixed\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    check_reference("src_only_pipes:fixed", {"files": [], "batch_size": 4})
    with pytest.raises(PipelineError, match=r"takes no argument\(s\) \['batch'\]"):
        check_reference("src_only_pipes:fixed", {"batch": 4})
    check_reference("src_only_pipes:open_ended", {"anything": 1})
    check_reference("src_only_pipes:alias", {"anything": 1})      # not a def: left to the task
    with pytest.raises(PipelineError, match=r"defines no 'fixd' \(did you mean 'fixd' -> 'fixed'\?\)"):
        check_reference("src_only_pipes:fixd")
    with pytest.raises(PipelineError, match="no module named 'no_such_mod_xyz'"):
        check_reference("no_such_mod_xyz:f")
    assert "no_such_dependency_xyz" not in sys.modules and "src_only_pipes" not in sys.modules


def _prefetch_only_in_parallel(knobs):
    calls = knobs.parallelism("map", max=4)
    ds = tf.data.Dataset.range(1000).repeat().map(lambda x: x + 1, num_parallel_calls=calls)
    if calls > 1:   # a mistake: the knob space is found at the defaults, where calls == 1
        ds = ds.prefetch(knobs.buffer("prefetch", max=8))
    return ds.batch(10)


def test_a_knob_declared_only_at_some_configs_is_named_once_in_a_warning(caplog):
    p = Pipeline(_prefetch_only_in_parallel)
    with caplog.at_level(logging.WARNING, logger="intune_flow.pipeline"):
        assert "prefetch" not in p.space.names    # discovery's builds at other values see it
        p.build({"map": 2})
        p.build({"map": 3})
    [warning] = p.late_knob_warnings
    assert "knob 'prefetch' is declared only at some configs" in warning
    assert "it is not tuned" in warning
    assert caplog.text.count("knob 'prefetch' is declared only") == 1


def test_apply_config_warns_of_a_key_that_misspells_what_it_applies():
    import intune_flow

    ds = tf.data.Dataset.range(10).batch(2)
    with pytest.warns(UserWarning, match=r"config key 'thread_pool' is not applied; did you "
                                         r"mean 'threadpool'\?"):
        out = intune_flow.apply_config(ds, {"thread_pool": 32})
    assert out.options().threading.private_threadpool_size in (None, 0)


def test_apply_config_says_a_threadpool_key_is_not_applied_over_the_datasets_own_pool():
    """README-only trial 72: a factory that sets its own pool has no 'threadpool' knob, and
    apply_config dropped a 'threadpool' (or 'thread_pool') key without a word."""
    import warnings

    import intune_flow

    options = tf.data.Options()
    options.threading.private_threadpool_size = 24
    ds = tf.data.Dataset.range(10).batch(2).with_options(options)
    for key in ("threadpool", "thread_pool"):
        with pytest.warns(UserWarning, match=rf"config key '{key}' is not applied: the dataset "
                                             r"sets its own private_threadpool_size 24"):
            out = intune_flow.apply_config(ds, {key: 8})
        assert out.options().threading.private_threadpool_size == 24
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        intune_flow.apply_config(ds, {"pool": 8})    # the factory's own knob: nothing to say
        # A factory knob named 'threadpool' that set the pool: the key is what the pool holds.
        intune_flow.apply_config(ds, {"threadpool": 24})


def _no_knobs_declared(knobs):
    # A README-only trial's factory: the parallelism written in, the knobs taken and unused.
    return tf.data.Dataset.range(1000).repeat().map(lambda x: x + 1, num_parallel_calls=4) \
        .batch(10).prefetch(2)


def test_a_tf_data_factory_that_declares_no_knobs_is_told_what_is_tuned():
    desc = Pipeline(_no_knobs_declared).describe()
    assert desc.space.names == ("threadpool",)
    [warning] = [w for w in desc.warnings if "declares no knobs" in w]
    assert "only 'threadpool' implicit knob(s) are tuned" in warning
    assert 'knobs.parallelism("parse")' in warning
    # A factory that declares one is not told.
    assert not [w for w in Pipeline(tiny).describe().warnings if "declares no knobs" in w]


def _python_reads_the_knobs(knobs):
    """Knobs read only by Python the graph calls: a generator's thread pool, a
    numpy_function's closure; and one knob nothing reads."""
    fetch = knobs.parallelism("fetch", max=32)
    scale = knobs.parallelism("scale", max=8)
    knobs.parallelism("unused", max=8)

    def shards():
        with ThreadPoolExecutor(max_workers=fetch) as pool:
            yield from pool.map(np.float32, range(64))

    ds = tf.data.Dataset.from_generator(shards, output_signature=tf.TensorSpec((), tf.float32))
    ds = ds.map(lambda x: tf.numpy_function(lambda v: np.float32(v * scale), [x], tf.float32),
                num_parallel_calls=knobs.parallelism("map", max=4))
    return ds.batch(8)


def test_a_knob_read_only_by_python_the_graph_calls_is_not_called_inert():
    # A knob sizing a thread pool inside a from_generator generator was reported as
    # changing nothing: the graph names Python functions only by a per-process token.
    p = Pipeline(_python_reads_the_knobs)
    inert = [w for w in p.describe().warnings if "changes nothing" in w]
    assert len(inert) == 1 and "'unused'" in inert[0]
    assert p.signature({"fetch": 2}) == p.signature({"fetch": 2}) != p.signature({"fetch": 4})
    assert p.signature({"scale": 2}) != p.signature({"scale": 3})
    # AUTOTUNE cannot size what only Python reads: ThreadPoolExecutor(-1) raised in README-only
    # trial 94's all-AUTOTUNE probe. The AUTOTUNE baseline keeps such knobs at their defaults.
    space = p.describe().space
    assert [k.name for k in space if not k.autotune] == ["fetch", "scale"]
    assert space.autotune() == {"fetch": 1, "scale": 1, "unused": AUTOTUNE, "map": AUTOTUNE,
                                "threadpool": AUTOTUNE}
    assert len(p.first_element(space.autotune())) == 8


def _two_knobs_one_interleave(knobs, one=False):
    cycle = knobs.parallelism("cycle", max=8)
    calls = cycle if one else knobs.parallelism("calls", max=8)
    ds = tf.data.Dataset.range(4).repeat().interleave(
        lambda i: tf.data.Dataset.range(100).map(lambda x: x + i), cycle_length=cycle,
        num_parallel_calls=calls)
    return ds.map(lambda x: x * 2, num_parallel_calls=knobs.parallelism("map")).batch(8)


def test_two_knobs_on_one_interleave_are_named_with_the_one_knob_fix():
    # README-only trial 93 declared cycle_length and num_parallel_calls as two knobs, which
    # the README advises against (tf.data rejects calls above the cycle), and heard nothing.
    [warning] = [w for w in Pipeline(_two_knobs_one_interleave).describe().warnings
                 if "one interleave" in w]
    assert warning.startswith("knobs 'cycle' and 'calls' of pipeline ")
    assert "cycle_length=k, num_parallel_calls=k" in warning
    one = Pipeline(_two_knobs_one_interleave, {"one": True}).describe()
    assert one.stages["cycle"] and not [w for w in one.warnings if "one interleave" in w]
