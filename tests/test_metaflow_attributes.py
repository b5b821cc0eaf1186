"""@intune attributes, budgets, cache location, card rows and the summary: no flow run needed."""

import json
import sys

import pytest

from intune_flow.errors import ConfigurationError
from intune_flow.metaflow.attributes import (build_time_values, deferred, parameter_note, parse,
                                             resolve)
from intune_flow.metaflow.card import config_rows, history_rows, summary_rows, throughput_png
from intune_flow.metaflow.defaults import default_cache, resource_budgets
from intune_flow.metaflow.summary import format_side_by_side, format_summary, summarize

REF = "examples.dlrm:train"  # any module:attr; its source is read, it is not imported


def test_strings_from_the_command_line_are_coerced():
    s = parse({"pipeline": REF, "budget_s": "30", "strict": "true", "cpu_budget": "2",
                "ram_budget": "512MiB", "window_s": "0.5", "timeout_s": "5",
                "pipeline_kwargs": '{"batch_size": 64}'})
    assert s.budget_s == 30.0 and s.strict is True and s.cpu_budget == 2.0
    assert s.ram_budget == 512 * 2**20 and s.window_s == 0.5 and s.timeout_s == 5.0
    assert parse({"pipeline": REF}).timeout_s is None
    assert parse({"pipeline": REF, "timeout_s": "none"}).timeout_s is None
    assert s.pipeline_kwargs == {"batch_size": 64} and s.method == "intune"
    assert parse({"pipeline": REF, "strict": "False"}).strict is False


@pytest.mark.parametrize("attrs, match", [
    ({}, "needs pipeline="),
    ({"pipeline": "examples.dlrm.train"}, "malformed"),
    ({"pipeline": "examples.dlrm:"}, "malformed"),
    ({"pipeline": "no_such_module_xyz:f"}, "no module named 'no_such_module_xyz'"),
    ({"pipeline": "examples.dlrm:trian"}, r"defines no 'trian' \(did you mean 'trian' -> 'train'\?\)"),
    ({"pipeline": REF, "cache": "s3://"}, "cache: cache URI 's3://' names no bucket"),
    ({"pipeline": REF, "cache": "ftp://host/x"}, "scheme 'ftp':// is not supported"),
    ({"pipeline": REF, "budget_s": -1}, "budget_s must be a positive number of seconds, got -1"),
    ({"pipeline": REF, "budget_s": 0}, "budget_s must be a positive number of seconds, got 0"),
    ({"pipeline": REF, "budget_s": "soon"}, r"budget_s must be a positive number of seconds \(a bare number, no unit\), got 'soon'"),
    ({"pipeline": REF, "cpu_budget": 0}, "cpu_budget must be a positive number of cores"),
    ({"pipeline": REF, "timeout_s": 0}, "timeout_s must be a positive number of seconds, got 0"),
    ({"pipeline": REF, "timeout_s": -3}, "got -3"),
    ({"pipeline": REF, "timeout_s": "later"}, "got 'later'; e.g. timeout_s=30"),
    ({"pipeline": REF, "timeout_s": float("inf")}, "got inf"),
    ({"pipeline": REF, "ram_budget": "lots"}, "not a memory size"),
    ({"pipeline": REF, "strict": "maybe"}, "strict must be True or False"),
    ({"pipeline": REF, "pipeline_kwargs": "{not json"}, "JSON on the command line"),
    ({"pipeline": REF, "pipeline_kwargs": "[1, 2]"}, "must be a dict"),
    ({"pipeline": REF, "method": "magic"}, "method must be one of intune, ones"),
    ({"pipeline": REF, "budgett": 3}, "does not take 'budgett'"),
    ({"pipeline": "examples.criteo:criteo_pipeline", "pipeline_kwargs": {"batchsize": 64}},
     r"takes no argument\(s\) \['batchsize'\] \(did you mean 'batchsize' -> "
     r"'batch_size'\?\)"),
])
def test_bad_attributes_name_the_problem(attrs, match):
    with pytest.raises(ConfigurationError, match=match):
        parse(attrs)


def test_a_misspelled_attribute_is_refused_as_the_flow_is_built_naming_the_near_miss():
    from metaflow.exception import MetaflowException

    from intune_flow.metaflow.decorator import IntuneDecorator

    # Written in the flow's source, the decorator is made as the class is defined, where a
    # raise is a bare traceback: the refusal waits for step_init, inside Metaflow's CLI.
    deco = IntuneDecorator(attributes={"pipeline": REF, "budget": 5}, statically_defined=True)
    with pytest.raises(MetaflowException, match=r"step 'train': @intune does not take 'budget' "
                                                 r"\(did you mean 'budget' -> 'budget_s'\?\)"):
        deco.step_init(None, None, "train", [], None, None, None)
    deco = IntuneDecorator(attributes={"pipeline": REF, "budget_s": 5}, statically_defined=True)
    assert deco.attributes["budget_s"] == 5 and deco._refused is None


def test_the_factory_is_found_in_the_source_without_importing_the_module(tmp_path, monkeypatch):
    # Its dependencies may exist only on the remote machine that runs the step.
    (tmp_path / "remote_only_pipes.py").write_text(
        "import no_such_dependency_xyz\n\nif True:\n    def pipe(knobs):\n        pass\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert parse({"pipeline": "remote_only_pipes:pipe"}).pipeline == "remote_only_pipes:pipe"
    assert "remote_only_pipes" not in sys.modules
    with pytest.raises(ConfigurationError, match="defines no 'pipes'"):
        parse({"pipeline": "remote_only_pipes:pipes"})
    # Names made at run time cannot be read from the source: left to the task.
    (tmp_path / "dynamic_pipes.py").write_text("globals()['made'] = lambda knobs: None\n")
    assert parse({"pipeline": "dynamic_pipes:made"}).pipeline == "dynamic_pipes:made"


def test_parameters_and_callables_are_checked_with_defaults_and_resolved_on_the_task():
    from metaflow import Parameter

    budget = Parameter("budget", type=float, default=12.0)
    attrs = {"pipeline": REF, "budget_s": budget, "pipeline_kwargs": lambda flow: {"files": flow.files}}
    assert set(deferred(attrs)) == {"budget_s", "pipeline_kwargs"}
    assert parse(build_time_values(attrs)).budget_s == 12.0

    class Flow:
        files = ["a", "b"]

    Flow.budget = 7
    s = parse(resolve(attrs, Flow()))
    assert s.budget_s == 7.0 and s.pipeline_kwargs == {"files": ["a", "b"]}
    with pytest.raises(ConfigurationError, match="budget_s must be a positive number of seconds, got -1"):
        parse(build_time_values({"pipeline": REF, "budget_s": Parameter("b", default=-1)}))


def test_a_wrong_value_from_a_parameter_names_the_parameter():
    from metaflow import Parameter

    # README-only trial 91: `run --budget 0` was answered "budget_s must be ...; e.g.
    # budget_s=60", which sends the fix to the decorator, not to the run's --budget.
    attrs = {"pipeline": REF, "budget_s": Parameter("budget", default=30),
             "window_s": Parameter("window", default=1.0), "strict": False}
    note = parameter_note(attrs, {**attrs, "budget_s": 0, "window_s": 1.0})
    assert note == (" (budget_s is the flow's Parameter 'budget': this run's --budget or the "
                    "Parameter's default)")
    assert parameter_note(attrs, {**attrs, "budget_s": 5, "window_s": 1.0}) == ""
    assert parameter_note({"pipeline": REF, "budget_s": 0}, {"pipeline": REF, "budget_s": 0}) == ""


class _Deco:
    def __init__(self, name, attributes, user_set):
        self.name, self.attributes, self._user_defined_attributes = name, attributes, set(user_set)


def test_resources_give_the_default_budgets_only_where_the_user_set_them():
    assert resource_budgets([_Deco("resources", {"cpu": 4, "memory": 8192}, ["cpu", "memory"])]) \
        == (4.0, 8192 * 2**20)
    assert resource_budgets([_Deco("resources", {"cpu": 1, "memory": 2048}, ["memory"])]) \
        == (None, 2048 * 2**20)
    assert resource_budgets([_Deco("resources", {"cpu": "2"}, ["cpu"]),
                             _Deco("kubernetes", {"cpu": 8}, ["cpu"])])[0] == 8.0
    assert resource_budgets([_Deco("retry", {"times": 3}, ["times"])]) == (None, None)


def test_default_cache_prefers_the_environment_then_the_s3_datastore(monkeypatch):
    monkeypatch.setenv("INTUNE_FLOW_CACHE", "/some/where")
    assert default_cache("s3") == ("/some/where", "$INTUNE_FLOW_CACHE")
    monkeypatch.delenv("INTUNE_FLOW_CACHE")
    assert default_cache("local") == (None, "the local default")
    import metaflow.metaflow_config as mfconf

    monkeypatch.setattr(mfconf, "DATASTORE_SYSROOT_S3", "s3://bucket/metaflow/")
    assert default_cache("s3") == ("s3://bucket/metaflow/intune_flow", "the Metaflow S3 datastore root")


RECORD = {
    "pipeline": "m:f", "source": "tuned", "reason": None, "tuning_seconds": 12.5,
    "seconds_saved": 0.0, "throughput": 3000.0, "start_throughput": 1000.0,
    "config": {"read": 4, "prefetch": 8}, "start_config": {"read": 1, "prefetch": 1},
    "history": [{"config": {"read": 1, "prefetch": 1}, "throughput": 1000.0, "status": "ok", "seconds": 1.0},
                {"config": {"read": 4, "prefetch": 8}, "throughput": 3000.0, "status": "ok", "seconds": 1.0,
                 "stage_signals": {"read": 0.934}},
                {"config": {"read": 8, "prefetch": 8}, "throughput": 0.0, "status": "oom", "seconds": 0.4}],
    "cpu_budget": 2.0, "ram_budget": 2**31, "method": "intune", "cache": "/c", "cache_origin": "decorator",
}


def test_card_rows_hold_the_figures():
    rows = dict(summary_rows(RECORD))
    assert rows["source"] == "tuned" and rows["tuning seconds"] == "12.5 s"
    assert rows["speedup over start"] == "3.00x" and rows["ram budget"] == "2.0 GiB"
    assert config_rows(RECORD) == [["read", "1", "4", "93%"], ["prefetch", "1", "8", "-"]]
    hybrid = {"config": {"read": -1, "prefetch": 8}, "throughput": 3500.0, "status": "ok",
              "autotune_choices": {"read": 12}}
    mixed = {**RECORD, "config": hybrid["config"], "history": RECORD["history"] + [hybrid]}
    assert config_rows(mixed)[0] == ["read", "1", "AUTOTUNE (12)", "-"]   # what AUTOTUNE held
    assert config_rows({**mixed, "history": []})[0][2] == "AUTOTUNE"
    assert [r[3] for r in history_rows(RECORD)] == ["ok", "ok", "oom"]
    # numbered as the log's "step N" lines: step 0 is the start (README-only trial 91)
    assert [r[0] for r in history_rows(RECORD)] == ["0", "1", "2"]
    fallback = dict(summary_rows({**RECORD, "source": "fallback", "reason": "it broke"}))
    assert fallback["fallback reason"] == "it broke"
    assert rows["vs AUTOTUNE"] == "not measured"
    tuned = dict(summary_rows({**RECORD, "autotune_throughput": 500.0}))
    assert tuned["vs AUTOTUNE"] == "6.0 times AUTOTUNE"
    # A cache hit: the result's vs_autotune (the night that tuned it), not today's probe
    # over that night's AUTOTUNE, as the artifact, the CLI and the logs say.
    hit = dict(summary_rows({**RECORD, "source": "cache", "throughput": 2000.0,
                             "autotune_throughput": 500.0, "vs_autotune": 6.2}))
    assert hit["vs AUTOTUNE"] == "6.2 times AUTOTUNE when tuned"
    png = throughput_png(RECORD)
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert throughput_png({**RECORD, "history": []}) is None


def test_summary_and_side_by_side():
    stats = {"steps": 10, "steps_per_s": 5.0, "records_per_s": 5120.0, "input_wait_fraction": 0.25,
             "final_loss": 0.5}
    s = summarize(RECORD, stats)
    json.dumps(s)
    text = format_summary(s)
    assert "25.0%" in text and "tuned" in text and "12.5" in text
    table = format_side_by_side({"night 1": s, "night 2": {**s, "tuning_source": "cache"}})
    assert "night 1" in table.splitlines()[0] and "cache" in table


def _ranges(knobs, n=64):
    import tensorflow as tf

    ds = tf.data.Dataset.range(n).map(lambda x: x + 1, num_parallel_calls=knobs.parallelism("map", max=4))
    return ds.batch(8).prefetch(knobs.buffer("prefetch", max=4))


def test_a_session_tunes_once_on_first_use_and_builds_with_the_steps_arguments():
    pytest.importorskip("tensorflow")
    from intune_flow import Pipeline, TuneResult
    from intune_flow.metaflow.session import IntuneSession

    calls, recorded = [], []
    settings = parse({"pipeline": _ranges, "pipeline_kwargs": {"n": 16}})
    pipe = Pipeline.load(_ranges, n=16)

    def tuner():
        calls.append(1)
        return TuneResult.fallback("tuning raised OSError: disk", config=pipe.space.defaults(),
                                   pipeline_kwargs={"n": 16}).bind(pipe)

    session = IntuneSession(settings, tuner, on_tuned=recorded.append)
    assert not session.tuned and not calls          # lazy until used
    assert session.config == {"map": 1, "prefetch": 1, "threadpool": -1}
    assert session.source == "fallback"
    assert session.reason == "tuning raised OSError: disk; using the factory defaults"
    assert calls == [1] and recorded == [session]   # tuned once, recorded once
    batches = list(session.dataset(n=24).as_numpy_iterator())
    assert sum(len(b) for b in batches) == 24       # the step's kwargs override pipeline_kwargs
    record = session.to_dict()
    json.dumps(record)
    assert record["source"] == "fallback" and record["config"] == session.config
    assert record["settings"]["pipeline_kwargs"] == {"n": 16}


_RELEASE = __import__("threading").Event()


def hanging_factory(knobs):
    """Declares a knob, then blocks until the test releases it (a factory that never returns)."""
    knobs.parallelism("work", max=4)
    _RELEASE.wait(600)


def test_timeout_s_reaches_tune_and_bounds_a_hanging_factory(tmp_path):
    from intune_flow.metaflow.decorator import IntuneDecorator

    deco = IntuneDecorator(attributes={"pipeline": hanging_factory, "timeout_s": "1",
                                       "budget_s": 2})
    deco.step_name = "train"
    deco.settings = deco._parse(deco.attributes)
    assert deco.settings.timeout_s == 1.0
    _RELEASE.clear()
    try:
        result = deco._tune(None, None, str(tmp_path / "cache"))
    finally:
        _RELEASE.set()
    assert result.source == "fallback"
    # tune()'s own bound is 60 s: this says 1 s, so the attribute's value was used
    assert "did not return within 1 s" in result.reason


def test_resources_above_this_machine_are_lowered_to_it_with_a_log_line(capsys):
    from intune_flow.metaflow.decorator import IntuneDecorator
    from intune_flow.resources import machine_ram, usable_cpus

    deco = IntuneDecorator(attributes={"pipeline": REF})
    deco.step_name = "train"
    deco.settings = deco._parse(deco.attributes)
    deco.resource_cpu, deco.resource_ram = 4096.0, 2**50      # a flow written for a bigger box
    assert deco._budgets() == (usable_cpus(), machine_ram())
    out = capsys.readouterr()
    log = out.out + out.err
    assert "@resources asks for 4096 CPUs" in log and "@resources asks for 1048576.0 GiB" in log
    deco.resource_cpu, deco.resource_ram = None, 2**30          # what fits is kept as asked
    assert deco._budgets() == (None, 2**30)


def test_the_step_summary_points_at_the_warnings_tune_logged_instead_of_repeating_them(capsys):
    from intune_flow.metaflow.decorator import _report
    from intune_flow.result import TuneResult

    r = TuneResult(config={"read": 4}, throughput=100.0, start_config={"read": 1},
                   start_throughput=50.0, source="tuned",
                   warnings=["knob 'read' was tuned to its max (4)"])
    _report(r)
    out = capsys.readouterr().out
    assert "1 warning(s) from tune() on stderr" in out and "tuned to its max" not in out
