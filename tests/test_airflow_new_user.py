"""Tried as a new user would: a DAG written from the README (docs/airflow.md), our own pipeline
(defined here), an Airflow connection to the real S3 server, ``python dag_file.py`` run
twice. The second run takes its config from the cache, and the connection's secret key
shows up nowhere: not in task logs, XCom values or the cache record."""

import json
import os
import subprocess
import sys
import time

import pytest

from tests.s3server import SECRET_KEY
from tests.test_airflow_support import REPO, AIRFLOW_HOME, dags_folder, migrate_db


def _decode(batch):
    time.sleep(0.01)  # stands in for a remote read: waiting, not computing
    return batch


def clicks_pipeline(knobs, n=8_000, batch_size=64, epochs=None):
    """Our own input pipeline: a knob per stage, declared where it is used."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(n).repeat(epochs).batch(batch_size)
    ds = ds.map(lambda b: tf.reshape(tf.numpy_function(_decode, [b], tf.int64), tf.shape(b)),
                num_parallel_calls=knobs.parallelism("decode", max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=16))


# As in the README (docs/airflow.md), with our pipeline, bucket and budget filled in.
USER_DAG = '''
import pendulum
from airflow.sdk import dag, task

from intune_flow.airflow import InTuneOperator

PIPELINE = "tests.test_airflow_new_user:clicks_pipeline"
FACTORY_KWARGS = {"n": 8000, "batch_size": 64}


@dag(schedule="@daily", start_date=pendulum.datetime(2026, 1, 1, tz="UTC"), catchup=False)
def retrain_clicks():
    tune = InTuneOperator(
        task_id="tune_input",
        pipeline=PIPELINE,
        pipeline_kwargs=FACTORY_KWARGS,
        budget_s=10,
        cache="s3://BUCKET/intune",
        aws_conn_id="intune_s3",
    )

    @task
    def train(tuned: dict) -> dict:
        from intune_flow import TuneResult

        batches = TuneResult.from_dict(tuned).build(**FACTORY_KWARGS, epochs=1)
        seen = sum(1 for _ in batches)
        return {"source": tuned["source"], "config": tuned["config"], "batches": seen}

    train(tune.output)


dag = retrain_clicks()

if __name__ == "__main__":
    run = dag.test()
    print("RUN_STATE", run.state)
    print("RUN_ID", run.run_id)
'''


def _xcoms(run_id: str) -> dict:
    """Every XCom of one run, by (task_id, key)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        rows = session.scalars(XComModel.get_many(run_id=run_id, dag_ids="retrain_clicks")).all()
        return {(r.task_id, r.key): XComModel.deserialize_value(r) for r in rows}


@pytest.mark.slow
@pytest.mark.flow(minutes=2)
def test_new_user_dag_with_s3_connection_runs_twice_second_from_cache(s3_server, s3_bucket):
    migrate_db()
    path = dags_folder() / "retrain_clicks.py"
    path.write_text(USER_DAG.replace("BUCKET", s3_bucket))
    env = dict(os.environ)
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "INTUNE_FLOW_S3_ENDPOINT_URL"):
        env.pop(name, None)  # the connection alone must carry credentials and endpoint
    env["AIRFLOW_CONN_INTUNE_S3"] = json.dumps({
        "conn_type": "aws", "login": "intune-test-access-key", "password": SECRET_KEY,
        "extra": {"endpoint_url": s3_server.endpoint_url, "region_name": "us-east-1"}})
    runs = []
    for _ in range(2):
        proc = subprocess.run([sys.executable, str(path)], capture_output=True, text=True,
                              timeout=400, env=env, cwd=REPO)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, output[-4000:]
        assert "RUN_STATE success" in output, output[-4000:]
        assert SECRET_KEY not in output
        run_id = next(l.split(" ", 1)[1] for l in output.splitlines() if l.startswith("RUN_ID "))
        runs.append(_xcoms(run_id))
    first, second = (r[("tune_input", "return_value")] for r in runs)
    assert first["source"] == "tuned", first
    if second["source"] == "tuned":
        # only when the start config spent night 1's 10 s on a busy machine (README, budget_s)
        assert any("nothing was cached" in w for w in first["warnings"]), first["warnings"]
        return
    # Night 2 read night 1's record. A short verification probe of a 2-core machine under a
    # parallel suite can read under the drift threshold: then it refines from that record.
    assert second["source"] in ("cache", "refined"), (second["reason"], second["history"])
    assert second["history"][0]["config"] == first["config"]     # it began with night 1's
    if second["source"] == "refined":
        assert "verification probe" in second["reason"], second["reason"]
    else:
        assert second["config"] == first["config"]
    assert runs[1][("train", "return_value")] == {
        "source": second["source"], "config": second["config"], "batches": 8000 // 64}
    # The record is in the bucket, written with the connection's credentials...
    client = s3_server.client()
    objects = client.list_objects_v2(Bucket=s3_bucket).get("Contents", [])
    assert objects, "no cache record in the bucket"
    # ...and the secret key is nowhere: XCom values, records, task log files.
    for values in runs:
        assert SECRET_KEY not in json.dumps(list(values.values()), default=str)
    for obj in objects:
        body = client.get_object(Bucket=s3_bucket, Key=obj["Key"])["Body"].read()
        assert SECRET_KEY.encode() not in body
    for log_file in (AIRFLOW_HOME / "logs").rglob("*"):
        if log_file.is_file():
            assert SECRET_KEY not in log_file.read_text(errors="replace")
