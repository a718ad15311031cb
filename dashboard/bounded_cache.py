"""A least-recently-used cache bounded by the bytes of its values, shared by every session.

Streamlit's st.cache_data bounds entries by count, not size: 64 test-set predictions of full MNIST at
R = 100 keep their per-draw probabilities (10,000 x 100 x 10 float32, 40 MB each), 2.6 GB in all, and
every hit unpickles a fresh copy. The prediction arrays the pages share live here instead: one copy
per entry, handed out read-only (no page may change what another session sees), the least recently
used dropped first once the total passes the bound, entries older than the time to live dropped on
access. A value larger than the whole bound is computed and returned but not kept.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from typing import Any, Callable, Hashable

import numpy as np


def value_bytes(value: Any) -> int:
    """Bytes of the numpy arrays in a value (dicts, lists and tuples of arrays are walked)."""
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(value_bytes(item) for item in value.values())
    if isinstance(value, (list, tuple)):
        return sum(value_bytes(item) for item in value)
    return 0


def _read_only(value: Any) -> Any:
    if isinstance(value, np.ndarray):
        value.setflags(write=False)
    elif isinstance(value, dict):
        for item in value.values():
            _read_only(item)
    elif isinstance(value, (list, tuple)):
        for item in value:
            _read_only(item)
    return value


class BoundedCache:
    """get_or_compute(key, compute): the cached value of `key`, computing it once when missing."""

    def __init__(self, max_bytes: int, ttl: float | None = None, clock: Callable[[], float] = time.monotonic):
        self.max_bytes = int(max_bytes)
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._entries: OrderedDict[Hashable, tuple[Any, int, float]] = OrderedDict()
        self.bytes = 0

    def get_or_compute(self, key: Hashable, compute: Callable[[], Any]) -> Any:
        now = self._clock()
        with self._lock:
            entry = self._entries.get(key)
            if entry is not None and (self.ttl is None or now - entry[2] <= self.ttl):
                self._entries.move_to_end(key)
                return entry[0]
            if entry is not None:
                self._drop(key)
        value = _read_only(compute())  # outside the lock: other keys stay readable meanwhile
        size = value_bytes(value)
        with self._lock:
            if size <= self.max_bytes:
                if key in self._entries:
                    self._drop(key)
                self._entries[key] = (value, size, now)
                self.bytes += size
                while self.bytes > self.max_bytes:
                    self._drop(next(iter(self._entries)))
        return value

    def _drop(self, key: Hashable) -> None:
        _, size, _ = self._entries.pop(key)
        self.bytes -= size

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self.bytes = 0

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
