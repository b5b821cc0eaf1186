"""Provider metadata for Airflow's ``apache_airflow_provider`` entry point.

Airflow calls :func:`get_provider_info` while it reads its own configuration, so this
module must import nothing heavy (and never Airflow itself).
"""

from __future__ import annotations


def get_provider_info() -> dict:
    """What ``airflow providers list`` shows for intune-flow."""
    from intune_flow import __version__

    return {
        "package-name": "intune-flow",
        "name": "intune_flow",
        "description": "Reinforcement-learning tuning of tf.data/torchdata input pipelines: "
                       "``InTuneOperator`` and the ``@task.intune`` TaskFlow decorator.",
        "versions": [__version__],
        "integrations": [{
            "integration-name": "intune_flow",
            "external-doc-url": "https://github.com/intune-flow/intune-flow",
            "tags": ["software"],
        }],
        "operators": [{
            "integration-name": "intune_flow",
            "python-modules": ["intune_flow.airflow.operator"],
        }],
        "task-decorators": [{
            "name": "intune",
            "class-name": "intune_flow.airflow.decorators.task_intune",
        }],
    }
