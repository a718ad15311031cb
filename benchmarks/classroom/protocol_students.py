"""The rest of a class beside benchmarks.browser_class's chromium pages: students driven over Streamlit's
websocket protocol (classroom_load's client and its browsing scenario), so that a few real pages are timed
while the server carries a whole class.

In a classroom every student's page runs on the student's own machine. On this 2-core machine ten chromium
pages share the cores with the server, and what the pages measure is then mostly each other's rendering
(docs/classroom.md, "Where a browser's first update goes"). With `--protocol-sessions K` the server serves
the browsers and K more students; those K cost the machine only their protocol messages, as students whose
browsers run elsewhere. Like a browser, they send a move of a control inside the Pruning page's body as a
run of that fragment alone.
"""

from __future__ import annotations

import asyncio
import random
import time

from benchmarks.classroom.client import Session
from benchmarks.classroom.report import Report
from benchmarks.classroom.scenario import Scenario, browse

# classroom_load's kinds of an interaction, as the table names them
SLIDERS = ("threshold", "samples")
FIRST_INDEX = 1000  # the protocol students' numbers in errors, apart from the browsers' 0..N-1


def protocol_report(sessions: int, interactions: int, think_seconds: float) -> Report:
    """An empty record for `sessions` protocol students of the given pace (classroom_load's Report)."""
    scenario = Scenario(sessions=sessions, interactions=interactions, think_seconds=think_seconds)
    return Report(scenario=scenario)


async def protocol_students(url: str, run_id: str, report: Report, start: asyncio.Event, max_seconds: float) -> None:
    """The report's scenario.sessions students, each opening `run_id` from a shared link and browsing
    (classroom_load's `browse`: page switches, threshold and R moves, each timed to the first update and
    to the complete numbers); they begin when `start` is set (the browsers have opened) and stop at
    `max_seconds` from then."""
    scenario = report.scenario
    if scenario.sessions < 1:
        return
    await start.wait()
    deadline = time.monotonic() + max_seconds
    rng = random.Random(scenario.seed)
    report.started = time.time()
    tasks = []
    for offset in range(scenario.sessions):
        session = Session(FIRST_INDEX + offset, url, run_id, fragment_moves=scenario.fragment_moves)
        seeded = random.Random(rng.random())
        tasks.append(asyncio.create_task(browse(session, report, scenario, [run_id], deadline, {}, seeded)))
        await asyncio.sleep(0.1)  # students do not all click in the same millisecond
    for outcome in await asyncio.gather(*tasks, return_exceptions=True):
        if isinstance(outcome, BaseException):  # one student's failure is a line of the report
            report.errors.append(f"a protocol student: {type(outcome).__name__}: {outcome}")


def _row(label: str, summary: dict[str, float]) -> str:
    return f"| {label} | {summary['n']} | {summary['p50']:.2f} | {summary['p95']:.2f} | {summary['max']:.2f} |"


def students_lines(report: Report) -> list[str]:
    """The protocol students' part of browser_class's report: their latencies (from sending the new value
    to the server's end of the run, as classroom_load times them), errors and leaks; no lines without them."""
    if report.scenario.sessions < 1:
        return []
    lines = [
        f"The {report.scenario.sessions} protocol students beside the pages (benchmarks.classroom's client: "
        "from sending the new value to the end of the run; "
        + (
            "a move inside a fragment reruns it alone, as a browser's):"
            if report.scenario.fragment_moves
            else "their moves are runs of the whole page):"
        ),
        "",
        "| interaction | n | p50 (s) | p95 (s) | max (s) |",
        "|---|---|---|---|---|",
        _row("slider release -> first update (threshold, R)", report.summary(SLIDERS)),
        _row("slider release -> complete R-draw numbers", report.summary(SLIDERS, complete=True)),
        _row("page switch", report.summary(("page switch",))),
        _row("open a shared link", report.summary(("open link",))),
        "",
        f"- protocol students' errors: {len(report.errors)}"
        + "".join(f"\n  - {error}" for error in report.errors[:10]),
        f"- leaks (a student shown another's run, threshold or R): {len(report.leaks)}"
        + "".join(f"\n  - {leak}" for leak in report.leaks[:10]),
        "",
    ]
    return lines
