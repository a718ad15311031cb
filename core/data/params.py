"""Validation of the **params a generated dataset accepts."""

from __future__ import annotations

from typing import Any

from core.errors import DataError


def merge_params(name: str, defaults: dict[str, Any], given: dict[str, Any]) -> dict[str, Any]:
    """Defaults overridden by `given`; unknown keys raise DataError listing the valid ones."""
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        valid = ", ".join(f"{k}={v!r}" for k, v in defaults.items()) or "none"
        raise DataError(
            f"dataset {name!r} does not take parameter(s) {', '.join(unknown)}; "
            f"valid parameters (with defaults): {valid}"
        )
    return {**defaults, **given}


def positive_int(name: str, key: str, value: Any, minimum: int = 1, maximum: int | None = None) -> int:
    """A whole number in [minimum, maximum]. The generators pass maximum for counts of points
    (core.cost.max_generated_points), checked here before any array of that length exists."""
    from core.validate import shown

    try:
        as_int = int(value)
    except (TypeError, ValueError, OverflowError):
        as_int = None
    if as_int is None or as_int != value or as_int < minimum:
        raise DataError(f"{name}: {key} must be an integer >= {minimum}, got {shown(value)}")
    if maximum is not None and as_int > maximum:
        raise DataError(
            f"{name}: {key}={shown(value)} is above the {maximum:,} points a generated set may have "
            f"(BNN_MAX_GENERATED_POINTS); give {key} of at most {maximum:,}"
        )
    return as_int


def point_count(name: str, key: str, value: Any, minimum: int = 1) -> int:
    """A count of generated points: positive_int up to $BNN_MAX_GENERATED_POINTS."""
    from core.cost import max_generated_points

    return positive_int(name, key, value, minimum, maximum=max_generated_points())


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
        raise DataError(f"{name}: {key} must be a list of (start, end) pairs, got {value!r}") from exc
    for index, (a, b) in enumerate(pairs):
        if not (low <= a < b <= high):
            raise DataError(f"{name}: {key} interval ({a}, {b}) must satisfy {low} <= start < end <= {high}")
        if index and a < pairs[index - 1][1]:
            raise DataError(f"{name}: {key} intervals {pairs[index - 1]} and ({a}, {b}) overlap")
    return pairs
