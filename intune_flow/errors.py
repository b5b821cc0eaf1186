"""Errors intune_flow raises. Every message names the problem and the fix."""


class IntuneError(Exception):
    """Base class of every error intune_flow raises on purpose."""


class PipelineError(IntuneError):
    """The pipeline factory could not be loaded, built or iterated."""


class KnobError(IntuneError):
    """A knob declaration or a config is invalid."""


class CacheError(IntuneError):
    """A cache URI or backend is unusable."""


class TuningError(IntuneError):
    """Tuning failed and strict mode asked for the failure to propagate."""
