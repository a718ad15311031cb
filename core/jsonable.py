"""The one JSON sanitiser: numpy, tensors, enums, paths and tuples to plain JSON values.

`jsonable(value)` gives strict JSON (NaN and inf become None), for the CLI's output and
exported files; `jsonable(value, keep_nonfinite=True)` keeps them as floats (Python's json
writes NaN), for the run store, whose numbers must read back as written.
"""

from __future__ import annotations

import math
from enum import Enum
from pathlib import Path
from typing import Any, Callable

import numpy as np


def jsonable(value: Any, keep_nonfinite: bool = False, fallback: Callable[[Any], Any] | None = None) -> Any:
    """Dicts (string keys), lists, str, int, float, bool and None only.

    A value with no JSON form goes through `fallback` (e.g. str), or raises TypeError without one.
    """

    def walk(item: Any) -> Any:
        if isinstance(item, dict):
            return {str(getattr(k, "value", k)): walk(v) for k, v in item.items()}
        if isinstance(item, (list, tuple, set)):
            return [walk(v) for v in item]
        if isinstance(item, np.ndarray):
            return walk(item.tolist())
        if isinstance(item, Enum):  # str-Enums serialise as their value
            return walk(item.value)
        if isinstance(item, (bool, np.bool_)):
            return bool(item)
        if isinstance(item, (int, np.integer)):
            return int(item)
        if isinstance(item, (float, np.floating)):
            number = float(item)
            return number if keep_nonfinite or math.isfinite(number) else None
        if item is None or isinstance(item, str):
            return item
        if isinstance(item, Path):
            return str(item)
        if hasattr(item, "numel") and hasattr(item, "item"):  # a torch tensor (torch not imported here)
            if item.numel() == 1:
                return walk(item.item())
            return walk(item.tolist())
        if fallback is not None:
            return fallback(item)
        raise TypeError(f"cannot store {type(item).__name__} as JSON")

    return walk(value)
