"""benchmarks/classroom/serving.py: the free port and the health wait that the classroom load test
and the browser tests start their servers with."""

from __future__ import annotations

import http.server
import socket
import threading

import pytest

from benchmarks.classroom.serving import HOST, free_port, wait_until_healthy


class FakeProcess:
    def __init__(self, returncode=None):
        self.returncode = returncode

    def poll(self):
        return self.returncode


@pytest.fixture
def health_server():
    """A local HTTP server whose /_stcore/health answers 200 and anything else 404."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200 if self.path == "/_stcore/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer((HOST, 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://{HOST}:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


def test_free_port_can_be_bound_and_differs_from_a_taken_one():
    port = free_port()
    with socket.socket() as taken:
        taken.bind((HOST, port))  # nothing holds it
        taken.listen()
        assert free_port() != port


def test_wait_returns_once_the_server_is_healthy(health_server, tmp_path):
    wait_until_healthy(health_server, FakeProcess(), tmp_path / "log", timeout=10)


def test_an_exited_server_is_an_error_with_its_log(tmp_path):
    log = tmp_path / "log"
    log.write_text("Address already in use")
    with pytest.raises(RuntimeError, match=r"exited with 3:\nAddress already in use"):
        wait_until_healthy(f"http://{HOST}:{free_port()}", FakeProcess(3), log, timeout=10)


def test_a_silent_server_times_out_with_its_log(tmp_path):
    log = tmp_path / "log"
    log.write_text("still importing")
    with pytest.raises(RuntimeError, match=r"did not answer within 1 s:\nstill importing"):
        wait_until_healthy(f"http://{HOST}:{free_port()}", FakeProcess(), log, timeout=1)
