"""``workers=``: the scale-out switch, declared once in TuneOptions (no TensorFlow, no servers)."""

import inspect

import pytest

from intune_flow.errors import OptionsError
from intune_flow.options import TuneOptions

REF = "examples.criteo:criteo_pipeline"


@pytest.mark.parametrize("given, kept", [
    ("local:4", "local:4x1"), (" LOCAL:2x1 ", "local:2x1"), ("ray:32x4", "ray:32x4"),
    ("ray://head:10001:8x2", "ray://head:10001:8x2"), (None, None), ("", None), ("none", None),
])
def test_workers_specs_are_parsed_into_their_canonical_form(given, kept):
    assert TuneOptions.parse({"pipeline": REF, "workers": given}).workers == kept


@pytest.mark.parametrize("bad", ["k8s:3", "local", "local:0", "local:2x0", "ray:x2", 4])
def test_a_bad_workers_spec_names_the_argument_and_the_forms(bad):
    with pytest.raises(OptionsError, match="^@intune: workers=") as err:
        TuneOptions.parse({"pipeline": REF, "workers": bad}, where="@intune")
    assert "'local:NxC'" in str(err.value) and "'ray:NxC'" in str(err.value)


def test_every_surface_takes_workers_and_the_default_is_single_node():
    for surface in ("tune", "cli", "metaflow", "airflow"):
        assert "workers" in TuneOptions.names(surface)
        assert TuneOptions.defaults(surface)["workers"] is None
    from intune_flow import tune

    assert inspect.signature(tune).parameters["workers"].default is None
    assert "ray:NxC" in TuneOptions.doc("workers")


def test_the_cli_has_a_workers_flag_checked_like_the_others():
    import argparse

    from intune_flow.cli import tune as cli_tune

    parser = argparse.ArgumentParser()
    cli_tune.register(parser.add_subparsers())
    args = parser.parse_args(["tune", REF, "--workers", "local:2"])
    assert args.workers == "local:2"
    with pytest.raises(OptionsError, match="^--workers: workers='gpu:1'"):
        TuneOptions.parse({"pipeline": REF, "workers": "gpu:1"}, where=cli_tune._flag,
                          surface="cli")


def test_workers_is_in_the_options_json():
    # (that parsing imports neither TensorFlow nor Ray is the tests/unit guard's to check:
    # in-process it depends on which tests ran before)
    o = TuneOptions.parse({"pipeline": REF, "workers": "local:2x1"})
    assert o.to_dict()["workers"] == "local:2x1" and o.tune_kwargs()["workers"] == "local:2x1"
