"""Registers ``@intune`` with Metaflow: ``from metaflow import intune`` and ``--with intune``."""

STEP_DECORATORS_DESC = [("intune", ".intune_decorator.IntuneDecorator")]
