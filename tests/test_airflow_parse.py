"""DAG parse time: the shipped DAGs import cleanly, and bad arguments fail there, clearly."""

from pathlib import Path

import pytest

from intune_flow.errors import ConfigurationError, IntuneError, PipelineError
from tests.test_airflow_support import REPO, TEST_DAGS, dags_folder, install_dag

BAD_DAG = '''
import pendulum
from airflow.sdk import DAG
from intune_flow.airflow import InTuneOperator

with DAG("bad_{name}", schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC")):
    InTuneOperator(task_id="tune", {args})
'''


def test_dagbag_imports_every_shipped_dag_without_errors():
    from airflow.dag_processing.dagbag import DagBag

    for path in sorted((REPO / "dags").glob("*.py")):
        install_dag(path)
    bag = DagBag(dag_folder=str(dags_folder()))
    assert bag.import_errors == {}
    dag = bag.dags.get("nightly_retrain")
    assert dag is not None
    assert dag.catchup is False
    assert dag.schedule == "@daily"
    assert set(dag.task_ids) == {"prepare_data", "tune_input", "train", "report"}
    assert dag.get_task("tune_input").upstream_task_ids == {"prepare_data"}
    assert dag.get_task("train").upstream_task_ids == {"prepare_data", "tune_input"}
    assert dag.get_task("report").upstream_task_ids == {"tune_input", "train"}


def test_test_dags_import_without_errors():
    from airflow.dag_processing.dagbag import DagBag

    for path in sorted(TEST_DAGS.glob("*.py")):
        install_dag(path)
        bag = DagBag(dag_folder=str(dags_folder() / path.name))
        assert bag.import_errors == {}, path.name
        assert bag.dags, path.name


@pytest.mark.parametrize("args, message", [
    ('pipeline="examples.criteo:criteo_pipeline", budget_s=-5', "budget_s must be a positive"),
    ('pipeline="examples.criteo:criteo_pipeline", budget_s=0', "budget_s must be a positive"),
    ('pipeline="examples.criteo.criteo_pipeline"',
     "is malformed (did you mean 'examples.criteo:criteo_pipeline'?); write it as"),
    ('pipeline="examples.criteo:criteo_pipeline", cache="s3://"', "names no bucket"),
    ('pipeline="examples.criteo:criteo_pipeline", cache="gopher://x/y"', "is not supported"),
    ('pipeline="examples.criteo:criteo_pipeline", method="psychic"',
     "InTuneOperator (task_id 'tune'): method must be one of intune, ones"),
    ('pipeline="examples.criteo:criteo_pipeline", ram_budget="lots"', "not a memory size"),
    ('pipeline="examples.criteo:criteo_pipeline", cpu_budget=-1', "cpu_budget must be a positive"),
    ('pipeline="examples.criteo:criteo_pipeline", timeout_s=0',
     "timeout_s must be a positive number of seconds, got 0; e.g. timeout_s=30"),
    ('pipeline="examples.criteo:criteo_pipeline", pipeline_kwargs=["f"]', "must be a dict"),
    ('pipeline="examples.criteo:criteo_pipeline", strict="maybe"', "strict must be True or False"),
    ('"examples.criteo:criteo_pipeline"', "positional"),
    ('pipeline="examples.criteo:criteo_pipline"',
     "module 'examples.criteo' defines no 'criteo_pipline' (did you mean 'criteo_pipline' -> 'criteo_pipeline'?)"),
    ('pipeline="examples.criteo:criteo_pipeline", pipeline_kwargs={"batchsize": 64}',
     # names the task, as every other message here does (README-only trial 91)
     "InTuneOperator (task_id 'tune'): pipeline factory examples.criteo:criteo_pipeline takes no "
     "argument(s) ['batchsize'] (did you mean 'batchsize' -> 'batch_size'?)"),
])
def test_bad_arguments_are_import_errors_with_clear_messages(args, message, request):
    from airflow.dag_processing.dagbag import DagBag

    name = request.node.callspec.id.replace("-", "_").replace(".", "_")[:40]
    path = install_dag(BAD_DAG.format(name=abs(hash(name)), args=args), f"bad_dag_{abs(hash(name))}.py")
    try:
        bag = DagBag(dag_folder=str(path))
        errors = list(bag.import_errors.values())
        assert len(errors) == 1, bag.import_errors
        assert message in errors[0]
    finally:
        path.unlink()


@pytest.mark.parametrize("kwargs, error", [
    ({"budget_s": -1}, IntuneError),
    ({"pipeline": "nocolon"}, PipelineError),
    ({"pipeline": 42}, ConfigurationError),
    ({"cache": "s3://"}, ConfigurationError),
    ({"aws_conn_id": ""}, IntuneError),
    ({"window_s": 0}, IntuneError),
    ({"timeout_s": 0}, IntuneError),
    ({"timeout_s": -1.5}, IntuneError),
    ({"timeout_s": float("nan")}, IntuneError),
    ({"timeout_s": "soon"}, IntuneError),
    ({"timeout_s": True}, IntuneError),
])
def test_operator_constructor_rejects_bad_arguments(kwargs, error):
    from intune_flow.airflow import InTuneOperator

    args = {"task_id": "t", "pipeline": "examples.criteo:criteo_pipeline", **kwargs}
    with pytest.raises(error):
        InTuneOperator(**args)


def test_a_module_the_dag_processor_cannot_find_is_left_to_the_worker():
    from intune_flow.airflow import InTuneOperator

    op = InTuneOperator(task_id="t", pipeline="only_on_the_workers:factory")
    assert op.pipeline == "only_on_the_workers:factory"


def test_templated_arguments_are_not_checked_at_parse_and_are_template_fields():
    # Their rendered values are checked in the task: test_airflow_runs.py,
    # test_a_bad_templated_argument_is_checked_when_rendered_and_not_retried.
    from intune_flow.airflow import InTuneOperator

    op = InTuneOperator(task_id="t", pipeline="{{ params.pipeline }}", budget_s="{{ params.b }}",
                        cache="{{ params.cache }}", ram_budget="{{ params.ram }}",
                        timeout_s="{{ params.timeout }}")
    assert set(op.template_fields) >= {"pipeline", "cache", "aws_conn_id", "budget_s",
                                       "ram_budget", "timeout_s", "pipeline_kwargs"}


def test_decorator_rejects_bad_arguments_and_missing_parameter():
    from intune_flow.airflow import intune_task

    with pytest.raises(IntuneError, match="budget_s"):
        intune_task(pipeline="m:f", budget_s=0)
    with pytest.raises(IntuneError, match="timeout_s must be a positive number"):
        intune_task(pipeline="m:f", timeout_s=-1)
    with pytest.raises(IntuneError, match="timeout_s must be a positive number"):
        intune_task(pipeline="m:f", timeout_s=0)
    with pytest.raises(IntuneError, match="add a parameter `intune=None`"):
        intune_task(pipeline="m:f")(lambda data: data)
    with pytest.raises(IntuneError, match="names no argument"):
        intune_task(pipeline="m:f", pipeline_kwargs="files")(lambda data, intune=None: data)
    with pytest.raises(IntuneError, match=r"intune_task does not render Jinja templates "
                                          r"\(budget_s='\{\{ params.b \}\}'\).*InTuneOperator"):
        intune_task(pipeline="m:f", budget_s="{{ params.b }}")


def test_task_intune_names_a_misspelled_argument():
    from airflow.sdk import task

    import intune_flow.airflow  # noqa: F401  (registers @task.intune)

    with pytest.raises(IntuneError, match=r"@task.intune got unknown argument\(s\) \['pipline'\] "
                                          r"\(did you mean 'pipline' -> 'pipeline'\?\)"):
        task.intune(pipline="m:f")
    with pytest.raises(IntuneError, match=r"'budgt_s' -> 'budget_s'"):
        task.intune(pipeline="m:f", budgt_s=8)


def test_the_operator_names_a_misspelled_argument():
    from airflow.sdk import DAG

    from intune_flow.airflow import InTuneOperator

    with DAG("typo", schedule=None):
        with pytest.raises(IntuneError, match=r"InTuneOperator \(task_id 't'\) got unknown "
                                              r"argument\(s\) \['budget'\] \(did you mean "
                                              r"'budget' -> 'budget_s'\?\)"):
            InTuneOperator(task_id="t", pipeline="m:f", budget=5)
        # Airflow's own arguments still reach BaseOperator
        assert InTuneOperator(task_id="u", pipeline="m:f", retries=2).retries == 2
        # README-only trial 75: a misspelled pipeline got Airflow's "missing keyword argument"
        with pytest.raises(IntuneError, match=r"\['pipline'\] \(did you mean 'pipline' -> "
                                              r"'pipeline'\?\)"):
            InTuneOperator(task_id="v", pipline="m:f")
        with pytest.raises(IntuneError, match=r"InTuneOperator \(task_id 'w'\): needs "
                                              r"pipeline=\"package.module:function\""):
            InTuneOperator(task_id="w")


def test_intune_task_names_a_misspelled_argument():
    from intune_flow.airflow import intune_task

    # README-only trial 75: Python's bare "unexpected keyword argument 'budget'" before.
    with pytest.raises(IntuneError, match=r"intune_task got unknown argument\(s\) \['budget'\] "
                                          r"\(did you mean 'budget' -> 'budget_s'\?\)"):
        intune_task(pipeline="m:f", budget=20)
    with pytest.raises(IntuneError, match=r"did you mean 'pipline' -> 'pipeline'\?"):
        intune_task(pipline="m:f")
    with pytest.raises(IntuneError, match=r"intune_task: needs pipeline=\"package.module:"):
        intune_task(budget_s=20)


def test_decorator_hides_the_injected_parameter_from_airflow():
    import inspect

    from intune_flow.airflow import intune_task

    def train(data, intune=None, ti=None):
        return data

    wrapped = intune_task(pipeline="m:f")(train)
    assert list(inspect.signature(wrapped).parameters) == ["data", "ti"]
    assert wrapped.__name__ == "train"


_RELEASE = __import__("threading").Event()


def hanging_factory(knobs):
    """Declares a knob, then blocks until the test releases it (a factory that never returns)."""
    knobs.parallelism("work", max=4)
    _RELEASE.wait(600)


@pytest.fixture
def hang():
    _RELEASE.clear()
    yield hanging_factory
    _RELEASE.set()  # let the abandoned discovery threads return


def _bounded_by_one_second(reason: str) -> None:
    # tune()'s own bound is 60 s: "1s" says the argument's value reached tune()
    assert "did not return within 1 s" in reason, reason


def test_operator_timeout_s_reaches_tune_and_bounds_a_hanging_factory(hang, tmp_path):
    from intune_flow.airflow import InTuneOperator

    op = InTuneOperator(task_id="t", pipeline=hang, budget_s=2, timeout_s=1,
                        cache=str(tmp_path / "cache"))
    payload = op.execute(context={})
    assert payload["source"] == "fallback"
    _bounded_by_one_second(payload["reason"])


def test_rendered_timeout_s_template_is_checked_and_forwarded(hang, tmp_path):
    from intune_flow.errors import OptionsError
    from intune_flow.airflow.runner import run_tuning

    rendered = {"pipeline": hang, "budget_s": "2", "timeout_s": "1",  # as a template renders
                "cache": str(tmp_path / "cache"), "aws_conn_id": "None"}
    result, _ = run_tuning(rendered, where="InTuneOperator")
    assert result.source == "fallback"
    _bounded_by_one_second(result.reason)
    with pytest.raises(OptionsError, match="timeout_s must be a positive number"):
        run_tuning({**rendered, "timeout_s": "-1"}, where="InTuneOperator")


def test_intune_task_forwards_timeout_s(hang, tmp_path):
    from intune_flow.airflow import intune_task

    @intune_task(pipeline=hang, budget_s=2, timeout_s=1, cache=str(tmp_path / "cache"))
    def train(intune=None):
        return intune.result

    result = train()
    assert result.source == "fallback"
    _bounded_by_one_second(result.reason)


def test_task_intune_passes_timeout_s_to_the_tuning_not_to_task():
    from intune_flow.airflow.arguments import NAMES
    from intune_flow.airflow.decorators import task_intune

    assert "timeout_s" in NAMES
    with pytest.raises(IntuneError, match="timeout_s must be a positive number"):
        task_intune(pipeline="m:f", timeout_s=0)


def test_the_task_log_points_at_the_warnings_tune_logged_instead_of_repeating_them(caplog):
    import logging

    from intune_flow.airflow.runner import report
    from intune_flow.result import TuneResult

    r = TuneResult(config={"read": 4}, throughput=100.0, start_config={"read": 1},
                   start_throughput=50.0, source="tuned",
                   warnings=["knob 'read' was tuned to its max (4)"])
    logger = logging.getLogger("test_airflow_report")
    with caplog.at_level(logging.INFO, logger="test_airflow_report"):
        report(r, logger)
    text = caplog.text
    assert "1 warning(s) logged above" in text and "tuned to its max" not in text
