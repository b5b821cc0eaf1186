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
