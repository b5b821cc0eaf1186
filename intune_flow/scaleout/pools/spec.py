"""Worker pool specs: ``"local:4"``, ``"local:4x1"``, ``"ray:8x2"``, ``"ray://host:10001:8"``;
``:SIZE`` at the end states each worker's RAM budget (``"local:4x1:2GiB"``, ``"ray:8x2:4GiB"``),
written as ``ram_budget=`` is (``4GiB``, ``512MiB``, bytes)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from ...errors import OptionsError, near_misses
from .base import worker_ram

SPEC_HELP = ("expected 'local:N' or 'local:NxC' (N local worker processes of C cores), "
             "'ray:N' or 'ray:NxC' (N Ray actors of C CPUs on a local Ray) or "
             "'ray://HOST:PORT:N[xC]' (an existing Ray cluster), each optionally followed by "
             "':SIZE', the RAM budget of each worker written like ram_budget= (4GiB, 512MiB, "
             "bytes); for example 'local:4x1', 'ray:8x2' or 'local:4x1:2GiB'")

_WORKERS = r"(?P<n>\d+)(?:x(?P<c>\d+))?"
_COUNT = rf"{_WORKERS}(?::(?P<ram>[0-9.]+[A-Za-z]*))?"
_LOCAL = re.compile(rf"local:{_COUNT}")
_RAY = re.compile(rf"ray:{_COUNT}")
_RAY_ADDRESS = re.compile(rf"(?P<address>ray://[^\s:/]+:\d+):{_COUNT}")


@dataclass(frozen=True)
class PoolSpec:
    """A parsed worker pool spec: what :func:`make_pool` builds."""

    kind: str                   # "local" | "ray"
    max_workers: int
    cores_per_worker: int = 1
    address: str | None = None  # Ray only: an existing cluster; None starts a local Ray
    ram_per_worker: int | None = None   # bytes; None: no RAM budget stated per worker

    def __str__(self) -> str:
        count = f"{self.max_workers}x{self.cores_per_worker}"
        if self.ram_per_worker:
            from ...resources import format_bytes

            count += f":{format_bytes(self.ram_per_worker)}"
        return f"{self.address}:{count}" if self.address else f"{self.kind}:{count}"

    @classmethod
    def of(cls, pool) -> "PoolSpec":
        """The spec of a :class:`~.base.WorkerPool` object."""
        return cls(pool.kind, pool.max_workers, pool.cores_per_worker,
                   getattr(pool, "address", None), pool.ram_per_worker)

    def pool_kwargs(self) -> dict:
        """What :func:`make_pool` passes on besides the kind's own arguments."""
        return {"ram_per_worker": self.ram_per_worker} if self.ram_per_worker else {}


def parse_pool_spec(text: str, name: str = "workers") -> PoolSpec:
    """Parse a pool spec; raise :class:`~intune_flow.errors.OptionsError` naming ``name``
    and the accepted forms. Pure: imports neither TensorFlow nor Ray."""
    if not isinstance(text, str):
        raise OptionsError(f"{name}={text!r}: the spec is a string such as 'local:2'; "
                           f"{SPEC_HELP}")
    spec = text.strip().lower() if not text.strip().startswith("ray://") else text.strip()
    for pattern, kind in ((_LOCAL, "local"), (_RAY, "ray"), (_RAY_ADDRESS, "ray")):
        match = pattern.fullmatch(spec)
        if match:
            n, c = int(match["n"]), int(match["c"] or 1)
            if n < 1 or c < 1:
                raise OptionsError(f"{name}={text!r}: the worker count and cores per worker "
                                   f"must be at least 1; {SPEC_HELP}")
            ram = None
            if match["ram"] is not None:
                given = text.strip().rsplit(":", 1)[1]     # as written, not lower-cased
                try:
                    ram = worker_ram(given)
                except ValueError as exc:
                    raise OptionsError(f"{name}={text!r}: the RAM size per worker {given!r}: "
                                       f"{exc}; {SPEC_HELP}") from None
            return PoolSpec(kind, n, c, match.groupdict().get("address"), ram)
    raise OptionsError(f"{name}={text!r}: {_what_is_wrong(text.strip())}; {SPEC_HELP}")


def _what_is_wrong(spec: str) -> str:
    """The part of a spec that matches no form: the pool kind, the count, or the RAM size."""
    if spec.startswith("ray://"):
        return "an existing Ray cluster is written ray://HOST:PORT:N[xC][:SIZE]"
    kind, _, rest = spec.partition(":")
    kind = kind.lower()
    if kind not in ("local", "ray"):
        meant = near_misses([kind], ["local", "ray"]).get(kind)
        return f"{kind!r} is not a pool kind" + (f" (did you mean {meant!r}?)" if meant else "")
    if not rest:
        return f"it names no worker count ({kind}:N)"
    count, _, ram = rest.partition(":")
    if not re.fullmatch(_WORKERS, count.lower()):
        return f"{count!r} is not a worker count N or NxC (workers x cores each)"
    try:
        worker_ram(ram)
        why = ""
    except ValueError as exc:
        why = f" ({exc})"
    return f"{ram!r} is not a RAM size per worker{why}"


def make_pool(spec, name: str = "workers", **kwargs):
    """A :class:`~.base.WorkerPool` from a spec string, a :class:`PoolSpec`, or a pool
    (returned as is). ``kwargs`` go to the pool (``registration_timeout_s=``, ...)."""
    from .base import WorkerPool

    if isinstance(spec, WorkerPool):
        return spec
    if not isinstance(spec, PoolSpec):
        spec = parse_pool_spec(spec, name)
    if spec.kind == "local":
        from .local import LocalProcessPool

        return LocalProcessPool(max_workers=spec.max_workers,
                                cores_per_worker=spec.cores_per_worker,
                                **spec.pool_kwargs(), **kwargs)
    from .ray import RayPool

    return RayPool(address=spec.address, num_cpus_per_worker=spec.cores_per_worker,
                   max_workers=spec.max_workers, **spec.pool_kwargs(), **kwargs)
