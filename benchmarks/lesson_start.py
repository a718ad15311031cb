"""How soon a class sees a shipped lesson's first picture, through a real browser on a fresh server.

    python -m benchmarks.lesson_start                  # all shipped lessons, 2 repetitions each
    python -m benchmarks.lesson_start --lessons gaps --repetitions 1
    # writes benchmarks/results/lesson_start.md (--out to write elsewhere)

For each lesson and repetition: a new, empty run store ($BNN_CACHE_DIR of a temporary folder), a new
`streamlit run dashboard/app.py` on 127.0.0.1 (benchmarks/classroom/server.py), and Debian's chromium
through Playwright. The bundled runs (assets/lessons/store) are placed in the store at the server's
first start; nothing is trained. Timed from `page.goto`:

- "panel": `?lesson=NAME` until the lesson panel shows "Step 1 of N";
- "first picture": until the first chart of the main area of the lesson's first step whose page draws
  one is drawn. When that is step 1, timed from opening `?lesson=NAME` (the class's first visitor on
  the cold server); first-steps opens on the Train page, a form without a chart, so there it is timed
  from going on to `?lesson=NAME&step=K` in the same tab. Then again from `?lesson=NAME&step=K` in a
  new tab (a second visitor).

The server's start (until its health check answers) is reported apart. The store is checked after
each visit: it must hold exactly the bundled runs (no training started). The table records the
machine's load average: on a shared machine the absolute times are inflated.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.classroom.server import Server

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1400, "height": 1800}
TARGET_SECONDS = 5.0  # the first picture a class sees, from opening the lesson's link
# The pages that draw a chart once their run is there (Train is a form; the Glossary is text).
CHART_PAGES = ("inclusion", "pruning", "uncertainty", "compare", "playground")

MAIN_CHARTS = (
    'document.querySelectorAll(\'[data-testid="stMain"] .vega-embed svg,'
    ' [data-testid="stMain"] .vega-embed canvas, [data-testid="stMain"] [data-testid="stImage"] img\').length'
)


def first_chart_step(name: str) -> int:
    """The number of the lesson's first step whose page draws a chart."""
    from core.lessons import load_lesson

    lesson = load_lesson(name)
    for number, step in enumerate(lesson.steps, start=1):
        if step.page in CHART_PAGES:
            return number
    raise ValueError(f"lesson {name} has no step on a page with a chart")


def panel_visible(number: int) -> str:
    return (
        '[...document.querySelectorAll(\'[data-testid="stSidebar"] [data-testid="stCaptionContainer"]\')]'
        f".some(e => e.innerText.startsWith('Step {number} of '))"
    )


def wait_panel(page: Any, number: int, timeout_ms: float) -> None:
    page.wait_for_function(panel_visible(number), timeout=timeout_ms, polling="raf")


def wait_first_chart(page: Any, timeout_ms: float) -> None:
    page.wait_for_function(f"{MAIN_CHARTS} >= 1", timeout=timeout_ms, polling="raf")


def timed(action: Any) -> float:
    started = time.perf_counter()
    action()
    return time.perf_counter() - started


@dataclass
class Visit:
    lesson: str
    chart_step: int
    server_start: float = math.nan
    panel: float = math.nan
    first_picture: float = math.nan  # the first visitor, on the cold server
    second_visitor: float = math.nan
    trained: list[str] = field(default_factory=list)  # runs in the store that are not bundled
    error: str = ""


def store_runs(cache: Path) -> set[str]:
    from core.runs.store import RunStore

    store = RunStore(cache)
    return {run_id for run_id in store.run_ids() if store.exists(run_id)}


def visit(browser: Any, name: str, timeout_ms: float) -> Visit:
    """One lesson on a fresh server over a fresh empty store."""
    from core.runs.bundled import bundled_run_ids

    measured = Visit(lesson=name, chart_step=first_chart_step(name))
    bundled = set(bundled_run_ids())
    with tempfile.TemporaryDirectory(prefix="bnn-lesson-start-") as folder:
        cache = Path(folder)
        env = dict(os.environ, BNN_CACHE_DIR=str(cache), BNN_OFFLINE="1", BNN_LESSON_RUNS="1")
        started = time.perf_counter()
        server = Server(env, cache / "streamlit.log")
        try:
            server.wait_healthy(timeout=300)
            measured.server_start = time.perf_counter() - started
            page = browser.new_page(viewport=VIEWPORT)
            address = f"{server.url}/?lesson={name}&step={measured.chart_step}"
            opened = time.perf_counter()
            page.goto(f"{server.url}/?lesson={name}")
            wait_panel(page, 1, timeout_ms)
            measured.panel = time.perf_counter() - opened
            if measured.chart_step == 1:  # the link's own page draws the picture: timed from opening it
                wait_first_chart(page, timeout_ms)
                measured.first_picture = time.perf_counter() - opened
            else:  # step 1 is a form: the picture is the step K page, timed from going there
                measured.first_picture = timed(lambda: (page.goto(address), wait_first_chart(page, timeout_ms)))
            page.close()
            other = browser.new_page(viewport=VIEWPORT)
            measured.second_visitor = timed(lambda: (other.goto(address), wait_first_chart(other, timeout_ms)))
            other.close()
            measured.trained = sorted(store_runs(cache) - bundled)
        except Exception as exc:  # a timeout or a dead server is a row of the report, not a traceback
            measured.error = f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            server.stop()
    return measured


def seconds(value: float) -> str:
    return "—" if math.isnan(value) else f"{value:.2f}"


def report(visits: list[Visit], load_before: tuple, load_after: tuple, command: str) -> str:
    loads = "/".join(f"{v:.2f}" for v in load_before), "/".join(f"{v:.2f}" for v in load_after)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    lines = [
        "# A shipped lesson's first picture (generated)",
        "",
        f"Generated by `{command}` (benchmarks/lesson_start.py) on {stamp};",
        f"{os.cpu_count()} CPU cores, load average (1/5/15 min) before {loads[0]}, after {loads[1]}: the machine is",
        "shared and loaded, so these times are upper bounds of what a quiet machine shows.",
        "",
        "Each row: a fresh server over an empty run store; the lesson's bundled runs are placed in the store at",
        "its first start. *panel*: from opening `?lesson=NAME` until its panel shows step 1. *first picture*: until",
        "the first chart of step K (the lesson's first step whose page draws one) is drawn, timed from opening",
        "`?lesson=NAME` when K = 1, else from going on to `?lesson=NAME&step=K` (first-steps opens on the Train",
        "form). *second visitor*: `?lesson=NAME&step=K` in a new tab. *trained*: runs in the store that the bundle",
        f"did not bring (must be none). Target: first picture within {TARGET_SECONDS:g} s.",
        "",
        "| lesson | step K (page) | server start s | panel s | first picture s | second visitor s | trained "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    from core.lessons import load_lesson

    for v in visits:
        page = load_lesson(v.lesson).step(v.chart_step).page
        if v.error:
            verdict = f"error: {v.error}"
        else:
            verdict = "PASS" if v.first_picture <= TARGET_SECONDS and not v.trained else "FAIL"
        lines.append(
            f"| {v.lesson} | {v.chart_step} ({page}) | {seconds(v.server_start)} | {seconds(v.panel)} | "
            f"{seconds(v.first_picture)} | {seconds(v.second_visitor)} | {', '.join(v.trained) or 'none'} | {verdict} |"
        )
    lines += [
        "",
        "prior-sparsity's first chart step is the Playground, which fits its own small network live in the",
        "page (no run is trained or stored); its first picture is that fit's first frame.",
        "",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    from core.lessons import lesson_names

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lessons", default=",".join(lesson_names()), help="comma-separated lesson names")
    parser.add_argument("--repetitions", type=int, default=2, help="fresh servers per lesson (1-10)")
    parser.add_argument("--timeout", type=float, default=180.0, help="seconds each wait may take (1-1800)")
    parser.add_argument("--out", type=Path, default=RESULTS / "lesson_start.md")
    args = parser.parse_args(argv)
    from core import validate
    from core.errors import InputError

    try:
        names = [validate.one_of(name.strip(), "--lessons", lesson_names()) for name in args.lessons.split(",")]
        repetitions = validate.whole_number(args.repetitions, "--repetitions", 1, 10)
        timeout = validate.real_number(args.timeout, "--timeout", 1.0, 1800.0)
    except InputError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    from playwright.sync_api import sync_playwright

    load_before = os.getloadavg()
    visits = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            for name in names:
                for _ in range(repetitions):
                    visits.append(visit(browser, name, timeout * 1000))
                    print(visits[-1], flush=True)
        finally:
            browser.close()
    command = "python -m benchmarks.lesson_start" + (f" {' '.join(argv)}" if argv else " ".join([""] + sys.argv[1:]))
    args.out.write_text(report(visits, load_before, os.getloadavg(), command.strip()))
    print(f"wrote {args.out}")
    return 0 if all(not v.error for v in visits) else 1


if __name__ == "__main__":
    raise SystemExit(main())
