"""`python -m dashboard.serve`: the proxy in front of several server processes (against small stand-in
servers: plain HTTP and websockets, no Streamlit), its command line, and the real thing (slow)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from core.errors import InputError
from dashboard import serve

ROOT = Path(__file__).resolve().parents[1]


# --- stand-ins for the server processes ----------------------------------------------------------------


async def stand_in(index: int):
    """A server that says which it is: on HTTP ("child <index> <method> <path> <body bytes>") and on a
    websocket (each frame echoed, text prefixed with "child <index>: ")."""
    from websockets.asyncio.server import serve as ws_serve
    from websockets.datastructures import Headers
    from websockets.http11 import Response

    async def echo(connection):
        async for message in connection:
            await connection.send(f"child {index}: {message}" if isinstance(message, str) else message)

    def plain(connection, request):
        if "websocket" in request.headers.get("Upgrade", "").lower():
            return None
        # websockets' request parser takes no body: the stand-in reports the declared length
        text = f"child {index} GET {request.path} {request.headers.get('Content-Length', '0')}".encode()
        return Response(200, "OK", Headers([("Content-Length", str(len(text)))]), text)

    return await ws_serve(echo, serve.LOOPBACK, 0, process_request=plain, max_size=None)


async def http_stand_in(index: int):
    """An HTTP server that reads a request's body and says how many bytes came ("child <index> <n>")."""

    async def answer(reader, writer):
        head = (await reader.readuntil(b"\r\n\r\n")).decode("latin-1")
        length = int(re.search(r"Content-Length: (\d+)", head).group(1)) if "Content-Length" in head else 0
        body = await reader.readexactly(length)
        text = f"child {index} {len(body)} {body.count(b'x')}".encode()
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(text) + text)
        await writer.drain()
        with contextlib.suppress(Exception):  # the proxy asked for Connection: close
            assert await asyncio.wait_for(reader.read(), 5) == b""
        writer.close()

    return await asyncio.start_server(answer, serve.LOOPBACK, 0)


class Stage:
    """Two stand-ins behind a Proxy on a free port."""

    def __init__(self, make=stand_in):
        self.make = make

    async def __aenter__(self) -> "Stage":
        self.servers = [await self.make(0), await self.make(1)]
        ports = [next(iter(s.sockets)).getsockname()[1] for s in self.servers]
        self.children = [serve.Child(i, port, up=True) for i, port in enumerate(ports)]
        self.proxy = serve.Proxy(self.children)
        self.server = await asyncio.start_server(self.proxy.handle, serve.LOOPBACK, 0, limit=serve.HEAD_LIMIT)
        self.port = self.server.sockets[0].getsockname()[1]
        return self

    async def __aexit__(self, *exc) -> None:
        self.server.close()
        for server in self.servers:
            server.close()
            await server.wait_closed()

    async def request(self, target: str = "/", cookie: str | None = None, raw: bytes | None = None):
        """(status, headers, body) of one HTTP request through the proxy."""
        reader, writer = await asyncio.open_connection(serve.LOOPBACK, self.port)
        if raw is None:
            head = f"GET {target} HTTP/1.1\r\nHost: example\r\n" + (f"Cookie: {cookie}\r\n" if cookie else "") + "\r\n"
            raw = head.encode()
        writer.write(raw)
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 10)  # the proxy closes after one response
        writer.close()
        head, _, body = data.partition(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        headers = [tuple(part.strip() for part in line.split(":", 1)) for line in lines[1:]]
        return int(lines[0].split(" ")[1]), headers, body.decode()


def set_cookie(headers) -> str | None:
    values = [v for n, v in headers if n.lower() == "set-cookie" and v.startswith(serve.COOKIE + "=")]
    assert len(values) <= 1
    return values[0].split(";")[0].split("=", 1)[1] if values else None


def run(coroutine):
    return asyncio.run(asyncio.wait_for(coroutine, 60))


def test_new_browsers_spread_over_the_processes_and_a_cookied_one_stays_on_its_own():
    async def scenario():
        async with Stage() as stage:
            status, headers, body = await stage.request("/")
            first = set_cookie(headers)
            assert status == 200 and body.startswith("child 0 GET /") and first.startswith("0.")
            # a second new browser: the first counts on process 0 until its websocket connects
            status, headers, body = await stage.request("/")
            second = set_cookie(headers)
            assert body.startswith("child 1 ") and second.startswith("1.")
            for _ in range(3):  # every later request of a browser goes to its process, no new cookie
                for cookie, child in ((first, 0), (second, 1)):
                    status, headers, body = await stage.request("/static/x.js", f"other=1; {serve.COOKIE}={cookie}")
                    assert body.startswith(f"child {child} GET /static/x.js") and set_cookie(headers) is None

    run(scenario())


@pytest.mark.parametrize(
    "cookie",
    ["", "garbage", "7.abcdefghijk", "1", "1.", "1.short", "-1.abcdefghijk", "01x.abcdefghijk", "1.abc%20defghijk"],
)
def test_a_missing_garbled_or_out_of_range_cookie_is_reassigned_never_an_error(cookie):
    async def scenario():
        async with Stage() as stage:
            status, headers, body = await stage.request("/", f"{serve.COOKIE}={cookie}")
            assert status == 200 and body.startswith("child ")
            new = set_cookie(headers)
            assert new is not None and re.fullmatch(serve.COOKIE_VALUE, new)
            assert body.startswith(f"child {new.split('.')[0]} ")

    run(scenario())


def test_a_browser_of_a_process_that_is_down_moves_to_one_that_is_up():
    async def scenario():
        async with Stage() as stage:
            stage.children[1].up = False
            status, headers, body = await stage.request("/", f"{serve.COOKIE}=1.abcdefghijk")
            assert body.startswith("child 0 ") and set_cookie(headers).startswith("0.")
            stage.children[0].up = False
            status, _, body = await stage.request("/")
            assert status == 503 and "starting" in body

    run(scenario())


def test_a_training_link_goes_to_the_process_that_has_the_training():
    async def scenario():
        async with Stage() as stage:
            status, headers, body = await stage.request("/?train=s1-AbCdEf_123", f"{serve.COOKIE}=0.abcdefghijk")
            assert body.startswith("child 1 GET /?train=s1-AbCdEf_123") and set_cookie(headers).startswith("1.")
            # a token of no process, or of none here, leaves the browser where it is
            for target in ("/?train=s9-AbCdEf", "/?train=AbCdEf", "/?train=s1"):
                status, headers, body = await stage.request(target, f"{serve.COOKIE}=0.abcdefghijk")
                assert body.startswith("child 0 ") and set_cookie(headers) is None

    run(scenario())


def test_websocket_frames_go_both_ways_to_the_cookies_process_and_are_counted_while_open():
    from websockets.asyncio.client import connect

    async def scenario():
        async with Stage() as stage:
            url = f"ws://{serve.LOOPBACK}:{stage.port}/_stcore/stream"
            cookie = {"Cookie": f"{serve.COOKIE}=1.abcdefghijk"}
            async with connect(url, additional_headers=cookie, max_size=None) as ws:
                assert stage.children[1].websockets == 1 and stage.children[0].websockets == 0
                await ws.send("hello")
                assert await ws.recv() == "child 1: hello"
                big = os.urandom(3_000_000)  # a frame far longer than any buffer on the way
                await ws.send(big)
                assert await ws.recv() == big
            for _ in range(100):
                if stage.children[1].websockets == 0:
                    break
                await asyncio.sleep(0.02)
            assert stage.children[1].websockets == 0
            # a new browser's websocket (no cookie) goes to the process with the fewest, and gets a cookie
            async with connect(url, additional_headers=cookie) as held:
                async with connect(url) as fresh:
                    await fresh.send("x")
                    assert await fresh.recv() == "child 0: x"
                    assert set_cookie(fresh.response.headers.raw_items()).startswith("0.")
                await held.send("y")
                assert await held.recv() == "child 1: y"

    run(scenario())


def test_a_request_body_is_forwarded_and_bad_requests_are_answered_not_crashed():
    async def scenario():
        async with Stage(http_stand_in) as stage:
            body = b"x" * 200_000
            raw = b"POST /_stcore/upload HTTP/1.1\r\nHost: e\r\nContent-Length: %d\r\n\r\n" % len(body) + body
            status, _, text = await stage.request(raw=raw)
            assert status == 200 and text == f"child 0 {len(body)} {len(body)}"
            for raw, expected in [
                (b"nonsense\r\n\r\n", 400),
                (b"GET / HTTP/1.1\r\nno colon here\r\n\r\n", 400),
                (b"GET / HTTP/1.1\r\nContent-Length: -5\r\n\r\n", 400),
                (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n", 411),
                (b"GET / HTTP/1.1\r\nX: " + b"y" * (serve.HEAD_LIMIT + 10) + b"\r\n\r\n", 400),
            ]:
                status, _, _ = await stage.request(raw=raw)
                assert status == expected, raw[:40]
            status, _, text = await stage.request("/")  # still serving
            assert status == 200

    run(scenario())


def test_the_proxy_holds_each_connections_handler_until_it_ends():
    """asyncio.start_server's protocol forgets a handler's task once the browser's connection is lost and
    the loop holds tasks weakly: unheld, a handler waiting for its streams to close was garbage-collected
    mid-await ("Task was destroyed but it is pending!" in dashboard.serve's log)."""

    async def scenario():
        async with Stage() as stage:
            reader, writer = await asyncio.open_connection(serve.LOOPBACK, stage.port)
            writer.write(b"GET / HTTP/1.1\r\nHost: e\r\n")  # half a head: the handler waits for the rest
            await writer.drain()
            for _ in range(100):
                if stage.proxy.handlers:
                    break
                await asyncio.sleep(0.01)
            (handler,) = stage.proxy.handlers
            assert not handler.done()
            writer.write(b"\r\n")
            assert (await asyncio.wait_for(reader.read(), 10)).startswith(b"HTTP/1.1 200")
            writer.close()
            await asyncio.wait_for(handler, 10)
            assert not stage.proxy.handlers  # let go once done

    run(scenario())


# --- the command line ------------------------------------------------------------------------------------


@given(st.integers(-(10**6), 10**6))
def test_processes_accepts_exactly_the_whole_numbers_from_1_to_the_documented_most(number):
    if 1 <= number <= serve.MAX_SERVER_PROCESSES:
        assert serve.parse_processes(str(number)) == number
    else:
        with pytest.raises(InputError, match="--processes"):
            serve.parse_processes(str(number))


@given(st.text(max_size=30))
def test_processes_text_is_a_number_in_range_or_one_message(text):
    try:
        value = serve.parse_processes(text)
    except InputError as exc:
        assert str(exc).startswith("--processes")
    else:
        assert 1 <= value <= serve.MAX_SERVER_PROCESSES


@pytest.mark.parametrize("value", ["0", "-2", "17", "1.5", "two", "", "1e9", "nan"])
def test_an_invalid_processes_is_one_message_and_exit_2(value, capsys):
    with pytest.raises(SystemExit) as stopped:
        serve.arguments(["--processes", value])
    assert stopped.value.code == 2
    err = capsys.readouterr().err
    assert "--processes" in err and "Traceback" not in err


def test_an_invalid_environment_value_names_the_variable_and_exits_2(monkeypatch, capsys):
    monkeypatch.setenv("BNN_SERVER_PROCESSES", "lots")
    with pytest.raises(SystemExit) as stopped:
        serve.arguments([])
    assert stopped.value.code == 2 and "BNN_SERVER_PROCESSES" in capsys.readouterr().err
    monkeypatch.setenv("BNN_SERVER_PROCESSES", "3")
    assert serve.arguments([]).processes == 3
    assert serve.arguments(["--processes", "2"]).processes == 2  # the flag wins


def test_one_process_is_streamlit_run_itself_with_only_the_options_given(monkeypatch):
    monkeypatch.delenv("BNN_SERVER_PROCESSES", raising=False)
    app = str(ROOT / "dashboard" / "app.py")
    assert serve.streamlit_command(None, "") == [sys.executable, "-m", "streamlit", "run", app]
    assert serve.streamlit_command(8600, "127.0.0.1")[-4:] == ["--server.port", "8600", "--server.address", "127.0.0.1"]
    assert serve.arguments([]).processes == 1 and serve.arguments([]).port is None


def test_the_command_refuses_bad_input_in_one_line_without_starting_anything():
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    for args in (["--processes", "0"], ["--processes", "2", "--port", "70000"]):
        done = subprocess.run(
            [sys.executable, "-m", "dashboard.serve", *args], cwd=ROOT, env=env, capture_output=True, text=True
        )
        assert done.returncode == 2 and "error:" in done.stderr and "Traceback" not in done.stderr, done.stderr


def test_a_taken_port_is_one_message_before_any_process_starts():
    import socket

    with socket.socket() as taken:
        taken.bind((serve.LOOPBACK, 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = dict(os.environ, PYTHONPATH=str(ROOT))
        command = [sys.executable, "-m", "dashboard.serve", "--processes", "2", "--port", str(port)]
        done = subprocess.run(
            [*command, "--address", "127.0.0.1"],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert done.returncode == 2 and f"port {port}" in done.stderr and "Traceback" not in done.stderr
    assert "starting" not in done.stdout + done.stderr


# --- the real thing: two Streamlit processes behind the proxy ------------------------------------------------


def descendants(pid: int) -> set[int]:
    found, frontier = set(), [pid]
    while frontier:
        parent = frontier.pop()
        try:
            children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
        except OSError:
            continue
        for child in map(int, children):
            found.add(child)
            frontier.append(child)
    return found


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
def test_two_streamlit_processes_serve_through_the_proxy_a_dead_one_restarts_and_sigterm_ends_them_all(tmp_path):
    import urllib.request

    from benchmarks.classroom.serving import free_port

    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(ROOT), BNN_CACHE_DIR=str(tmp_path / "cache"), BNN_OFFLINE="1")
    env["BNN_LESSON_RUNS"] = "0"
    env["TMPDIR"] = str(tmp_path)  # the proxy's shared folder: a killed proxy cannot remove it
    env["BNN_RERUN_LOG"] = str(tmp_path / "reruns.jsonl")  # each script run's page
    server = subprocess.Popen(
        [sys.executable, "-m", "dashboard.serve", "--processes", "2", "--port", str(port), "--address", "127.0.0.1"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        output = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = server.stdout.readline()
            output.append(line)
            if line.startswith("Serving the dashboard") or not line:
                break
        assert output[-1].startswith("Serving the dashboard from 2 server processes"), "".join(output)
        streamlits = descendants(server.pid)
        assert len(streamlits) >= 2

        # before any browser: each process's warm-up pages ran and started its two draw processes, which
        # answered (the warm-up waits for them: dashboard/warm.py)
        def warmed() -> int:  # each warm-up ends with one of these lines (it is bounded: serve.WARM_UP_SECONDS)
            return sum(" is warm (" in line or "could not be computed ahead" in line for line in output)

        while warmed() < 2:
            line = server.stdout.readline()
            if not line:
                break
            output.append(line)
        assert sum(" is warm (" in line for line in output) == 2, "".join(output)
        for process in Path(f"/proc/{server.pid}/task/{server.pid}/children").read_text().split():
            drawing = [
                pid for pid in descendants(int(process)) if Path(f"/proc/{pid}/comm").read_text() == "bnn-draws\n"
            ]
            assert len(drawing) == 2, f"server process {process}: draw processes {drawing}"
        runs = [json.loads(line) for line in (tmp_path / "reruns.jsonl").read_text().splitlines()]
        pages = [run["page"] for run in runs if "page" in run]
        assert sorted(pages) == sorted(["train", *serve.WARM_PAGES] * 2), pages  # each process's warm-up pages
        url = f"http://127.0.0.1:{port}"
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as response:
            assert response.status == 200
            assert any(c.startswith(serve.COOKIE + "=") for c in response.headers.get_all("Set-Cookie"))

        # a browser's websocket through the proxy: Streamlit's own handshake and a first script message
        async def first_message() -> bytes:
            from websockets.asyncio.client import connect

            async with connect(url.replace("http", "ws") + "/_stcore/stream", subprotocols=["streamlit"]) as ws:
                from streamlit.proto.BackMsg_pb2 import BackMsg

                msg = BackMsg()
                msg.rerun_script.SetInParent()
                await ws.send(msg.SerializeToString())
                return await asyncio.wait_for(ws.recv(), 120)

        assert asyncio.run(first_message())

        # a server process that dies is restarted; the proxy answers meanwhile
        children_file = Path(f"/proc/{server.pid}/task/{server.pid}/children")
        first_children = [int(pid) for pid in children_file.read_text().split()]
        os.kill(first_children[0], signal.SIGKILL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            now = [int(p) for p in children_file.read_text().split()]
            if len(now) == 2 and first_children[0] not in now:
                break
            time.sleep(0.5)
        assert len(now) == 2 and first_children[0] not in now
        with urllib.request.urlopen(f"{url}/_stcore/health", timeout=10) as response:
            assert response.status == 200

        everything = descendants(server.pid)
        server.send_signal(signal.SIGTERM)
        assert server.wait(60) == 0
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and any(Path(f"/proc/{pid}").exists() for pid in everything):
            time.sleep(0.2)
        alive = [pid for pid in everything if Path(f"/proc/{pid}").exists() and _not_zombie(pid)]
        assert not alive, f"left behind: {alive}"
    finally:
        with contextlib.suppress(ProcessLookupError):
            server.kill()
        server.wait()


def _not_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; the death signal is Linux's")
def test_the_server_processes_end_when_the_proxy_is_killed_outright(tmp_path):
    from benchmarks.classroom.serving import free_port

    env = dict(os.environ, PYTHONPATH=str(ROOT), BNN_CACHE_DIR=str(tmp_path / "cache"), BNN_OFFLINE="1")
    env["BNN_LESSON_RUNS"] = "0"
    env["TMPDIR"] = str(tmp_path)  # the proxy's shared folder: a killed proxy cannot remove it
    command = [sys.executable, "-m", "dashboard.serve", "--processes", "2", "--port", str(free_port())]
    server = subprocess.Popen(
        [*command, "--address", "127.0.0.1"], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(descendants(server.pid)) < 2:
            time.sleep(0.2)
        streamlits = descendants(server.pid)
        assert len(streamlits) >= 2
    finally:
        server.kill()  # SIGKILL: no handler of the proxy's runs
        server.wait()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and any(_not_zombie(pid) for pid in streamlits):
        time.sleep(0.2)
    assert not [pid for pid in streamlits if _not_zombie(pid)]


# --- the warm-up client against a stand-in server ------------------------------------------------------------


def warm_up_against(answer) -> tuple[int, str, list]:
    """Run serve.WARM_UP against a websocket server that answers each rerun request with `answer(request)`
    (a list of ForwardMsg, or None to close): (exit code, stderr, the rerun requests it got)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg
    from websockets.asyncio.server import serve as ws_serve

    received: list = []

    async def handler(ws):
        async for data in ws:
            request = BackMsg()
            request.ParseFromString(data)
            received.append(request.rerun_script)
            replies = answer(request.rerun_script)
            if replies is None:
                await ws.close()
                return
            for reply in replies:
                await ws.send(reply.SerializeToString())

    async def main() -> tuple[int, str]:
        async with ws_serve(handler, "127.0.0.1", 0) as server:
            port = server.sockets[0].getsockname()[1]
            client = await asyncio.create_subprocess_exec(
                sys.executable,
                "-c",
                serve.WARM_UP,
                f"ws://127.0.0.1:{port}/_stcore/stream",
                "60",
                *serve.WARM_PAGES,
                stdin=subprocess.PIPE,
                stderr=subprocess.PIPE,
            )
            _, err = await client.communicate(b"the-token\n")
            return client.returncode, err.decode()

    code, err = asyncio.run(main())
    return code, err, received


def finished(status: int):
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    message = ForwardMsg()
    message.script_finished = status
    return message


def test_the_warm_up_client_sends_its_token_first_then_each_page_once_its_run_has_finished():
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    early, done = finished(ForwardMsg.FINISHED_EARLY_FOR_RERUN), finished(ForwardMsg.FINISHED_SUCCESSFULLY)
    code, err, received = warm_up_against(lambda request: [early, done])  # a rerun's end is not the page's
    assert code == 0, err
    assert [(r.query_string, r.page_name) for r in received] == [
        ("warm=the-token", ""),
        *(("", page) for page in serve.WARM_PAGES),
    ]


def test_a_server_that_closes_the_page_is_a_failed_warm_up_not_a_warm_one():
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    done = finished(ForwardMsg.FINISHED_SUCCESSFULLY)
    closes_the_last = lambda request: None if request.page_name == serve.WARM_PAGES[-1] else [done]  # noqa: E731
    code, err, received = warm_up_against(closes_the_last)
    assert code != 0 and "closed the page before its script run finished" in err
    assert len(received) == 1 + len(serve.WARM_PAGES)
