"""Nightly retraining with a tuned input pipeline: prepare data -> tune -> train -> report.

The DLRM and its training loop are shared with the Metaflow flow (``examples/dlrm.py``).
Trigger with parameters to change the defaults, e.g.
``airflow dags trigger nightly_retrain --conf '{"budget_s": 30, "cache": "s3://ml/intune", "aws_conn_id": "aws_default"}'``.
"""

from __future__ import annotations

import pendulum
from airflow.sdk import Param, dag, task

from intune_flow.airflow import InTuneOperator

PIPELINE = "examples.criteo:criteo_pipeline"


@dag(
    schedule="@daily",
    start_date=pendulum.datetime(2026, 1, 1, tz="UTC"),
    catchup=False,
    render_template_as_native_obj=True,  # "{{ params.budget_s }}" renders as a number, None as None
    tags=["intune_flow", "dlrm"],
    params={
        "budget_s": Param(60, type="number", exclusiveMinimum=0,
                          description="seconds the tuning phase may spend (a cache hit takes far less)"),
        "cache": Param(None, type=["null", "string"],
                       description="directory or s3://bucket/prefix; null: INTUNE_FLOW_CACHE or the default"),
        "aws_conn_id": Param(None, type=["null", "string"],
                             description="Airflow connection with S3 credentials/endpoint for an s3:// cache"),
        "train_steps": Param(200, type="integer", minimum=1),
        "batch_size": Param(1024, type="integer", minimum=1),
    },
    doc_md=__doc__,
)
def nightly_retrain():
    @task
    def prepare_data(params=None) -> dict:
        """The factory arguments of the pipeline: the generated Criteo-shaped TFRecord shards."""
        from intune_flow.data import default_dataset

        return {"files": default_dataset("tfrecord"), "batch_size": int(params["batch_size"])}

    data = prepare_data()

    tune = InTuneOperator(
        task_id="tune_input",
        pipeline=PIPELINE,
        budget_s="{{ params.budget_s }}",
        cache="{{ params.cache }}",
        aws_conn_id="{{ params.aws_conn_id }}",
        pipeline_kwargs=data,
    )

    @task
    def train(tuned: dict, data: dict, params=None) -> dict:
        """Train the DLRM for ``train_steps`` batches from the pipeline built with the tuned config."""
        from examples.dlrm import train as train_dlrm
        from intune_flow import Pipeline

        batches = Pipeline.load(PIPELINE, **data).build(tuned["config"])
        return train_dlrm(batches, steps=int(params["train_steps"])).to_dict()

    @task
    def report(tuned: dict, stats: dict) -> dict:
        """One summary of the night: where the config came from, what it bought, how training went."""
        summary = {
            "source": tuned["source"],
            "config": tuned["config"],
            "throughput": tuned.get("throughput"),
            "start_throughput": tuned.get("start_throughput"),
            "tuning_seconds": tuned.get("tuning_seconds"),
            "seconds_saved": tuned.get("seconds_saved"),
            "reason": tuned.get("reason"),
            "train_steps": stats["steps"],
            "train_records_per_s": stats["records_per_s"],
            "input_wait_fraction": stats["input_wait_fraction"],
            "first_loss": stats["first_loss"],
            "final_loss": stats["final_loss"],
        }
        print("nightly_retrain report:", summary)
        return summary

    report(tune.output, train(tune.output, data))


nightly_retrain()
