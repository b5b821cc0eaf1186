"""Test DAG: tuning and training in one TaskFlow task, both spellings."""

import pendulum
from airflow.sdk import dag, task

from intune_flow.airflow import intune_task

PIPELINE = "tests.test_airflow_support:fetch_pipeline"


@dag(schedule=None, start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False,
     params={"cache": None})
def intune_taskflow():
    @task
    def prepare() -> dict:
        return {"n": 10_000, "batch_size": 32}

    @task
    @intune_task(pipeline=PIPELINE, budget_s=3, window_s=0.5, pipeline_kwargs="data")
    def train(data: dict, intune=None) -> dict:
        batches = [b for _, b in zip(range(5), intune.dataset())]
        return {"config": intune.config, "source": intune.source,
                "batches": len(batches), "batch_rows": int(batches[0].shape[0])}

    @task.intune(pipeline=PIPELINE, budget_s=3, window_s=0.5,
                 pipeline_kwargs={"n": 5_000, "batch_size": 16},
                 retries=0)
    def train_short(intune=None) -> dict:
        first = next(iter(intune.dataset()))
        return {"config": intune.config, "batch_rows": int(first.shape[0])}

    @intune_task(pipeline=PIPELINE, budget_s=3, window_s=0.5, pipeline_kwargs="data")
    @task
    def train_above(data: dict, intune=None) -> dict:
        return {"config": intune.config, "rows": int(next(iter(intune.dataset())).shape[0])}

    data = prepare()
    train(data)
    train_above(data)
    train_short()


intune_taskflow()
