"""The provider entry point: Airflow lists intune-flow and finds ``@task.intune``."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from intune_flow.airflow.provider import get_provider_info

REPO = Path(__file__).resolve().parents[1]


def test_provider_info_matches_airflow_schema():
    import jsonschema

    import airflow

    schema = json.loads((Path(airflow.__file__).parent / "provider_info.schema.json").read_text())
    info = get_provider_info()
    jsonschema.validate(info, schema)
    assert info["package-name"] == "intune-flow"
    assert info["task-decorators"] == [
        {"name": "intune", "class-name": "intune_flow.airflow.decorators.task_intune"}]


@pytest.mark.slow
def test_airflow_providers_list_shows_intune_flow(tmp_path):
    env = dict(os.environ, AIRFLOW_HOME=str(tmp_path / "airflow_home"))
    proc = subprocess.run([sys.executable, "-m", "airflow", "providers", "list", "-o", "json"],
                          capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    listing = next(line for line in proc.stdout.splitlines() if line.startswith("[{"))
    providers = {p["package_name"]: p for p in json.loads(listing)}
    assert "intune-flow" in providers, sorted(providers)
    assert providers["intune-flow"]["version"] == "0.1.0"
    assert "InTuneOperator" in providers["intune-flow"]["description"]


def test_task_intune_is_registered_with_the_task_decorator():
    from airflow.sdk import task

    from intune_flow.airflow.decorators import task_intune

    assert task.intune is task_intune
