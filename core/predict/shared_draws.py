"""Draws kept on disk: a folder of files, one per draw, shared by a machine's server processes and kept
across their restarts.

    shared = SharedDraws(folder, max_bytes=256 * 2**20)
    cache.shared = shared        # core.predict.draw_cache: `extend` reads a draw here before computing it

Why. `python -m dashboard.serve --processes 2` runs two servers, each with its own draw cache: the
class's sessions on both ask for the same (run, threshold) plans, and each process drew them
(measured: 21% and 45% of a class's draws computed twice, benchmarks/results/classroom_draws_proxy2_*.md).
A draw that another process computed is read here instead. And a class's draws are a function of the
run and the plan: the dashboard keeps the folder beside the run store ($BNN_CACHE_DIR/draws), so a
lesson taught again (another class, a restarted server, the teacher's rehearsal) reads the draws an
earlier class computed instead of computing them again. A class of 30 asks for about 270 draws of
0.1 s of CPU each, more than two cores finish within seconds (benchmarks/results/classroom_kept_draws.md).

What a file holds. Draw r of a plan (run and its fingerprint, inputs, mode, threshold, weights,
seed, batch size, torch threads) as a draw process returns it: its raw outputs, the weights it used
(bit-packed) and the draw path it ran by (core.predict.draw_paths). A process takes it as it takes
a draw process's answer: only when its own kept path for the plan is that path, or it keeps none
yet (then it keeps that one), so its numbers stay bit for bit those of its uncached prediction.

Files are written whole (a temporary file renamed into place) and read with numpy's loader without
pickles; an unreadable file counts as absent. At most `max_bytes` are kept: the oldest files are
deleted first. Two processes asking for the same draw at the same moment both compute it (the
second write finds the file and keeps the first).
"""

from __future__ import annotations

import hashlib
import logging
import math
import os
import re
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

log = logging.getLogger(__name__)

SUFFIX = ".draw.npz"


class SharedDraws:
    """Draw files in `folder`, at most `max_bytes` of them (see the module docstring)."""

    def __init__(self, folder: str | Path, max_bytes: int):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.max_bytes = int(max_bytes)
        self._lock = threading.Lock()
        self.read = 0  # draws taken from the folder
        self.written = 0

    @staticmethod
    def name(key: Any, index: int, threads: int | None, fingerprint: tuple) -> str:
        """The file of draw `index` of the plan `key` (a core.predict.draw_cache.DrawKey)."""
        parts = (
            str(key.owner),
            repr(key.inputs),
            tuple(key.shape),
            key.mode.value,
            None if key.threshold is None else float(key.threshold).hex(),
            key.weights.value,
            int(key.seed),
            key.batch_size,
            int(index),
            threads,
            tuple((name, shape, float(value).hex()) for name, shape, value in fingerprint),
        )
        return _owner_prefix(key.owner) + hashlib.sha256(repr(parts).encode()).hexdigest() + SUFFIX

    def forget(self, owner: Any) -> int:
        """Delete the files of `owner`'s draws (a deleted or retrained run); returns how many."""
        prefix = _owner_prefix(owner)
        if not prefix:
            return 0
        removed = 0
        try:
            entries = [entry.path for entry in os.scandir(self.folder) if entry.name.startswith(prefix)]
        except OSError:
            return 0
        for path in entries:
            try:
                os.unlink(path)
                removed += 1
            except OSError:
                pass
        return removed

    def get(self, name: str) -> tuple[torch.Tensor, list[torch.Tensor], str | None] | None:
        """(outputs, used weights, path) of the draw, or None when no process kept it."""
        path = self.folder / name
        try:
            with np.load(path, allow_pickle=False) as held:
                output = torch.from_numpy(held["output"].copy())
                layers = int(held["layers"])
                used = [_unpacked(held[f"used{i}"], held[f"shape{i}"]) for i in range(layers)]
                drawn_by = str(held["path"]) or None
        except FileNotFoundError:
            return None
        except Exception as error:  # a damaged or foreign file: drawn again, and replaced
            log.warning("shared draw %s unreadable (%s); drawing it here", name, error)
            try:
                path.unlink()
            except OSError:
                pass
            return None
        with self._lock:
            self.read += 1
        return output, used, drawn_by

    def put(self, name: str, output: torch.Tensor, used: list[torch.Tensor], drawn_by: str | None) -> None:
        """Keep a draw for the other processes (the first copy stays), then delete the oldest files
        beyond `max_bytes`."""
        target = self.folder / name
        if target.exists():
            return
        arrays: dict[str, Any] = {
            "output": output.numpy(),
            "layers": np.array(len(used)),
            "path": np.array(drawn_by or ""),
        }
        for i, layer in enumerate(used):
            arrays[f"used{i}"] = np.packbits(layer.numpy().reshape(-1))
            arrays[f"shape{i}"] = np.array(tuple(layer.shape), dtype=np.int64)
        try:
            handle, temporary = tempfile.mkstemp(dir=self.folder, suffix=".tmp")
            with os.fdopen(handle, "wb") as file:
                np.savez(file, **arrays)
            os.replace(temporary, target)
        except OSError as error:  # a full or read-only disk: the draw stays this process's
            log.warning("shared draw %s not written (%s)", name, error)
            try:
                os.unlink(temporary)
            except (OSError, UnboundLocalError):
                pass
            return
        with self._lock:
            self.written += 1
        self._evict()

    def _evict(self) -> None:
        try:
            files = [(entry.stat().st_mtime, entry.stat().st_size, entry.path) for entry in os.scandir(self.folder)]
        except OSError:
            return
        files = [f for f in files if f[2].endswith(SUFFIX)]
        total = sum(size for _, size, _ in files)
        for _, size, path in sorted(files):
            if total <= self.max_bytes:
                break
            try:
                os.unlink(path)
            except OSError:
                pass
            total -= size


def _unpacked(bits: np.ndarray, shape: np.ndarray) -> torch.Tensor:
    """A layer's used weights from a file: its shape is checked against the bits the file holds before
    anything of that shape is made (a foreign file's shape alone could ask for any size)."""
    dims = [int(d) for d in np.asarray(shape).reshape(-1)]
    count = math.prod(dims)
    if (
        bits.ndim != 1
        or bits.dtype != np.uint8
        or any(d < 0 for d in dims)
        or not 8 * bits.size - 8 < count <= 8 * bits.size
    ):
        raise ValueError(f"used weights of shape {dims} do not match their {bits.size} packed bytes")
    return torch.from_numpy(np.unpackbits(bits, count=count).reshape(dims).astype(bool))


def _owner_prefix(owner: Any) -> str:
    """A run id's files start with it (so that deleting the run deletes them); other owners have none."""
    text = str(owner)
    return f"{text}-" if re.fullmatch(r"[0-9a-f]{4,64}", text) else ""


def share(cache: Any, folder: str | Path, max_bytes: int) -> None:
    """Have `cache` (a DrawCache) read and keep its draws in `folder`; a folder that cannot be made
    leaves it its own draws (logged), never an error for the page that asked."""
    try:
        cache.shared = SharedDraws(folder, max_bytes)
    except OSError as error:
        log.warning("draws not shared between the server processes: %s", error)
