"""Where the libraries intune_flow runs keep their files, when the caller has not said.

Importing TensorFlow creates ``~/.keras``, matplotlib writes ``~/.config/matplotlib`` and
torch's inductor ``/tmp/torchinductor_<user>``; the demo and the benchmarks point them into
a directory of their own instead (a caller's own settings win).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import MutableMapping


def library_homes(home: Path) -> dict[str, str]:
    """The environment variables that keep Keras, matplotlib and torch inductor under ``home``."""
    return {"MPLCONFIGDIR": str(home / "matplotlib"),
            "KERAS_HOME": str(home / "keras"),
            "TORCHINDUCTOR_CACHE_DIR": str(home / "torchinductor")}


def fill_unset(env: MutableMapping[str, str], defaults: dict[str, str]) -> None:
    """Set each of ``defaults`` in ``env`` where it is unset or empty."""
    for key, value in defaults.items():
        if not env.get(key):
            env[key] = value


def use_library_homes(home: Path, env: MutableMapping[str, str] = os.environ) -> None:
    """:func:`library_homes` under ``home``, where ``env`` does not set them already."""
    fill_unset(env, library_homes(home))
