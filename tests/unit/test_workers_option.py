"""``workers=``: the scale-out switch, declared once in TuneOptions (no TensorFlow, no servers)."""

import inspect

import pytest

from intune_flow.errors import OptionsError
from intune_flow.options import TuneOptions

REF = "examples.criteo:criteo_pipeline"


@pytest.mark.parametrize("given, kept", [
    ("local:4", "local:4x1"), (" LOCAL:2x1 ", "local:2x1"), ("ray:32x4", "ray:32x4"),
    ("ray://head:10001:8x2", "ray://head:10001:8x2"), (None, None), ("", None), ("none", None),
])
def test_workers_specs_are_parsed_into_their_canonical_form(given, kept):
    assert TuneOptions.parse({"pipeline": REF, "workers": given}).workers == kept


@pytest.mark.parametrize("bad", ["k8s:3", "local", "local:0", "local:2x0", "ray:x2", 4])
def test_a_bad_workers_spec_names_the_argument_and_the_forms(bad):
    with pytest.raises(OptionsError, match="^@intune: workers=") as err:
        TuneOptions.parse({"pipeline": REF, "workers": bad}, where="@intune")
    assert "'local:NxC'" in str(err.value) and "'ray:NxC'" in str(err.value)


@pytest.mark.parametrize("bad,wrong", [
    ("locl:2", "'locl' is not a pool kind (did you mean 'local'?)"),
    ("local", "it names no worker count (local:N)"),
    ("local:-1", "'-1' is not a worker count N or NxC"),
    ("local:2x1:lots", "'lots' is not a RAM size per worker"),
    (2, "the spec is a string such as 'local:2'")])
def test_a_bad_workers_spec_says_which_part_is_wrong(bad, wrong):
    # A README-only trial met the list of forms alone for each of these.
    with pytest.raises(OptionsError) as err:
        TuneOptions.parse({"pipeline": REF, "workers": bad})
    assert f"workers={bad!r}: {wrong}" in str(err.value)


def test_every_surface_takes_workers_and_the_default_is_single_node():
    for surface in ("tune", "cli", "metaflow", "airflow"):
        assert "workers" in TuneOptions.names(surface)
        assert TuneOptions.defaults(surface)["workers"] is None
    from intune_flow import tune

    assert inspect.signature(tune).parameters["workers"].default is None
    assert "ray:N[xC]" in TuneOptions.doc("workers")


def test_the_cli_has_a_workers_flag_checked_like_the_others():
    import argparse

    from intune_flow.cli import tune as cli_tune

    parser = argparse.ArgumentParser()
    cli_tune.register(parser.add_subparsers())
    args = parser.parse_args(["tune", REF, "--workers", "local:2"])
    assert args.workers == "local:2"
    with pytest.raises(OptionsError, match="^--workers: workers='gpu:1'"):
        TuneOptions.parse({"pipeline": REF, "workers": "gpu:1"}, where=cli_tune._flag,
                          surface="cli")


def test_workers_is_in_the_options_json():
    # (that parsing imports neither TensorFlow nor Ray is the tests/unit guard's to check:
    # in-process it depends on which tests ran before)
    o = TuneOptions.parse({"pipeline": REF, "workers": "local:2x1"})
    assert o.to_dict()["workers"] == "local:2x1" and o.tune_kwargs()["workers"] == "local:2x1"


@pytest.mark.parametrize("given, kept, ram", [
    ("local:4x1:2GiB", "local:4x1:2GiB", 2 * 2**30), ("local:4:512mib", "local:4x1:512MiB", 2**29),
    ("ray:8x2:4gib", "ray:8x2:4GiB", 4 * 2**30),
    ("ray://head:10001:8x2:1.5GiB", "ray://head:10001:8x2:1536MiB", 3 * 2**29),
    ("local:2x1:1073741824", "local:2x1:1GiB", 2**30), ("local:2x1", "local:2x1", None),
])
def test_a_ram_budget_per_worker_is_written_like_ram_budget(given, kept, ram):
    from intune_flow.scaleout.pools import make_pool, parse_pool_spec

    assert TuneOptions.parse({"pipeline": REF, "workers": given}).workers == kept
    spec = parse_pool_spec(given)
    assert spec.ram_per_worker == ram and parse_pool_spec(str(spec)) == spec
    if spec.kind == "local" and (ram or 0) < 2**31:     # builds the pool, starts nothing
        assert make_pool(spec).ram_per_worker == ram


@pytest.mark.parametrize("bad", ["local:4x1:2GB2", "local:4x1:lots", "local:4x1:0GiB",
                                 "local:4x1:2GiB:3", "ray:2x1:-1GiB"])
def test_a_bad_ram_per_worker_names_the_argument_and_the_forms(bad):
    with pytest.raises(OptionsError, match="^InTuneOperator: workers=") as err:
        TuneOptions.parse({"pipeline": REF, "workers": bad}, where="InTuneOperator")
    assert "':SIZE'" in str(err.value) and "'local:4x1:2GiB'" in str(err.value)


def test_ram_per_worker_beyond_the_machine_is_refused_for_local_workers():
    from intune_flow.scaleout.pools import LocalProcessPool, make_pool

    with pytest.raises(OptionsError, match=r"^workers='local:4x1:4096GiB': 4096.0 GiB of RAM "
                                           r"per worker x 4 local workers is more than this "
                                           r"machine's"):
        make_pool("local:4x1:4TiB")     # the value refused is in the spec it names
    with pytest.raises(OptionsError, match="^ram_per_worker='lots'"):
        LocalProcessPool(1, ram_per_worker="lots")


def test_local_workers_this_machine_cannot_hold_are_refused_by_tune_before_tuning():
    # Raised before the fallback point: no search would ever run them.
    from intune_flow import tune
    from intune_flow.resources import usable_cpus

    with pytest.raises(OptionsError, match="more than this machine's"):
        tune(REF, workers="local:2x1:4TiB", budget_s=5, cache="memory://fits")
    wide = int(usable_cpus()) + 1
    with pytest.raises(OptionsError, match=rf"a local worker of {wide} cores is more than "
                                           rf"the {wide - 1} cores"):
        tune(REF, workers=f"local:2x{wide}", budget_s=5, cache="memory://fits")
    # A Ray spec without a cluster address starts a local Ray on this machine: the same
    # check (a README-only trial's ray:2x8 on 2 cores was taken silently).
    with pytest.raises(OptionsError, match=rf"^workers='ray:2x{wide}': a ray worker of {wide} "
                                           rf"cores is more than the {wide - 1} cores"):
        tune(REF, workers=f"ray:2x{wide}", budget_s=5, cache="memory://fits")
    with pytest.raises(OptionsError, match=r"^workers='ray:2x1:4096GiB': .* more than this "
                                           r"machine's"):
        tune(REF, workers="ray:2x1:4TiB", budget_s=5, cache="memory://fits")


def test_the_worker_class_in_cache_keys_carries_the_ram_per_worker():
    from intune_flow.scaleout.pools import parse_pool_spec
    from intune_flow.scaleout.run import worker_class

    assert worker_class(parse_pool_spec("local:2x1")) == "workers-local1c"
    assert worker_class(parse_pool_spec("ray:8x4:12GiB")) == "workers-ray4c-ram8g"


def test_demand_is_a_rate_for_scale_out_on_every_surface():
    import inspect

    from intune_flow import tune

    o = TuneOptions.parse({"pipeline": REF, "workers": "local:2", "demand": "2e5"})
    assert o.demand == 2e5 and o.to_dict()["demand"] == 2e5
    for surface in ("tune", "cli", "metaflow", "airflow"):
        assert "demand" in TuneOptions.names(surface)
    assert inspect.signature(tune).parameters["demand"].default is None
    with pytest.raises(OptionsError, match="^@intune: demand must be a positive number of "
                                           "records/s, got -5"):
        TuneOptions.parse({"pipeline": REF, "workers": "local:2", "demand": -5},
                          where="@intune")
    with pytest.raises(OptionsError, match="demand=1000.0 records/s applies to scale-out only; "
                                           "give workers= too"):
        TuneOptions.parse({"pipeline": REF, "demand": 1000})


def test_a_single_node_method_with_workers_is_refused_with_the_fix():
    # A README-only trial's method="ones" with workers= returned a scale-out result recorded
    # as method 'ones', though the node searches ran the agent.
    with pytest.raises(OptionsError, match="method='ones' does not apply with workers=: .*"
                                           "leave method unset"):
        TuneOptions.parse({"pipeline": REF, "workers": "local:2", "method": "ones"})
    assert TuneOptions.parse({"pipeline": REF, "workers": "local:2",
                              "method": "intune"}).method == "intune"


def test_a_local_ray_goes_under_a_short_ray_tmpdir_and_under_tmp_otherwise(monkeypatch,
                                                                             tmp_path, caplog):
    from intune_flow.scaleout.pools.ray import RAY_TEMP_BASE_MAX, ray_temp_base

    monkeypatch.delenv("RAY_TMPDIR", raising=False)
    assert ray_temp_base() == "/tmp"
    long = tmp_path / ("x" * RAY_TEMP_BASE_MAX)
    monkeypatch.setenv("RAY_TMPDIR", str(long))
    assert ray_temp_base() == "/tmp" and "too long for Ray's socket paths" in caplog.text
    assert not long.exists()
    short = "/" + "r" * (RAY_TEMP_BASE_MAX - 1)      # never created: only its length matters
    monkeypatch.setattr("os.makedirs", lambda path, exist_ok=False: None)
    monkeypatch.setenv("RAY_TMPDIR", short)
    assert ray_temp_base() == short


def test_the_done_line_says_why_no_stage_ran():
    # README-only trial 92: a demand the first window met (K = 0 at AUTOTUNE) ended on
    # "(every stage ran)" though no stage had run.
    from types import SimpleNamespace

    from intune_flow.scaleout.run import _done_event

    def done(stages, trainer_wait):
        pick = SimpleNamespace(delivered=1e6, config={"map": -1}, ok=True, status="ok",
                               trainer_wait=trainer_wait)
        outcome = SimpleNamespace(pick=pick, stages=stages, workers=0)
        return _done_event(outcome, SimpleNamespace(measurements=[pick]), 6.1)["stopped"]
    assert done([], 0.0) == "the first window met the demand: no stage ran"
    assert done([], 0.4) == "no stage ran"
    assert done([{"stage": "tune the trainer", "ran": True}], 0.0) == "every stage ran"
    assert done([{"stage": "start the first worker", "ran": False}], 0.4) == \
        "skipped for the budget: start the first worker"


def test_a_worker_log_of_tensorflow_start_up_lines_only_is_not_quoted_as_the_cause(tmp_path):
    # README-only trial 92: a registration timeout quoted "Its log ends: WARNING: All log
    # messages before absl::InitializeLog() ... | I0000 ... oneDNN custom operations are on".
    from intune_flow.scaleout.pools import LocalProcessPool, WorkerInfo

    pool = LocalProcessPool(1)
    pool._dir = tmp_path
    log = tmp_path / "worker-0.log"
    startup = ("WARNING: All log messages before absl::InitializeLog() is called are written "
               "to STDERR\nI0000 00:00:1 123 port.cc:153] oneDNN custom operations are on.\n")
    log.write_text(startup)
    said = pool._diagnose(WorkerInfo(index=0))
    assert "absl" not in said and "oneDNN" not in said
    assert "only TensorFlow's start-up lines" in said
    log.write_text(startup + "RuntimeError: address already in use\n")
    assert pool._diagnose(WorkerInfo(index=0)) == \
        " Its log ends: RuntimeError: address already in use"


@pytest.mark.parametrize("spec, said", [
    ("local:2x1:1", "1 bytes is less than a tf.data service worker needs"),
    ("local:2x1:1MiB", "1MiB is less than a tf.data service worker needs"),
    ("ray://head:10001:2:100MiB", "give at least 512MiB"),
    ("local:2x1:-1GiB", "'-1GiB' is not a RAM size per worker (not a memory size"),
    ("local:2x1:0", "the RAM size per worker '0': not a memory size"),
])
def test_a_ram_per_worker_no_worker_can_run_in_is_refused_saying_why(spec, said):
    # README-only trial 92: 'local:2x1:1MiB' was accepted, and its tuning fell back 18 s
    # later on a RAM guard every config failed (a worker's TensorFlow holds ~522 MiB);
    # '-1GiB' was echoed lower-cased and '0' was refused without a reason.
    from intune_flow.scaleout.pools import LocalProcessPool, parse_pool_spec

    with pytest.raises(OptionsError) as err:
        TuneOptions.parse({"pipeline": REF, "workers": spec})
    assert said in str(err.value), str(err.value)
    assert parse_pool_spec("local:2x1:512MiB").ram_per_worker == 2**29
    with pytest.raises(OptionsError, match=r"^ram_per_worker='1MiB': 1MiB is less than"):
        LocalProcessPool(1, ram_per_worker="1MiB")
