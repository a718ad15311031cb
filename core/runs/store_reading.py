"""Reading and verifying run folders: a folder opened once and read consistently while writers
replace or delete it, the manifest and every file checked against it (sizes, then checksums),
the JSON parsed as what it should be, and the listing's verdicts kept per state of a folder.
`RunReading` holds the RunStore methods that do it."""

from __future__ import annotations

import hashlib
import os
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import numpy as np
from filelock import Timeout

from core.errors import RunStoreError
from core.runs.store_disk import _folder_size, _json_bytes, _mtime, _parse_json, _quietly
from core.runs.store_format import (
    JSON_FILES,
    LAST_USED,
    MANIFEST,
    MANIFEST_FIELDS,
    REPLACE_WAIT_SECONDS,
    REPLACED,
    SUMMARY_ARRAYS,
    TRASH_DIR,
    VERIFIED,
    WEIGHTS,
    RunInfo,
    StoredRun,
    _fix_hint,
    _is_count,
    _is_number,
    _manifest_own_digest,
    _one_line,
    _safe_name,
    join_summaries,
    read_snapshot_arrays,
)


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
        """ "deleted" or "replaced" when the path no longer names the folder opened, else None."""
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


class RunReading:
    """RunStore's reading, verification and listing (the store's paths, lock and recovery are
    RunStore's own)."""

    # --- reading -----------------------------------------------------------------------------
    def read(self, run_id: str, touch: bool = True) -> StoredRun:
        """Verify every checksum, then parse; RunStoreError naming the file on any problem, or
        saying the run was deleted when it went while being read."""
        self._start()
        try:
            stored = self._consistently(run_id, self._read_folder)
        except _Vanished:
            raise RunStoreError(
                f"run {run_id} was deleted (by another session or process) or never stored in "
                f"{self.root}; list the runs with `python -m core runs`"
            ) from None
        except OSError as exc:
            raise RunStoreError(
                f"run {run_id}: cannot read {self.path(run_id)} ({exc.strerror or exc}); {_fix_hint(run_id)}"
            ) from None
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
        raise RunStoreError(f"run {run_id}: it kept changing while being read (replaced again and again); try again")

    def _manifest(self, run_id: str, folder: _Folder) -> dict[str, Any]:
        path = folder.path / MANIFEST
        try:
            data = folder.read_bytes(MANIFEST)
        except FileNotFoundError:
            raise RunStoreError(
                f"run {run_id}: {path} is missing, the run is incomplete; {_fix_hint(run_id)}"
            ) from None
        manifest = self._parse(run_id, path, data, dict)
        # Each file's entry is checked against the file; the rest against own_sha256 (runs written
        # before it was recorded have none), and a field of another name is a damaged one.
        unknown = set(manifest) - MANIFEST_FIELDS
        if unknown or ("own_sha256" in manifest and manifest["own_sha256"] != _manifest_own_digest(manifest)):
            raise RunStoreError(
                f"run {run_id}: {path} does not match its own checksum (corrupted or modified); {_fix_hint(run_id)}"
            )
        files = manifest.get("files")
        required = {WEIGHTS, SUMMARY_ARRAYS, *JSON_FILES}
        if not isinstance(files, dict) or not required <= set(files):
            raise RunStoreError(f"run {run_id}: {path} does not list every file of a run; {_fix_hint(run_id)}")
        for name, entry in files.items():
            if (
                not isinstance(entry, dict)
                or not isinstance(entry.get("sha256"), str)
                or not _is_count(entry.get("bytes"))
                or not _safe_name(name)
            ):
                raise RunStoreError(
                    f"run {run_id}: {path} has a malformed entry for {str(name)[:80]!r}; {_fix_hint(run_id)}"
                )
        return manifest

    def _parse(self, run_id: str, path: Path, data: bytes, kind: type) -> Any:
        try:
            value = _parse_json(data)
        except ValueError as exc:
            raise RunStoreError(f"run {run_id}: cannot parse {path}: {_one_line(exc)}; {_fix_hint(run_id)}") from None
        if not isinstance(value, kind):
            raise RunStoreError(
                f"run {run_id}: {path} holds a JSON {type(value).__name__}, not "
                f"{'an object' if kind is dict else 'a list'}; {_fix_hint(run_id)}"
            )
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
            raise RunStoreError(
                f"run {run_id}: {path} has {len(data)} bytes, its manifest says "
                f"{entry['bytes']} (truncated or modified); {_fix_hint(run_id)}"
            )
        if hashlib.sha256(data).hexdigest() != entry["sha256"]:
            raise RunStoreError(
                f"run {run_id}: {path} does not match its checksum (corrupted or modified); {_fix_hint(run_id)}"
            )
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
                raise RunStoreError(
                    f"run {run_id}: cannot read {folder.path / name}: {_one_line(exc)}; {_fix_hint(run_id)}"
                ) from None
        parsed = {
            name: self._parse(run_id, folder.path / name, data[name], list if name == "history.json" else dict)
            for name in JSON_FILES
        }
        self._check_fields(run_id, folder.path, parsed)
        try:
            summaries = join_summaries(parsed["summaries.json"], tensors[SUMMARY_ARRAYS])
        except (KeyError, TypeError) as exc:
            raise RunStoreError(
                f"run {run_id}: summaries.json refers to a missing array {exc}; {_fix_hint(run_id)}"
            ) from None
        return StoredRun(
            run_id=run_id,
            path=self.path(run_id),
            config=parsed["config.json"],
            info=parsed["info.json"],
            state_dict=tensors[WEIGHTS],
            metrics=parsed["metrics.json"],
            history=parsed["history.json"],
            summaries=summaries,
        )

    @staticmethod
    def _check_fields(run_id: str, folder: Path, parsed: dict[str, Any]) -> None:
        """The fields a listing shows have the types it shows."""
        config, info = parsed.get("config.json", {}), parsed.get("info.json", {})
        for key in ("dataset", "method"):
            if config.get(key) is not None and not isinstance(config.get(key), str):
                raise RunStoreError(f"run {run_id}: {folder / 'config.json'}: {key} is not a name; {_fix_hint(run_id)}")
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
            raise RunStoreError(
                f"run {run_id} is not in the store {self.root} (deleted?); list the runs with `python -m core runs`"
            )
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
        return RunInfo(
            run_id,
            folder,
            names["dataset"],
            names["method"],
            None,
            _mtime(folder / LAST_USED),
            _folder_size(folder),
            {},
            {},
            "corrupt",
            _one_line(reason),
        )

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
                raise RunStoreError(
                    f"run {run_id}: {folder.path / name} has {st.st_size} bytes, its manifest says "
                    f"{entry['bytes']} (truncated or modified); {_fix_hint(run_id)}"
                )
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
        return RunInfo(
            run_id,
            folder.path,
            config.get("dataset"),
            config.get("method"),
            float(created) if created is not None else None,
            _mtime(folder.path / LAST_USED),
            _folder_size(folder.path),
            metrics,
            config,
        )

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
                row = RunInfo(
                    run_id,
                    self.path(run_id),
                    None,
                    None,
                    None,
                    None,
                    _folder_size(self.path(run_id)),
                    {},
                    {},
                    "corrupt",
                    _one_line(f"run {run_id}: cannot be read ({type(exc).__name__}: {exc})"),
                )
            if row is not None:
                rows.append(row)
        return sorted(rows, key=lambda r: (r.created or 0.0, r.run_id))

    def __iter__(self) -> Iterator[RunInfo]:
        return iter(self.list())
