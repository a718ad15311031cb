"""A class of real browsers against one `streamlit run` (or, with --proxy-processes N, against
`python -m dashboard.serve --processes N`, as classroom_load's flag): N chromium sessions moving the Pruning
page's sliders at once, each timed to the first update and to the complete R-draw numbers.

    python -m benchmarks.browser_class                    # 10 sessions, bundled mnist-small 784-400-600-10
    python -m benchmarks.browser_class --sessions 5 --interactions 6
    python -m benchmarks.browser_class --proxy-processes 2 --out benchmarks/results/browser_class_proxy_2.md
    python -m benchmarks.browser_class --sessions 2 --protocol-sessions 8   # 2 pages timed in a class of 10
    # writes benchmarks/results/browser_class.md (--out to write elsewhere)

The speed issue's second class target: 10 browser sessions on a bundled-subset run, p95 to the first
update <= 1 s. The websocket load test (benchmarks/classroom_load.py) drives 30 sessions without a
browser; this one drives Debian's chromium through Playwright (one browser, a context per session,
asyncio), so the browser's own rendering and the page's fragments run as in a classroom. The
browser shares the machine with the server: on 2 cores its CPU is part of what a student waits for.
In a classroom each browser runs on its student's own machine; here ten of them share two cores with
the server. By default (`--browser-share group`) the server runs in its own session, so that Linux's
autogroup scheduler gives the server's group (its threads and draw processes) and the browsers' group
equal shares of the CPU when both want it, as one machine for the server and one for the class;
`--browser-share process` keeps them in one group, where ten browser processes outweigh the server
ten to one (the setting of the first measurements, 2026-11-27 02:20 and 02:46 UTC: draws starved for
180 s). `--browser-share background` starts the server in its own session as `group` does and lowers
the browsers' group (this process's autogroup, which chromium inherits) to nice 19, so that the server
gets the CPU it wants and the browsers the rest, closer to a class whose browsers run on the students'
own machines: the server is measured as a server alone on the machine, while the pages' own work
(rendering the cards) gets the leftovers, slower than a laptop would give it. Chromium raises its own
browser and GPU processes to nice -8 (seen with `ps -eo ni,comm` as root), which within one group
outweighs the server; across groups only the groups' weights count. The report says which.

Each session opens the run from a link on the Pruning page in mode prune with sampled weights
(`?run=<id>&mode=prune&weights=sample&R=10&threshold=<t>`, each session at its own threshold, so the
class asks for different (run, threshold) plans), then, after a think time of --think-seconds x
U(0.5, 1.5), presses one key on the threshold slider (two thirds of the moves) or on the R slider,
alternately right and left. Timed from the key press:
- first update: the metric cards differ from before the press (a value, or the "k of R draws" note
  on the accuracy card) and the script run is over (Streamlit's flag on the app root);
- complete: the note reads "R of R draws" for the R now set (a mode that draws once has no note).
An exception element on the page, or a wait past --timeout, counts as an error.

`--protocol-sessions K` adds K students without a browser (benchmarks/classroom/protocol_students.py:
classroom_load's websocket client browsing the same run), as students whose pages run on their own
machines: the server carries the whole class, and the chromium sessions, the ones timed, share the
cores with the server only, not with the rest of the class's pages. They start their moves when the
pages have opened.

All sessions open their links at once (timed: "open the shared link"); the moves begin when every
session has opened, so that ten pages' first renders (seconds of browser CPU each, a classroom's
laptops' work) do not starve the other pages' timers, which drive the fragments' polls.

Bounded: --interactions per session, every wait has a timeout, and the whole run stops after
--max-seconds; the server and the browser are stopped on the way out.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import random
import re
import shlex
import sys
import tempfile
import time
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from benchmarks.classroom.draws import kept_draws_at_start
from benchmarks.classroom.protocol_students import protocol_report, protocol_students, students_lines
from benchmarks.classroom.report import SERVER_SETTINGS, Report
from benchmarks.classroom.server import ProcessRow, ProxiedServers, process_table, proxy_processes
from benchmarks.classroom_load import Server, percentile
from benchmarks.dashboard_latency import CHROMIUM, CHROMIUM_ARGS, SCRIPT_IDLE, prepare_run

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
VIEWPORT = {"width": 1400, "height": 1600}
TARGET_FIRST_P95 = 1.0  # seconds (the speed issue's target for 10 browser sessions)
START_R = 10

# label -> [value, delta] of every metric card on the page
CARDS = (
    "(() => { const out = {}; for (const m of document.querySelectorAll('[data-testid=\"stMetric\"]')) {"
    " const label = m.querySelector('[data-testid=\"stMetricLabel\"]')?.innerText.trim();"
    " const value = m.querySelector('[data-testid=\"stMetricValue\"]')?.innerText ?? null;"
    " const delta = m.querySelector('[data-testid=\"stMetricDelta\"]')?.innerText ?? null;"
    " if (label) out[label] = [value, delta]; } return JSON.stringify(out); })()"
)
EXCEPTION = "document.querySelectorAll('[data-testid=\"stException\"]').length"
DRAWS_NOTE = re.compile(r"(\d+) of (\d+) draws")


@dataclass
class Measured:
    first: dict[str, list[float]] = field(default_factory=lambda: {"threshold": [], "R": []})
    complete: dict[str, list[float]] = field(default_factory=lambda: {"threshold": [], "R": []})
    opened: list[float] = field(default_factory=list)
    refined: int = 0  # moves whose first update rested on fewer than R draws
    errors: list[str] = field(default_factory=list)
    setting: dict[str, object] = field(default_factory=dict)
    load_before: tuple[float, float, float] = (math.nan,) * 3
    load_after: tuple[float, float, float] = (math.nan,) * 3
    server_cpu: float = math.nan
    script_runs: str = "not logged"  # what the server's own log says of its script runs (script_runs_line)
    browser_cpu: float = math.nan  # the chromium processes' CPU seconds from the first move to the last
    wall: float = math.nan
    # the first update split at the page's websocket frames: key press -> rerun request sent (the page),
    # request -> the run's end received (the server), that end -> the cards drawn (the page)
    split: dict[str, list[float]] = field(default_factory=lambda: {"page before": [], "server": [], "page after": []})
    # each move as (the page's Streamlit session id, key press, cards drawn) in wall-clock time, set against
    # the server's own log of its script runs after the class (server_split)
    moves: list[tuple[str | None, float, float]] = field(default_factory=list)
    server_split: dict[str, list[float]] = field(
        default_factory=lambda: {"to the run": [], "the run": [], "after the run": [], "to the run's end": []}
    )
    # --protocol-sessions K: the rest of the class over Streamlit's protocol (benchmarks.classroom)
    students: Report = field(default_factory=lambda: protocol_report(0, 1, 0.0))

    def failures(self) -> list[str]:
        """The browsers' errors, the protocol students' and their leaks: any of them fails the run."""
        return self.errors + self.students.errors + self.students.leaks


class Frames:
    """One page's websocket frames, timed as Playwright reports them: the moves' rerun requests sent (BackMsg
    rerun_script not sent by a timer: a full run's, or a fragment's whose control moved, as the Pruning page's
    body) and the ends of the runs they asked for (ForwardMsg script_finished: FINISHED_SUCCESSFULLY, or
    FINISHED_FRAGMENT_RUN_SUCCESSFULLY for a fragment's move); fragment polls are neither."""

    def __init__(self) -> None:
        self.sent: list[float] = []
        self.finished: list[float] = []
        # The fragment runs asked for and not ended, oldest first: True for a move's, False for a poll's. The
        # server runs a session's fragment requests one after the other, and a full run drops those queued.
        self.fragment_runs: deque[bool] = deque()
        self.events: list[str] = []  # sockets opened and closed, console errors: what an error row reports
        self.last_received = 0.0  # when the page last received any frame
        # The fragments' polls the page sent and the timers the server set and stopped: a session whose
        # cards stayed at "0 of R draws" (browser_class.md) says whether its page kept polling.
        self.polls: list[float] = []
        self.timers: list[str] = []
        self.session_id: str | None = None  # the server's id of this page's session (its log names runs by it)

    def watch(self, page) -> None:
        page.on("websocket", lambda socket: self._attach(socket))
        page.on("console", lambda message: self._console(message))
        page.on("crash", lambda _page: self.events.append(f"{time.perf_counter():.1f} page crashed"))
        page.on(
            "requestfailed",
            lambda request: self.events.append(
                f"{time.perf_counter():.1f} request failed: {request.url.split('/', 3)[-1][:60]} {request.failure}"
            ),
        )
        page.on(
            "response",
            lambda response: (
                self.events.append(
                    f"{time.perf_counter():.1f} HTTP {response.status}: {response.url.split('/', 3)[-1][:60]}"
                )
                if response.status >= 400
                else None
            ),
        )

    def _console(self, message) -> None:
        if message.type in ("error", "warning"):
            text = f"console {message.type}: {message.text[:160]}"
            if not any(event.endswith(text) for event in self.events[-3:]):  # a repeated message once
                self.events.append(f"{time.perf_counter():.1f} {text}")

    def _attach(self, socket) -> None:
        self.events.append(f"{time.perf_counter():.1f} socket opened")
        socket.on("framesent", self.on_sent)
        socket.on("framereceived", self.on_received)
        socket.on(
            "close",
            lambda _socket: self.events.append(
                f"{time.perf_counter():.1f} socket closed (last frame received {self.last_received:.1f})"
            ),
        )
        socket.on("socketerror", lambda error: self.events.append(f"{time.perf_counter():.1f} socket error {error}"))

    def on_sent(self, payload) -> None:
        kind = rerun_request(payload)
        if kind in ("full", "fragment move"):
            self.sent.append(time.perf_counter())
        elif kind == "poll":
            self.polls.append(time.perf_counter())
        if kind == "full":
            self.fragment_runs.clear()
        elif kind is not None:
            self.fragment_runs.append(kind == "fragment move")

    def on_received(self, payload) -> None:
        self.last_received = time.perf_counter()
        session = new_session_id(payload)
        if session:
            self.session_id = session
        ended = run_finished(payload)
        if ended == "full":
            self.finished.append(time.perf_counter())
            self.fragment_runs.clear()
        elif ended == "fragment" and self.fragment_runs and self.fragment_runs.popleft():
            self.finished.append(time.perf_counter())
        timer = timer_message(payload)
        if timer is not None:
            self.timers = (self.timers + [f"{self.last_received:.1f} {timer}"])[-4:]

    def polling(self, since: float) -> str:
        """What an error row says of the fragments' polls since `since`: how many, the last, the timers, and
        the moves' runs asked for and ended since (a page left 'running' has an ask without its end)."""
        recent = [t for t in self.polls if t >= since]
        last = f", the last at {recent[-1]:.1f}" if recent else ""
        asked = ", ".join(f"{t:.1f}" for t in self.sent if t >= since) or "none"
        ended = ", ".join(f"{t:.1f}" for t in self.finished if t >= since) or "none"
        return (
            f"{len(recent)} fragment polls sent since {since:.1f}{last}; timers: {'; '.join(self.timers) or 'none'}; "
            f"moves' runs asked at {asked}, ended at {ended}; the last frame received at {self.last_received:.1f}"
        )

    def split(self, pressed: float, drawn: float) -> tuple[float, float, float] | None:
        """(page before, server, page after) of the update drawn at `drawn` after a press at `pressed`."""
        sent = next((t for t in self.sent if pressed <= t <= drawn), None)
        done = None if sent is None else next((t for t in self.finished if sent <= t <= drawn), None)
        return None if done is None else (sent - pressed, done - sent, drawn - done)


def _parsed(payload, message_class):
    """A websocket frame as a Streamlit protobuf message, or None (a text frame, another message)."""
    if isinstance(payload, str):
        return None
    message = message_class()
    try:
        message.ParseFromString(payload)
    except Exception:  # not that message: not counted
        return None
    return message


def new_session_id(payload) -> str | None:
    """The session id a ForwardMsg new_session carries (None: another message)."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    message = _parsed(payload, ForwardMsg)
    if message is None or message.WhichOneof("type") != "new_session":
        return None
    return message.new_session.initialize.session_id or None


def script_runs_line(records: list[dict]) -> str:
    """The server's log (BNN_RERUN_LOG) in one line: its full script runs and the runs of a page's body
    alone (a fragment whose control moved), each with the CPU of their threads, and the draws computed.
    A fragment's poll is not logged."""
    runs = [r for r in records if "session" in r and "cpu" in r]
    full = [r["cpu"] for r in runs if not r.get("fragment")]
    body = [r["cpu"] for r in runs if r.get("fragment")]
    draws = sum(1 for r in records if "draw" in r)
    return (
        f"{len(full)} full runs ({sum(full):.1f} s of CPU), {len(body)} runs of a page's body alone "
        f"({sum(body):.1f} s); {draws} draws computed"
    )


def server_split(moves: list[tuple[str | None, float, float]], runs: list[dict]) -> dict[str, list[float]]:
    """Each move's first update split at the server's own log of its script runs (BNN_RERUN_LOG: the
    session, start and end in wall-clock time; full runs and the page body's fragment runs): key press ->
    the first run of that session that started after it, that run (its start to its end: what the server
    did), and its end -> the cards drawn. A move without such a run that ended before the cards were drawn
    is left out. Unlike the split at the page's frames, neither boundary waits for the browser to be
    scheduled: on two cores shared with ten pages at nice 19, a frame is seen when the page's renderer
    next runs."""
    by_session: dict[str, list[dict]] = {}
    for run in runs:
        if "session" in run and "start" in run and "end" in run:
            by_session.setdefault(run["session"], []).append(run)
    split: dict[str, list[float]] = {"to the run": [], "the run": [], "after the run": [], "to the run's end": []}
    for session, pressed, drawn in moves:
        run = next(
            (r for r in sorted(by_session.get(session or "", []), key=lambda r: r["start"]) if r["start"] >= pressed),
            None,
        )
        if run is None or run["end"] > drawn:
            continue
        split["to the run"].append(run["start"] - pressed)
        split["the run"].append(run["end"] - run["start"])
        split["after the run"].append(drawn - run["end"])
        split["to the run's end"].append(run["end"] - pressed)
    return split


def rerun_request(payload) -> str | None:
    """What a sent frame asks for: "full" (a rerun without a fragment id), "fragment move" (a fragment's, a
    control in it moved), "poll" (a fragment's, sent by its timer), None (another frame)."""
    from streamlit.proto.BackMsg_pb2 import BackMsg

    message = _parsed(payload, BackMsg)
    if message is None or message.WhichOneof("type") != "rerun_script":
        return None
    if not message.rerun_script.fragment_id:
        return "full"
    return "poll" if message.rerun_script.is_auto_rerun else "fragment move"


def timer_message(payload) -> str | None:
    """'set every S s' / 'stopped' for a fragment timer the server sets or stops (ForwardMsg auto_rerun,
    stop_auto_rerun), with the fragment id's first characters; None for any other frame."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    message = _parsed(payload, ForwardMsg)
    kind = None if message is None else message.WhichOneof("type")
    if kind == "auto_rerun":
        return f"timer of {message.auto_rerun.fragment_id[:8]} set every {message.auto_rerun.interval:g} s"
    if kind == "stop_auto_rerun":
        return f"timers stopped: {', '.join(f[:8] for f in message.stop_auto_rerun.fragment_ids)}"
    return None


def run_finished(payload) -> str | None:
    """ "full" for a full run's successful end (ForwardMsg script_finished FINISHED_SUCCESSFULLY), "fragment"
    for a fragment run's (FINISHED_FRAGMENT_RUN_SUCCESSFULLY), None for any other frame."""
    from streamlit.proto.ForwardMsg_pb2 import ForwardMsg

    message = _parsed(payload, ForwardMsg)
    if message is None or message.WhichOneof("type") != "script_finished":
        return None
    return {ForwardMsg.FINISHED_SUCCESSFULLY: "full", ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY: "fragment"}.get(
        message.script_finished
    )


def draws_note(cards_json: str) -> tuple[int, int] | None:
    """(k, R) from the accuracy card's "k of R draws" note, None without one."""
    match = DRAWS_NOTE.search(cards_json)
    return (int(match.group(1)), int(match.group(2))) if match else None


def settled(cards_json: str) -> bool:
    """The cards rest on all their R draws (or on a mode that draws once): nothing will refine them."""
    note = draws_note(cards_json)
    return note is None or note[0] >= note[1]


def session_threshold(index: int) -> float:
    """Each session's starting inclusion-probability threshold: spread over 0.30-0.80 in slider steps."""
    return round(0.30 + 0.005 * ((index * 17) % 101), 3)


async def page_text(page, limit: int = 400) -> str:
    """What the page shows, its main area's text in one line (an error row says what the student saw)."""
    try:
        text = await page.evaluate("(document.querySelector('[data-testid=\"stMain\"]') || document.body).innerText")
    except Exception as exc:  # the page itself is gone
        return f"(unreadable: {type(exc).__name__})"
    return " ".join(str(text).split())[:limit] or "(nothing)"


async def wait_until(page, predicate, timeout: float, poll: float = 0.02):
    """Poll the page's cards until predicate(cards_json, idle) holds; returns the cards' text."""
    deadline = time.perf_counter() + timeout
    while True:
        cards, idle = await page.evaluate(f"[{CARDS}, {SCRIPT_IDLE}]")
        if predicate(cards, idle):
            return cards
        if time.perf_counter() > deadline:
            raise TimeoutError(f"no update within {timeout:g} s (cards: {cards[:200]})")
        await asyncio.sleep(poll)


class OpenedAll:
    """Waits until `count` sessions have arrived (asyncio.Barrier is Python 3.11's; the project runs on 3.10)."""

    def __init__(self, count: int) -> None:
        self.left = count
        self.event = asyncio.Event()

    async def wait(self) -> None:
        self.left -= 1
        if self.left <= 0:
            self.event.set()
        await self.event.wait()


async def one_session(
    browser, url: str, run_id: str, index: int, args, measured: Measured, stop: float, opened_all: OpenedAll
) -> None:
    rng = random.Random(index)
    context = await browser.new_context(viewport=VIEWPORT)
    page = await context.new_page()
    frames = Frames()
    frames.watch(page)
    try:
        try:
            started = time.perf_counter()
            link = (
                f"{url}/pruning?run={run_id}&mode=prune&weights=sample&R={START_R}&threshold={session_threshold(index)}"
            )
            await page.goto(link, wait_until="commit")
            await wait_until(page, lambda cards, idle: idle and '"accuracy"' in cards, args.open_timeout)
            measured.opened.append(time.perf_counter() - started)
            # The student reads the opening's complete numbers before her first move, so that every move
            # starts from settled cards. Without this wait a poll refining the opening's R draws could land
            # after the first key press and count as its first update, and the wait for the move's complete
            # numbers then waited for the opening's R (two timeouts in seven classes, 2026-11-28 07:10-07:22).
            await wait_until(page, lambda cards, idle: idle and settled(cards), args.open_timeout)
        finally:
            # The moves start when every session has opened (or failed to): the opening's browser CPU
            # (parsing and first render, seconds per page) is the students' laptops' in a class, and on
            # two shared cores it starved the pages' timers that drive the fragments' polls.
            await opened_all.wait()
        sliders = {
            "threshold": page.get_by_role("slider", name=re.compile(r"^threshold on")),
            "R": page.get_by_role("slider", name=re.compile(r"^Posterior samples R")),
        }
        direction = {"threshold": 1, "R": 1}
        for _ in range(args.interactions):
            if time.perf_counter() > stop:
                return
            await asyncio.sleep(args.think_seconds * rng.uniform(0.5, 1.5))
            kind = "threshold" if rng.random() < 2 / 3 else "R"
            before, _ = await page.evaluate(f"[{CARDS}, {SCRIPT_IDLE}]")
            await sliders[kind].focus()
            pressed, pressed_wall = time.perf_counter(), time.time()
            await page.keyboard.press("ArrowRight" if direction[kind] > 0 else "ArrowLeft")
            direction[kind] = -direction[kind]
            try:
                cards = await wait_until(
                    page, lambda cards, idle, before=before: idle and cards != before, args.timeout
                )
            except TimeoutError as exc:  # say what the page showed before the press, and whether it is idle
                _, idle = await page.evaluate(f"[{CARDS}, {SCRIPT_IDLE}]")
                raise TimeoutError(
                    f"{exc}; pressed {kind} at {pressed:.1f}; before it the cards were {before[:200]}; "
                    f"the page's script {'idle' if idle else 'still running'}"
                ) from None
            drawn = time.perf_counter()
            measured.first[kind].append(drawn - pressed)
            measured.moves.append((frames.session_id, pressed_wall, pressed_wall + (drawn - pressed)))
            parts = frames.split(pressed, drawn)
            if parts is not None:
                for name, value in zip(("page before", "server", "page after"), parts):
                    measured.split[name].append(value)
            note = draws_note(cards)
            if note is not None and note[0] < note[1]:
                measured.refined += 1
                await wait_until(
                    page,
                    lambda cards, idle, wanted=note[1]: (n := draws_note(cards)) is not None and n[0] >= n[1] == wanted,
                    args.timeout,
                )
            measured.complete[kind].append(time.perf_counter() - pressed)
            if await page.evaluate(EXCEPTION):
                measured.errors.append(f"session {index}: the page shows an exception")
                return
    except Exception as exc:  # one session's failure is a row of the report, not the end of the class
        shown = await page_text(page)
        measured.errors.append(
            f"session {index} at {time.perf_counter():.1f}: {type(exc).__name__}: {str(exc)[:300]}; the page showed: "
            f"{shown}; its last events: {'; '.join(frames.events[-8:]) or 'none'}; "
            f"{frames.polling(time.perf_counter() - args.timeout)}"
        )
    finally:
        await context.close()


AUTOGROUP = Path("/proc/self/autogroup")
AUTOGROUP_ENABLED = Path("/proc/sys/kernel/sched_autogroup_enabled")


def background_browsers_refusal() -> str | None:
    """Why `--browser-share background` cannot be had here (None: it can): it needs Linux's autogroup
    scheduler on, and this process's autogroup writable."""
    try:
        enabled = AUTOGROUP_ENABLED.read_text().strip() == "1"
    except OSError:
        enabled = False
    if not enabled:
        return f"--browser-share background: needs Linux's autogroup scheduler ({AUTOGROUP_ENABLED} = 1)"
    if not os.access(AUTOGROUP, os.W_OK):
        return f"--browser-share background: cannot set this process's autogroup niceness ({AUTOGROUP})"
    return None


def lower_the_browsers_group() -> Callable[[], None]:
    """This process's autogroup (the benchmark and the browsers it launches, and whatever else shares this
    session) at nice 19; returns what puts the group's niceness back (raising a niceness back needs root:
    as another user the session stays at 19, so run the benchmark under `setsid` there)."""
    match = re.search(r"nice\s+(-?\d+)", AUTOGROUP.read_text())
    before = match.group(1) if match else "0"
    AUTOGROUP.write_text("19")

    def restore() -> None:
        try:
            AUTOGROUP.write_text(before)
        except OSError:
            pass

    return restore


CHROMIUM_NAMES = ("chrom", "headless")  # what chromium's processes are called in /proc (the name's start)


def chromium_cpu(root: int, table: dict[int, ProcessRow] | None = None) -> dict[int, float]:
    """Process id -> user + system CPU seconds so far of the live chromium processes below `root`: the
    browser, its GPU and utility processes and each page's renderer. `table`: process_table() (read now
    when not given)."""
    table = process_table() if table is None else table

    def below_root(pid: int) -> bool:
        for _ in range(64):  # a bounded walk up the parents: a table read while processes end can loop
            if pid == root:
                return True
            if pid <= 1 or pid not in table:
                return False
            pid = table[pid].parent
        return False

    return {
        pid: row.cpu
        for pid, row in table.items()
        if pid != root and row.name.startswith(CHROMIUM_NAMES) and below_root(table[pid].parent)
    }


class BrowserCpu:
    """The browsers' CPU over the moves: sampled every quarter second (a page's renderer ends with its
    session, taking its count with it), from the moment every session has opened to the last move."""

    def __init__(self) -> None:
        self.start: dict[int, float] | None = None
        self.last: dict[int, float] = {}

    async def follow(self, opened_all: OpenedAll) -> None:
        while True:  # /proc is read in a thread: the loop that drives the pages does not wait for it
            now = await asyncio.to_thread(chromium_cpu, os.getpid())
            if self.start is None and opened_all.event.is_set():
                self.start = now
            self.last.update(now)
            await asyncio.sleep(0.25)

    def seconds(self) -> float:
        if self.start is None:
            return math.nan
        return sum(seconds - self.start.get(pid, 0.0) for pid, seconds in self.last.items())


async def drive(url: str, run_id: str, args, measured: Measured) -> None:
    from playwright.async_api import async_playwright

    restore_group = lower_the_browsers_group() if args.browser_share == "background" else (lambda: None)

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        browser_cpu = BrowserCpu()
        try:
            stop = time.perf_counter() + args.max_seconds
            opened_all = OpenedAll(args.sessions)
            follower = asyncio.ensure_future(browser_cpu.follow(opened_all))
            try:
                await asyncio.gather(
                    *(
                        one_session(browser, url, run_id, i, args, measured, stop, opened_all)
                        for i in range(args.sessions)
                    ),
                    protocol_students(url, run_id, measured.students, opened_all.event, args.max_seconds),
                )
            finally:
                follower.cancel()
            measured.browser_cpu = browser_cpu.seconds()
        finally:
            await browser.close()
            restore_group()


def serving(proxy: int) -> str:
    """What serves the class, as the report's title and setting say it."""
    return f"`python -m dashboard.serve --processes {proxy}` (one address)" if proxy else "one `streamlit run`"


def start_server(args, env: dict[str, str], work: Path) -> Server | ProxiedServers:
    """One `streamlit run`, or with --proxy-processes N the proxy and its N processes (classroom_load's
    ProxiedServers); --browser-share group starts either in a session of its own (see the docstring)."""
    own_session = args.browser_share in ("group", "background")
    if args.proxy_processes:
        return ProxiedServers(env, work / "serve.log", args.proxy_processes, own_session=own_session)
    return Server(env, work / "streamlit.log", own_session=own_session)


def run(args) -> Measured:
    measured = Measured(
        setting={
            "serving": serving(args.proxy_processes),
            "sessions": args.sessions,
            "interactions": args.interactions,
            "think": args.think_seconds,
            "dataset": args.dataset,
            "network": "784-" + args.hidden.replace(",", "-") + "-10",
            "epochs": args.epochs,
            "browser share": args.browser_share,
            "protocol students": args.protocol_sessions,
        },
        students=protocol_report(args.protocol_sessions, args.interactions, args.think_seconds),
    )
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bnn-browser-class-") as work:
        cache_dir = args.cache_dir or Path(os.environ.get("BNN_CACHE_DIR") or Path(work) / "cache")
        rerun_log = Path(work) / "reruns.jsonl"  # the server's own record of its script runs (dashboard/app.py)
        env = dict(
            os.environ, BNN_CACHE_DIR=str(cache_dir), BNN_OFFLINE="1", BNN_CLASSROOM="1", BNN_RERUN_LOG=str(rerun_log)
        )
        env.setdefault("OMP_NUM_THREADS", "1")
        # the server's settings (a setting left unset: the app's default)
        measured.setting.update({name: env.get(name, "(unset)") for name in SERVER_SETTINGS})
        hidden = tuple(int(w) for w in args.hidden.split(",") if w.strip())
        run_id = prepare_run(args.dataset, hidden, args.epochs, env)
        measured.setting["run"] = run_id
        measured.setting["kept draws"] = kept_draws_at_start(cache_dir, args.kept_draws)
        measured.load_before = os.getloadavg()
        server = start_server(args, env, Path(work))
        try:
            server.wait_healthy()
            cpu_start = server.cpu_seconds()  # with the proxy: its processes' and its own
            asyncio.run(drive(server.url, run_id, args, measured))
            measured.server_cpu = server.cpu_seconds() - cpu_start
            log_text = server.log.read_text()  # the proxy's log holds its processes' output too
            lines = rerun_log.read_text().splitlines() if rerun_log.exists() else []
            runs = [json.loads(line) for line in lines if line.strip()]
            measured.server_split = server_split(measured.moves, [r for r in runs if "session" in r])
            measured.script_runs = script_runs_line(runs)
            if "Traceback" in log_text:
                tail = log_text[log_text.index("Traceback") :][:1500]
                measured.errors.append(f"the server logged a traceback:\n```\n{tail}\n```")
        finally:
            server.stop()
            measured.load_after = os.getloadavg()
            measured.wall = time.monotonic() - started
    return measured


def _row(name: str, values: list[float]) -> str:
    ordered = sorted(values)
    if not ordered:
        return f"| {name} | 0 | - | - | - |"
    p50, p95 = percentile(ordered, 0.5), percentile(ordered, 0.95)
    return f"| {name} | {len(ordered)} | {p50:.2f} | {p95:.2f} | {ordered[-1]:.2f} |"


def report(measured: Measured, command: str, note: str = "") -> str:
    first = measured.first["threshold"] + measured.first["R"]
    complete = measured.complete["threshold"] + measured.complete["R"]
    moves = len(first)
    p95 = percentile(sorted(first), 0.95) if first else math.nan
    verdict = "not measured" if math.isnan(p95) else ("PASS" if p95 <= TARGET_FIRST_P95 else "FAIL")
    setting = ", ".join(f"{key} {value}" for key, value in measured.setting.items())
    students = measured.students.scenario.sessions
    beside = f" and {students} protocol students" if students else ""
    lines = [
        f"# A class of browsers: N chromium sessions{beside} on {measured.setting.get('serving', serving(0))}",
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        f"Setting: {setting}; mode prune with sampled weights, R starting at {START_R}; headless chromium "
        "(one browser, a context per session) and the server on the same 2-core machine. The sessions open "
        "their links at once and begin their moves when all have opened.",
        "",
        "| interaction | n | p50 (s) | p95 (s) | max (s) |",
        "|---|---|---|---|---|",
        _row("key press -> first update of the cards (threshold or R)", first),
        _row("key press -> complete R-draw numbers", complete),
        _row("threshold: first update", measured.first["threshold"]),
        _row("threshold: complete", measured.complete["threshold"]),
        _row("R: first update", measured.first["R"]),
        _row("R: complete", measured.complete["R"]),
        _row("open the shared link -> cards drawn", measured.opened),
        "",
        "The first update split at the page's websocket frames (moves whose rerun, of the whole page or of its "
        "body, was seen; the rest were answered without one):",
        "",
        "| part of the first update | n | p50 (s) | p95 (s) | max (s) |",
        "|---|---|---|---|---|",
        _row("key press -> rerun request sent (the page)", measured.split["page before"]),
        _row("rerun request -> the run's end received (the server)", measured.split["server"]),
        _row("the run's end -> cards drawn (the page)", measured.split["page after"]),
        "",
        "The same split at the server's own log of its script runs (wall-clock times written by the server as"
        " each run of the whole page or of its body starts and ends; moves whose run was logged):",
        "",
        "| part of the first update | n | p50 (s) | p95 (s) | max (s) |",
        "|---|---|---|---|---|",
        _row(
            "key press -> the server's run starts (the page, its socket, Streamlit's dispatch)",
            measured.server_split["to the run"],
        ),
        _row("the server's script run", measured.server_split["the run"]),
        _row("the run's end -> cards drawn (its messages sent, the page)", measured.server_split["after the run"]),
        _row(
            "key press -> the server's run ends (the two parts before the cards drawn)",
            measured.server_split["to the run's end"],
        ),
        "",
        *students_lines(measured.students),
        f"- target: p95 to the first update <= {TARGET_FIRST_P95:g} s: **{verdict}** (p95 {p95:.2f} s)"
        + (f", the {moves} moves of the chromium pages" if students else ""),
        f"- moves whose first update rested on fewer than R draws (refined in place): {measured.refined}",
        f"- errors: {len(measured.errors)}" + "".join(f"\n  - {error}" for error in measured.errors[:10]),
        f"- server CPU during the class: {measured.server_cpu:.1f} s; wall time {measured.wall:.0f} s "
        "(training or finding the run included)",
        f"- the server's script runs (its own log, the class's opening included): {measured.script_runs}",
        f"- the browsers' CPU from the first move to the last: {measured.browser_cpu:.1f} s for {moves} moves "
        f"({measured.browser_cpu / max(moves, 1):.3f} s a move; every chromium process, sampled every 0.25 s)",
        "- load average (1/5/15 min) before {:.2f}/{:.2f}/{:.2f}, after {:.2f}/{:.2f}/{:.2f}".format(
            *measured.load_before, *measured.load_after
        ),
        *([f"- {note}"] if note else []),
        "",
    ]
    return "\n".join(lines)


# (flag, kind, low, high): every number from the command line is checked by core.validate before the
# server starts or a run is trained.
BOUNDS = (
    ("sessions", "whole", 1, 60),
    ("protocol_sessions", "whole", 0, 59),
    ("interactions", "whole", 1, 200),
    ("think_seconds", "real", 0.0, 60.0),
    ("epochs", "whole", 1, 100),
    ("timeout", "real", 1.0, 600.0),
    ("open_timeout", "real", 1.0, 1800.0),
    ("max_seconds", "real", 10.0, 3600.0),
)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from core import validate
    from core.errors import BNNError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", default="10")
    parser.add_argument(
        "--protocol-sessions",
        default="0",
        help="this many more students over Streamlit's protocol, no browser (benchmarks.classroom's client), "
        "as students whose pages run on their own machines; the chromium sessions are the ones timed",
    )
    parser.add_argument("--interactions", default="12", help="key presses per session")
    parser.add_argument("--think-seconds", default="1.0", help="mean pause before each key press")
    parser.add_argument("--dataset", default="mnist-small", choices=["mnist-small", "mnist"])
    parser.add_argument("--hidden", default="400,600", help="hidden widths of the browsed run")
    parser.add_argument("--epochs", default="1", help="epochs of the browsed run")
    parser.add_argument("--timeout", default="60", help="seconds one wait for an update may take")
    parser.add_argument("--open-timeout", default="300", help="seconds a session may take to open its link")
    parser.add_argument("--max-seconds", default="600", help="bound on the whole class")
    parser.add_argument(
        "--browser-share",
        default="group",
        choices=["group", "process", "background"],
        help="group: the server and the browsers as two equal scheduling groups; process: one group, "
        "shared per process; background: two groups, the browsers' at nice 19 (see the module docstring)",
    )
    parser.add_argument(
        "--proxy-processes",
        default="0",
        help="serve the class with `python -m dashboard.serve --processes N` (what the app ships: one address, "
        "a proxy keeping each browser on one of N processes) instead of one `streamlit run` (0, the default); "
        "as benchmarks.classroom_load's flag",
    )
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument(
        "--kept-draws",
        action="store_true",
        help="keep the draws earlier classes left on disk (<cache-dir>/draws); by default they are emptied first",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "browser_class.md")
    parser.add_argument("--note", default="", help="a line about the machine's load, written under the table")
    args = parser.parse_args(argv)
    try:
        args.proxy_processes = proxy_processes(args.proxy_processes)  # classroom_load's rule, shared
        for name, kind, low, high in BOUNDS:
            flag = "--" + name.replace("_", "-")
            check = validate.whole_number if kind == "whole" else validate.real_number
            setattr(args, name, check(getattr(args, name), flag, low, high))
        widths = [validate.whole_number(w, "--hidden", 1, 4096) for w in args.hidden.split(",")]
    except BNNError as exc:
        parser.error(str(exc))
    if args.sessions + args.protocol_sessions > 60:
        parser.error(
            f"--sessions and --protocol-sessions: at most 60 students in all, got "
            f"{args.sessions} + {args.protocol_sessions}"
        )
    if not 1 <= len(widths) <= 4:
        parser.error("--hidden: give 1 to 4 widths separated by commas, e.g. 400,600")
    if args.browser_share == "background" and (why := background_browsers_refusal()):
        parser.error(why)
    return args


def command_line(argv: list[str]) -> str:
    """The command as the report gives it: quoted to be pasted again, without --note (its text is
    written under the table, and it changes nothing measured)."""
    kept, skip = [], False
    for word in argv:
        if skip:
            skip = False
        elif word == "--note":
            skip = True
        elif not word.startswith("--note="):
            kept.append(word)
    return shlex.join(["python", "-m", "benchmarks.browser_class", *kept])


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    measured = run(args)
    text = report(measured, command_line(argv if argv is not None else sys.argv[1:]), args.note)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 1 if measured.failures() else 0


if __name__ == "__main__":
    sys.exit(main())
