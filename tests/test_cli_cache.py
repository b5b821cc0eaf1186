"""`intune-flow cache ...` and `intune-flow tune ...` through the real CLI entry point."""

from __future__ import annotations

import json

import pytest

from intune_flow.cache import get_cache
from intune_flow.cache.records import write_best
from intune_flow.cli import main
from tests.test_cache_records import make_record


def run(capsys, *argv) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


@pytest.fixture(params=["local", "s3"])
def uri(request, tmp_path, monkeypatch):
    if request.param == "local":
        return str(tmp_path / "cache")
    server = request.getfixturevalue("s3_server")
    for name, value in server.env().items():
        monkeypatch.setenv(name, value)
    return f"s3://{server.make_bucket()}/team/intune"


def fill(uri):
    cache = get_cache(uri)
    write_best(cache, make_record(123456.0, hardware="cpu2-ram8g"))
    write_best(cache, make_record(999.0, hardware="cpu4-ram16g", config={"read": 2, "prefetch": 3}))
    damaged = str(make_record(hardware="cpu8-ram32g").key)
    cache.put(damaged, b"garbage")
    bad = str(make_record(hardware="cpu16-ram64g").key)
    token = cache.put(bad, b"more garbage")
    cache.quarantine(bad, "test", if_version=token)
    return cache, damaged


def test_ls_show_rm_prune(capsys, uri):
    code, out, _ = run(capsys, "cache", "ls", "--cache", uri)
    assert code == 0 and "no records" in out
    cache, damaged = fill(uri)
    code, out, _ = run(capsys, "cache", "--cache", uri, "ls")
    assert code == 0
    header = out.splitlines()[0]
    for column in ("SCHEMA", "HARDWARE", "CONFIG", "THROUGHPUT", "AGE"):
        assert column in header
    assert "cpu2-ram8g" in out and "read=4,prefetch=8" in out and "123,456/s" in out
    assert "cpu4-ram16g" in out and "999/s" in out
    assert "DAMAGED" in out and damaged in out
    assert "1 quarantined" in out
    assert cache.get(damaged) is not None                     # ls changes nothing

    key = str(make_record(hardware="cpu2-ram8g").key)
    code, out, _ = run(capsys, "cache", "show", key[:-3], "--cache", uri)  # a unique prefix
    doc = json.loads(out)
    assert code == 0 and doc["config"] == {"read": 4, "prefetch": 8} and doc["key"] == key

    code, out, err = run(capsys, "cache", "show", "v1/nope", "--cache", uri)
    assert code == 2 and "no record" in err and "cache ls" in err
    code, out, err = run(capsys, "cache", "show", "v1/", "--cache", uri)
    assert code == 2 and "matches" in err

    code, out, _ = run(capsys, "cache", "rm", key, "--cache", uri)
    assert code == 0 and "removed" in out and cache.get(key) is None

    code, out, err = run(capsys, "cache", "prune", "--cache", uri)
    assert code == 2 and "--older-than" in err
    code, out, _ = run(capsys, "cache", "prune", "--quarantined", "--dry-run", "--cache", uri)
    assert "would remove" in out and any(".quarantine/" in k for k in cache.list())
    code, out, _ = run(capsys, "cache", "prune", "--quarantined", "--cache", uri)
    assert code == 0 and not any(".quarantine/" in k for k in cache.list())
    code, out, _ = run(capsys, "cache", "prune", "--older-than", "1", "--cache", uri)
    assert "0 object(s) removed" in out                        # everything is younger
    code, out, _ = run(capsys, "cache", "prune", "--older-than", "0", "--cache", uri)
    assert code == 0 and cache.records() == [damaged]          # damaged ones have no age


def test_ls_on_a_parent_prefix_leaves_a_nested_cache_out_and_says_so(capsys, tmp_path):
    outer = str(tmp_path / "outer")
    fill(str(tmp_path / "outer" / "team-a"))          # a whole cache one level down
    write_best(get_cache(outer), make_record(5.0, hardware="cpu2-ram8g"))
    code, out, _ = run(capsys, "cache", "ls", "--cache", outer)
    assert code == 0 and "DAMAGED" not in out and "5/s" in out and "123,456/s" not in out
    assert "3 other object(s) under" in out and "not records of this cache" in out
    code, out, err = run(capsys, "cache", "show", "v1/", "--cache", outer)
    assert code == 0 and json.loads(out)["throughput"] == 5.0


def test_ls_json(capsys, tmp_path):
    uri = str(tmp_path / "c")
    fill(uri)
    code, out, _ = run(capsys, "cache", "ls", "--json", "--cache", uri)
    rows = [json.loads(line) for line in out.splitlines()]
    assert {r["hardware"] for r in rows if r["problem"] is None} == {"cpu2-ram8g", "cpu4-ram16g"}


def test_bad_cache_uri_is_a_clear_error(capsys):
    code, _, err = run(capsys, "cache", "ls", "--cache", "gs://bucket")
    assert code == 2 and "not supported" in err


def test_default_cache_from_env(capsys, tmp_path, monkeypatch):
    monkeypatch.setenv("INTUNE_FLOW_CACHE", str(tmp_path / "envc"))
    fill(str(tmp_path / "envc"))
    code, out, _ = run(capsys, "cache", "ls")
    assert code == 0 and "cpu2-ram8g" in out


def test_tune_cli(capsys, tmp_path):
    uri = str(tmp_path / "cache")
    code, out, _ = run(capsys, "tune", "tests.test_tune:tiny_pipeline", "--budget-s", "2",
                       "--window-s", "0.3", "--cache", uri, "--json", "--method", "hillclimb")
    result = json.loads(out)
    assert code == 0 and result["source"] == "tuned" and result["config"]
    code, out, _ = run(capsys, "tune", "tests.test_tune:tiny_pipeline", "--budget-s", "2",
                       "--window-s", "0.3", "--cache", uri, "--method", "hillclimb")
    assert code == 0 and out.startswith("source") and "config" in out and "tuning" in out
    code, out, err = run(capsys, "tune", "tests.test_tune:tiny_pipeline", "--budget-s", "0")
    assert code == 2 and "budget_s" in err


def test_ls_of_a_directory_that_does_not_exist_says_so(capsys, tmp_path):
    code, out, _ = run(capsys, "cache", "ls", "--cache", str(tmp_path / "nope"))
    assert code == 0 and "no such directory: check the path" in out
    assert not (tmp_path / "nope").exists()          # looking creates nothing
    (tmp_path / "empty").mkdir()
    code, out, _ = run(capsys, "cache", "ls", "--cache", str(tmp_path / "empty"))
    assert code == 0 and "no records in" in out and "no such directory" not in out
