"""Every framework adapter satisfies the Adapter protocol (without importing a framework)."""


import pytest

from intune_flow.adapters import adapter_for, adapters
from intune_flow.adapters.protocol import Adapter


@pytest.mark.parametrize("adapter", adapters(), ids=lambda a: a.FRAMEWORK)
def test_each_adapter_module_satisfies_the_protocol(adapter):
    assert isinstance(adapter, Adapter)
    assert isinstance(adapter.FRAMEWORK, str) and isinstance(adapter.LIST_IS_BATCH, bool)


def test_the_frameworks_are_distinct():
    assert len({a.FRAMEWORK for a in adapters()}) == len(adapters())
    assert adapter_for(object()) is None
