"""Metaflow integration: the ``@intune`` step decorator.

``from intune_flow.metaflow import intune`` always works; with this package installed,
``from metaflow import intune`` and ``python flow.py run --with intune:pipeline=...`` do
too (registered through the ``metaflow_extensions`` package shipped alongside).
"""

import metaflow  # noqa: F401  (first: Metaflow's plugin loader imports .decorator through
#                   metaflow_extensions, which must not meet a half-imported .decorator)

from .decorator import ARTIFACT, IntuneDecorator, IntuneDecoratorException, intune
from .session import IntuneSession

__all__ = ["ARTIFACT", "IntuneDecorator", "IntuneDecoratorException", "IntuneSession", "intune"]
