"""Device resolution. There is no global device: callers pass one around."""

from __future__ import annotations

import torch

from core.errors import ConfigError


def resolve_device(name: str | torch.device = "auto") -> torch.device:
    """'auto' picks CUDA, then MPS, then CPU; other names are checked to exist."""
    if isinstance(name, torch.device):
        return name
    name = str(name).strip().lower()
    if name == "auto":
        if torch.cuda.is_available():
            return torch.device("cuda")
        mps = getattr(torch.backends, "mps", None)
        if mps is not None and mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")
    try:
        device = torch.device(name)
    except RuntimeError as exc:
        raise ConfigError(f"device: unknown device {name!r}; use auto, cpu, cuda or mps") from exc
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device: CUDA was asked for but no CUDA GPU is available; use --device auto or cpu")
    if device.type == "mps" and not (getattr(torch.backends, "mps", None) and torch.backends.mps.is_available()):
        raise ConfigError("device: MPS was asked for but is not available; use --device auto or cpu")
    return device


def device_message(text: str) -> str:
    """core's device errors name the CLI flag; on the dashboard's Train form the choice is the Device box."""
    return text.replace("use --device auto or cpu", "choose Device: auto or cpu")


def device_problem(device: str) -> str | None:
    """Why `device` cannot be used here, in the Train form's words, or None."""
    from core.errors import ConfigError

    try:
        resolve_device(device)
    except ConfigError as exc:
        return device_message(str(exc))
    return None
