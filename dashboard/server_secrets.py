"""The server's `.streamlit/secrets.toml`, read once per process: the settings' fallback source.

No core import here: dashboard/backend.py reads the draw cache's settings through it at its own
import, and dashboard/settings.py (which imports backend) reads the rest.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any


@functools.lru_cache(maxsize=1)
def read_secrets() -> dict[str, Any]:
    """The secrets, read once per process (restart the server after editing them).

    Streamlit is asked only when a secrets file exists: reading st.secrets starts a
    watcher polling the secrets files, which cost a busy server measurable time."""
    candidates = [Path.cwd() / ".streamlit" / "secrets.toml", Path.home() / ".streamlit" / "secrets.toml"]
    if not any(path.is_file() for path in candidates):
        return {}
    try:
        import streamlit as st

        return dict(st.secrets)
    except Exception:  # unreadable secrets, or not under a Streamlit runtime
        return {}


def secret(name: str) -> Any:
    """A key of .streamlit/secrets.toml, or None (also when there is no such file)."""
    return read_secrets().get(name)
