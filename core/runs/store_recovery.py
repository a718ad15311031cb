"""Start-up recovery of the run store: runs whose replacement was killed halfway are put back, and
what killed writers left (temporary folders, trash, free lock files) is removed for every id whose
lock is free. `RunRecovery` holds the RunStore methods that do it."""

from __future__ import annotations

import uuid
from pathlib import Path

from filelock import Timeout

from core.errors import RunStoreError
from core.runs import store_disk as disk
from core.runs.store_disk import _folder_size, _mtime, _size
from core.runs.store_format import DELETED, LOCK_DIR, MANIFEST, REPLACED, TEMP_DIR, TRASH_DIR
from core.runs.store_lock import _held_here, _try_lock, _unlock


class RunRecovery:
    """RunStore's start-up: recovery and cleaning."""

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
            disk._rename(newest, self.path(run_id))
            trash.remove(newest)
            counts["restored"] += 1
        for entry in trash:
            self._discard(entry)
            counts["trash"] += 1
        for entry in self._entries(TEMP_DIR, run_id):
            disk._remove_tree(entry)
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
                disk._unlink(path)
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
            disk._rename(entry, target)
            entry = target
        disk._remove_tree(entry)

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
