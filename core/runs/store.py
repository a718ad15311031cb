"""RunStore: a content-addressed cache of trained runs, one folder per run id.

Layout of <cache>/runs/<run id>/:
    weights.safetensors      the model's state_dict (all variational parameters)
    config.json              RunConfig.to_dict()
    info.json                run id, schema, dataset fingerprint, model shape, times
    metrics.json             final metrics
    history.json             per-epoch training records
    summaries.safetensors    array-valued summaries (keys are paths like "a/b/0")
    summaries.json           the rest of the summaries, arrays replaced by {"__array__": key}
    snapshots.npz            per-epoch snapshots of the statistic (core/snapshots.py); optional:
                             runs trained before snapshots were recorded have none
    manifest.json            sha256 and size of every file above; written LAST
    last_used                empty file whose mtime is the last load (LRU); not in the manifest

Writes build the folder in <runs>/.tmp/ and os.rename it into place, so a run
folder is either complete or absent. A per-id file lock in <runs>/.locks/
serialises writers of the same id. Nothing is ever unpickled: tensors come from
safetensors, everything else from JSON.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from filelock import FileLock, Timeout

from core.data.npz import read_npz
from core.errors import RunStoreError
from core.jsonable import jsonable

CACHE_DIR_ENV = "BNN_CACHE_DIR"
CACHE_MAX_MB_ENV = "BNN_CACHE_MAX_MB"
MANIFEST = "manifest.json"
LAST_USED = "last_used"
WEIGHTS = "weights.safetensors"
SUMMARY_ARRAYS = "summaries.safetensors"
JSON_FILES = ("config.json", "info.json", "metrics.json", "history.json", "summaries.json")
SNAPSHOTS = "snapshots.npz"  # optional: listed in the manifest when present, never required
TEMP_DIR = ".tmp"
LOCK_DIR = ".locks"
TRASH_DIR = ".trash"
ARRAY_MARKER = "__array__"


def default_cache_dir() -> Path:
    """$BNN_CACHE_DIR, else platformdirs' user cache dir for bnn-explorer. Runs live in <this>/runs."""
    override = os.environ.get(CACHE_DIR_ENV, "").strip()
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir
    return Path(user_cache_dir("bnn-explorer"))


def _fix_hint(run_id: str) -> str:
    return f"delete it with `python -m core rm {run_id}` or train it again with --force"


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _write_json(path: Path, value: Any) -> None:
    # Non-finite numbers are kept (written as NaN / Infinity): stored metrics read back as written.
    path.write_text(json.dumps(jsonable(value, keep_nonfinite=True), indent=1, sort_keys=True), encoding="utf-8")


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
    """One row of `list_runs`. status is "ok" or "corrupt" (then `error` says why)."""

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
        return {"run_id": self.run_id, "path": str(self.path), "dataset": self.dataset, "method": self.method,
                "created": self.created, "last_used": self.last_used, "size_bytes": self.size_bytes,
                "metrics": self.metrics, "status": self.status, "error": self.error}


class RunStore:
    def __init__(self, cache_dir: str | Path | None = None, max_bytes: int | None = None):
        base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.root = base / "runs"
        if max_bytes is None:
            env = os.environ.get(CACHE_MAX_MB_ENV, "").strip()
            if env:
                try:
                    max_bytes = int(float(env) * 1024 * 1024)
                except ValueError:
                    raise RunStoreError(f"{CACHE_MAX_MB_ENV}: must be a number of megabytes, got {env!r}") from None
        self.max_bytes = max_bytes

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r}, max_bytes={self.max_bytes})"

    # --- paths and locks -------------------------------------------------------------------
    def path(self, run_id: str) -> Path:
        return self.root / run_id

    def _ensure_dirs(self) -> None:
        for sub in (TEMP_DIR, LOCK_DIR, TRASH_DIR):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def lock(self, run_id: str, timeout: float = -1) -> FileLock:
        """The per-id lock writers hold; `timeout=-1` waits forever."""
        self._ensure_dirs()
        return FileLock(str(self.root / LOCK_DIR / f"{run_id}.lock"), timeout=timeout)

    def run_ids(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))

    def resolve(self, run_ref: str) -> str:
        """The full id for a run id or a unique prefix of one."""
        run_ref = str(run_ref).strip()
        if not run_ref:
            raise RunStoreError("run: give a run id (see `python -m core runs`)")
        ids = self.run_ids()
        if run_ref in ids:
            return run_ref
        matches = [run_id for run_id in ids if run_id.startswith(run_ref)]
        if len(matches) == 1:
            return matches[0]
        if not matches:
            raise RunStoreError(f"run {run_ref!r}: no cached run has this id in {self.root}; "
                                f"list them with `python -m core runs`")
        raise RunStoreError(f"run {run_ref!r}: the prefix matches {len(matches)} runs "
                            f"({', '.join(matches[:5])}); give more characters")

    def exists(self, run_id: str) -> bool:
        return (self.path(run_id) / MANIFEST).is_file()

    # --- writing -----------------------------------------------------------------------------
    def write(self, run_id: str, contents: RunContents, replace: bool = False) -> Path:
        """Write a run atomically. The caller should hold `lock(run_id)`.

        With replace=False an existing complete run is kept (and its path returned).
        """
        self._ensure_dirs()
        self.clean_stale_temp(run_id)
        final = self.path(run_id)
        if final.exists() and not replace and self.exists(run_id):
            return final
        temp = self.root / TEMP_DIR / f"{run_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
        temp.mkdir()
        try:
            from safetensors.numpy import save_file as save_numpy
            from safetensors.torch import save_file as save_torch

            save_torch(state_dict_for_saving(contents.state_dict), str(temp / WEIGHTS))
            json_summaries, arrays = split_summaries(contents.summaries)
            save_numpy(arrays, str(temp / SUMMARY_ARRAYS))
            _write_json(temp / "config.json", contents.config)
            _write_json(temp / "info.json", dict(contents.info, run_id=run_id))
            _write_json(temp / "metrics.json", contents.metrics)
            _write_json(temp / "history.json", contents.history)
            _write_json(temp / "summaries.json", json_summaries)
            names = (WEIGHTS, SUMMARY_ARRAYS, *JSON_FILES)
            if contents.snapshots is not None:
                np.savez_compressed(temp / SNAPSHOTS, **contents.snapshots)
                names += (SNAPSHOTS,)
            for name in names:
                _fsync_file(temp / name)
            files = {name: {"sha256": sha256_file(temp / name), "bytes": (temp / name).stat().st_size}
                     for name in names}
            # The manifest is the completion marker: written last, after every file is closed.
            _write_json(temp / MANIFEST, {"run_id": run_id, "files": files, "written": time.time()})
            (temp / LAST_USED).touch()
            _fsync_dir(temp)
            if final.exists():
                self._move_to_trash(final)
            os.rename(temp, final)
            _fsync_dir(self.root)
        except BaseException:
            shutil.rmtree(temp, ignore_errors=True)
            raise
        self.enforce_cap(keep={run_id})
        return final

    def _move_to_trash(self, path: Path) -> None:
        trash = self.root / TRASH_DIR / f"{path.name}.{uuid.uuid4().hex[:8]}"
        os.rename(path, trash)
        shutil.rmtree(trash, ignore_errors=True)

    def clean_stale_temp(self, run_id: str | None = None) -> int:
        """Remove temporary folders left by killed writers (those whose id lock is free)."""
        removed = 0
        for sub in (TEMP_DIR, TRASH_DIR):
            folder = self.root / sub
            if not folder.is_dir():
                continue
            for temp in folder.iterdir():
                owner = temp.name.split(".")[0]
                if run_id is not None and owner != run_id:
                    continue
                if owner == run_id:  # the caller holds this lock already
                    shutil.rmtree(temp, ignore_errors=True)
                    removed += 1
                    continue
                try:
                    with self.lock(owner, timeout=0):
                        shutil.rmtree(temp, ignore_errors=True)
                        removed += 1
                except Timeout:
                    continue
        return removed

    # --- reading -----------------------------------------------------------------------------
    def read(self, run_id: str, touch: bool = True) -> StoredRun:
        """Verify every checksum, then parse; RunStoreError naming the file on any problem."""
        from safetensors import SafetensorError
        from safetensors.numpy import load_file as load_numpy
        from safetensors.torch import load_file as load_torch

        folder = self.path(run_id)
        manifest = self._verified_manifest(run_id)
        del manifest
        try:
            state_dict = load_torch(str(folder / WEIGHTS), device="cpu")
        except (SafetensorError, OSError, ValueError) as exc:
            raise RunStoreError(f"run {run_id}: cannot read {folder / WEIGHTS}: {exc}; {_fix_hint(run_id)}") from None
        try:
            arrays = load_numpy(str(folder / SUMMARY_ARRAYS))
        except (SafetensorError, OSError, ValueError) as exc:
            raise RunStoreError(f"run {run_id}: cannot read {folder / SUMMARY_ARRAYS}: {exc}; "
                                f"{_fix_hint(run_id)}") from None
        parsed = {name: self._read_json(run_id, name) for name in JSON_FILES}
        try:
            summaries = join_summaries(parsed["summaries.json"], arrays)
        except KeyError as exc:
            raise RunStoreError(f"run {run_id}: summaries.json refers to a missing array {exc}; "
                                f"{_fix_hint(run_id)}") from None
        if touch:
            self.touch(run_id)
        return StoredRun(run_id=run_id, path=folder, config=parsed["config.json"], info=parsed["info.json"],
                         state_dict=state_dict, metrics=parsed["metrics.json"], history=parsed["history.json"],
                         summaries=summaries)

    def _read_json(self, run_id: str, name: str) -> Any:
        path = self.path(run_id) / name
        try:
            return json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise RunStoreError(f"run {run_id}: cannot parse {path}: {exc}; {_fix_hint(run_id)}") from None

    def _verified_manifest(self, run_id: str) -> dict[str, Any]:
        folder = self.path(run_id)
        if not folder.is_dir():
            raise RunStoreError(f"run {run_id}: not in the store {self.root}; list runs with `python -m core runs`")
        manifest = self._read_manifest(run_id)
        for name, entry in manifest["files"].items():
            path = folder / name
            if not path.is_file():
                raise RunStoreError(f"run {run_id}: {path} is missing; {_fix_hint(run_id)}")
            if sha256_file(path) != entry.get("sha256"):
                raise RunStoreError(f"run {run_id}: {path} does not match its checksum (corrupted or modified); "
                                    f"{_fix_hint(run_id)}")
        return manifest

    def _read_manifest(self, run_id: str) -> dict[str, Any]:
        path = self.path(run_id) / MANIFEST
        if not path.is_file():
            raise RunStoreError(f"run {run_id}: {path} is missing, the run is incomplete; {_fix_hint(run_id)}")
        manifest = self._read_json(run_id, MANIFEST)
        files = manifest.get("files") if isinstance(manifest, dict) else None
        required = {WEIGHTS, SUMMARY_ARRAYS, *JSON_FILES}
        if not isinstance(files, dict) or not required <= set(files):
            raise RunStoreError(f"run {run_id}: {path} does not list every file of a run; {_fix_hint(run_id)}")
        return manifest

    def read_snapshots(self, run_id: str) -> dict[str, np.ndarray] | None:
        """The stored per-epoch snapshots' arrays (checksum verified), or None for a run trained
        before snapshots were recorded."""
        return read_snapshot_arrays(self.path(run_id), run_id)

    def verify(self, run_id: str) -> None:
        """Raise RunStoreError if any file fails its checksum or cannot be parsed."""
        self.read(run_id, touch=False)

    def touch(self, run_id: str) -> None:
        try:
            os.utime(self.path(run_id) / LAST_USED)
        except FileNotFoundError:
            try:
                (self.path(run_id) / LAST_USED).touch()
            except OSError:
                pass
        except OSError:  # a read-only store still loads
            pass

    # --- listing, deleting, eviction -----------------------------------------------------------
    def info(self, run_id: str) -> RunInfo:
        """Cheap description (no checksums over the weights); corrupt runs get status "corrupt"."""
        folder = self.path(run_id)
        size = _folder_size(folder)
        last_used = _mtime(folder / LAST_USED)
        try:
            self._read_manifest(run_id)
            config = self._read_json(run_id, "config.json")
            info = self._read_json(run_id, "info.json")
            metrics = self._read_json(run_id, "metrics.json")
        except RunStoreError as exc:
            return RunInfo(run_id, folder, None, None, None, last_used, size, {}, {}, "corrupt", str(exc))
        return RunInfo(run_id, folder, config.get("dataset"), config.get("method"), info.get("created"),
                       last_used, size, metrics if isinstance(metrics, dict) else {},
                       config if isinstance(config, dict) else {})

    def list(self) -> list[RunInfo]:
        runs = [self.info(run_id) for run_id in self.run_ids()]
        return sorted(runs, key=lambda r: (r.created or 0.0, r.run_id))

    def delete(self, run_id: str) -> None:
        folder = self.path(run_id)
        if not folder.exists():
            raise RunStoreError(f"run {run_id}: not in the store {self.root}")
        self._ensure_dirs()
        with self.lock(run_id):
            if folder.exists():
                self._move_to_trash(folder)

    def total_bytes(self) -> int:
        return sum(_folder_size(self.path(run_id)) for run_id in self.run_ids())

    def enforce_cap(self, keep: set[str] = frozenset()) -> list[str]:
        """Delete least-recently-used runs until the store fits max_bytes; returns the evicted ids."""
        if self.max_bytes is None:
            return []
        sizes = {run_id: _folder_size(self.path(run_id)) for run_id in self.run_ids()}
        total = sum(sizes.values())
        evicted = []
        by_age = sorted((run_id for run_id in sizes if run_id not in keep),
                        key=lambda run_id: _mtime(self.path(run_id) / LAST_USED) or 0.0)
        for run_id in by_age:
            if total <= self.max_bytes:
                break
            try:
                with self.lock(run_id, timeout=0):  # skip runs another process is writing
                    if self.path(run_id).exists():
                        self._move_to_trash(self.path(run_id))
            except Timeout:
                continue
            total -= sizes[run_id]
            evicted.append(run_id)
        return evicted

    def __iter__(self) -> Iterator[RunInfo]:
        return iter(self.list())


def read_snapshot_arrays(folder: Path, run_id: str | None = None) -> dict[str, np.ndarray] | None:
    """The snapshots of the run folder `folder` as arrays, checked against the manifest's checksum;
    None when the manifest lists none (an older run). Never unpickles."""
    import zipfile

    run_id = run_id or folder.name
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise RunStoreError(f"run {run_id}: cannot read {folder / MANIFEST}: {exc}; {_fix_hint(run_id)}") from None
    entry = (manifest.get("files") or {}).get(SNAPSHOTS) if isinstance(manifest, dict) else None
    if entry is None:
        return None
    path = folder / SNAPSHOTS
    if not path.is_file():
        raise RunStoreError(f"run {run_id}: {path} is missing; {_fix_hint(run_id)}")
    if sha256_file(path) != entry.get("sha256"):
        raise RunStoreError(f"run {run_id}: {path} does not match its checksum (corrupted or modified); "
                            f"{_fix_hint(run_id)}")
    try:
        return read_npz(path)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise RunStoreError(f"run {run_id}: cannot read {path}: {exc}; {_fix_hint(run_id)}") from None


def _folder_size(folder: Path) -> int:
    try:
        return sum(p.stat().st_size for p in folder.iterdir() if p.is_file())
    except OSError:
        return 0


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def _fsync_file(path: Path) -> None:
    with open(path, "rb+") as handle:
        os.fsync(handle.fileno())


def _fsync_dir(path: Path) -> None:
    """Make a rename durable; best effort (not every platform can open a directory)."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
