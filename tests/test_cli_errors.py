"""Bad arguments on the command line: a clear message naming the problem, exit status 2, no traceback."""

import subprocess
import sys

import pytest

TINY = "tests.test_cli_errors:tiny_pipeline"


def tiny_pipeline(knobs):
    import tensorflow as tf
    ds = tf.data.Dataset.range(10_000).repeat()
    return ds.map(lambda x: x * 2, num_parallel_calls=knobs.parallelism("double", max=4)).batch(64)


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
    (["probe", TINY, "--config", "nosuch=3"], "nosuch"),
    (["probe", TINY, "--config", "double=99"], "outside its bounds"),
    (["cache", "ls", "--cache", "s3://"], "bucket"),
])
def test_bad_arguments_fail_cleanly(args, message):
    proc = _cli(*args)
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "Traceback" not in proc.stderr
    import re
    assert re.search(message, proc.stderr), proc.stderr[-2000:]


def test_unknown_option_is_rejected_by_argparse():
    proc = _cli("tune", TINY, "--budget", "5", "--frobnicate")
    assert proc.returncode == 2 and "unrecognized arguments: --frobnicate" in proc.stderr
