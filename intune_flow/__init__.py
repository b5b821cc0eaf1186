"""intune_flow: reinforcement-learning tuning of DLRM input pipelines.

``import intune_flow`` is light: TensorFlow, torch, boto3 and the workflow engines are
imported only when the piece that needs them is used.
"""

# ``tune`` and ``probe`` share their names with their modules: imported here, the package
# attribute is the function, whatever imports ``intune_flow.tune`` later.

from importlib import import_module

from .errors import (CacheError, ConfigurationError, FactoryError, IntuneError, KnobError,
                     OptionsError, PipelineError, TuningError)
from .knobs import AUTOTUNE, Knob, Knobs, KnobSpace
from .measurement import Measurement
from .probe import probe
from .tune import tune

__version__ = "0.1.0"

_LAZY = {
    "TuneResult": ".result",
    "TuneOptions": ".options",
    "Pipeline": ".pipeline",
    "apply_config": ".pipeline",
    "get_cache": ".cache",
}


def __getattr__(name):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module 'intune_flow' has no attribute {name!r}")


def __dir__():
    """The package's names with the lazy ones (``dir(intune_flow)`` shows ``TuneResult`` too)."""
    return sorted({*globals(), *_LAZY})


__all__ = ["AUTOTUNE", "CacheError", "ConfigurationError", "FactoryError", "IntuneError", "Knob",
           "KnobError", "KnobSpace", "Knobs", "Measurement", "OptionsError", "PipelineError",
           "TuningError", "__version__", "probe", "tune", *_LAZY]
