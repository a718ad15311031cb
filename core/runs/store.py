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
into place, so a run folder is either complete or absent. Replacing a run swaps the new folder and
the old one in one step where the file system can (Linux renameat2 RENAME_EXCHANGE: the id is never
absent, so a listing always shows it) and then removes the old one from .tmp; elsewhere it renames the
old folder to <runs>/.trash/<id>.<random>.replaced, renames the new one into place, and only then
removes the old one (renamed to .deleted first). Deleting renames to .trash/<id>.<random>.deleted, then
removes it. So a kill at any moment leaves the old run or the new one live, or the old one in .trash as
".replaced" with no live folder: the store's start-up (the first use of a RunStore) renames that one
back, and removes what killed writers left (.tmp folders, .deleted trash, free lock files) for every
id whose lock is free (a live writer always holds it). Until they are removed, leftovers count
towards the size cap. Without the swap, a listing that reads the folder names inside a replace's two
renames and looks at the trash only after the whole replace has ended can leave that run out of that
one listing (readers wait a replace out; the run itself is never lost).

Listing (`list`) checks every run it shows: the manifest and every file it lists are there with
their sizes, the JSON files parse as what they should be; the sha256 checksums and the rest of a
full read run once per state of the folder (keyed by the files' inodes, sizes, mtimes and ctimes;
any write or utime changes a ctime), and the verdict is kept, in the process and in the folder's
`verified` file, so a listing hashes only what changed since the last one (measured: 20 runs of
8 MB list in 1.3 s the first time, then in 0.04-0.07 s in a new process and 9 ms in the same one).
A run that fails gets status "corrupt" and a one-line
reason; one bad folder never breaks the listing. Reading (`read`) checks everything every time.
Nothing is ever unpickled: tensors come from safetensors, everything else from JSON.

Parts (each re-exported here): store_disk (the only functions that change the disk), store_format
(the folder's names and records, the manifest's checksum), store_lock (the per-id lock),
store_reading (reading, verification, listing) and store_recovery (start-up clean-up); this module
is the API: RunStore with writing, deleting and the size cap.

Settings (environment, declared in core.settings):
    BNN_CACHE_DIR       the cache folder (runs live in <it>/runs); default: the user cache dir
    BNN_CACHE_MAX_MB    size cap of the store in MB, leftovers of killed writers included;
                        unset: no cap
"""

from __future__ import annotations

import errno
import io
import os
import shutil
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import numpy as np
from filelock import Timeout

from core.data.locations import CACHE_DIR_ENV  # the one home of the variable's name
from core.errors import RunStoreError
from core.runs import store_disk as disk

# The store's parts, re-exported: code and tests import them from here.
from core.runs.store_disk import (  # noqa: F401
    _folder_size,
    _fsync_dir,
    _fsync_file,
    _json_bytes,
    _mkdir,
    _mtime,
    _open_lock_file,
    _parse_json,
    _quietly,
    _remove_tree,
    _rename,
    _rmdir,
    _size,
    _unlink,
    _write_file,
    _write_json,
    sha256_file,
)
from core.runs.store_format import (  # noqa: F401
    ARRAY_MARKER,
    DELETED,
    JSON_FILES,
    LAST_USED,
    LOCK_DIR,
    MANIFEST,
    MANIFEST_FIELDS,
    REPLACE_WAIT_SECONDS,
    REPLACED,
    SNAPSHOTS,
    SUMMARY_ARRAYS,
    TEMP_DIR,
    TRASH_DIR,
    VERIFIED,
    WEIGHTS,
    RunContents,
    RunInfo,
    StoredRun,
    _check_id,
    _fix_hint,
    _is_count,
    _is_number,
    _manifest_own_digest,
    _megabytes,
    _one_line,
    _safe_name,
    join_summaries,
    read_snapshot_arrays,
    split_summaries,
    state_dict_for_saving,
)
from core.runs.store_lock import RunLock, _held, _held_here, _held_lock, _try_lock, _unlock  # noqa: F401
from core.runs.store_reading import (  # noqa: F401
    MAX_VERDICTS,
    RunReading,
    _file_key,
    _Folder,
    _Vanished,
    _verdicts,
    _verdicts_lock,
)
from core.runs.store_recovery import RunRecovery
from core.settings import CACHE_DIR, CACHE_MAX_MB

CACHE_MAX_MB_ENV = CACHE_MAX_MB.variable


def default_cache_dir() -> Path:
    """$BNN_CACHE_DIR, else platformdirs' user cache dir for bnn-explorer. Runs live in <this>/runs."""
    override = CACHE_DIR.read()
    if override:
        return Path(override).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("bnn-explorer"))


class RunStore(RunReading, RunRecovery):
    """The store's API: paths, locks, room on disk, writing, deleting and the size cap here; reading,
    verification and listing in RunReading (core.runs.store_reading); start-up recovery in
    RunRecovery (core.runs.store_recovery)."""

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
            raise RunStoreError(
                f"cannot list the run store {self.root}: {exc.strerror or exc}; "
                f"check the folder's permissions or set {CACHE_DIR_ENV}"
            ) from None

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
            raise RunStoreError(
                f"run {run_ref!r}: no cached run has this id in {self.root}; list them with `python -m core runs`"
            )
        raise RunStoreError(
            f"run {run_ref!r}: the prefix matches {len(matches)} runs ({', '.join(matches[:5])}); give more characters"
        )

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
            return (
                f"{what}: no space left in {self.root} ({_megabytes(self.free_bytes())} free), nothing was "
                f"stored; delete runs (`python -m core rm RUN`) or set {CACHE_DIR_ENV} to a folder on a "
                f"larger disk"
            )
        if exc.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return (
                f"{what}: the run store {self.root} cannot be written ({reason}); make it writable or set "
                f"{CACHE_DIR_ENV} to a writable folder"
            )
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
            disk._write_file(probe, b"")
            disk._unlink(probe)
        free = self.free_bytes()
        if free is not None and free < needed_bytes:
            raise RunStoreError(
                f"{what}: needs about {_megabytes(needed_bytes)} in {self.root} but only "
                f"{_megabytes(free)} are free; delete runs (`python -m core rm RUN`) or set "
                f"{CACHE_DIR_ENV} to a folder on a larger disk"
            )

    # --- writing -----------------------------------------------------------------------------
    def _replace_folder(self, run_id: str, temp: Path, final: Path) -> Path:
        """The new folder `temp` in the old one's place; returns where the old one is now. One swap where
        the file system can (the id is never absent: a listing always sees it), else two renames with
        the old folder in .trash as ".replaced" in between (which listings and readers wait out)."""
        try:
            disk._exchange(temp, final)
            return temp  # the old run, in .tmp: removed below, or by the next start-up after a kill
        except OSError as exc:
            if exc.errno not in disk.EXCHANGE_UNSUPPORTED:
                raise
        old = self._trash_path(run_id, REPLACED)
        disk._rename(final, old)
        try:
            disk._rename(temp, final)
        except BaseException:
            if not final.exists():
                _quietly(disk._rename, old, final)
            raise
        return old

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
        binary = {WEIGHTS: save_torch(state_dict_for_saving(contents.state_dict)), SUMMARY_ARRAYS: save_numpy(arrays)}
        if contents.snapshots is not None:
            buffer = io.BytesIO()
            np.savez_compressed(buffer, **contents.snapshots)
            binary[SNAPSHOTS] = buffer.getvalue()
        documents = {
            "config.json": contents.config,
            "info.json": dict(contents.info, run_id=run_id),
            "metrics.json": contents.metrics,
            "history.json": contents.history,
            "summaries.json": json_summaries,
        }
        self._start()
        final = self.path(run_id)
        with self._disk_errors(f"run {run_id}"), self.lock(run_id):
            self._recover_id(run_id)
            if not replace and self.exists(run_id):
                return final
            temp = self.root / TEMP_DIR / f"{run_id}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
            old = None
            disk._mkdir(temp)
            try:
                for name, data in binary.items():
                    disk._write_file(temp / name, data)
                for name, value in documents.items():
                    disk._write_json(temp / name, value)
                names = (WEIGHTS, SUMMARY_ARRAYS, *JSON_FILES) + ((SNAPSHOTS,) if SNAPSHOTS in binary else ())
                files = {
                    name: {"sha256": sha256_file(temp / name), "bytes": (temp / name).stat().st_size} for name in names
                }
                # The manifest is the completion marker: written last, after every file is on disk.
                # Milliseconds: at 13 significant digits every digit of the time is seen by own_sha256
                # (at 17, a flip of the last one can parse to the same float).
                manifest = {"run_id": run_id, "files": files, "written": round(time.time(), 3)}
                disk._write_json(temp / MANIFEST, dict(manifest, own_sha256=_manifest_own_digest(manifest)))
                disk._write_file(temp / LAST_USED, b"")
                _fsync_dir(temp)
                if final.exists():
                    old = self._replace_folder(run_id, temp, final)
                else:
                    disk._rename(temp, final)
                _fsync_dir(self.root)
            except BaseException:
                _quietly(disk._remove_tree, temp)
                if old is not None and not final.exists():
                    _quietly(disk._rename, old, final)
                raise
            if old is not None:
                _quietly(self._discard, old)  # else start-up removes it
        self.enforce_cap(keep={run_id})
        return final

    def delete(self, run_id: str) -> None:
        self._start()
        folder = self.path(run_id)
        if not folder.exists():
            raise RunStoreError(f"run {run_id}: not in the store {self.root}")
        with self._disk_errors(f"rm {run_id}"), self.lock(run_id):
            self._recover_id(run_id)
            if folder.exists():
                trash = self._trash_path(run_id, DELETED)
                disk._rename(folder, trash)
                _quietly(disk._remove_tree, trash)  # else start-up removes it

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
        by_age = sorted(
            (run_id for run_id in sizes if run_id not in keep),
            key=lambda run_id: _mtime(self.path(run_id) / LAST_USED) or 0.0,
        )
        for run_id in by_age:
            if total <= self.max_bytes:
                break
            try:
                with self.lock(run_id, timeout=0):  # skip runs another process is writing
                    if self.path(run_id).exists():
                        trash = self._trash_path(run_id, DELETED)
                        disk._rename(self.path(run_id), trash)
                        _quietly(disk._remove_tree, trash)
            except (Timeout, RunStoreError, OSError):
                continue
            total -= sizes[run_id]
            evicted.append(run_id)
        return evicted


class _StoreLock(RunLock):
    """A RunLock whose failures to create its file are RunStoreErrors (a read-only store)."""

    def __init__(self, store: RunStore, path: Path, run_id: str, timeout: float):
        super().__init__(path, timeout)
        self._store, self._run_id = store, run_id

    def acquire(self) -> RunLock:
        with self._store._disk_errors(f"run {self._run_id}"):
            return super().acquire()
