"""Starting a dashboard server for a test: a free local port and waiting until Streamlit answers its
health check. Shared by the classroom load test and the browser tests (tests/test_browser.py)."""

from __future__ import annotations

import socket
import subprocess
import time
import urllib.request
from pathlib import Path

HOST = "127.0.0.1"  # the servers these tests start listen here and nowhere else


def free_port(host: str = HOST) -> int:
    """A port nothing listens on right now (the OS picks it)."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return sock.getsockname()[1]


def wait_until_healthy(url: str, process: subprocess.Popen, log: Path, timeout: float = 120.0) -> None:
    """Return once `url`/_stcore/health answers 200; RuntimeError (with the server's log) when the
    process exits first or `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"streamlit exited with {process.returncode}:\n{Path(log).read_text()}")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError(f"streamlit did not answer within {timeout:g} s:\n{Path(log).read_text()}")
