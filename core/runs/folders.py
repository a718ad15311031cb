"""The folders core reads and writes on this machine, each with the words a page shows instead of
its path (a page never shows an absolute server path)."""

from __future__ import annotations

from pathlib import Path

from core.data.locations import CACHE_DIR_ENV, DATA_DIR_ENV, resolve_data_dir, user_cache_dir
from core.runs.store import default_cache_dir
from core.settings import CACHE_DIR


def server_folders() -> list[tuple[Path, str]]:
    """The download cache, the run store, the cache folder, $BNN_CACHE_DIR and $BNN_DATA_DIR when set."""
    folders = [
        (Path(user_cache_dir()), "the download cache"),
        (default_cache_dir() / "runs", "the run store"),
        (default_cache_dir(), "the cache folder"),
    ]
    cache_dir = CACHE_DIR.read()  # BNN_CACHE_DIR, read (and checked) where every BNN_* variable is
    if cache_dir:
        folders.append((Path(str(cache_dir)).expanduser(), f"${CACHE_DIR_ENV}"))
    data_dir = resolve_data_dir()
    if data_dir is not None:
        folders.append((Path(data_dir), f"${DATA_DIR_ENV}"))
    return folders
