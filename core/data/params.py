"""Validation of the **params a generated dataset accepts."""

from __future__ import annotations

from typing import Any

from core.errors import DataError


def merge_params(name: str, defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Defaults overridden by `given`; unknown keys raise DataError listing the valid ones."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        valid = ", ".join(f"{k}={v!r}" for k, v in defaults.items()) or "none"
        raise DataError(f"dataset {name!r} does not take parameter(s) {', '.join(unknown)}; "
                        f"valid parameters (with defaults): {valid}")
    return {**defaults, **given}


def positive_int(name: str, key: str, value: Any, minimum: int = 1) -> int:
    try:
        as_int = int(value)
    except (TypeError, ValueError):
        as_int = None
    if as_int is None or as_int != value or as_int < minimum:
        raise DataError(f"{name}: {key} must be an integer >= {minimum}, got {value!r}")
    return as_int


def non_negative_float(name: str, key: str, value: Any) -> float:
    try:
        as_float = float(value)
    except (TypeError, ValueError):
        as_float = float("nan")
    if not as_float >= 0 or as_float == float("inf"):
        raise DataError(f"{name}: {key} must be a finite number >= 0, got {value!r}")
    return as_float


def interval_list(name: str, key: str, value: Any, low: float, high: float) -> list:
    """A list of (a, b) pairs with low <= a < b <= high, sorted, non-overlapping."""
    try:
        pairs = sorted((float(a), float(b)) for a, b in value)
    except (TypeError, ValueError) as exc:
        raise DataError(f"{name}: {key} must be a list of (start, end) pairs, "
                        f"got {value!r}") from exc
    for index, (a, b) in enumerate(pairs):
        if not (low <= a < b <= high):
            raise DataError(f"{name}: {key} interval ({a}, {b}) must satisfy "
                            f"{low} <= start < end <= {high}")
        if index and a < pairs[index - 1][1]:
            raise DataError(f"{name}: {key} intervals {pairs[index - 1]} and ({a}, {b}) overlap")
    return pairs
