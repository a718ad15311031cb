"""The server under test: `streamlit run dashboard/app.py` on 127.0.0.1 and a free port, with its own
run store (the browsed runs trained into it first when missing)."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

from benchmarks.classroom.serving import HOST, free_port, wait_until_healthy

if TYPE_CHECKING:
    from benchmarks.classroom.scenario import Scenario

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "dashboard" / "app.py"


# --- the server --------------------------------------------------------------------------------


def prepare_runs(scenario: Scenario, env: dict[str, str]) -> list[str]:
    """Train (or find cached) the runs the class browses; returns their ids."""
    if scenario.preset:
        configs = (
            f"[dataclasses.replace(get_preset({scenario.preset!r}), seed=s) for s in range({scenario.browsed_runs})]"
        )
    else:
        configs = (
            f"[RunConfig(dataset={scenario.dataset!r}, hidden={tuple(scenario.hidden)!r}, seed=s, "
            f"train={{'epochs': {scenario.train_epochs}}}) for s in range({scenario.browsed_runs})]"
        )
    code = (
        "import dataclasses, json, sys, torch; torch.set_num_threads(1)\n"
        "from core.runs import RunConfig, get_preset, train_run\n"
        f"ids = [train_run(config).run_id for config in {configs}]\n"
        "print(json.dumps(ids))\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"training the browsed runs failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


# `streamlit run`, with every thread of the server writing one JSON line to $BNN_THREAD_LOG as it starts
# (its name: /proc shows every Python thread as "python") and as it ends (its CPU, time.thread_time):
# Streamlit starts a thread per script run and the draw workers end when their queue is empty, so most
# of the server's threads live for less than a second and /proc alone would lose them.
THREAD_LOG_PATCH = """
import json, os, sys, threading, time

def _write(record):
    if not os.environ.get("BNN_THREAD_LOG"):
        return
    handle = os.open(os.environ["BNN_THREAD_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(handle, (json.dumps(record) + "\\n").encode())
    finally:
        os.close(handle)

_inner = threading.Thread._bootstrap_inner

def _bootstrap_inner(self):
    _write({"tid": threading.get_native_id(), "name": self.name})
    try:
        _inner(self)
    finally:
        _write({"tid": threading.get_native_id(), "name": self.name, "cpu": time.thread_time()})

threading.Thread._bootstrap_inner = _bootstrap_inner
"""
BOOT = (
    THREAD_LOG_PATCH
    + """
from streamlit.web.cli import main
sys.argv = ["streamlit", *sys.argv[1:]]
main(prog_name="streamlit")
"""
)


def stop_process(process: subprocess.Popen, log_handle, seconds: float) -> None:
    """SIGTERM, SIGKILL after `seconds`, then close the process's log file."""
    process.terminate()
    try:
        process.wait(seconds)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    log_handle.close()


class Server:
    """`streamlit run dashboard/app.py` on 127.0.0.1:<free port>, stopped on exit."""

    def __init__(self, env: dict[str, str], log: Path, own_session: bool = False):
        """`own_session`: start the server in a new session, so that Linux's autogroup scheduler shares the
        CPU between it (its threads and children together) and this process's group as two equals,
        whatever the count of processes in each (benchmarks.browser_class: ten browsers beside it)."""
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = log
        self.thread_log = Path(env.get("BNN_THREAD_LOG") or os.devnull)
        self._handle = open(log, "w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-c",
                BOOT,
                "run",
                str(APP),
                "--server.headless",
                "true",
                "--server.port",
                str(self.port),
                "--server.address",
                HOST,
                "--browser.gatherUsageStats",
                "false",
            ],
            cwd=ROOT,
            env=env,
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )

    def wait_healthy(self, timeout: float = 120) -> None:
        wait_until_healthy(self.url, self.process, self.log, timeout)

    def memory_mb(self) -> tuple[float, float]:
        """(resident, peak resident) memory of the server process in MB, from /proc."""
        values = {}
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, amount = line.split(":", 1)
                    values[key] = float(amount.split()[0]) / 1024
        except OSError:
            pass
        return values.get("VmRSS", float("nan")), values.get("VmHWM", float("nan"))

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (not of its training children)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")

    def thread_cpu(self) -> dict[int, float]:
        """Thread id -> user + system CPU seconds so far of the server's live threads."""
        return thread_cpu(self.process.pid)

    def draw_process_cpu(self) -> dict[int, float]:
        """Process id -> user + system CPU seconds so far of the server's live draw processes (children
        named DRAW_PROCESS_NAME: core.predict.draw_process), whose CPU is not the server process's."""
        return child_cpu(self.process.pid, DRAW_PROCESS_NAME)

    def stop(self) -> None:
        stop_process(self.process, self._handle, 20)


class ServerGroup:
    """N `streamlit run` processes serving one class, each session on one of them (session i on server
    i mod N) as a sticky proxy would place browsers: what a class gains when its script runs are shared
    out over several interpreters (each with its own lock, caches and draw processes). CPU, memory and
    draw processes are summed over the group."""

    def __init__(self, env: dict[str, str], logs: list[Path]) -> None:
        self.servers: list[Server] = []
        try:
            for log in logs:
                self.servers.append(Server(env, log))
        except BaseException:
            self.stop()
            raise
        self.thread_log = self.servers[0].thread_log
        self.urls = [server.url for server in self.servers]

    @property
    def pids(self) -> list[int]:
        return [server.process.pid for server in self.servers]

    def url_of(self, session: int) -> str:
        return self.urls[session % len(self.urls)] if session >= 0 else self.urls[0]

    def wait_healthy(self, timeout: float = 120) -> None:
        for server in self.servers:
            server.wait_healthy(timeout)

    def memory_mb(self) -> tuple[float, float]:
        values = [server.memory_mb() for server in self.servers]
        return sum(rss for rss, _ in values), sum(peak for _, peak in values)

    def cpu_seconds(self) -> float:
        return sum(server.cpu_seconds() for server in self.servers)

    def draw_process_cpu(self) -> dict[int, float]:
        return {pid: cpu for server in self.servers for pid, cpu in server.draw_process_cpu().items()}

    def stop(self) -> None:
        for server in self.servers:
            server.stop()


class _Attached(Server):
    """A server process someone else started (dashboard.serve's): read from /proc, stopped with its parent."""

    def __init__(self, pid: int, log: Path) -> None:
        self.process = SimpleNamespace(pid=pid)
        self.log = log
        self.url = ""

    def stop(self) -> None:
        pass


# --proxy-processes N of the load tests (benchmarks.classroom_load, benchmarks.browser_class): 0 is one
# `streamlit run`, no proxy; 1 to this many, `python -m dashboard.serve --processes N` (which itself allows
# up to BNN_SERVER_PROCESSES' most). The same bound as classroom_load's --servers.
MAX_PROXY_PROCESSES = 8


def proxy_processes(value: object) -> int:
    """The --proxy-processes of a load test: 0 (no proxy) or 1 to MAX_PROXY_PROCESSES. Anything else
    (a fraction, text, out of range) is one message naming the flag (core.errors.InputError), raised
    before anything starts."""
    from core import validate
    from core.errors import InputError

    try:
        number = validate.whole_number(value, "--proxy-processes", 0, MAX_PROXY_PROCESSES)
    except InputError:
        raise InputError(
            f"--proxy-processes: 1 to {MAX_PROXY_PROCESSES} processes behind `python -m dashboard.serve` "
            f"(0: one `streamlit run`, no proxy), got {validate.shown(value)}"
        ) from None
    return number


class ProxiedServers:
    """`python -m dashboard.serve --processes N` on 127.0.0.1: the class reaches one address and the
    proxy shares it out (a browser's websocket goes to the process with the fewest; the load test's
    sessions carry no cookie, each is one websocket). Memory and CPU are the N processes' and the
    proxy's together (the proxy's CPU also apart). The proxy computes each process's first page before
    the class (its warm-up), as the teacher's first page does for one server."""

    def __init__(self, env: dict[str, str], log: Path, processes: int, own_session: bool = False) -> None:
        """`own_session`: the proxy and its server processes in a new session, one scheduling group
        (Server's own_session: benchmarks.browser_class's browsers beside them)."""
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.urls = [self.url]
        self.log = log
        self.expected = processes
        self.thread_log = Path(env.get("BNN_THREAD_LOG") or os.devnull)
        self.servers: list[Server] = []
        self._handle = open(log, "w")
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "dashboard.serve",
                "--processes",
                str(processes),
                "--port",
                str(self.port),
                "--address",
                HOST,
            ],
            cwd=ROOT,
            env=env,
            stdout=self._handle,
            stderr=subprocess.STDOUT,
            start_new_session=own_session,
        )

    def wait_healthy(self, timeout: float = 300) -> None:
        """Until the proxy serves and every process has computed its first page (or said it could not)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"dashboard.serve exited with {self.process.returncode}:\n{self.log.read_text()}")
            text = self.log.read_text()
            warmed = text.count(" is warm (") + text.count("could not be computed ahead")
            if "Serving the dashboard" in text and warmed >= self.expected:
                break
            time.sleep(0.5)
        else:
            raise RuntimeError(f"dashboard.serve did not get ready within {timeout:g} s:\n{self.log.read_text()}")
        wait_until_healthy(self.url, self.process, self.log, 30)
        children = Path(f"/proc/{self.process.pid}/task/{self.process.pid}/children").read_text().split()
        self.servers = [_Attached(int(pid), self.log) for pid in children]

    @property
    def pids(self) -> list[int]:
        return [server.process.pid for server in self.servers]

    def url_of(self, session: int) -> str:
        return self.url

    def memory_mb(self) -> tuple[float, float]:
        values = [server.memory_mb() for server in [*self.servers, _Attached(self.process.pid, self.log)]]
        return sum(rss for rss, _ in values), sum(peak for _, peak in values)

    def proxy_memory_mb(self) -> tuple[float, float]:
        return _Attached(self.process.pid, self.log).memory_mb()

    def proxy_cpu_seconds(self) -> float:
        return _Attached(self.process.pid, self.log).cpu_seconds()

    def cpu_seconds(self) -> float:
        return sum(server.cpu_seconds() for server in self.servers) + self.proxy_cpu_seconds()

    def draw_process_cpu(self) -> dict[int, float]:
        return {pid: cpu for server in self.servers for pid, cpu in server.draw_process_cpu().items()}

    def stop(self) -> None:
        stop_process(self.process, self._handle, 60)  # the proxy stops its server processes first


def thread_cpu(pid: int) -> dict[int, float]:
    """Thread id -> user + system CPU seconds so far of process `pid`'s live threads (/proc/<pid>/task)."""
    tick = os.sysconf("SC_CLK_TCK")
    threads: dict[int, float] = {}
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return threads
    for task in tasks:
        try:
            fields = (task / "stat").read_text().rsplit(")", 1)[1].split()
            threads[int(task.name)] = (int(fields[11]) + int(fields[12])) / tick
        except (OSError, ValueError, IndexError):
            continue  # the thread ended while read
    return threads


DRAW_PROCESS_NAME = "bnn-draws"  # core.predict.draw_process.PROCESS_NAME (the benchmark does not import core)


@dataclasses.dataclass(frozen=True)
class ProcessRow:
    """One process as /proc/<pid>/stat gives it: its name, its parent and its CPU seconds so far."""

    name: str
    parent: int
    cpu: float


def process_table() -> dict[int, ProcessRow]:
    """Process id -> ProcessRow of every live process (/proc; one that ends while read is left out)."""
    tick = os.sysconf("SC_CLK_TCK")
    table: dict[int, ProcessRow] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            name, rest = (entry / "stat").read_text().split(" (", 1)[1].rsplit(")", 1)
            fields = rest.split()
            table[int(entry.name)] = ProcessRow(name, int(fields[1]), (int(fields[11]) + int(fields[12])) / tick)
        except (OSError, ValueError, IndexError):
            continue  # ended while read
    return table


def child_cpu(parent: int, name: str) -> dict[int, float]:
    """Process id -> user + system CPU seconds so far of `parent`'s live children called `name` (/proc)."""
    return {pid: row.cpu for pid, row in process_table().items() if row.name == name and row.parent == parent}


class ThreadCpu:
    """Each server thread's CPU over an interval: /proc at its start and end for the threads alive then,
    the thread log (BOOT) for the threads that ended in between, and the log's names."""

    def __init__(self, pids: list[int], log: Path) -> None:
        self.pids, self.log = list(pids), log
        self.start: dict[int, float] = {}
        self.end: dict[int, float] = {}
        self.offset = 0  # the log's length at the interval's start: threads that ended before are not in it

    def _threads(self) -> dict[int, float]:
        return {tid: cpu for pid in self.pids for tid, cpu in thread_cpu(pid).items()}

    def begin(self) -> None:
        self.start = self._threads()
        try:
            self.offset = len(self.log.read_bytes())
        except OSError:
            self.offset = 0

    def finish(self) -> None:
        self.end = self._threads()

    def used(self) -> tuple[dict[int, float], dict[int, str]]:
        """(thread id -> CPU seconds in the interval, thread id -> name) of the threads that used some."""
        names: dict[int, str] = {pid: "MainThread" for pid in self.pids}
        final = dict(self.end)
        try:
            text = self.log.read_bytes()
        except OSError:
            text = b""
        for at, line in _lines_at(text):
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line cut short as the server stopped
            names[record["tid"]] = record["name"]
            if "cpu" in record and at >= self.offset and record["tid"] not in self.end:  # ended in the interval
                final[record["tid"]] = record["cpu"]
        used = {tid: seconds - self.start.get(tid, 0.0) for tid, seconds in final.items()}
        return {tid: seconds for tid, seconds in used.items() if seconds > 0}, names


def _lines_at(text: bytes) -> list[tuple[int, bytes]]:
    """(offset, line) of each line of `text`."""
    out, at = [], 0
    for line in text.splitlines(keepends=True):
        out.append((at, line))
        at += len(line)
    return out
