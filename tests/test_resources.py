"""CPU and RAM budgets come from what the process may really use."""

import os

import pytest

from intune_flow import resources


def test_usable_cpus_follows_affinity():
    before = os.sched_getaffinity(0)
    try:
        os.sched_setaffinity(0, {min(before)})
        assert resources.usable_cpus() == 1.0
    finally:
        os.sched_setaffinity(0, before)
    assert resources.usable_cpus() <= len(before)


def test_default_ram_budget_is_above_current_rss_and_below_total():
    import psutil
    budget = resources.default_ram_budget()
    assert resources.current_rss() < budget < psutil.virtual_memory().total


@pytest.mark.parametrize("text, expected", [
    ("512M", 512 * 2**20), ("4GiB", 4 * 2**30), ("2g", 2 * 2**30), ("1.5GB", 1_500_000_000),
    (1024, 1024)])
def test_parse_bytes(text, expected):
    assert resources.parse_bytes(text) == expected


@pytest.mark.parametrize("bad", ["lots", "-1G", "5 parsecs", 0, True])
def test_parse_bytes_rejects_nonsense(bad):
    with pytest.raises(ValueError, match="memory size"):
        resources.parse_bytes(bad)


def test_hardware_class_buckets_ram():
    assert resources.hardware_class(2, 3 * 2**30) == "cpu2-ram2g"
    assert resources.hardware_class(16, 64 * 2**30) == "cpu16-ram64g"
    # By default the machine's memory, not what happens to be free: stable across runs.
    assert resources.hardware_class(2) == resources.hardware_class(2, resources.machine_ram())
    assert 0 < resources.available_ram() <= resources.machine_ram()


def test_worker_processes_count_children_started_after_them_and_what_they_add():
    import subprocess
    import sys
    import time

    hold = "import time; time.sleep({wait}); x = b'x' * (200 * 2**20); time.sleep(60)"
    older = subprocess.Popen([sys.executable, "-c", hold.format(wait=0)])
    try:
        time.sleep(1.0)                         # holds its 200 MiB before we start counting
        workers = resources.WorkerProcesses(refresh_s=0.0)
        assert workers.sample(time.perf_counter()) == (0, 0.0)
        newer = subprocess.Popen([sys.executable, "-c", hold.format(wait=1.0)])
        try:
            extra, cpu, deadline = 0, 0.0, time.time() + 20
            while extra < 150 * 2**20 and time.time() < deadline:
                extra, cpu = workers.sample(time.perf_counter())
                time.sleep(0.05)
            assert 150 * 2**20 <= extra < 400 * 2**20   # the newer one's 200 MiB, not the older's
            assert cpu > 0
        finally:
            newer.kill()
            newer.wait()
    finally:
        older.kill()
        older.wait()
