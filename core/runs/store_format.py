"""What a run folder holds: the layout's names, the records read and written, the manifest's own
checksum, summaries split into JSON and arrays, and the checks of names and values every part of
the store shares (see core.runs.store for the layout)."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from core.data.npz import read_npz
from core.errors import RunStoreError
from core.runs.store_disk import _parse_json, sha256_file

MANIFEST = "manifest.json"
LAST_USED = "last_used"
VERIFIED = "verified"
WEIGHTS = "weights.safetensors"
SUMMARY_ARRAYS = "summaries.safetensors"
JSON_FILES = ("config.json", "info.json", "metrics.json", "history.json", "summaries.json")
SNAPSHOTS = "snapshots.npz"  # optional: listed in the manifest when present, never required
TEMP_DIR = ".tmp"
LOCK_DIR = ".locks"
TRASH_DIR = ".trash"
ARRAY_MARKER = "__array__"
REPLACED, DELETED = "replaced", "deleted"  # suffixes of .trash entries: put back, or remove
# A reader that finds a run's folder missing while a replace of it is under way (its old folder in
# .trash as ".replaced") waits this long for the new one before calling the run deleted.
REPLACE_WAIT_SECONDS = 2.0


def _fix_hint(run_id: str) -> str:
    return f"delete it with `python -m core rm {run_id}` or train it again with --force"


# --- summaries: arrays to safetensors, the rest to JSON -------------------------------------------
def split_summaries(summaries: dict[str, Any]) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Replace every array (at any depth) by {"__array__": path}; return (json part, arrays)."""
    arrays: dict[str, np.ndarray] = {}

    def walk(value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            value = value.detach().cpu().numpy()
        if isinstance(value, np.ndarray):
            arrays[path] = np.ascontiguousarray(value).copy()
            return {ARRAY_MARKER: path}
        if isinstance(value, dict):
            return {str(k): walk(v, f"{path}/{k}" if path else str(k)) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return [walk(v, f"{path}/{i}") for i, v in enumerate(value)]
        if isinstance(value, np.generic):
            return value.item()
        return value

    return walk(summaries, ""), arrays


def join_summaries(json_part: Any, arrays: dict[str, np.ndarray]) -> Any:
    def walk(value: Any) -> Any:
        if isinstance(value, dict):
            if set(value) == {ARRAY_MARKER}:
                return arrays[value[ARRAY_MARKER]]
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(json_part)


def state_dict_for_saving(state_dict: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """CPU, contiguous, unshared copies: safetensors refuses views and aliased tensors."""
    return {name: tensor.detach().to("cpu").contiguous().clone() for name, tensor in state_dict.items()}


@dataclass
class RunContents:
    """What goes into a run folder."""

    config: dict[str, Any]
    info: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    summaries: dict[str, Any] = field(default_factory=dict)
    snapshots: dict[str, np.ndarray] | None = None  # TrainingSnapshots.to_arrays()


@dataclass
class StoredRun:
    """A verified run folder read back (tensors on CPU)."""

    run_id: str
    path: Path
    config: dict[str, Any]
    info: dict[str, Any]
    state_dict: dict[str, torch.Tensor]
    metrics: dict[str, Any]
    history: list[dict[str, Any]]
    summaries: dict[str, Any]


@dataclass
class RunInfo:
    """One row of `list_runs`. status is "ok" or "corrupt" (then `error` says why in one line, and
    metrics and config are empty: nothing of a damaged run is shown as if it were true)."""

    run_id: str
    path: Path
    dataset: str | None
    method: str | None
    created: float | None
    last_used: float | None
    size_bytes: int
    metrics: dict[str, Any]
    config: dict[str, Any]
    status: str = "ok"
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "run_id": self.run_id,
            "path": str(self.path),
            "dataset": self.dataset,
            "method": self.method,
            "created": self.created,
            "last_used": self.last_used,
            "size_bytes": self.size_bytes,
            "metrics": self.metrics,
            "status": self.status,
            "error": self.error,
        }


MANIFEST_FIELDS = frozenset({"run_id", "files", "written", "own_sha256"})


def _manifest_own_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's fields other than the files' entries (and itself), canonically."""
    own = {key: value for key, value in manifest.items() if key not in ("files", "own_sha256")}
    return hashlib.sha256(json.dumps(own, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _check_id(run_id: str) -> None:
    if not _safe_name(run_id) or "." in run_id:
        raise RunStoreError(f"run id {run_id!r}: not a run id (letters and digits only)")


def _safe_name(name: Any) -> bool:
    return (
        isinstance(name, str)
        and bool(name)
        and not name.startswith(".")
        and "/" not in name
        and "\\" not in name
        and "\0" not in name
    )


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _one_line(value: Any, limit: int = 400) -> str:
    text = " ".join(str(value).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _megabytes(n: int | None) -> str:
    if n is None:
        return "? MB"
    megabytes = n / (1024 * 1024)
    return f"{megabytes:.2f} MB" if megabytes < 10 else f"{megabytes:.0f} MB"


def read_snapshot_arrays(folder: Path, run_id: str | None = None) -> dict[str, np.ndarray] | None:
    """The snapshots of the run folder `folder` as arrays, checked against the manifest's checksum;
    None when the manifest lists none (an older run). Never unpickles."""
    import zipfile

    run_id = run_id or folder.name
    if not folder.is_dir():
        raise RunStoreError(
            f"run {run_id} was deleted (by another session or process); list the runs with `python -m core runs`"
        )
    try:
        manifest = _parse_json((folder / MANIFEST).read_bytes())
    except (OSError, ValueError) as exc:
        raise RunStoreError(f"run {run_id}: cannot read {folder / MANIFEST}: {exc}; {_fix_hint(run_id)}") from None
    entry = (manifest.get("files") or {}).get(SNAPSHOTS) if isinstance(manifest, dict) else None
    if entry is None:
        return None
    path = folder / SNAPSHOTS
    if not path.is_file():
        raise RunStoreError(f"run {run_id}: {path} is missing; {_fix_hint(run_id)}")
    if sha256_file(path) != entry.get("sha256"):
        raise RunStoreError(
            f"run {run_id}: {path} does not match its checksum (corrupted or modified); {_fix_hint(run_id)}"
        )
    try:
        return read_npz(path)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise RunStoreError(f"run {run_id}: cannot read {path}: {exc}; {_fix_hint(run_id)}") from None
