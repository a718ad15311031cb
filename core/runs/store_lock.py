"""The per-id writer lock of the run store: an flock on <runs>/.locks/<id>.lock, re-entrant in the
thread that holds it."""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any

from filelock import Timeout

from core.runs import store_disk as disk

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
        fd = disk._open_lock_file(path)
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
