"""The cluster policy's weights: safetensors only (never pickle), validated against the network."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np

from ..agent.policy_io import PolicyError
from .network import HIDDEN, ScaleQNet

CLUSTER_POLICY = "cluster.safetensors"
FORMAT = "intune-flow-cluster-dqn/1"


def expected_shapes(hidden: int | None = None) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of :class:`~intune_flow.scaleout.network.ScaleQNet`."""
    net = ScaleQNet(hidden or HIDDEN)
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def validate_cluster_policy(state: dict, hidden: int | None = None) -> dict[str, np.ndarray]:
    """Check names, shapes, dtypes and finiteness; float32 copies. Raises :class:`PolicyError`."""
    if not isinstance(state, dict):
        raise PolicyError(f"a policy is a dict of name to array, got {type(state).__name__}")
    if hidden is None:
        w = state.get("body.0.weight")
        hidden = int(np.shape(w)[0]) if w is not None and np.ndim(w) == 2 else None
    want = expected_shapes(hidden)
    if set(want) != set(state):
        raise PolicyError(f"cluster policy weights do not match the network: missing "
                          f"{sorted(set(want) - set(state))}, unexpected "
                          f"{sorted(set(state) - set(want))}; retrain with "
                          "`python -m benchmarks.cluster_pretrain`")
    out = {}
    for name, shape in want.items():
        arr = np.asarray(state[name])
        if arr.dtype.kind != "f" or tuple(arr.shape) != shape or not np.all(np.isfinite(arr)):
            raise PolicyError(f"cluster policy weight {name!r}: dtype {arr.dtype}, shape "
                              f"{tuple(arr.shape)}, expected finite floats of shape {shape}")
        out[name] = arr.astype(np.float32, copy=True)
    return out


def save_cluster_policy(state: dict, path: str | Path, provenance: dict | None = None) -> None:
    """Write ``path`` (safetensors) and, with provenance, the same name with ``.json``."""
    from safetensors.numpy import save
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    clean = validate_cluster_policy(state)
    path.write_bytes(save({k: np.ascontiguousarray(v) for k, v in clean.items()},
                          metadata={"format": FORMAT}))
    if provenance is not None:
        text = json.dumps(provenance, indent=2, sort_keys=True) + "\n"
        path.with_suffix(".json").write_text(text)


def cluster_policy_from_bytes(data: bytes) -> dict[str, np.ndarray]:
    """Parse safetensors bytes into validated weights; anything else raises :class:`PolicyError`."""
    from safetensors.numpy import load
    try:
        state = load(bytes(data))
    except Exception as exc:  # safetensors raises its own error types on malformed input
        raise PolicyError(f"not a safetensors cluster policy ({exc})") from None
    return validate_cluster_policy(state)


def load_cluster_policy(path: str | Path | None = None) -> dict[str, np.ndarray]:
    """A cluster policy file, or the one shipped in ``intune_flow/policies/`` when None."""
    try:
        if path is None:
            data = resources.files("intune_flow.policies").joinpath(CLUSTER_POLICY).read_bytes()
        else:
            data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read the cluster policy {path or CLUSTER_POLICY}: {exc}; run "
                          "`python -m benchmarks.cluster_pretrain`") from None
    return cluster_policy_from_bytes(data)


def cluster_policy_provenance() -> dict:
    try:
        ref = resources.files("intune_flow.policies").joinpath("cluster.json")
        return json.loads(ref.read_text())
    except (OSError, ValueError):
        return {}
