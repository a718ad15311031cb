"""The reverse proxy of `python -m dashboard.serve`: which server process each request goes to, and the
bytes passed through (HTTP/1.1, one request per connection, and websockets). Plain asyncio: no Streamlit,
no torch (see dashboard/serve.py for the whole command)."""

from __future__ import annotations

import asyncio
import contextlib
import re
import secrets
import time
from dataclasses import dataclass, field
from subprocess import Popen
from urllib.parse import parse_qs, urlsplit

LOOPBACK = "127.0.0.1"  # the server processes listen here only; browsers reach them through the proxy
COOKIE = "bnn_server"
COOKIE_VALUE = re.compile(r"(\d{1,3})\.([A-Za-z0-9_-]{8,64})")
TRAIN_TOKEN = re.compile(r"s(\d{1,3})-[A-Za-z0-9_-]+")  # dashboard.worker's tokens behind this proxy
HEAD_LIMIT = 64 * 1024  # bytes of a request's or response's head (Streamlit's are a few hundred)
PENDING_SECONDS = 60.0  # a browser sent to a process counts there until it connects, or this long
HOP_BY_HOP = {"connection", "keep-alive", "proxy-connection", "te", "trailer", "upgrade", "transfer-encoding"}


@dataclass
class Child:
    """One server process as the proxy sees it."""

    index: int
    port: int
    up: bool = False  # answered its health check since it (re)started: browsers may be sent here
    websockets: int = 0  # open websockets through the proxy
    pending: dict[str, float] = field(default_factory=dict)  # browsers sent here, not connected yet
    process: Popen | None = None
    started: float = 0.0
    restarts: int = 0

    def load(self, now: float) -> int:
        for nonce, since in list(self.pending.items()):
            if now - since > PENDING_SECONDS:
                del self.pending[nonce]
        return self.websockets + len(self.pending)


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
        # The connections' handlers while they run. asyncio.start_server's protocol drops its task once the
        # browser's connection is lost, and the event loop keeps only weak references: a handler waiting
        # for its streams to close was collected as garbage mid-await ("Task was destroyed but it is
        # pending!" and "coroutine ignored GeneratorExit" in the log: 4 of 8 short runs of
        # benchmarks.browser_class --proxy-processes 2, 2-3 sessions; none in 5 with this set).
        self.handlers: set[asyncio.Task] = set()

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
        task = asyncio.current_task()
        if task is not None:
            self.handlers.add(task)
            task.add_done_callback(self.handlers.discard)
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
