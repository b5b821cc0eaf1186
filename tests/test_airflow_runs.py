"""Real ``dag.test()`` runs on SQLite: the operator's XCom, the TaskFlow path, the cache
across two runs, fallback and strict. Pipelines are our own (tests/test_airflow_support.py)."""

import json
import logging
import sys

import pytest

from tests.test_airflow_support import (TEST_DAGS, install_dag, migrate_db, run_dag, task_states,
                                        xcom)

def conf(**params):
    """DAG params for intune_operator (its defaults: our fetch pipeline, budget 5 s)."""
    return params


@pytest.fixture(scope="module")
def operator_dag():
    migrate_db()
    return install_dag(TEST_DAGS / "intune_operator_dag.py")


@pytest.fixture(scope="module")
def taskflow_dag():
    migrate_db()
    return install_dag(TEST_DAGS / "intune_taskflow_dag.py")


def test_operator_result_lands_in_xcom_and_feeds_the_next_task(operator_dag, tmp_path):
    run = run_dag(operator_dag, "intune_operator", conf(cache=str(tmp_path / "cache")))
    assert run.state == "success", task_states(run)
    tuned = xcom(run, "tune")
    assert json.loads(json.dumps(tuned)) == tuned  # plain JSON all the way down
    assert tuned["source"] == "tuned"
    assert {"fetch", "prefetch"} <= set(tuned["config"])
    assert all(isinstance(v, int) for v in tuned["config"].values())
    assert tuned["throughput"] > 0 and tuned["start_throughput"] > 0
    assert tuned["tuning_seconds"] > 0
    for key in ("seconds_saved", "reason", "fingerprint"):
        assert key in tuned
    assert xcom(run, "consume") == {"got_source": "tuned", "got_config": tuned["config"]}


def test_second_run_against_the_same_cache_skips_tuning(operator_dag, tmp_path, lenient):
    # a rule-picked config is always written (a 5 s search on a busy machine may hold no step
    # and write nothing); the cache's decision on the search is tested in tests/unit
    params = conf(cache=str(tmp_path / "cache"), method="heuristic")
    first = xcom(run_dag(operator_dag, "intune_operator", params), "tune")
    second_run = run_dag(operator_dag, "intune_operator", params)
    second = xcom(second_run, "tune")
    assert first["source"] == "tuned"
    assert second["source"] == "cache"
    assert second["config"] == first["config"]
    assert second["fingerprint"] == first["fingerprint"]
    assert xcom(second_run, "consume")["got_source"] == "cache"


def test_a_failing_pipeline_falls_back_and_the_run_succeeds(operator_dag, tmp_path, capfd):
    params = conf(cache=str(tmp_path / "cache"),
                  pipeline="tests.test_airflow_support:broken_pipeline")
    run = run_dag(operator_dag, "intune_operator", params)
    assert run.state == "success", task_states(run)
    tuned = xcom(run, "tune")
    assert tuned["source"] == "fallback"
    assert tuned["reason"]
    assert {"work", "prefetch"} <= set(tuned["config"])
    assert xcom(run, "consume")["got_source"] == "fallback"
    assert "tuning fell back" in capfd.readouterr().out


def test_strict_turns_a_tuning_failure_into_a_failed_task(operator_dag, tmp_path):
    run = run_dag(operator_dag, "intune_operator_strict", {"cache": str(tmp_path / "cache")})
    assert run.state == "failed"
    assert task_states(run)["tune"] == "failed"


def _tune_try(run):
    """The tune task's (state, try_number, max_tries)."""
    from airflow.utils.session import create_session

    with create_session() as session:
        ti = run.get_task_instance("tune", session=session)
        return str(ti.state), ti.try_number, ti.max_tries


def test_a_configuration_error_fails_at_once_without_retries(operator_dag, tmp_path, capfd):
    """The DAG gives the task two retries; a factory the module lacks is not worth them."""
    run = run_dag(operator_dag, "intune_operator_retries", {"cache": str(tmp_path / "cache")})
    assert run.state == "failed"
    assert _tune_try(run) == ("failed", 1, 2)
    out = capfd.readouterr().out
    assert "no_such_factory" in out and "a configuration error: not retried" in out


@pytest.mark.parametrize("params, message", [
    ({"budget_s": -5}, "budget_s must be a positive"),
    ({"cache": "gopher://x/y"}, "is not supported"),
])
def test_a_bad_templated_argument_is_checked_when_rendered_and_not_retried(
        operator_dag, tmp_path, capfd, params, message):
    """Parse time cannot check a Jinja template; the rendered value is checked in the task,
    and a bad one fails it as a configuration error, without the DAG's two retries."""
    run = run_dag(operator_dag, "intune_operator_retries",
                  {"pipeline": "tests.test_airflow_support:fetch_pipeline",
                   "cache": str(tmp_path / "cache"), **params})
    out = capfd.readouterr().out
    assert run.state == "failed", out[-3000:]
    assert _tune_try(run) == ("failed", 1, 2), out[-3000:]
    assert message in out and "a configuration error: not retried" in out


def test_taskflow_tunes_and_trains_in_one_task(taskflow_dag, tmp_path):
    run = run_dag(taskflow_dag, "intune_taskflow")
    assert run.state == "success", task_states(run)
    trained = xcom(run, "train")
    assert {"fetch", "prefetch"} <= set(trained["config"])
    assert trained["source"] in ("tuned", "cache", "transferred", "refined")
    assert trained["batches"] == 5 and trained["batch_rows"] == 32
    summary = xcom(run, "train", key="intune")  # the tuning summary rides along
    assert summary["config"] == trained["config"]
    short = xcom(run, "train_short")
    assert {"fetch", "prefetch"} <= set(short["config"]) and short["batch_rows"] == 16
    above = xcom(run, "train_above")  # intune_task stacked above @task works the same
    assert {"fetch", "prefetch"} <= set(above["config"]) and above["rows"] == 32


S3HOOK_LINE = "built by the Amazon provider's S3Hook"
"""What intune_flow logs when the Amazon provider's S3Hook built the cache's client."""


def test_s3_cache_through_an_airflow_connection(operator_dag, s3_server, s3_bucket, monkeypatch,
                                                capfd, caplog, lenient):
    from tests.s3server import SECRET_KEY
    from tests.test_airflow_support import conn_env

    caplog.set_level(logging.INFO, logger="intune_flow")
    for name, value in conn_env("intune_s3", s3_server).items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("INTUNE_FLOW_S3_ENDPOINT_URL", raising=False)  # the connection says where
    params = conf(cache=f"s3://{s3_bucket}/nightly", aws_conn_id="intune_s3", method="heuristic")
    first_run = run_dag(operator_dag, "intune_operator", params)
    second_run = run_dag(operator_dag, "intune_operator", params)
    first, second = xcom(first_run, "tune"), xcom(second_run, "tune")
    assert (first["source"], second["source"]) == ("tuned", "cache")
    assert second["config"] == first["config"]
    client = s3_server.client()
    keys = [o["Key"] for o in client.list_objects_v2(Bucket=s3_bucket).get("Contents", [])]
    assert keys and all(k.startswith("nightly/") for k in keys)
    records = b"".join(client.get_object(Bucket=s3_bucket, Key=k)["Body"].read() for k in keys)
    assert SECRET_KEY.encode() not in records
    assert SECRET_KEY not in json.dumps([first, second, xcom(second_run, "consume")])
    assert SECRET_KEY not in capfd.readouterr().out and SECRET_KEY not in caplog.text
    assert S3HOOK_LINE in caplog.text                           # the provider's path, for real


def test_wrong_credentials_in_the_connection_fall_back_without_leaking(
        operator_dag, s3_server, s3_bucket, monkeypatch, capfd, caplog):
    from tests.test_airflow_support import conn_env

    caplog.set_level(logging.INFO, logger="intune_flow")
    wrong = "wrong-secret-that-must-not-leak-0123456789"
    for name, value in conn_env("bad_s3", s3_server, secret=wrong).items():
        monkeypatch.setenv(name, value)
    params = conf(cache=f"s3://{s3_bucket}/denied", aws_conn_id="bad_s3")
    run = run_dag(operator_dag, "intune_operator", params)
    assert run.state == "success", task_states(run)
    tuned = xcom(run, "tune")
    assert tuned["config"]  # trained on with a tuned config, from the local fallback cache
    assert any("unavailable" in w for w in tuned["warnings"]), tuned["warnings"]
    assert not tuned["cache_uri"].startswith("s3://")
    assert wrong not in json.dumps(tuned)
    assert wrong not in capfd.readouterr().out and wrong not in caplog.text
    assert S3HOOK_LINE in caplog.text
    assert s3_server.client().list_objects_v2(Bucket=s3_bucket).get("KeyCount", 0) == 0


@pytest.mark.parametrize("builder", ["S3Hook", "connection"])
def test_a_connection_client_has_the_cache_clients_short_timeouts_and_one_try(
        builder, s3_server, monkeypatch):
    """Both builders: botocore's defaults (60 s reads, 5 tries a call) would let a dead
    endpoint hold the task for minutes; the connection's config_kwargs still win."""
    from intune_flow.airflow import connection
    from tests.test_airflow_support import conn_env

    env = conn_env("cfg_s3", s3_server)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    if builder == "connection":   # as without the Amazon provider installed
        monkeypatch.setitem(sys.modules, "airflow.providers.amazon.aws.hooks.s3", None)
    access = connection.s3_access("cfg_s3")
    assert access.built_by == builder
    config = access.client.meta.config
    assert (config.connect_timeout, config.read_timeout) == (2.0, 5.0)
    assert config.retries == {"total_max_attempts": 1, "mode": "standard"}
    assert config.s3 == {"addressing_style": "path"}
    assert access.client.meta.endpoint_url == s3_server.endpoint_url
    assert access.client.list_buckets()["Buckets"]               # it reaches the store
    doc = json.loads(env["AIRFLOW_CONN_CFG_S3"])
    doc["extra"]["config_kwargs"] = {"read_timeout": 7}
    monkeypatch.setenv("AIRFLOW_CONN_CFG_S3", json.dumps(doc))
    assert connection.s3_access("cfg_s3").client.meta.config.read_timeout == 7


def test_a_dead_endpoint_in_the_connection_falls_back_after_one_try_per_attempt(
        operator_dag, s3_server, monkeypatch, tmp_path, capfd, caplog):
    """Through S3Hook to an endpoint that takes each connection and drops it: the cache
    tries S3Cache.attempts times (one try per call), falls back, and the run succeeds."""
    from intune_flow.cache.s3 import S3Cache
    from tests.s3server import SECRET_KEY, FaultProxy, _free_port
    from tests.test_airflow_support import conn_env

    caplog.set_level(logging.INFO, logger="intune_flow")
    dead = FaultProxy(_free_port(set()))          # nothing listens behind it
    try:
        env = conn_env("dead_s3", s3_server)
        doc = json.loads(env["AIRFLOW_CONN_DEAD_S3"])
        doc["extra"]["endpoint_url"] = dead.endpoint_url
        monkeypatch.setenv("AIRFLOW_CONN_DEAD_S3", json.dumps(doc))
        monkeypatch.setenv("INTUNE_FLOW_CACHE", str(tmp_path / "fallback"))
        run = run_dag(operator_dag, "intune_operator",
                      conf(cache="s3://some-bucket/nightly", aws_conn_id="dead_s3"))
        tries = dead.connections
    finally:
        dead.close()
    assert run.state == "success", task_states(run)
    tuned = xcom(run, "tune")
    assert tuned["config"] and tuned["cache_uri"] == str(tmp_path / "fallback")
    assert any("unavailable after" in w for w in tuned["warnings"]), tuned["warnings"]
    # the endpoint came from the connection, not from INTUNE_FLOW_S3_ENDPOINT_URL (unset)
    assert any("an Airflow connection's extra endpoint_url" in w and "INTUNE_FLOW_S3" not in w
               for w in tuned["warnings"]), tuned["warnings"]
    assert 1 <= tries <= S3Cache("b").attempts, tries
    out = capfd.readouterr().out
    assert S3HOOK_LINE in caplog.text
    assert SECRET_KEY not in out and SECRET_KEY not in caplog.text and SECRET_KEY not in json.dumps(tuned)


def test_a_missing_connection_falls_back_to_the_local_cache_and_says_why(
        operator_dag, tmp_path, monkeypatch):
    # A README-only trial's misspelled aws_conn_id failed the task, so training never ran;
    # missing credentials fall back, and so does a connection that is not there.
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(tmp_path / "fallback"))
    run = run_dag(operator_dag, "intune_operator",
                  conf(cache="s3://some-bucket/x", aws_conn_id="no-such-conn"))
    assert run.state == "success", task_states(run)
    tuned = xcom(run, "tune")
    assert tuned["config"] and tuned["cache_uri"] == str(tmp_path / "fallback")
    said = [w for w in tuned["warnings"] if "Airflow connection 'no-such-conn' could not be "
            "read" in w]
    assert said and "cannot be an environment variable" in said[0], tuned["warnings"]


@pytest.mark.slow
def test_nightly_retrain_dag_prepares_tunes_trains_and_reports(tmp_path):
    from tests.test_airflow_support import REPO

    migrate_db()
    path = install_dag(REPO / "dags" / "nightly_retrain.py")
    params = {"budget_s": 3, "train_steps": 3, "batch_size": 256, "cache": str(tmp_path / "c")}
    run = run_dag(path, "nightly_retrain", params)
    assert run.state == "success", task_states(run)
    tuned = xcom(run, "tune_input")
    assert {"read", "parse", "transform", "prefetch"} <= set(tuned["config"])
    assert tuned["pipeline"] == "examples.criteo:criteo_pipeline"
    stats = xcom(run, "train")
    assert stats["steps"] == 3 and stats["batch_size"] == 256
    report = xcom(run, "report")
    assert report["source"] == tuned["source"] and report["config"] == tuned["config"]
    assert report["train_steps"] == 3


def test_operator_accepts_a_factory_defined_in_the_dag_file(operator_dag, tmp_path):
    run = run_dag(operator_dag, "intune_operator_callable", {"cache": str(tmp_path / "cache")})
    assert run.state == "success", task_states(run)
    tuned = xcom(run, "tune")
    assert tuned["source"] == "tuned" and {"fetch", "prefetch"} <= set(tuned["config"])
    assert xcom(run, "build") == 64
