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
    manifest.json            sha256 and size of every file above, and of its own other fields
                             (own_sha256); written LAST
    last_used                empty file whose mtime is the last load (LRU); not in the manifest
    verified                 the last listing's verdict on the folder's state; not in the manifest

Writes hold the id's lock (<runs>/.locks/<id>.lock), build the folder in <runs>/.tmp/ and rename it
into place, so a run folder is either complete or absent. Replacing a run renames the old folder to
<runs>/.trash/<id>.<random>.replaced, renames the new one into place, and only then removes the old
one (renamed to .deleted first); deleting renames to .trash/<id>.<random>.deleted, then removes it.
So a kill at any moment leaves the old run or the new one live, or the old one in .trash as
".replaced" with no live folder: the store's start-up (the first use of a RunStore) renames that one
back, and removes what killed writers left (.tmp folders, .deleted trash, free lock files) for every
id whose lock is free (a live writer always holds it). Until they are removed, leftovers count
towards the size cap.

Listing (`list`) checks every run it shows: the manifest and every file it lists are there with
their sizes, the JSON files parse as what they should be; the sha256 checksums and the rest of a
full read run once per state of the folder (keyed by the files' inodes, sizes, mtimes and ctimes;
any write or utime changes a ctime), and the verdict is kept, in the process and in the folder's
`verified` file, so a listing hashes only what changed since the last one (measured: 20 runs of
8 MB list in 1.3 s the first time, then in 0.04-0.07 s in a new process and 9 ms in the same one). A run that fails gets status "corrupt" and a one-line
reason; one bad folder never breaks the listing. Reading (`read`) checks everything every time.
Nothing is ever unpickled: tensors come from safetensors, everything else from JSON.

Settings (environment):
    BNN_CACHE_DIR       the cache folder (runs live in <it>/runs); default: the user cache dir
    BNN_CACHE_MAX_MB    size cap of the store in MB, leftovers of killed writers included;
                        unset: no cap
"""

from __future__ import annotations

import errno
import hashlib
import io
import json
import math
import os
import shutil
import threading
import time
import uuid
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import torch
from filelock import Timeout

from core.data.locations import CACHE_DIR_ENV  # the one home of the variable's name
from core.data.npz import read_npz
from core.errors import RunStoreError
from core.jsonable import jsonable
from core.settings import CACHE_DIR, CACHE_MAX_MB

CACHE_MAX_MB_ENV = CACHE_MAX_MB.variable
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


def default_cache_dir() -> Path:
    """$BNN_CACHE_DIR, else platformdirs' user cache dir for bnn-explorer. Runs live in <this>/runs."""
    override = CACHE_DIR.read()
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


def _json_bytes(value: Any) -> bytes:
    # Non-finite numbers are kept (written as NaN / Infinity): stored metrics read back as written.
    return json.dumps(jsonable(value, keep_nonfinite=True), indent=1, sort_keys=True).encode("utf-8")


def _write_json(path: Path, value: Any) -> None:
    _write_file(path, _json_bytes(value))


def _parse_json(data: bytes) -> Any:
    """JSON from bytes; ValueError for anything unreadable (bad UTF-8 or syntax, an integer longer
    than Python converts, nesting deeper than the parser's recursion limit)."""
    try:
        return json.loads(data.decode("utf-8"))
    except RecursionError:
        raise ValueError("nested too deeply") from None


# --- every change the store makes on disk goes through these few functions ---------------------
# (one place to reason about what a kill can leave behind; the tests inject faults here)
def _mkdir(path: Path) -> None:
    os.mkdir(path)


def _rename(source: Path, target: Path) -> None:
    os.rename(source, target)


def _unlink(path: Path) -> None:
    os.unlink(path)


def _rmdir(path: Path) -> None:
    os.rmdir(path)


def _write_file(path: Path, data: bytes) -> None:
    with open(path, "wb") as handle:
        handle.write(data)
        handle.flush()
        os.fsync(handle.fileno())


def _open_lock_file(path: str) -> int:
    return os.open(path, os.O_RDWR | os.O_CREAT, 0o644)


def _remove_tree(path: Path) -> None:
    """Remove a folder file by file (or a file); what is already gone is fine."""
    try:
        if path.is_symlink() or not path.is_dir():
            _unlink(path)
            return
        for attempt in range(3):
            for child in list(path.iterdir()):
                _remove_tree(child)
            try:
                _rmdir(path)
                return
            except OSError as exc:  # a listing wrote its `verified` file into it meanwhile: again
                if exc.errno != errno.ENOTEMPTY or attempt == 2:
                    raise
    except FileNotFoundError:
        pass


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
        return {"run_id": self.run_id, "path": str(self.path), "dataset": self.dataset, "method": self.method,
                "created": self.created, "last_used": self.last_used, "size_bytes": self.size_bytes,
                "metrics": self.metrics, "status": self.status, "error": self.error}


# --- the per-id writer lock -----------------------------------------------------------------------
_held_lock = threading.Lock()
_held: dict[str, list] = {}  # lock path -> [owning thread id, depth, file descriptor], this process


class RunLock:
    """An exclusive lock on <runs>/.locks/<id>.lock between processes and threads, re-entrant in
    the thread that holds it (train_run holds it and calls `write`, which takes it too).

    An flock (POSIX) on the file; after taking it the holder checks that the path still names the
    locked file, because the store's start-up removes free lock files: a waiter that locked a file
    just removed starts again on the new one, so two holders never coexist. Used as a context
    manager; `timeout` -1 waits forever, 0 tries once; raises filelock.Timeout when it expires.
    """

    POLL_SECONDS = 0.02

    def __init__(self, path: str | Path, timeout: float = -1):
        self.path = os.path.abspath(str(path))
        self.timeout = timeout
        self._depth = 0

    def acquire(self) -> RunLock:
        me = threading.get_ident()
        with _held_lock:
            held = _held.get(self.path)
            if held is not None and held[0] == me:
                held[1] += 1
                self._depth += 1
                return self
        deadline = None if self.timeout is None or self.timeout < 0 else time.monotonic() + self.timeout
        while True:
            fd = _try_lock(self.path)
            if fd is not None:
                with _held_lock:
                    _held[self.path] = [me, 1, fd]
                self._depth += 1
                return self
            if deadline is not None and time.monotonic() >= deadline:
                raise Timeout(self.path)
            time.sleep(self.POLL_SECONDS)

    def release(self) -> None:
        if self._depth == 0:
            return
        self._depth -= 1
        with _held_lock:
            held = _held[self.path]
            held[1] -= 1
            if held[1] > 0:
                return
            del _held[self.path]
        _unlock(held[2])

    def __enter__(self) -> RunLock:
        return self.acquire()

    def __exit__(self, *exc_info: Any) -> None:
        self.release()


def _held_here(path: str | Path) -> bool:
    with _held_lock:
        return os.path.abspath(str(path)) in _held


def _try_lock(path: str) -> int | None:
    """A descriptor holding the lock on `path`, or None when another holder has it."""
    for _ in range(100):  # only a lock file removed again and again between open and lock repeats
        fd = _open_lock_file(path)
        try:
            if os.name == "nt":
                import msvcrt
                msvcrt.locking(fd, msvcrt.LK_NBLCK, 1)
            else:
                import fcntl
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            os.close(fd)
            return None
        try:
            on_disk = os.stat(path)
        except FileNotFoundError:
            on_disk = None
        mine = os.fstat(fd)
        if on_disk is not None and (on_disk.st_dev, on_disk.st_ino) == (mine.st_dev, mine.st_ino):
            return fd
        _unlock(fd)  # the file was removed after we opened it: lock the new one
    return None


def _unlock(fd: int) -> None:
    try:
        if os.name == "nt":
            import msvcrt
            msvcrt.locking(fd, msvcrt.LK_UNLCK, 1)
        else:
            import fcntl
            fcntl.flock(fd, fcntl.LOCK_UN)
    except OSError:
        pass
    finally:
        os.close(fd)


# --- reading one folder consistently ---------------------------------------------------------------
class _Vanished(Exception):
    """The run folder was deleted while it was being read."""


class _Folder:
    """A run folder opened once: files are read relative to the opened folder (where the platform
    allows it), so a replace or delete renaming it away mid-read is seen as such (`changed`) and
    never as a mix of two runs."""

    def __init__(self, path: Path):
        self.path = path
        self.fd: int | None = None
        if os.open in os.supports_dir_fd and hasattr(os, "O_DIRECTORY"):
            self.fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
            st = os.fstat(self.fd)
        else:
            st = os.stat(path)
        self.identity = (st.st_dev, st.st_ino)

    def close(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __enter__(self) -> _Folder:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def read_bytes(self, name: str) -> bytes:
        if self.fd is None:
            return (self.path / name).read_bytes()
        fd = os.open(name, os.O_RDONLY, dir_fd=self.fd)
        with os.fdopen(fd, "rb") as handle:
            return handle.read()

    def write_bytes(self, name: str, data: bytes) -> None:
        if self.fd is None:
            (self.path / name).write_bytes(data)
            return
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644, dir_fd=self.fd)
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)

    def stat(self, name: str) -> os.stat_result:
        if self.fd is None:
            return os.stat(self.path / name)
        return os.stat(name, dir_fd=self.fd)

    def changed(self) -> str | None:
        """"deleted" or "replaced" when the path no longer names the folder opened, else None."""
        try:
            st = os.stat(self.path)
        except FileNotFoundError:
            return "deleted"
        except OSError:
            return None
        return None if (st.st_dev, st.st_ino) == self.identity else "replaced"


# Verdicts of full checks (None: healthy, else the reason), keyed by a folder's state (its identity,
# and the inode, size, mtime and ctime of the manifest and every file it lists): a listing hashes a
# run once per state, not on every call. ctime changes with any write or utime, so even an edit that
# restores the mtime is a new state.
_verdicts_lock = threading.Lock()
_verdicts: dict[tuple, str | None] = {}
MAX_VERDICTS = 4096


def _file_key(st: os.stat_result) -> tuple:
    return (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


class RunStore:
    def __init__(self, cache_dir: str | Path | None = None, max_bytes: int | None = None):
        base = Path(cache_dir).expanduser() if cache_dir else default_cache_dir()
        self.root = base / "runs"
        if max_bytes is None:
            megabytes = CACHE_MAX_MB.read()
            if megabytes is not None:
                max_bytes = int(megabytes * 1024 * 1024)
        self.max_bytes = max_bytes
        self._started = False

    def __repr__(self) -> str:
        return f"RunStore({str(self.root)!r}, max_bytes={self.max_bytes})"

    # --- paths and locks -------------------------------------------------------------------
    def path(self, run_id: str) -> Path:
        return self.root / run_id

    def _ensure_dirs(self) -> None:
        for sub in (TEMP_DIR, LOCK_DIR, TRASH_DIR):
            (self.root / sub).mkdir(parents=True, exist_ok=True)

    def lock(self, run_id: str, timeout: float = -1) -> RunLock:
        """The per-id lock writers hold; `timeout=-1` waits forever. RunStoreError when the store
        cannot be written (read-only, full)."""
        with self._disk_errors(f"run {run_id}"):
            self._ensure_dirs()
        return _StoreLock(self, self.root / LOCK_DIR / f"{run_id}.lock", run_id, timeout)

    def run_ids(self) -> list[str]:
        self._start()
        if not self.root.is_dir():
            return []
        try:
            return sorted(p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("."))
        except OSError as exc:
            raise RunStoreError(f"cannot list the run store {self.root}: {exc.strerror or exc}; "
                                f"check the folder's permissions or set {CACHE_DIR_ENV}") from None

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
        self._start()
        return (self.path(run_id) / MANIFEST).is_file()

    # --- disk errors -------------------------------------------------------------------------
    @contextmanager
    def _disk_errors(self, what: str) -> Iterator[None]:
        """An OSError of a write becomes one RunStoreError line saying what to do."""
        try:
            yield
        except OSError as exc:
            raise RunStoreError(self._disk_message(what, exc)) from None

    def _disk_message(self, what: str, exc: OSError) -> str:
        reason = exc.strerror or str(exc)
        if exc.errno in (errno.ENOSPC, getattr(errno, "EDQUOT", errno.ENOSPC)):
            return (f"{what}: no space left in {self.root} ({_megabytes(self.free_bytes())} free), nothing was "
                    f"stored; delete runs (`python -m core rm RUN`) or set {CACHE_DIR_ENV} to a folder on a "
                    f"larger disk")
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return (f"{what}: the run store {self.root} cannot be written ({reason}); make it writable or set "
                    f"{CACHE_DIR_ENV} to a writable folder")
        where = exc.filename or self.root
        return f"{what}: cannot write {where} ({reason}); check the run store {self.root} or set {CACHE_DIR_ENV}"

    def free_bytes(self) -> int | None:
        folder = self.root
        while not folder.exists() and folder != folder.parent:
            folder = folder.parent
        try:
            return shutil.disk_usage(folder).free
        except OSError:
            return None

    def check_room(self, run_id: str, needed_bytes: int) -> None:
        """Before a training: RunStoreError unless the store can be written and its disk has about
        `needed_bytes` free (the estimate of the run's size), so that no training ends unsaved."""
        what = f"run {run_id}"
        with self._disk_errors(what):
            self._ensure_dirs()
            probe = self.root / TEMP_DIR / f"{run_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}.probe"
            _write_file(probe, b"")
            _unlink(probe)
        free = self.free_bytes()
        if free is not None and free < needed_bytes:
            raise RunStoreError(f"{what}: needs about {_megabytes(needed_bytes)} in {self.root} but only "
                                f"{_megabytes(free)} are free; delete runs (`python -m core rm RUN`) or set "
                                f"{CACHE_DIR_ENV} to a folder on a larger disk")

    # --- start-up: recovery and cleaning ------------------------------------------------------
    def _start(self) -> None:
        if self._started:
            return
        self._started = True
        try:
            self.recover()
        except OSError:  # a read-only store still lists and loads
            pass

    def recover(self) -> dict[str, int]:
        """Put back runs whose replacement was killed halfway, and remove what killed writers left
        (temporary folders, trash, lock files) for ids whose lock is free. Returns the counts."""
        counts = {"restored": 0, "temp": 0, "trash": 0, "locks": 0}
        if not self.root.is_dir():
            return counts
        ids = set()
        for sub in (TRASH_DIR, TEMP_DIR):
            folder = self.root / sub
            if folder.is_dir():
                ids.update(entry.name.split(".")[0] for entry in folder.iterdir())
        for run_id in sorted(ids):
            try:
                with self.lock(run_id, timeout=0):
                    found = self._recover_id(run_id)
            except (Timeout, RunStoreError, OSError):
                continue
            for key, value in found.items():
                counts[key] += value
        counts["locks"] = self._remove_free_lock_files()
        return counts

    def clean_stale_temp(self, run_id: str | None = None) -> int:
        """Remove temporary folders and trash left by killed writers (those whose id lock is free);
        returns how many entries went."""
        if run_id is None:
            counts = self.recover()
            return counts["temp"] + counts["trash"]
        with self.lock(run_id, timeout=0):
            counts = self._recover_id(run_id)
        return counts["temp"] + counts["trash"]

    def _entries(self, sub: str, run_id: str) -> list[Path]:
        folder = self.root / sub
        if not folder.is_dir():
            return []
        return sorted(entry for entry in folder.iterdir() if entry.name.split(".")[0] == run_id)

    def _recover_id(self, run_id: str) -> dict[str, int]:
        """With the id's lock held: the old run back when a replace died between its renames, then
        every leftover of the id removed."""
        counts = {"restored": 0, "temp": 0, "trash": 0}
        trash = self._entries(TRASH_DIR, run_id)
        replaced = [entry for entry in trash if entry.name.endswith(f".{REPLACED}")]
        if replaced and not self.path(run_id).exists():
            newest = max(replaced, key=lambda entry: _mtime(entry / MANIFEST) or 0.0)
            _rename(newest, self.path(run_id))
            trash.remove(newest)
            counts["restored"] += 1
        for entry in trash:
            self._discard(entry)
            counts["trash"] += 1
        for entry in self._entries(TEMP_DIR, run_id):
            _remove_tree(entry)
            counts["temp"] += 1
        return counts

    def _remove_free_lock_files(self) -> int:
        folder = self.root / LOCK_DIR
        if not folder.is_dir():
            return 0
        removed = 0
        for path in folder.iterdir():
            if _held_here(path):
                continue
            fd = _try_lock(str(path))
            if fd is None:
                continue
            try:  # removed while held: a waiter that locked this file sees it gone and starts again
                _unlink(path)
                removed += 1
            except OSError:
                pass
            finally:
                _unlock(fd)
        return removed

    def _trash_path(self, run_id: str, kind: str) -> Path:
        return self.root / TRASH_DIR / f"{run_id}.{uuid.uuid4().hex[:12]}.{kind}"

    def _discard(self, entry: Path) -> None:
        """Remove a trash entry; renamed to .deleted first, so a kill halfway never leaves a partly
        removed run that start-up would put back."""
        if entry.name.endswith(f".{REPLACED}"):
            target = entry.with_name(entry.name[: -len(REPLACED)] + DELETED)
            _rename(entry, target)
            entry = target
        _remove_tree(entry)

    def leftover_bytes(self) -> int:
        """Bytes in temporary folders and trash (killed writers' leftovers, or writes under way)."""
        total = 0
        for sub in (TEMP_DIR, TRASH_DIR):
            folder = self.root / sub
            if not folder.is_dir():
                continue
            for entry in folder.iterdir():
                total += _folder_size(entry) if entry.is_dir() else _size(entry)
        return total

    # --- writing -----------------------------------------------------------------------------
    def write(self, run_id: str, contents: RunContents, replace: bool = False) -> Path:
        """Write a run atomically under its lock (taken here; callers may hold it already).

        With replace=False an existing complete run is kept (and its path returned). With
        replace=True the new run is in place before the old one is removed. A disk that is full or
        read-only raises RunStoreError with nothing half-written left behind.
        """
        _check_id(run_id)
        from safetensors.numpy import save as save_numpy
        from safetensors.torch import save as save_torch

        # Everything is serialised before the disk is touched: a bad value fails with nothing written.
        json_summaries, arrays = split_summaries(contents.summaries)
        binary = {WEIGHTS: save_torch(state_dict_for_saving(contents.state_dict)),
                  SUMMARY_ARRAYS: save_numpy(arrays)}
        if contents.snapshots is not None:
            buffer = io.BytesIO()
            np.savez_compressed(buffer, **contents.snapshots)
            binary[SNAPSHOTS] = buffer.getvalue()
        documents = {"config.json": contents.config, "info.json": dict(contents.info, run_id=run_id),
                     "metrics.json": contents.metrics, "history.json": contents.history,
                     "summaries.json": json_summaries}
        self._start()
        final = self.path(run_id)
        with self._disk_errors(f"run {run_id}"), self.lock(run_id):
            self._recover_id(run_id)
            if not replace and self.exists(run_id):
                return final
            temp = self.root / TEMP_DIR / f"{run_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
            old = None
            _mkdir(temp)
            try:
                for name, data in binary.items():
                    _write_file(temp / name, data)
                for name, value in documents.items():
                    _write_json(temp / name, value)
                names = (WEIGHTS, SUMMARY_ARRAYS, *JSON_FILES) + ((SNAPSHOTS,) if SNAPSHOTS in binary else ())
                files = {name: {"sha256": sha256_file(temp / name), "bytes": (temp / name).stat().st_size}
                         for name in names}
                # The manifest is the completion marker: written last, after every file is on disk.
                # Milliseconds: at 13 significant digits every digit of the time is seen by own_sha256
                # (at 17, a flip of the last one can parse to the same float).
                manifest = {"run_id": run_id, "files": files, "written": round(time.time(), 3)}
                _write_json(temp / MANIFEST, dict(manifest, own_sha256=_manifest_own_digest(manifest)))
                _write_file(temp / LAST_USED, b"")
                _fsync_dir(temp)
                if final.exists():
                    old = self._trash_path(run_id, REPLACED)
                    _rename(final, old)
                _rename(temp, final)
                _fsync_dir(self.root)
            except BaseException:
                _quietly(_remove_tree, temp)
                if old is not None and not final.exists():
                    _quietly(_rename, old, final)
                raise
            if old is not None:
                _quietly(self._discard, old)  # else start-up removes it
        self.enforce_cap(keep={run_id})
        return final

    # --- reading -----------------------------------------------------------------------------
    def read(self, run_id: str, touch: bool = True) -> StoredRun:
        """Verify every checksum, then parse; RunStoreError naming the file on any problem, or
        saying the run was deleted when it went while being read."""
        self._start()
        try:
            stored = self._consistently(run_id, self._read_folder)
        except _Vanished:
            raise RunStoreError(f"run {run_id} was deleted (by another session or process) or never stored in "
                                f"{self.root}; list the runs with `python -m core runs`") from None
        except OSError as exc:
            raise RunStoreError(f"run {run_id}: cannot read {self.path(run_id)} ({exc.strerror or exc}); "
                                f"{_fix_hint(run_id)}") from None
        if touch:
            self.touch(run_id)
        return stored

    def _open_folder(self, run_id: str) -> _Folder:
        """The run's folder, opened; waits out a replace under way. _Vanished when absent."""
        deadline = time.monotonic() + REPLACE_WAIT_SECONDS
        while True:
            try:
                return _Folder(self.path(run_id))
            except (FileNotFoundError, NotADirectoryError):
                pass
            # The folder is missing from a replace's first rename to its second, and the old one is
            # in .trash as ".replaced" from that first rename until after the second. Looking at the
            # trash before and after the folder, a replace starting or ending in between shows as a
            # change, and then we look again: so a run being replaced is never taken for deleted.
            before = self._trash_names(run_id)
            back = self.path(run_id).is_dir()
            after = self._trash_names(run_id)
            if back or before != after:
                continue
            if not any(name.endswith(f".{REPLACED}") for name in after) or time.monotonic() > deadline:
                raise _Vanished(run_id)
            try:  # a writer killed between its renames: put the old run back now
                with self.lock(run_id, timeout=0):
                    self._recover_id(run_id)
            except (Timeout, RunStoreError, OSError):
                time.sleep(0.01)

    def _trash_names(self, run_id: str | None = None) -> set[str]:
        try:
            names = {entry.name for entry in (self.root / TRASH_DIR).iterdir()}
        except OSError:
            return set()
        return names if run_id is None else {name for name in names if name.split(".")[0] == run_id}

    def _consistently(self, run_id: str, work) -> Any:
        """work(run_id, folder) on one opened state of the folder: when it fails because the folder
        was replaced or deleted meanwhile it runs again on what is there now (_Vanished when that
        is nothing)."""
        for _ in range(5):
            folder = self._open_folder(run_id)
            with folder:
                try:
                    return work(run_id, folder)
                except (RunStoreError, OSError):
                    if folder.changed() is None:
                        raise
        return self._fail_after_changes(run_id)

    def _fail_after_changes(self, run_id: str) -> Any:
        raise RunStoreError(f"run {run_id}: it kept changing while being read (replaced again and again); "
                            f"try again")

    def _manifest(self, run_id: str, folder: _Folder) -> dict[str, Any]:
        path = folder.path / MANIFEST
        try:
            data = folder.read_bytes(MANIFEST)
        except FileNotFoundError:
            raise RunStoreError(f"run {run_id}: {path} is missing, the run is incomplete; "
                                f"{_fix_hint(run_id)}") from None
        manifest = self._parse(run_id, path, data, dict)
        # Each file's entry is checked against the file; the rest against own_sha256 (runs written
        # before it was recorded have none), and a field of another name is a damaged one.
        unknown = set(manifest) - MANIFEST_FIELDS
        if unknown or ("own_sha256" in manifest and manifest["own_sha256"] != _manifest_own_digest(manifest)):
            raise RunStoreError(f"run {run_id}: {path} does not match its own checksum (corrupted or modified); "
                                f"{_fix_hint(run_id)}")
        files = manifest.get("files")
        required = {WEIGHTS, SUMMARY_ARRAYS, *JSON_FILES}
        if not isinstance(files, dict) or not required <= set(files):
            raise RunStoreError(f"run {run_id}: {path} does not list every file of a run; {_fix_hint(run_id)}")
        for name, entry in files.items():
            if (not isinstance(entry, dict) or not isinstance(entry.get("sha256"), str)
                    or not _is_count(entry.get("bytes")) or not _safe_name(name)):
                raise RunStoreError(f"run {run_id}: {path} has a malformed entry for {str(name)[:80]!r}; "
                                    f"{_fix_hint(run_id)}")
        return manifest

    def _parse(self, run_id: str, path: Path, data: bytes, kind: type) -> Any:
        try:
            value = _parse_json(data)
        except ValueError as exc:
            raise RunStoreError(f"run {run_id}: cannot parse {path}: {_one_line(exc)}; {_fix_hint(run_id)}") from None
        if not isinstance(value, kind):
            raise RunStoreError(f"run {run_id}: {path} holds a JSON {type(value).__name__}, not "
                                f"{'an object' if kind is dict else 'a list'}; {_fix_hint(run_id)}")
        return value

    def _file_bytes(self, run_id: str, folder: _Folder, name: str, entry: dict[str, Any]) -> bytes:
        path = folder.path / name
        try:
            data = folder.read_bytes(name)
        except FileNotFoundError:
            raise RunStoreError(f"run {run_id}: {path} is missing; {_fix_hint(run_id)}") from None
        # Sizes first, as the listing checks them: a manifest whose size entry alone was changed (one
        # flipped digit) is as damaged as a file whose bytes were.
        if len(data) != entry["bytes"]:
            raise RunStoreError(f"run {run_id}: {path} has {len(data)} bytes, its manifest says "
                                f"{entry['bytes']} (truncated or modified); {_fix_hint(run_id)}")
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise RunStoreError(f"run {run_id}: {path} does not match its checksum (corrupted or modified); "
                                f"{_fix_hint(run_id)}")
        return data

    def _read_folder(self, run_id: str, folder: _Folder) -> StoredRun:
        from safetensors import SafetensorError
        from safetensors.numpy import load as load_numpy
        from safetensors.torch import load as load_torch

        manifest = self._manifest(run_id, folder)
        files = manifest["files"]
        data = {name: self._file_bytes(run_id, folder, name, entry) for name, entry in files.items()}
        tensors = {}
        for name, load in ((WEIGHTS, load_torch), (SUMMARY_ARRAYS, load_numpy)):
            try:
                tensors[name] = load(data[name])
            except (SafetensorError, OSError, ValueError, TypeError) as exc:
                raise RunStoreError(f"run {run_id}: cannot read {folder.path / name}: {_one_line(exc)}; "
                                    f"{_fix_hint(run_id)}") from None
        parsed = {name: self._parse(run_id, folder.path / name, data[name],
                                    list if name == "history.json" else dict)
                  for name in JSON_FILES}
        self._check_fields(run_id, folder.path, parsed)
        try:
            summaries = join_summaries(parsed["summaries.json"], tensors[SUMMARY_ARRAYS])
        except (KeyError, TypeError) as exc:
            raise RunStoreError(f"run {run_id}: summaries.json refers to a missing array {exc}; "
                                f"{_fix_hint(run_id)}") from None
        return StoredRun(run_id=run_id, path=self.path(run_id), config=parsed["config.json"],
                         info=parsed["info.json"], state_dict=tensors[WEIGHTS], metrics=parsed["metrics.json"],
                         history=parsed["history.json"], summaries=summaries)

    @staticmethod
    def _check_fields(run_id: str, folder: Path, parsed: dict[str, Any]) -> None:
        """The fields a listing shows have the types it shows."""
        config, info = parsed.get("config.json", {}), parsed.get("info.json", {})
        for key in ("dataset", "method"):
            if config.get(key) is not None and not isinstance(config.get(key), str):
                raise RunStoreError(f"run {run_id}: {folder / 'config.json'}: {key} is not a name; "
                                    f"{_fix_hint(run_id)}")
        if info.get("created") is not None and not _is_number(info.get("created")):
            raise RunStoreError(f"run {run_id}: {folder / 'info.json'}: created is not a time; {_fix_hint(run_id)}")

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
        """The run's row in a listing; a damaged run gets status "corrupt" and the reason."""
        row = self._row(run_id)
        if row is None:
            raise RunStoreError(f"run {run_id} is not in the store {self.root} (deleted?); "
                                f"list the runs with `python -m core runs`")
        return row

    def _row(self, run_id: str) -> RunInfo | None:
        """The listing's row of one folder, None when it went meanwhile. Never raises for a bad
        folder: whatever reading it raises becomes its "corrupt" row."""
        folder = self.path(run_id)
        seen: dict[str, Any] = {}
        try:
            return self._consistently(run_id, lambda run_id, opened: self._checked_row(run_id, opened, seen))
        except _Vanished:
            return None
        except RunStoreError as exc:
            reason = str(exc)
        except OSError as exc:
            reason = f"run {run_id}: cannot read {folder}: {exc.strerror or exc}; {_fix_hint(run_id)}"
        except Exception as exc:  # anything else a bad folder makes the reading raise
            reason = f"run {run_id}: cannot read {folder} ({type(exc).__name__}: {_one_line(exc)}); {_fix_hint(run_id)}"
        config = seen.get("config") if isinstance(seen.get("config"), dict) else {}
        names = {key: config.get(key) if isinstance(config.get(key), str) else None for key in ("dataset", "method")}
        return RunInfo(run_id, folder, names["dataset"], names["method"], None, _mtime(folder / LAST_USED),
                       _folder_size(folder), {}, {}, "corrupt", _one_line(reason))

    def _checked_row(self, run_id: str, folder: _Folder, seen: dict[str, Any]) -> RunInfo:
        try:  # the dataset and method name even a damaged run's row, when they can be read
            seen["config"] = _parse_json(folder.read_bytes("config.json"))
        except (OSError, ValueError):
            pass
        manifest = self._manifest(run_id, folder)
        files = manifest["files"]
        key = [folder.identity, _file_key(folder.stat(MANIFEST))]
        for name, entry in sorted(files.items()):
            try:
                st = folder.stat(name)
            except FileNotFoundError:
                raise RunStoreError(f"run {run_id}: {folder.path / name} is missing; {_fix_hint(run_id)}") from None
            if st.st_size != entry["bytes"]:
                raise RunStoreError(f"run {run_id}: {folder.path / name} has {st.st_size} bytes, its manifest says "
                                    f"{entry['bytes']} (truncated or modified); {_fix_hint(run_id)}")
            key.append((name, _file_key(st)))
        parsed = {}
        for name in ("config.json", "info.json", "metrics.json"):
            parsed[name] = self._parse(run_id, folder.path / name, folder.read_bytes(name), dict)
        self._check_fields(run_id, folder.path, parsed)
        state = (str(folder.path), *key)
        with _verdicts_lock:
            known = state in _verdicts
            verdict = _verdicts.get(state)
        if not known:
            digest = hashlib.sha256(repr(key).encode()).hexdigest()
            known, verdict = self._stored_verdict(folder, digest)
            if not known:
                try:
                    self._read_folder(run_id, folder)
                    verdict = None
                except RunStoreError as exc:
                    if folder.changed() is not None:
                        raise
                    verdict = str(exc)
                _quietly(folder.write_bytes, VERIFIED, _json_bytes({"state": digest, "verdict": verdict}))
            with _verdicts_lock:
                if len(_verdicts) >= MAX_VERDICTS:
                    _verdicts.clear()
                _verdicts[state] = verdict
        if verdict is not None:
            raise RunStoreError(verdict)
        config, info, metrics = parsed["config.json"], parsed["info.json"], parsed["metrics.json"]
        created = info.get("created")
        return RunInfo(run_id, folder.path, config.get("dataset"), config.get("method"),
                       float(created) if created is not None else None, _mtime(folder.path / LAST_USED),
                       _folder_size(folder.path), metrics, config)

    @staticmethod
    def _stored_verdict(folder: _Folder, digest: str) -> tuple[bool, str | None]:
        """(True, verdict) when the folder's `verified` file holds a verdict for this very state."""
        try:
            stored = _parse_json(folder.read_bytes(VERIFIED))
        except (OSError, ValueError):
            return False, None
        if not isinstance(stored, dict) or stored.get("state") != digest:
            return False, None
        verdict = stored.get("verdict")
        return (True, verdict) if verdict is None or isinstance(verdict, str) else (False, None)

    def list(self) -> list[RunInfo]:
        # A run being replaced this instant has no folder, but its old one is in .trash as ".replaced":
        # such ids are listed too (their rows wait for the new folder). The trash is looked at before
        # and after the folders, again while it changed in between, so no replace slips through.
        for _ in range(20):
            before = self._trash_names()
            ids = set(self.run_ids())
            after = self._trash_names()
            if before == after:
                break
        ids.update(name.split(".")[0] for name in before | after if name.endswith(f".{REPLACED}"))
        rows = []
        for run_id in sorted(ids):
            try:
                row = self._row(run_id)
            except Exception as exc:  # never one folder breaking the whole listing
                row = RunInfo(run_id, self.path(run_id), None, None, None, None, _folder_size(self.path(run_id)), {}, {},
                              "corrupt",
                              _one_line(f"run {run_id}: cannot be read ({type(exc).__name__}: {exc})"))
            if row is not None:
                rows.append(row)
        return sorted(rows, key=lambda r: (r.created or 0.0, r.run_id))

    def delete(self, run_id: str) -> None:
        self._start()
        folder = self.path(run_id)
        if not folder.exists():
            raise RunStoreError(f"run {run_id}: not in the store {self.root}")
        with self._disk_errors(f"rm {run_id}"), self.lock(run_id):
            self._recover_id(run_id)
            if folder.exists():
                trash = self._trash_path(run_id, DELETED)
                _rename(folder, trash)
                _quietly(_remove_tree, trash)  # else start-up removes it

    def total_bytes(self) -> int:
        """The store's size: every run, and what killed writers left until it is removed."""
        return sum(_folder_size(self.path(run_id)) for run_id in self.run_ids()) + self.leftover_bytes()

    def enforce_cap(self, keep: set[str] = frozenset()) -> list[str]:
        """Delete least-recently-used runs until the store fits max_bytes; returns the evicted ids."""
        if self.max_bytes is None:
            return []
        sizes = {run_id: _folder_size(self.path(run_id)) for run_id in self.run_ids()}
        total = sum(sizes.values()) + self.leftover_bytes()
        evicted = []
        by_age = sorted((run_id for run_id in sizes if run_id not in keep),
                        key=lambda run_id: _mtime(self.path(run_id) / LAST_USED) or 0.0)
        for run_id in by_age:
            if total <= self.max_bytes:
                break
            try:
                with self.lock(run_id, timeout=0):  # skip runs another process is writing
                    if self.path(run_id).exists():
                        trash = self._trash_path(run_id, DELETED)
                        _rename(self.path(run_id), trash)
                        _quietly(_remove_tree, trash)
            except (Timeout, RunStoreError, OSError):
                continue
            total -= sizes[run_id]
            evicted.append(run_id)
        return evicted

    def __iter__(self) -> Iterator[RunInfo]:
        return iter(self.list())


class _StoreLock(RunLock):
    """A RunLock whose failures to create its file are RunStoreErrors (a read-only store)."""

    def __init__(self, store: RunStore, path: Path, run_id: str, timeout: float):
        super().__init__(path, timeout)
        self._store, self._run_id = store, run_id

    def acquire(self) -> RunLock:
        with self._store._disk_errors(f"run {self._run_id}"):
            return super().acquire()


MANIFEST_FIELDS = frozenset({"run_id", "files", "written", "own_sha256"})


def _manifest_own_digest(manifest: dict[str, Any]) -> str:
    """sha256 of the manifest's fields other than the files' entries (and itself), canonically."""
    own = {key: value for key, value in manifest.items() if key not in ("files", "own_sha256")}
    return hashlib.sha256(json.dumps(own, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _check_id(run_id: str) -> None:
    if not _safe_name(run_id) or "." in run_id:
        raise RunStoreError(f"run id {run_id!r}: not a run id (letters and digits only)")


def _safe_name(name: Any) -> bool:
    return (isinstance(name, str) and bool(name) and not name.startswith(".") and "/" not in name
            and "\\" not in name and "\0" not in name)


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


def _quietly(action, *args: Any) -> None:
    """A clean-up step whose failure is left to the next start-up."""
    try:
        action(*args)
    except OSError:
        pass


def read_snapshot_arrays(folder: Path, run_id: str | None = None) -> dict[str, np.ndarray] | None:
    """The snapshots of the run folder `folder` as arrays, checked against the manifest's checksum;
    None when the manifest lists none (an older run). Never unpickles."""
    import zipfile

    run_id = run_id or folder.name
    if not folder.is_dir():
        raise RunStoreError(f"run {run_id} was deleted (by another session or process); list the runs with "
                            f"`python -m core runs`")
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


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
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
