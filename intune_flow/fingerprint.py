"""The schema fingerprint: the key under which tuned configs and policies are cached.

It hashes what decides how a pipeline behaves under tuning and whether a cached config
still applies: the framework, each feature's name, dtype and shape (batch dimension
left out, as None), and the knob space (names, kinds, bounds). It does not depend on
the config, the knob defaults, file names or contents, the data values, the batch size,
or where or when it is computed (see docs/pipelines.md).
"""

from __future__ import annotations

import hashlib
import json

from .knobs import KnobSpace

FINGERPRINT_VERSION = 1


def fingerprint(framework: str, schema: dict, space: KnobSpace) -> str:
    """32 hex characters of sha256 over a canonical JSON of framework, schema and knob space."""
    canonical = {
        "v": FINGERPRINT_VERSION,
        "framework": framework,
        "schema": [[name, str(f["dtype"]), [d if d is None else int(d) for d in f["shape"]]]
                   for name, f in sorted(schema.items())],
        "knobs": [[k.name, k.kind, k.min, k.max] for k in space.knobs],
    }
    text = json.dumps(canonical, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()[:32]
