"""Shared pytest fixtures.

Tests never touch the network: BNN_OFFLINE=1 is forced for the whole session.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ["BNN_OFFLINE"] = "1"

FULL_DATA_SKIP_REASON = "BNN_DATA_DIR not set: full datasets absent"


@pytest.fixture
def data_dir() -> Path:
    """The folder with the full datasets ($BNN_DATA_DIR); skips the test when unset."""
    value = os.environ.get("BNN_DATA_DIR", "").strip()
    if not value:
        pytest.skip(FULL_DATA_SKIP_REASON)
    path = Path(value)
    if not path.is_dir():
        pytest.skip(f"BNN_DATA_DIR={value} is not a directory: full datasets absent")
    return path


@pytest.fixture
def isolated_data_env(tmp_path, monkeypatch) -> Path:
    """No data dir and an empty download cache, so only bundled/generated data is found."""
    monkeypatch.delenv("BNN_DATA_DIR", raising=False)
    cache = tmp_path / "cache"
    cache.mkdir()
    monkeypatch.setenv("BNN_CACHE_DIR", str(cache))
    monkeypatch.setenv("BNN_OFFLINE", "1")
    return cache
