"""The generality suite's --cpu-load: busy-loops in other processes while a block runs,
stopped when it ends or raises."""

import time

import psutil
import pytest

from benchmarks.cpu_load import cpu_load


def _alive(proc) -> bool:
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _loops() -> list:
    """This process's spawned children (not multiprocessing's resource tracker)."""
    out = []
    for c in psutil.Process().children(recursive=True):
        try:
            if _alive(c) and "spawn_main" in " ".join(c.cmdline()):
                out.append(c)
        except psutil.NoSuchProcess:
            pass
    return out


def test_the_load_runs_in_other_processes_only_while_the_block_runs():
    before = {c.pid for c in _loops()}
    with cpu_load(0.75, cores=2):
        loops = [c for c in _loops() if c.pid not in before]
        assert len(loops) == 2     # 1.5 cores of load: two loops at a 75% duty cycle
        time.sleep(0.3)
        assert all(c.cpu_times().user + c.cpu_times().system > 0 for c in loops)
    assert not [c for c in loops if _alive(c)]


def test_the_load_stops_when_the_block_raises():
    before = {c.pid for c in _loops()}
    with pytest.raises(KeyError):
        with cpu_load(0.25, cores=2):
            loops = [c for c in _loops() if c.pid not in before]
            assert len(loops) == 1
            raise KeyError("tune() failed")
    assert not [c for c in loops if _alive(c)]


def test_no_load_starts_nothing_and_a_share_outside_0_to_1_is_refused():
    before = {c.pid for c in _loops()}
    with cpu_load(0.0, cores=2):
        assert {c.pid for c in _loops()} == before
    with pytest.raises(ValueError, match=r"share must be in \[0, 1\), got 1.5; e.g. 0.25"):
        with cpu_load(1.5, cores=2):
            pass


@pytest.mark.parametrize("argv, says", [
    (["--cpu-load", "1.5"], "--cpu-load must be a share of the CPU in [0, 1), got 1.5"),
    (["--cpu-load", "0.25", "--compare", '{"a": {}}'], "--compare runs no tune()"),
])
def test_the_generality_suite_refuses_a_cpu_load_it_cannot_apply(argv, says, tmp_path, capsys):
    from benchmarks import generality

    with pytest.raises(SystemExit) as e:
        generality.main(["--cases", "two_maps", "--out", str(tmp_path), *argv])
    assert e.value.code == 2 and says in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_the_load_stops_when_the_process_that_started_it_is_killed(tmp_path):
    """A benchmark killed by a signal runs no ``finally``: its loops still end (before, a
    killed ``--cpu-load`` run left its loops holding the CPU until someone found them)."""
    import os
    import signal
    import subprocess
    import sys

    script = tmp_path / "hold.py"
    script.write_text(
        "import sys, time\n"
        "from benchmarks.cpu_load import cpu_load\n"
        "if __name__ == '__main__':\n"
        "    with cpu_load(0.25, cores=2):\n"
        "        print('loaded', flush=True)\n"
        "        time.sleep(600)\n")
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    proc = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": root})
    loops = []
    try:
        assert proc.stdout.readline().strip() == "loaded"
        loops = [c for c in psutil.Process(proc.pid).children(recursive=True)
                 if "spawn_main" in " ".join(c.cmdline())]
        assert len(loops) == 1 and _alive(loops[0])
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)
        deadline = time.monotonic() + 10
        while any(_alive(c) for c in loops) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not [c for c in loops if _alive(c)]
    finally:
        proc.kill()
        proc.wait(10)
        for c in loops:
            if _alive(c):
                c.kill()
