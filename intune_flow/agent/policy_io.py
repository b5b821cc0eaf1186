"""Policy weights as ``dict[str, numpy array]``, stored with safetensors (never pickle)."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

import numpy as np

from ..errors import IntuneError

DEFAULT_POLICY = "default.safetensors"
FORMAT = "intune-flow-dqn/2"
"""2: three moves per knob (up, down, AUTOTUNE) and 17 knob features; 1 had two and 13."""


class PolicyError(IntuneError):
    """Policy weights are missing, malformed or do not fit the network."""


def expected_shapes(hidden: int | None = None) -> dict[str, tuple[int, ...]]:
    """Parameter names and shapes of :class:`QNet`."""
    import torch

    from .network import HIDDEN, QNet
    torch.manual_seed(0)
    net = QNet(hidden or HIDDEN)
    return {k: tuple(v.shape) for k, v in net.state_dict().items()}


def validate_policy(state: dict, hidden: int | None = None) -> dict[str, np.ndarray]:
    """Check names, shapes and dtypes; return float32 copies. Raises :class:`PolicyError`."""
    if not isinstance(state, dict):
        raise PolicyError(f"a policy is a dict of name to array, got {type(state).__name__}")
    if hidden is None:
        w = state.get("knob.0.weight")
        hidden = int(np.shape(w)[0]) if w is not None and np.ndim(w) == 2 else None
    want = expected_shapes(hidden)
    missing = sorted(set(want) - set(state))
    extra = sorted(set(state) - set(want))
    if missing or extra:
        raise PolicyError(f"policy weights do not match the network: missing {missing}, "
                          f"unexpected {extra}. Retrain with `intune-flow pretrain` or pass "
                          "policy_state=None to use the shipped policy.")
    out = {}
    for name, shape in want.items():
        arr = np.asarray(state[name])
        if arr.dtype.kind != "f":
            raise PolicyError(f"policy weight {name!r} has dtype {arr.dtype}, expected floats")
        if tuple(arr.shape) != shape:
            raise PolicyError(f"policy weight {name!r} has shape {tuple(arr.shape)}, expected "
                              f"{shape}; the weights were made for a different network")
        if not np.all(np.isfinite(arr)):
            raise PolicyError(f"policy weight {name!r} holds NaN or infinity")
        out[name] = arr.astype(np.float32, copy=True)
    return out


def policy_to_bytes(state: dict, metadata: dict | None = None) -> bytes:
    """Serialize validated weights with safetensors."""
    from safetensors.numpy import save
    meta = {"format": FORMAT, **{k: str(v) for k, v in (metadata or {}).items()}}
    return save({k: np.ascontiguousarray(v) for k, v in validate_policy(state).items()},
                metadata=meta)


def policy_from_bytes(data: bytes) -> dict[str, np.ndarray]:
    """Parse safetensors bytes into validated weights. Anything else raises :class:`PolicyError`."""
    from safetensors.numpy import load
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise PolicyError(f"policy bytes expected, got {type(data).__name__}")
    try:
        state = load(bytes(data))
    except Exception as exc:  # safetensors raises its own error types on malformed input
        raise PolicyError(f"not a safetensors policy file ({exc}); regenerate it with "
                          "`intune-flow pretrain`") from None
    return validate_policy(state)


def save_policy(state: dict, path: str | Path, provenance: dict | None = None) -> None:
    """Write ``path`` (safetensors) and, with provenance, ``path`` with a ``.json`` suffix."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(policy_to_bytes(state))
    if provenance is not None:
        path.with_suffix(".json").write_text(json.dumps(provenance, indent=2, sort_keys=True) + "\n")


def load_policy(path: str | Path) -> dict[str, np.ndarray]:
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise PolicyError(f"cannot read policy file {path}: {exc}") from None
    return policy_from_bytes(data)


def load_default_policy() -> dict[str, np.ndarray]:
    """The pretrained policy shipped in ``intune_flow/policies/``."""
    ref = resources.files("intune_flow.policies").joinpath(DEFAULT_POLICY)
    try:
        data = ref.read_bytes()
    except (FileNotFoundError, OSError):
        raise PolicyError("the shipped policy intune_flow/policies/default.safetensors is missing; "
                          "reinstall intune-flow or run `intune-flow pretrain --out "
                          "intune_flow/policies/default.safetensors`") from None
    return policy_from_bytes(data)


def default_policy_provenance() -> dict:
    ref = resources.files("intune_flow.policies").joinpath("default.json")
    try:
        return json.loads(ref.read_text())
    except (FileNotFoundError, OSError, ValueError):
        return {}
