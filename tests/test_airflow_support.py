"""Shared pieces of the Airflow tests: a migrated SQLite metadata DB in the session's temp
AIRFLOW_HOME, DAG files copied under its dags folder, ``dag.test()`` runs, XCom reads, and
small pipelines of our own (not the reference ones) that the test DAGs tune.

Imported by the tests/test_airflow_*.py modules; it holds no tests itself.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_DAGS = Path(__file__).resolve().parent / "test_airflow_dags"
AIRFLOW_HOME = Path(os.environ["AIRFLOW_HOME"])  # a temp dir: tests/conftest.py set it
DAGS_FOLDER = AIRFLOW_HOME / "dags"
os.environ.setdefault("AIRFLOW__CORE__DAGS_FOLDER", str(DAGS_FOLDER))

_migrated = threading.Lock()
_state: dict = {}


# -- pipelines of our own ----------------------------------------------------------------
def _fetch(batch):
    time.sleep(0.01)  # a remote read: waiting, not computing, so noisy neighbours matter little
    return batch


def fetch_pipeline(knobs, n=50_000, batch_size=64, epochs=None):
    """A small latency-bound tf.data pipeline of our own: two knobs, nothing read from disk."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(n).repeat(epochs).batch(batch_size)
    ds = ds.map(lambda b: tf.reshape(tf.numpy_function(_fetch, [b], tf.int64), tf.shape(b)),
                num_parallel_calls=knobs.parallelism("fetch", max=16))
    return ds.prefetch(knobs.buffer("prefetch", max=16))


def _explode(x):
    raise RuntimeError("the disk went away (injected)")


def broken_pipeline(knobs, n=1000, batch_size=64):
    """Builds fine, fails on the first element: tuning must fall back, not fail the task."""
    import tensorflow as tf

    ds = tf.data.Dataset.range(n)
    ds = ds.map(lambda x: tf.numpy_function(_explode, [x], tf.int64),
                num_parallel_calls=knobs.parallelism("work", max=8))
    return ds.batch(batch_size).prefetch(knobs.buffer("prefetch", max=8))


# -- Airflow on SQLite -----------------------------------------------------------------------
def migrate_db() -> Path:
    """``airflow db migrate`` once per session (in a subprocess, as a user runs it)."""
    with _migrated:
        if "db" not in _state:
            DAGS_FOLDER.mkdir(parents=True, exist_ok=True)
            proc = subprocess.run([sys.executable, "-m", "airflow", "db", "migrate"],
                                  capture_output=True, text=True, timeout=300,
                                  env=dict(os.environ), cwd=REPO)
            assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
            _state["db"] = AIRFLOW_HOME / "airflow.db"
        return _state["db"]


def dags_folder() -> Path:
    """The dags folder Airflow actually uses in this process."""
    from airflow import settings

    folder = Path(settings.DAGS_FOLDER)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def install_dag(source: Path | str, name: str | None = None) -> Path:
    """Copy a DAG file (a path, or source text with ``name``) into the dags folder."""
    target = dags_folder() / (name or Path(source).name)
    if isinstance(source, Path):
        shutil.copyfile(source, target)
    else:
        target.write_text(source)
    return target


def load_dag(path: Path, dag_id: str):
    """Parse one DAG file the way the DAG processor does; fail on any import error."""
    from airflow.dag_processing.dagbag import DagBag

    bag = DagBag(dag_folder=str(path))
    assert not bag.import_errors, bag.import_errors
    dag = bag.dags.get(dag_id)
    assert dag is not None, f"{dag_id} not in {list(bag.dags)}"
    return dag


def run_dag(path: Path, dag_id: str, conf: dict | None = None):
    """One ``dag.test()`` run of ``dag_id`` from its file under the dags folder."""
    migrate_db()
    return load_dag(path, dag_id).test(run_conf=conf)


def xcom(dag_run, task_id: str, key: str = "return_value"):
    """The XCom value ``task_id`` pushed in ``dag_run``, deserialized (None if absent)."""
    from airflow.models.xcom import XComModel
    from airflow.utils.session import create_session

    with create_session() as session:
        query = XComModel.get_many(run_id=dag_run.run_id, key=key, dag_ids=dag_run.dag_id,
                                   task_ids=task_id)
        row = session.scalars(query).first()
        return None if row is None else XComModel.deserialize_value(row)


def task_states(dag_run) -> dict[str, str]:
    from airflow.utils.session import create_session

    with create_session() as session:
        return {ti.task_id: str(ti.state) for ti in dag_run.get_task_instances(session=session)}


def conn_env(conn_id: str, server, *, secret: str | None = None) -> dict[str, str]:
    """``AIRFLOW_CONN_<ID>`` (JSON form) for an aws connection to the test S3 server."""
    import json

    from tests.s3server import ACCESS_KEY, REGION, SECRET_KEY

    return {f"AIRFLOW_CONN_{conn_id.upper()}": json.dumps({
        "conn_type": "aws", "login": ACCESS_KEY, "password": secret or SECRET_KEY,
        "extra": {"endpoint_url": server.endpoint_url, "region_name": REGION}})}
