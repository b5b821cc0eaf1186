"""Benchmarks: ``python -m benchmarks.<name>``. Keras, matplotlib and torch inductor keep
their files under benchmarks/out/homes (ignored by git), not in ~ or /tmp, unless set."""

from pathlib import Path

from intune_flow.homes import use_library_homes

use_library_homes(Path(__file__).resolve().parent / "out" / "homes")
