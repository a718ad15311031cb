"""The run store's disk operations.

Every change the store makes on disk goes through the few functions here: one place to reason
about what a kill can leave behind, and where the tests inject faults. The store's other modules
call them as `disk.<name>`, so a function replaced here is the one every caller uses.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from core.jsonable import jsonable


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


_AT_FDCWD = -100  # <fcntl.h>: paths relative to the working directory (ours are absolute)
_RENAME_EXCHANGE = 2  # <linux/fs.h>
EXCHANGE_UNSUPPORTED = {errno.ENOSYS, errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV}


@functools.lru_cache(maxsize=1)
def _renameat2() -> Any:
    """libc's renameat2, or None (not Linux, or a libc without it)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        function = ctypes.CDLL(None, use_errno=True).renameat2
    except (AttributeError, OSError):
        return None
    function.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_int, ctypes.c_char_p, ctypes.c_uint]
    function.restype = ctypes.c_int
    return function


# --- the doors: the only functions that change the disk ------------------------------------------
def _mkdir(path: Path) -> None:
    os.mkdir(path)


def _rename(source: Path, target: Path) -> None:
    os.rename(source, target)


def _exchange(first: Path, second: Path) -> None:
    """Swap two existing paths in one step (Linux renameat2 RENAME_EXCHANGE): a replace that renames
    the old run away and the new one in leaves the id absent in between, and a listing that read the
    folder names then, with the whole replace done before it looked at the trash again, left the run
    out (tests/test_store_adversarial.py, seen under load). OSError where the platform or the file
    system cannot (ENOSYS, EINVAL, ENOTSUP): the caller renames in two steps."""
    swap = _renameat2()
    if swap is None:
        raise OSError(errno.ENOSYS, "renameat2 is not available")
    if swap(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second), _RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(first), None, str(second))


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


def _quietly(action, *args: Any) -> None:
    """A clean-up step whose failure is left to the next start-up."""
    try:
        action(*args)
    except OSError:
        pass


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
