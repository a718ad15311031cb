"""Reading .npz archives safely from several threads at once.

numpy parses each array's header with `ast.literal_eval`. On CPython 3.11 two threads building
AST objects at the same time can fail with "SystemError: AST constructor recursion depth
mismatch" (the recursion depth of the AST constructor is interpreter state shared by threads;
CPython issue gh-106905). The dashboard reads archives from many sessions' threads: the classroom
load test (30 sessions) hit it on the Train page. One process-wide lock makes the reads take
turns; they are small (labels, snapshots, the bundled subsets).
"""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Iterable

import numpy as np

NPZ_LOCK = threading.Lock()


def read_npz(path: str | Path, keys: Iterable[str] | None = None) -> dict[str, np.ndarray]:
    """The arrays `keys` (default: all) of an .npz archive, without pickles, one reader at a time."""
    with NPZ_LOCK, np.load(path, allow_pickle=False) as archive:
        return {key: archive[key] for key in (archive.files if keys is None else keys)}
