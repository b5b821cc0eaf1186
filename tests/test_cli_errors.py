"""Bad arguments on the command line: a clear message naming the problem, exit status 2, no traceback.

And ``--timeout-s``: a factory that never returns is abandoned after that long, and ``tune``
still prints a (fallback) config and exits.
"""

import json
import subprocess
import sys
import threading

import pytest

TINY = "tests.test_cli_errors:tiny_pipeline"


def tiny_pipeline(knobs):
    import tensorflow as tf
    ds = tf.data.Dataset.range(10_000).repeat()
    return ds.map(lambda x: x * 2, num_parallel_calls=knobs.parallelism("double", max=4)).batch(64)


def hanging_factory(knobs):
    """Declares a knob, then never returns (run only in the CLI's own process)."""
    knobs.parallelism("work", max=4)
    threading.Event().wait()


def _cli(*args):
    return subprocess.run([sys.executable, "-m", "intune_flow", *args], capture_output=True,
                          text=True, timeout=300)


@pytest.mark.parametrize("args, message", [
    (["tune", "nocolon"], "module:attr|package.module:function"),
    (["tune", "no_such_module_xyz:factory"], "no_such_module_xyz"),
    (["tune", TINY, "--budget-s", "-5"], "budget_s"),
    (["tune", TINY, "--budget-s", "0"], "budget_s"),
    (["tune", TINY, "--method", "telepathy"], "telepathy"),
    (["tune", TINY, "--cache", "ftp://nowhere/x"], "ftp"),
    (["tune", TINY, "--ram-budget", "lots"], "memory size"),
    (["tune", TINY, "--timeout-s", "0"], "--timeout-s: timeout_s must be a positive number"),
    (["tune", TINY, "--timeout-s", "-3"], "--timeout-s: timeout_s must be a positive number"),
    (["tune", TINY, "--timeout-s", "nan"], "got nan; e.g. timeout_s=30"),
    (["tune", TINY, "--timeout-s", "soon"], "got 'soon'"),
    (["probe", TINY, "--config", "nosuch=3"], "nosuch"),
    (["probe", TINY, "--config", "double=99"], "outside its bounds"),
    (["probe", TINY, "--repeat", "0"], "--repeat must be at least 1"),
    (["cache", "ls", "--cache", "s3://"], "bucket"),
])
def test_bad_arguments_fail_cleanly(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    import re
    assert re.search(message, proc.stderr), proc.stderr[-2000:]


def test_unknown_option_is_rejected_by_argparse():
    proc = _cli("tune", TINY, "--budget-s", "5", "--frobnicate")
    assert proc.returncode == 2 and "unrecognized arguments: --frobnicate" in proc.stderr


def test_a_prefix_of_an_option_is_rejected_naming_the_option():
    # argparse would take it as --budget-s; tune(budget=5) is an error too
    proc = _cli("tune", TINY, "--budget", "5")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "unrecognized arguments: --budget 5 (did you mean --budget-s?)" in proc.stderr
    # with the subcommand's usage and name (README-only trial 91 got the top level's)
    assert proc.stderr.startswith("usage: intune-flow tune ") and \
        "intune-flow tune: error: unrecognized arguments" in proc.stderr, proc.stderr
    # the hint comes from the subcommand given: probe has no --budget-s to point to
    proc = _cli("probe", TINY, "--budget-s", "5")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "unrecognized arguments: --budget-s 5" in proc.stderr
    assert "did you mean --budget-s" not in proc.stderr


def test_timeout_s_bounds_a_hanging_factory_and_tune_falls_back(tmp_path):
    proc = _cli("tune", "tests.test_cli_errors:hanging_factory", "--timeout-s", "1",
                "--budget-s", "2", "--cache", str(tmp_path / "cache"), "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    result = json.loads(proc.stdout)
    assert result["source"] == "fallback"
    # tune()'s own bound is 60 s: "1 s" says --timeout-s reached tune() (a CLI that hung
    # instead would be stopped by _cli's subprocess timeout and fail the test)
    assert "did not return within 1 s" in result["reason"], result["reason"]
    # The human output names the fallback's empty config (README-only trial 80 saw a blank line).
    proc = _cli("tune", "tests.test_cli_errors:hanging_factory", "--timeout-s", "1",
                "--budget-s", "2", "--cache", str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "config      the factory defaults" in proc.stdout, proc.stdout
