"""TuneOptions: one parser for every surface's tuning arguments (no TensorFlow, no servers)."""

import dataclasses
import importlib.util
import re
import subprocess
import sys

import pytest

from intune_flow.errors import ConfigurationError, OptionsError, PipelineError
from intune_flow.options import SURFACES, TuneOptions, coerce

REF = "examples.criteo:criteo_pipeline"


def test_strings_are_coerced_as_the_cli_jinja_and_metaflow_send_them():
    o = TuneOptions.parse({"pipeline": REF, "budget_s": "30", "strict": "true",
                           "cpu_budget": "2", "ram_budget": "512MiB", "window_s": "0.5",
                           "timeout_s": "None", "pipeline_kwargs": '{"batch_size": 64}',
                           "seed": "7", "cache": " memory://x "})
    assert (o.budget_s, o.strict, o.cpu_budget, o.ram_budget) == (30.0, True, 2.0, 512 << 20)
    assert (o.window_s, o.timeout_s, o.seed, o.cache) == (0.5, None, 7, "memory://x")
    assert o.pipeline_kwargs == {"batch_size": 64} and o.method == "intune"


def test_blank_values_are_the_defaults():
    o = TuneOptions.parse({"pipeline": REF, "budget_s": "", "method": "none", "cache": "null",
                           "pipeline_kwargs": None})
    assert (o.budget_s, o.method, o.cache, o.pipeline_kwargs) == (60.0, "intune", None, {})


@pytest.mark.parametrize("name, value, words", [
    ("budget_s", 0, "budget_s must be a positive number of seconds, got 0; e.g. budget_s=60"),
    ("budget_s", float("inf"), "got inf"),
    ("budget_s", "20s", "a positive number of seconds (a bare number, no unit), got '20s'"),
    ("budget_s", True, "got True"),
    ("cpu_budget", -1, "cpu_budget must be a positive number of cores"),
    ("ram_budget", "lots", "not a memory size"),
    ("method", "magic", "method must be one of intune, ones, autotune"),
    ("cache", "gs://b/x", "scheme 'gs':// is not supported"),
    ("strict", "maybe", "strict must be True or False"),
    ("pipeline_kwargs", "[1]", "must be a dict"),
    ("pipeline_kwargs", {"not a name": 1}, "keyed by argument names"),
    ("seed", 1.5, "seed must be an integer"),
    ("progress", 3, "progress must be None, False or a callable"),
])
def test_each_bad_value_names_the_argument_and_the_fix(name, value, words):
    with pytest.raises(OptionsError, match=f"^@intune: {name}") as err:
        TuneOptions.parse({"pipeline": REF, name: value}, where="@intune")
    assert words in str(err.value)


def test_every_error_is_a_configuration_error_and_a_value_error():
    assert issubclass(OptionsError, ConfigurationError) and issubclass(OptionsError, ValueError)
    assert issubclass(PipelineError, ConfigurationError)


def test_a_malformed_or_missing_pipeline_is_refused():
    with pytest.raises(PipelineError, match="is malformed"):
        TuneOptions.parse({"pipeline": "no_colon"})
    with pytest.raises(OptionsError, match="needs pipeline=") as missing:
        TuneOptions.parse({"budget_s": 5})
    # The example every such message gives is a factory an installed package has (README-only
    # trial 91: it named "examples.criteo:...", which imports only from a checkout).
    example = re.search(r'e\.g\. "([\w.]+:\w+)"', str(missing.value)).group(1)
    module, _, name = example.partition(":")
    spec = importlib.util.find_spec(module)      # found without importing TensorFlow
    assert module.startswith("intune_flow.") and spec is not None
    assert f"def {name}(" in open(spec.origin).read()


def test_unknown_names_and_names_of_other_surfaces_are_refused():
    with pytest.raises(OptionsError, match="does not take 'budgett'"):
        TuneOptions.parse({"pipeline": REF, "budgett": 3}, where="@intune", surface="metaflow")
    with pytest.raises(OptionsError, match="does not take 'progress'"):
        TuneOptions.parse({"pipeline": REF, "progress": False}, surface="airflow")


def test_a_misspelled_argument_names_the_near_miss_and_a_factory_argument_names_pipeline_kwargs():
    from intune_flow import tune

    with pytest.raises(OptionsError, match=r"tune\(\) does not take 'budget' \(did you mean "
                                           r"'budget' -> 'budget_s'\?\)"):
        tune(REF, budget=5)
    with pytest.raises(OptionsError, match=r"does not take 'batch_size' \(the factory's own "
                                           r"arguments go in pipeline_kwargs"):
        tune(REF, batch_size=64)
    # The pipeline itself misspelt or left out: named as the other arguments are, not
    # Python's "missing 1 required positional argument" (README-only trial 80).
    with pytest.raises(OptionsError, match=r"does not take 'pipline' \(did you mean "
                                           r"'pipline' -> 'pipeline'\?\)"):
        tune(pipline=REF)
    with pytest.raises(OptionsError, match="needs pipeline="):
        tune(budget_s=5)


def test_probe_names_a_misspelt_argument_and_the_near_miss():
    from intune_flow import probe

    with pytest.raises(OptionsError, match=r"probe\(\) does not take 'window' \(did you mean "
                                           r"'window' -> 'window_s'\?\); its arguments are "
                                           r"pipeline, config, window_s"):
        probe(REF, window=0.5)


def test_deferred_values_are_left_for_the_run():
    template = "{{ params.budget }}"
    o = TuneOptions.parse({"pipeline": REF, "budget_s": template},
                          deferred=lambda v: isinstance(v, str) and "{{" in v)
    assert o.budget_s == template


def test_the_source_check_reads_the_module_without_importing_it():
    with pytest.raises(PipelineError, match="defines no 'criteo_pipline'"):
        TuneOptions.parse({"pipeline": "examples.criteo:criteo_pipline"}, source="required")
    with pytest.raises(PipelineError, match=r"takes no argument\(s\) \['batchsize'\]"):
        TuneOptions.parse({"pipeline": REF, "pipeline_kwargs": {"batchsize": 1}},
                          source="required")
    TuneOptions.parse({"pipeline": "not_here_xyz:f"}, source="optional")   # left to the worker


def test_the_surfaces_take_the_shared_arguments_and_python_takes_the_objects():
    shared = set(TuneOptions.names("airflow"))
    assert shared == set(TuneOptions.names("metaflow"))
    assert set(TuneOptions.names("cli")) == shared | {"seed"}
    assert set(TuneOptions.names("tune")) == shared | {"seed", "progress", "s3_client"}
    for f in dataclasses.fields(TuneOptions):
        assert f.metadata["doc"] and set(f.metadata["surfaces"]) <= set(SURFACES)


def test_to_dict_is_json_and_keeps_no_client():
    o = TuneOptions.parse({"pipeline": REF, "s3_client": object(), "progress": print})
    d = o.to_dict()
    assert "s3_client" not in d and "progress" not in d and d["pipeline"] == REF


def test_budgets_refuse_more_than_this_machine_gives():
    from intune_flow.resources import usable_cpus

    with pytest.raises(OptionsError, match="cores this process may use"):
        TuneOptions.parse({"pipeline": REF, "cpu_budget": usable_cpus() + 1}).budgets()
    with pytest.raises(OptionsError, match="more than this machine's"):
        TuneOptions.parse({"pipeline": REF, "ram_budget": "1000TiB"}).budgets()
    cpu, ram = TuneOptions.parse({"pipeline": REF}).budgets()
    assert cpu == usable_cpus() and ram > 0


def test_coerce_checks_one_argument():
    assert coerce("window_s", "1.5") == 1.5 and coerce("ram_budget", "1KiB") == 1024


def test_the_method_list_is_the_search_modules():
    from intune_flow.search import METHODS

    assert ", ".join(METHODS) in TuneOptions.doc("method")


def test_parsing_imports_neither_tensorflow_nor_torch():
    code = ("import sys; from intune_flow.options import TuneOptions; "
            "TuneOptions.parse({'pipeline': 'examples.criteo:criteo_pipeline', 'method': 'random',"
            " 'cache': 's3://bucket/x'}, source='required'); "
            "print(sorted(m for m in ('tensorflow', 'torch', 'airflow', 'metaflow') "
            "if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def _needs_files(knobs, files, batch_size=64):
    raise AssertionError("never built: the arguments are checked first")


def _no_knobs():
    raise AssertionError("never built: the arguments are checked first")


def _batch_size_first(batch_size=256, data_dir="/data"):
    raise AssertionError("never built: the arguments are checked first")


def test_a_factory_whose_first_parameter_is_an_argument_raises_before_tuning():
    # A README-only trial's factory forgot the knobs; the knobs object landed in batch_size
    # and every build failed inside TensorFlow with a message that never said why.
    from intune_flow import tune
    from intune_flow.errors import FactoryError
    with pytest.raises(FactoryError, match=r"first parameter 'batch_size' defaults to 256, but "
                                           r"intune_flow passes the knobs there: a factory takes "
                                           r"them first, def my_pipeline\(knobs, batch_size="):
        tune(_batch_size_first, budget_s=5, cache="memory://args")
    with pytest.raises(FactoryError, match=r"first parameter 'batch_size' is given in "
                                           r"pipeline_kwargs"):
        tune(_batch_size_first, budget_s=5, cache="memory://args",
             pipeline_kwargs={"batch_size": 8})


def _knobs_second(batch_size, knobs):
    raise AssertionError("never built: the arguments are checked first")


def _annotated_second(batch_size, k: "intune_flow.Knobs" = None):
    raise AssertionError("never built: the arguments are checked first")


def test_a_factory_that_takes_its_knobs_after_another_parameter_is_told_to_move_them_first():
    # A README-only trial wrote def f(batch_size, knobs): the message said to pass 'knobs' in
    # pipeline_kwargs, a fix that cannot work (intune_flow passes them first).
    from intune_flow import tune
    from intune_flow.errors import FactoryError
    for factory, param in ((_knobs_second, "knobs"), (_annotated_second, "k")):
        for kwargs in (None, {"batch_size": 8}):
            with pytest.raises(FactoryError, match=rf"takes '{param}' as parameter 2, but "
                                                   r"intune_flow passes the knobs as the first "
                                                   r"argument \(there it would land in "
                                                   r"'batch_size'\): move it first"):
                tune(factory, budget_s=5, cache="memory://args", pipeline_kwargs=kwargs)


def test_a_factory_that_cannot_be_called_with_its_arguments_raises_before_tuning():
    from intune_flow import tune
    # Every build would fail the same way, so there is nothing to fall back to.
    with pytest.raises(PipelineError, match=r"needs argument\(s\) \['files'\] that were not "
                                            r"given: pass them in pipeline_kwargs"):
        tune(_needs_files, budget_s=5, cache="memory://args")
    with pytest.raises(PipelineError, match=r"takes no positional argument for the knobs: a "
                                            r"factory takes them first"):
        tune(_no_knobs, budget_s=5, cache="memory://args")


def test_the_package_lists_its_lazy_names_and_importing_it_stays_light():
    code = ("import sys, intune_flow; "
            "print(all(n in dir(intune_flow) for n in ('TuneResult', 'TuneOptions', 'Pipeline', "
            "'apply_config', 'get_cache', 'tune', 'Knobs')), "
            "sorted(m for m in ('tensorflow', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "True []"


def test_a_result_of_a_factory_from_another_scripts_main_says_to_bind_it():
    # README-only trial 80: @intune(pipeline=f) with f in the flow file records
    # "__main__:f", which builds in the flow's steps; from a notebook, build() listed the
    # notebook's callables. The message names the fix instead.
    from intune_flow import TuneResult

    result = TuneResult(config={}, pipeline="__main__:a_factory_only_the_flow_file_has")
    with pytest.raises(PipelineError, match=r"defined in the script that was run .*"
                                            r"result\.bind\(factory\)\.build\(\)"):
        result.build()
