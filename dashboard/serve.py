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
The proxy (dashboard/serve_proxy.py) is plain asyncio (HTTP/1.1 and websockets passed through as
bytes): Streamlit's own server changed from tornado to starlette across the versions this project
supports, so it uses neither. It never imports Streamlit; it reads its settings through dashboard.backend.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import dataclasses
import logging
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Sequence

from core.errors import InputError

# The settings' declarations and their rules, through the dashboard's one door to core (which loads
# torch: 288 MB resident after the imports, against 25 MB with core's settings module alone).
from dashboard.backend import dashboard_settings
from dashboard.serve_proxy import (  # noqa: F401  (the proxy's names, for the tests and readers of this command)
    COOKIE,
    COOKIE_VALUE,
    HEAD_LIMIT,
    LOOPBACK,
    Child,
    Proxy,
)

MAX_SERVER_PROCESSES = dashboard_settings.MAX_SERVER_PROCESSES
SERVE_ADDRESS = dashboard_settings.SERVE_ADDRESS
SERVE_CHILD = dashboard_settings.SERVE_CHILD
SERVE_DIR = dashboard_settings.SERVE_DIR
SERVE_WARM_TOKEN = dashboard_settings.SERVE_WARM_TOKEN
SERVER_PROCESSES = dashboard_settings.SERVER_PROCESSES

log = logging.getLogger("dashboard.serve")

APP = Path(__file__).resolve().parent / "app.py"
HEALTH_SECONDS = 2.0  # between health checks of a process
START_SECONDS = 180.0  # a process must answer its health check within this long of starting
DEFAULT_PORT = 8501  # Streamlit's


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
        self.warm_token = secrets.token_urlsafe(24)  # only the warm-up page carries it (never a browser)

    def environment(self, child: Child) -> dict[str, str]:
        env = dict(os.environ)
        env[SERVE_DIR.variable] = str(self.folder)
        env[SERVE_CHILD.variable] = str(child.index)
        env[SERVE_WARM_TOKEN.variable] = self.warm_token
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
        self.warming.add(asyncio.ensure_future(warm(child, self.warm_token)))

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


# The app's pages in a throw-away session, in a process of its own (the proxy stays free of Streamlit and
# torch), before a student asks for them: a server process's first page imports torch and the project, tens
# of seconds on a busy machine, which one student per process would otherwise wait for (with one process, the
# teacher does). The first page carries the warm token (?warm=): the process starts its draw processes and
# waits for them (dashboard/app.py, warm_up). Then the pages a class opens first, for the newest run: their
# modules imported, the run loaded, its default views computed.
WARM_UP = """
import asyncio, sys
from websockets.asyncio.client import connect
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

async def page(ws, query_string, page_name):
    msg = BackMsg()
    msg.rerun_script.query_string = query_string
    msg.rerun_script.page_name = page_name
    await ws.send(msg.SerializeToString())
    async for data in ws:
        reply = ForwardMsg()
        reply.ParseFromString(data)
        if reply.WhichOneof("type") == "script_finished" and reply.script_finished != reply.FINISHED_EARLY_FOR_RERUN:
            return
    raise ConnectionError("the server closed the page before its script run finished")

async def pages(url, token, names):
    async with connect(url, subprotocols=["streamlit"], max_size=None) as ws:
        await page(ws, "warm=" + token, "")
        for name in names:
            await page(ws, "", name)

token = sys.stdin.readline().strip()  # not in argv: a command line is visible to every local user
asyncio.run(asyncio.wait_for(pages(sys.argv[1], token, sys.argv[3:]), float(sys.argv[2])))
"""
WARM_UP_SECONDS = 300.0
WARM_PAGES = ("pruning", "inclusion")  # the url paths of the pages warmed after the first


async def warm(child: Child, token: str) -> None:
    """The process's first pages, computed before a student asks for them (logged; a failure only costs
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
            *WARM_PAGES,
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )
        _, err = await warming.communicate(input=token.encode() + b"\n")
    except asyncio.CancelledError:
        with contextlib.suppress(ProcessLookupError, UnboundLocalError):
            warming.kill()
        raise
    if warming.returncode == 0:
        log.info("server process %d is warm (its first pages took %.0f s)", child.index, time.monotonic() - started)
    else:
        last = err.decode("utf-8", "replace").strip().splitlines()[-1:] or ["no output"]
        log.warning("server process %d: its first pages could not be computed ahead (%s)", child.index, last[0])


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
