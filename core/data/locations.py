"""Where datasets live: the data directory, the download cache, offline mode."""

from __future__ import annotations

import os
from pathlib import Path

from core.settings import CACHE_DIR, DATA_DIR, OFFLINE

DATA_DIR_ENV = DATA_DIR.variable
OFFLINE_ENV = OFFLINE.variable
CACHE_DIR_ENV = CACHE_DIR.variable  # overrides the download cache (tests, shared machines)
ASSETS_DIR = Path(__file__).resolve().parents[2] / "assets"


def resolve_data_dir(data_dir: str | Path | None = None) -> Path | None:
    """The data directory: the argument, else $BNN_DATA_DIR, else None."""
    if data_dir is not None and str(data_dir) != "":
        return Path(data_dir).expanduser()
    env = DATA_DIR.read()
    return Path(env).expanduser() if env else None


def is_offline() -> bool:
    """True when the user disabled downloads with BNN_OFFLINE=1 (tests always do)."""
    return OFFLINE.read()


def user_cache_dir() -> Path:
    """Download cache: $BNN_CACHE_DIR/data, else platformdirs' user cache dir for bnn-explorer, /data.

    The run store keeps its runs beside it, in runs/ of the same cache dir.
    """
    override = CACHE_DIR.read()
    if override:
        return Path(override).expanduser() / "data"
    try:
        from platformdirs import user_cache_dir as platform_cache_dir

        return Path(platform_cache_dir("bnn-explorer")) / "data"
    except ImportError:  # platformdirs is a requirement; keep working without it
        return Path.home() / ".cache" / "bnn-explorer" / "data"


def download_roots(data_dir: str | Path | None = None) -> list[Path]:
    """Folders that may hold downloaded files, in look-up order."""
    roots = []
    resolved = resolve_data_dir(data_dir)
    if resolved is not None:
        roots.append(resolved)
    roots.append(user_cache_dir())
    return roots


def writable_download_root(data_dir: str | Path | None = None) -> Path:
    """Where a new download goes: the data dir when writable, else the user cache."""
    resolved = resolve_data_dir(data_dir)
    if resolved is not None and resolved.is_dir() and os.access(resolved, os.W_OK):
        return resolved
    return user_cache_dir()
