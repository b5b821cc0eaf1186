"""Cache keys: schema fingerprint + knob-space fingerprint + hardware class + record-format version."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import CacheError
from .base import check_key

FORMAT_VERSION = 1
"""Record-format version. Part of every key: a newer format lives under new keys."""

_PART = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._=+-]{0,127}$")
_KEY = re.compile(r"^v(\d+)/([^/]+)/([^/]+)/([^/]+)$")


@dataclass(frozen=True)
class CacheKey:
    """Where a record lives: ``v<format>/<schema>/<space>/<hardware>``.

    Records sharing ``family`` (same schema and knob space) on other hardware classes
    are the candidates for a transferred warm start.
    """

    schema: str
    space: str
    hardware: str
    format: int = FORMAT_VERSION

    def __post_init__(self):
        for name in ("schema", "space", "hardware"):
            value = getattr(self, name)
            if not isinstance(value, str) or not _PART.match(value):
                raise CacheError(f"cache key part {name}={value!r} must be 1-128 letters, digits "
                                 "or '._=+-'")

    def __str__(self) -> str:
        return f"v{self.format}/{self.schema}/{self.space}/{self.hardware}"

    @property
    def family(self) -> str:
        """Prefix shared by the records of this schema and knob space on every hardware class."""
        return f"v{self.format}/{self.schema}/{self.space}/"

    def to_dict(self) -> dict:
        return {"schema": self.schema, "space": self.space, "hardware": self.hardware,
                "format": self.format}

    @classmethod
    def parse(cls, key: str) -> "CacheKey":
        """The key of a stored record path; raises :class:`CacheError` for anything else."""
        match = _KEY.match(check_key(str(key)))
        if match is None:
            raise CacheError(f"{key!r} is not a record key; keys look like "
                             "v1/<schema>/<space>/<hardware> (see `intune-flow cache ls`)")
        return cls(match.group(2), match.group(3), match.group(4), int(match.group(1)))


def make_key(schema_fingerprint: str, space, hardware: str) -> CacheKey:
    """The key of a pipeline (its fingerprint and KnobSpace) on a hardware class."""
    return CacheKey(str(schema_fingerprint), space.fingerprint(), str(hardware))
