"""Test DAG: InTuneOperator on a pipeline of our own; its XCom feeds a downstream task."""

import pendulum
from airflow.sdk import DAG, Param, task

from intune_flow.airflow import InTuneOperator

with DAG(
    "intune_operator",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,
    params={
        "pipeline": Param("tests.test_airflow_support:fetch_pipeline", type="string"),
        "budget_s": Param(5, type="number"),
        "cache": Param(None, type=["null", "string"]),
        "aws_conn_id": Param(None, type=["null", "string"]),
        "method": Param("intune", type="string"),
        "window_s": Param(0.5, type="number"),
    },
) as dag:
    @task
    def prepare() -> dict:
        return {"n": 20_000, "batch_size": 64}

    tune = InTuneOperator(
        task_id="tune",
        pipeline="{{ params.pipeline }}",
        budget_s="{{ params.budget_s }}",
        cache="{{ params.cache }}",
        aws_conn_id="{{ params.aws_conn_id }}",
        method="{{ params.method }}",
        window_s="{{ params.window_s }}",
        pipeline_kwargs=prepare(),
    )

    @task
    def consume(tuned: dict) -> dict:
        # Downstream sees the tuned config through XCom, as a plain dict.
        assert isinstance(tuned["config"], dict)
        return {"got_source": tuned["source"], "got_config": tuned["config"]}

    consume(tune.output)

with DAG(
    "intune_operator_strict",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"cache": Param(None, type=["null", "string"])},
    render_template_as_native_obj=True,
) as strict_dag:
    InTuneOperator(task_id="tune", pipeline="tests.test_airflow_support:broken_pipeline",
                   budget_s=3, window_s=0.5, cache="{{ params.cache }}", strict=True)


def inline_pipeline(knobs, n=20_000, batch_size=64, epochs=None):
    """A factory defined in the DAG file itself, passed as a callable."""
    from tests.test_airflow_support import fetch_pipeline

    return fetch_pipeline(knobs, n=n, batch_size=batch_size, epochs=epochs)


with DAG(
    "intune_operator_callable",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    params={"cache": Param(None, type=["null", "string"])},
    render_template_as_native_obj=True,
) as callable_dag:
    tuned = InTuneOperator(task_id="tune", pipeline=inline_pipeline, budget_s=3, window_s=0.5,
                           cache="{{ params.cache }}")

    @task
    def build(tuned: dict) -> int:
        from intune_flow import Pipeline

        ds = Pipeline.load(inline_pipeline).build(tuned["config"])
        return int(next(iter(ds)).shape[0])

    build(tuned.output)


with DAG(
    "intune_operator_retries",
    schedule=None,
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    default_args={"retries": 2, "retry_delay": pendulum.duration(seconds=0)},
    params={"pipeline": Param("tests.test_airflow_support:no_such_factory", type="string"),
            "budget_s": Param(3, type="number"),
            "cache": Param(None, type=["null", "string"])},
    render_template_as_native_obj=True,
) as retries_dag:
    # Templated, so the parse check leaves the (misspelled) factory, and any bad value a run
    # passes in its params, to the run.
    InTuneOperator(task_id="tune", pipeline="{{ params.pipeline }}",
                   budget_s="{{ params.budget_s }}", window_s=0.5, cache="{{ params.cache }}")
