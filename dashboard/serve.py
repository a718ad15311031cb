"""One address for a class, several Streamlit server processes behind it.

    python -m dashboard.serve --processes 2 [--port 8501] [--address ADDRESS]

One `streamlit run` is one interpreter: every session's script runs take its lock in turn, and a class
of 30 waited seconds for it (docs/classroom.md). This starts N `streamlit run dashboard/app.py`
processes on free loopback ports and a reverse proxy on the public address that shares the class out:

- A browser stays on one process: the proxy sets a cookie (`bnn_server`) on its first response, and
  every later request and websocket with it goes to the same process (its session state, uploads and
  media live there). A missing, garbled or out-of-range cookie, or one naming a process that is down,
  is reassigned (never an error); a new browser goes to the process with the fewest open websockets
  (counting the browsers sent there that have not connected yet).
- A `?train=s<k>-...` link (a student's link to their training) goes to process k, which has it.
- The processes share the machine's training slots, queue and teacher's list through a folder this
  command makes ($BNN_SERVE_DIR, dashboard/shared_queue.py).
- Every process is health-checked before the proxy accepts; one that ends is restarted, and its
  browsers are sent to the others (their pages start afresh: session state is per process).
- Ctrl-C or SIGTERM stops the proxy and every process.

`--processes 1` (the default, or $BNN_SERVER_PROCESSES) is `streamlit run dashboard/app.py` itself.
The proxy is plain asyncio (HTTP/1.1 and websockets passed through as bytes): Streamlit's own server
changed from tornado to starlette across the versions this project supports, so it uses neither. It
never imports Streamlit or torch (its process stays small).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Sequence
from urllib.parse import parse_qs, urlsplit

# Light on purpose (no torch, no Streamlit): the settings' declarations and their rules.
from core.dashboard_settings import (
    MAX_SERVER_PROCESSES,
    SERVE_ADDRESS,
    SERVE_CHILD,
    SERVE_DIR,
    SERVER_PROCESSES,
)
from core.errors import InputError

log = logging.getLogger("dashboard.serve")

APP = Path(__file__).resolve().parent / "app.py"
LOOPBACK = "127.0.0.1"  # the server processes listen here only; browsers reach them through the proxy
COOKIE = "bnn_server"
COOKIE_VALUE = re.compile(r"(\d{1,3})\.([A-Za-z0-9_-]{8,64})")
TRAIN_TOKEN = re.compile(r"s(\d{1,3})-[A-Za-z0-9_-]+")  # dashboard.worker's tokens behind this proxy
HEAD_LIMIT = 64 * 1024  # bytes of a request's or response's head (Streamlit's are a few hundred)
PENDING_SECONDS = 60.0  # a browser sent to a process counts there until it connects, or this long
HEALTH_SECONDS = 2.0  # between health checks of a process
START_SECONDS = 180.0  # a process must answer its health check within this long of starting
DEFAULT_PORT = 8501  # Streamlit's
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "transfer-encoding"}


# --- the command line -----------------------------------------------------------------------------


def parse_processes(text: object, name: str = "--processes") -> int:
    """The number of server processes: BNN_SERVER_PROCESSES's rule, the message naming `name`."""
    return dataclasses.replace(SERVER_PROCESSES, variable=name).parse(text)


def parse_port(text: object) -> int:
    return dataclasses.replace(SERVER_PROCESSES, variable="--port", low=0, high=65535).parse(text)


def arguments(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m dashboard.serve",
        description="Serve the dashboard to a class from several Streamlit processes behind one address.",
    )
    parser.add_argument(
        "--processes",
        default=None,
        help=f"Streamlit server processes, 1 to {MAX_SERVER_PROCESSES} (default: $BNN_SERVER_PROCESSES, else 1: "
        "`streamlit run` itself)",
    )
    parser.add_argument(
        "--port", default=None, help=f"the port browsers use (default {DEFAULT_PORT}, as Streamlit; 0: any free port)"
    )
    parser.add_argument(
        "--address",
        default="",
        help="the address the proxy listens on (default: every interface, as Streamlit; 127.0.0.1: this machine only)",
    )
    args = parser.parse_args(argv)
    try:
        args.processes = (
            SERVER_PROCESSES.read() if args.processes is None else parse_processes(args.processes, "--processes")
        )
        args.port = None if args.port is None else parse_port(args.port)
    except InputError as exc:
        parser.error(str(exc))
    if len(args.address) > 255 or any(c.isspace() for c in args.address):
        parser.error(f"--address: {args.address[:80]!r} is no address or host name")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    args = arguments(argv)
    if args.processes == 1:  # one process needs no proxy: exactly `streamlit run`
        os.execv(sys.executable, streamlit_command(args.port, args.address))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s serve: %(message)s")
    port = DEFAULT_PORT if args.port is None else args.port
    try:
        listener = listen(args.address, port)
    except OSError as exc:
        print(f"error: cannot listen on {args.address or 'every interface'} port {port}: {exc}", file=sys.stderr)
        return 2
    return asyncio.run(serve(listener, args.processes, args.address))


def streamlit_command(port: int | None, address: str, headless: bool = False) -> list[str]:
    """`streamlit run dashboard/app.py` with the options given (the others: Streamlit's, config.toml's)."""
    command = [sys.executable, "-m", "streamlit", "run", str(APP)]
    if port is not None:
        command += ["--server.port", str(port)]
    if address:
        command += ["--server.address", address]
    if headless:
        command += ["--server.headless", "true", "--browser.gatherUsageStats", "false"]
    return command


def listen(address: str, port: int) -> socket.socket:
    """The public socket, bound now (a taken port fails before any process starts), listening later."""
    host = address or None
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host or ("::" if family == socket.AF_INET6 else "0.0.0.0"), port))
    except (OSError, OverflowError) as exc:
        sock.close()
        raise OSError(str(exc)) from None
    return sock


# --- the server processes ----------------------------------------------------------------------------


@dataclass
class Child:
    """One server process as the proxy sees it."""

    index: int
    port: int
    up: bool = False  # answered its health check since it (re)started: browsers may be sent here
    websockets: int = 0  # open websockets through the proxy
    pending: dict[str, float] = field(default_factory=dict)  # browsers sent here, not connected yet
    process: subprocess.Popen | None = None
    started: float = 0.0
    restarts: int = 0

    def load(self, now: float) -> int:
        for nonce, since in list(self.pending.items()):
            if now - since > PENDING_SECONDS:
                del self.pending[nonce]
        return self.websockets + len(self.pending)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((LOOPBACK, 0))
        return sock.getsockname()[1]


def _death_signal() -> Callable[[], None] | None:
    """Linux: a function that makes a starting server process get SIGTERM when this command ends, even
    when it is killed (no orphans); None elsewhere. Looked up here: between fork and exec the child
    must not import anything."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    return lambda: prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Supervisor:
    """Starts, health-checks, restarts and stops the server processes."""

    def __init__(self, children: list[Child], folder: Path, address: str):
        self.children = children
        self.folder = folder
        self.address = address
        self.stopping = False
        self.warming: set[asyncio.Future] = set()

    def environment(self, child: Child) -> dict[str, str]:
        env = dict(os.environ)
        env[SERVE_DIR.variable] = str(self.folder)
        env[SERVE_CHILD.variable] = str(child.index)
        # Classroom mode's default follows the address browsers use (every interface: "0.0.0.0").
        env[SERVE_ADDRESS.variable] = self.address or "0.0.0.0"
        # Its greeting would name its own loopback port, which no browser should use. (Its output is this
        # command's own, not a pipe: a process whose pipe's reader was killed could not stop on SIGTERM.)
        env["STREAMLIT_LOGGER_HIDE_WELCOME_MESSAGE"] = "true"
        return env

    def start(self, child: Child) -> None:
        child.port = free_port()
        child.up = False
        child.started = time.monotonic()
        child.process = subprocess.Popen(
            streamlit_command(child.port, LOOPBACK, headless=True),
            env=self.environment(child),
            preexec_fn=_death_signal(),
        )
        log.info("server process %d starting on %s:%d (pid %d)", child.index, LOOPBACK, child.port, child.process.pid)

    async def start_all(self) -> None:
        """Every process started and healthy; RuntimeError naming the first that ended or never answered."""
        for child in self.children:
            self.start(child)
        deadline = time.monotonic() + START_SECONDS
        while not all(child.up for child in self.children):
            for child in self.children:
                code = child.process.poll()
                if code is not None:
                    raise RuntimeError(f"server process {child.index} ended with exit code {code} as it started")
                if not child.up and await healthy(child.port):
                    self.is_up(child)
            if time.monotonic() > deadline:
                raise RuntimeError(f"a server process did not answer its health check within {START_SECONDS:.0f} s")
            await asyncio.sleep(0.2)

    async def watch(self) -> None:
        """Forever: restart a process that ended (its browsers go to the others meanwhile); mark one up
        again once it answers."""
        while not self.stopping:
            await asyncio.sleep(HEALTH_SECONDS / 4 if any(not c.up for c in self.children) else HEALTH_SECONDS)
            for child in self.children:
                if self.stopping:
                    return
                code = child.process.poll() if child.process is not None else None
                if code is not None:
                    child.up = False
                    child.websockets = 0
                    child.pending.clear()
                    # Back off when it keeps ending at once (a broken install would restart in a loop).
                    wait = min(60.0, 2.0**child.restarts) if time.monotonic() - child.started < 30 else 0.0
                    log.warning(
                        "server process %d ended (exit code %s): its browsers go to the others and start afresh; "
                        "restarting it%s",
                        child.index,
                        code,
                        f" in {wait:.0f} s" if wait else "",
                    )
                    child.process = None
                    child.restarts += 1
                    await asyncio.sleep(wait)
                    if not self.stopping:
                        self.start(child)
                elif child.process is not None and not child.up:
                    if await healthy(child.port):
                        self.is_up(child)
                    elif time.monotonic() - child.started > START_SECONDS:
                        log.warning(
                            "server process %d did not answer within %.0f s: stopping it", child.index, START_SECONDS
                        )
                        child.process.kill()

    def is_up(self, child: Child) -> None:
        child.up = True
        log.info("server process %d is up", child.index)
        self.warming.add(asyncio.ensure_future(warm(child)))

    def stop(self) -> None:
        """Every process asked to end, then killed after 15 s."""
        for task in self.warming:
            task.cancel()
        self.stopping = True
        running = [c.process for c in self.children if c.process is not None and c.process.poll() is None]
        for process in running:
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        deadline = time.monotonic() + 15
        for process in running:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


# One page of the app in a throw-away session, in a process of its own (the proxy stays free of Streamlit
# and torch): a server process's first page imports torch and the project, tens of seconds on a busy
# machine, which one student per process would otherwise wait for (with one process, the teacher does).
WARM_UP = """
import asyncio, sys
from websockets.asyncio.client import connect
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

async def first_page(url):
    async with connect(url, subprotocols=["streamlit"], max_size=None) as ws:
        msg = BackMsg()
        msg.rerun_script.SetInParent()
        await ws.send(msg.SerializeToString())
        async for data in ws:
            reply = ForwardMsg()
            reply.ParseFromString(data)
            if reply.WhichOneof("type") == "script_finished":
                return

asyncio.run(asyncio.wait_for(first_page(sys.argv[1]), float(sys.argv[2])))
"""
WARM_UP_SECONDS = 300.0


async def warm(child: Child) -> None:
    """The process's first page, computed before a student asks for it (logged; a failure only costs
    the first student on that process the wait)."""
    started = time.monotonic()
    url = f"ws://{LOOPBACK}:{child.port}/_stcore/stream"
    try:
        warming = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            WARM_UP,
            url,
            str(WARM_UP_SECONDS),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, err = await warming.communicate()
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError, UnboundLocalError):
            warming.kill()
        raise
    if warming.returncode == 0:
        log.info("server process %d is warm (its first page took %.0f s)", child.index, time.monotonic() - started)
    else:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        log.warning("server process %d: its first page could not be computed ahead (%s)", child.index, last[0])


async def healthy(port: int, timeout: float = 5.0) -> bool:
    """Whether the process on `port` answers Streamlit's health check with 200."""
    try:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(LOOPBACK, port), timeout)
    except (OSError, asyncio.TimeoutError):
        return False
    try:
        writer.write(f"GET /_stcore/health HTTP/1.1\r\nHost: {LOOPBACK}:{port}\r\nConnection: close\r\n\r\n".encode())
        await writer.drain()
        line = await asyncio.wait_for(reader.readline(), timeout)
        return line.split(b" ")[1:2] == [b"200"]
    except (OSError, asyncio.TimeoutError, IndexError):
        return False
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


# --- the proxy -----------------------------------------------------------------------------------------


class Head:
    """An HTTP request's or response's head: its first line and its headers, in order."""

    def __init__(self, first: str, headers: list[tuple[str, str]]):
        self.first, self.headers = first, headers

    @classmethod
    def parse(cls, data: bytes) -> "Head":
        lines = data.decode("latin-1").split("\r\n")
        headers = []
        for line in lines[1:]:
            if not line:
                continue
            name, colon, value = line.partition(":")
            if not colon or not name or name != name.strip():
                raise ValueError(f"malformed header line {line[:60]!r}")
            headers.append((name, value.strip()))
        return cls(lines[0], headers)

    def get(self, name: str) -> str | None:
        values = [v for n, v in self.headers if n.lower() == name.lower()]
        return ", ".join(values) if values else None

    def without(self, names: set[str]) -> "Head":
        return Head(self.first, [(n, v) for n, v in self.headers if n.lower() not in names])

    def plus(self, name: str, value: str) -> "Head":
        return Head(self.first, [*self.headers, (name, value)])

    def encode(self) -> bytes:
        return (self.first + "\r\n" + "".join(f"{n}: {v}\r\n" for n, v in self.headers) + "\r\n").encode("latin-1")


async def read_head(reader: asyncio.StreamReader) -> Head | None:
    """The next head from `reader`, or None at the end of the stream; ValueError when it is too long
    or malformed."""
    try:
        data = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        if not exc.partial.strip():
            return None
        raise ValueError("the connection ended inside a head") from None
    except asyncio.LimitOverrunError:
        raise ValueError(f"a head longer than {HEAD_LIMIT} bytes") from None
    return Head.parse(data[:-4])


def cookie_of(head: Head) -> str | None:
    """The value of the proxy's cookie in a request, or None."""
    for part in (head.get("Cookie") or "").split(";"):
        name, _, value = part.strip().partition("=")
        if name == COOKIE:
            return value.strip().strip('"')
    return None


def train_target(target: str) -> int | None:
    """The process named by a `?train=s<k>-...` link in a request target, or None."""
    try:
        values = parse_qs(urlsplit(target).query).get("train", [])
    except ValueError:
        return None
    match = TRAIN_TOKEN.fullmatch(values[0].strip()) if values else None
    return int(match.group(1)) if match else None


class Proxy:
    """Sends each browser's requests and websockets to its server process (see the module's doc)."""

    def __init__(self, children: list[Child]):
        self.children = children

    def choose(self, cookie: str | None, train: int | None, websocket: bool) -> tuple[Child | None, str | None]:
        """(the process for a request, the cookie to set or None): a link's process first, then the
        cookie's, else the least loaded process that is up. None when none is up."""
        now = time.monotonic()
        up = [child for child in self.children if child.up]
        if not up:
            return None, None
        match = COOKIE_VALUE.fullmatch(cookie or "")
        current = None
        if match and int(match.group(1)) < len(self.children) and self.children[int(match.group(1))].up:
            current = self.children[int(match.group(1))]
        if train is not None and train < len(self.children) and self.children[train].up:
            if current is self.children[train]:
                self._connected(current, match.group(2), websocket)
                return current, None
            return self._assign(self.children[train], now, websocket)
        if current is not None:
            self._connected(current, match.group(2), websocket)
            return current, None
        return self._assign(min(up, key=lambda child: (child.load(now), child.index)), now, websocket)

    def _assign(self, child: Child, now: float, websocket: bool) -> tuple[Child, str]:
        nonce = secrets.token_urlsafe(12)
        if not websocket:  # it counts there until its websocket connects
            child.pending[nonce] = now
        return child, f"{child.index}.{nonce}"

    @staticmethod
    def _connected(child: Child, nonce: str, websocket: bool) -> None:
        if websocket:
            child.pending.pop(nonce, None)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One browser connection: one HTTP request (answered with Connection: close) or one websocket."""
        upstream: asyncio.StreamWriter | None = None
        try:
            try:
                head = await read_head(reader)
            except ValueError as exc:
                await respond(writer, 400, f"Bad request: {exc}.")
                return
            if head is None:
                return
            parts = head.first.split(" ")
            if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
                await respond(writer, 400, "Bad request: this server speaks HTTP/1.1.")
                return
            websocket = "websocket" in (head.get("Upgrade") or "").lower()
            child, new_cookie = self.choose(cookie_of(head), train_target(parts[1]), websocket)
            if child is None:
                await respond(writer, 503, "The dashboard's server processes are starting; try again in a moment.")
                return
            try:
                up_reader, upstream = await asyncio.open_connection(LOOPBACK, child.port, limit=HEAD_LIMIT)
            except OSError:
                await respond(writer, 502, "This server process is restarting; reload the page in a moment.")
                return
            if websocket:
                await self._websocket(head, child, new_cookie, reader, writer, up_reader, upstream)
            else:
                await self._http(head, new_cookie, reader, writer, up_reader, upstream)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass  # either side went away: nothing to answer
        finally:
            for stream in (upstream, writer):
                if stream is not None:
                    stream.close()
                    with contextlib.suppress(Exception):
                        await stream.wait_closed()

    async def _http(self, head, new_cookie, reader, writer, up_reader, upstream) -> None:
        if "chunked" in (head.get("Transfer-Encoding") or "").lower():
            await respond(writer, 411, "Send the request with a Content-Length.")
            return
        try:
            length = int(head.get("Content-Length") or 0)
            if length < 0:
                raise ValueError
        except ValueError:
            await respond(writer, 400, "Bad request: its Content-Length is no length.")
            return
        upstream.write(head.without(HOP_BY_HOP).plus("Connection", "close").encode())
        body = asyncio.ensure_future(copy(reader, upstream, length))
        try:
            while True:
                response = await read_head(up_reader)
                if response is None:
                    raise ConnectionError("the server process closed the connection")
                status = response.first.split(" ")[1:2]
                if status and status[0].startswith("1") and status[0] != "101":  # 100 Continue: the body follows
                    writer.write(response.encode())
                    continue
                break
            response = response.without(HOP_BY_HOP).plus("Connection", "close")
            if new_cookie is not None:
                response = response.plus("Set-Cookie", f"{COOKIE}={new_cookie}; Path=/; HttpOnly; SameSite=Lax")
            writer.write(response.encode())
            await copy(up_reader, writer)
        finally:
            body.cancel()
            with contextlib.suppress(BaseException):
                await body

    async def _websocket(self, head, child, new_cookie, reader, writer, up_reader, upstream) -> None:
        upstream.write(head.without({"proxy-connection", "keep-alive"}).encode())
        response = await read_head(up_reader)
        if response is None:
            raise ConnectionError("the server process closed the connection")
        if new_cookie is not None:
            response = response.plus("Set-Cookie", f"{COOKIE}={new_cookie}; Path=/; HttpOnly; SameSite=Lax")
        writer.write(response.encode())
        await writer.drain()
        child.websockets += 1
        try:
            both = [asyncio.ensure_future(copy(reader, upstream)), asyncio.ensure_future(copy(up_reader, writer))]
            await asyncio.wait(both, return_when=asyncio.FIRST_COMPLETED)
            for task in both:
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        finally:
            child.websockets = max(0, child.websockets - 1)


async def copy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, length: int | None = None) -> None:
    """Bytes from `reader` to `writer`: `length` of them, or until the end of the stream."""
    left = length
    while left is None or left > 0:
        data = await reader.read(65536 if left is None else min(65536, left))
        if not data:
            break
        writer.write(data)
        await writer.drain()
        if left is not None:
            left -= len(data)


async def respond(writer: asyncio.StreamWriter, status: int, text: str) -> None:
    reasons = {400: "Bad Request", 411: "Length Required", 502: "Bad Gateway", 503: "Service Unavailable"}
    body = (text + "\n").encode()
    writer.write(
        f"HTTP/1.1 {status} {reasons.get(status, 'Error')}\r\nContent-Type: text/plain; charset=utf-8\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
        + body
    )
    with contextlib.suppress(ConnectionError):
        await writer.drain()


# --- the whole command ------------------------------------------------------------------------------


async def serve(listener: socket.socket, processes: int, address: str) -> int:
    folder = Path(tempfile.mkdtemp(prefix="bnn-serve-"))
    children = [Child(index, 0) for index in range(processes)]
    supervisor = Supervisor(children, folder, address)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    server = None
    try:
        starting = asyncio.ensure_future(supervisor.start_all())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait([starting, stopped], return_when=asyncio.FIRST_COMPLETED)
        if stop.is_set():
            starting.cancel()
            return 0
        try:
            starting.result()
        except RuntimeError as exc:
            print(f"error: {exc}; its output is above", file=sys.stderr)
            return 1
        proxy = Proxy(children)
        server = await asyncio.start_server(proxy.handle, sock=listener, limit=HEAD_LIMIT)
        host, port = listener.getsockname()[:2]
        reach = "every interface" if not address else host
        print(
            f"Serving the dashboard from {processes} server processes on {reach}, port {port}: "
            f"http://{host if address else 'localhost'}:{port}. "
            "Ctrl-C stops them all.",
            flush=True,
        )
        watching = asyncio.ensure_future(supervisor.watch())
        await stop.wait()
        watching.cancel()
        return 0
    finally:
        log.info("stopping the server processes")
        if server is not None:
            server.close()
        supervisor.stop()
        listener.close()
        shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
