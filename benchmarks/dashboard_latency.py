"""The dashboard's latency targets, measured through a real browser against `streamlit run`.

    python -m benchmarks.dashboard_latency                       # mnist-small 784-400-600-10, bundled data
    BNN_DATA_DIR=DATA python -m benchmarks.dashboard_latency --dataset mnist
                                                                 # the issue's setting: full MNIST
    # writes benchmarks/results/dashboard_latency.md (--out to write elsewhere)

Starts `streamlit run dashboard/app.py` on 127.0.0.1 (a free port, headless) with its own run
store ($BNN_CACHE_DIR or --cache-dir), trains the 784-400-600-10 LBBNN run into it unless it is
cached already, and drives Debian's chromium through Playwright:

- threshold: on Pruning and on Inclusion & masks, the threshold slider is moved one step with the
  keyboard (the page's own control), alternately right and left. Timed from the key press until
  the page shows the new threshold's numbers and the script run is over: on Pruning the density
  card's text has changed; on Inclusion the caption that counts the kept weights has changed and
  the histogram's drawing differs from before. "Over" is Streamlit's own flag on the app root
  (data-test-script-state is no longer "running").
- page load: each page opened in a new tab from a link with the run in the query string, timed
  until its heading and its charts are drawn and the script run is over. The first load of each
  page (the server computes and caches) is reported apart from the cached loads.
- playground: a new tab opens the playground; timed to the first picture (the first chart drawn)
  and to the fit the page reports as done ("done: epoch N/N" in its progress bar): the default fit,
  or (Setting.playground_shortest_fit, for a test) the fit restarted with the Epochs slider at its
  minimum. Then, in a tab showing the Glossary (the app loaded, no chart on its page), the sidebar's
  Playground link is clicked: timed to the first picture.

Bounded: every wait has a timeout and the whole run stops after --max-seconds; the server and the
browser are stopped on the way out. The table records the machine's load average before and
after: on a shared machine the absolute latencies are inflated.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.classroom_load import Server, percentile

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "benchmarks" / "results"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
VIEWPORT = {"width": 1400, "height": 2000}

# The targets a teaching demo needs (a page answers before a student looks away), in seconds.
TARGETS = {"threshold_p95": 0.300, "page_load_p95": 2.0, "first_picture": 1.0, "converged_fit": 10.0}

# (path, heading, charts drawn when the page is complete). Train has no chart: its form is the page.
PAGES = (
    ("", "Train a sparse Bayesian network", 0),
    ("inclusion", "Inclusion statistics and masks", 3),
    ("pruning", "Pruning", 1),
    ("uncertainty", "Uncertainty", 2),
    ("compare", "Compare runs", 2),
    ("playground", "Playground", 1),
    ("glossary", "Glossary", 0),
)

# In-page probes. Streamlit marks the app root with the script's state; "running" while a run is under way.
SCRIPT_IDLE = (
    "(() => { const app = document.querySelector('[data-testid=\"stApp\"]');"
    " return app !== null && app.dataset.testScriptState !== 'running'; })()"
)
MAIN_CHARTS = (
    'document.querySelectorAll(\'[data-testid="stMain"] .vega-embed svg,'
    ' [data-testid="stMain"] .vega-embed canvas\').length'
)
WATCHES = {
    # the density card's value (Pruning opens in mode prune, where the threshold acts on it)
    "pruning": "(() => { const card = [...document.querySelectorAll('[data-testid=\"stMetric\"]')].find(m =>"
    " m.querySelector('[data-testid=\"stMetricLabel\"]')?.innerText.trim() === 'density');"
    " return card ? card.querySelector('[data-testid=\"stMetricValue\"]').innerText : null; })()",
    # "A keeps N weights, B keeps M." counts the weights kept at the threshold (drawn after the histogram)
    "inclusion": "(() => { const c = [...document.querySelectorAll('[data-testid=\"stCaptionContainer\"]')]"
    ".find(e => e.innerText.startsWith('A keeps ')); return c ? c.innerText : null; })()",
}
# The histogram on Inclusion: the first chart of the main area; its SVG must change with the threshold.
FIRST_CHART = (
    "(() => { const s = document.querySelector('[data-testid=\"stMain\"] .vega-embed svg');"
    " return s ? s.innerHTML : null; })()"
)


@dataclass
class Measurements:
    threshold: dict[str, list[float]] = field(default_factory=dict)  # page -> seconds per step
    first_load: dict[str, float] = field(default_factory=dict)  # page -> seconds (server computes)
    page_loads: dict[str, list[float]] = field(default_factory=dict)  # page -> cached load seconds
    fresh_server_first_page: float = math.nan
    playground_heading: list[float] = field(default_factory=list)
    first_picture: list[float] = field(default_factory=list)
    first_picture_in_app: list[float] = field(default_factory=list)  # from the sidebar link in an open tab
    converged: list[float] = field(default_factory=list)
    playground_status: list[str] = field(default_factory=list)  # the progress text when done (or last seen)
    errors: list[str] = field(default_factory=list)
    load_before: tuple[float, float, float] = (math.nan,) * 3
    load_after: tuple[float, float, float] = (math.nan,) * 3
    setting: dict[str, Any] = field(default_factory=dict)
    wall_seconds: float = math.nan


def summary(values: list[float]) -> dict[str, float]:
    """n, p50, p95 (linear interpolation between order statistics) and max; NaN when empty."""
    ordered = sorted(values)
    if not ordered:
        return {"n": 0, "p50": math.nan, "p95": math.nan, "max": math.nan}
    return {"n": len(ordered), "p50": percentile(ordered, 0.5), "p95": percentile(ordered, 0.95), "max": ordered[-1]}


def verdict(value: float, target: float) -> str:
    """PASS when measured and within the target, FAIL when over it, 'not measured' without a value."""
    if value is None or math.isnan(value):
        return "not measured"
    return "PASS" if value <= target else "FAIL"


# --- the run and the server ------------------------------------------------------------------------


def prepare_run(dataset: str, hidden: tuple[int, ...], epochs: int, env: dict[str, str]) -> str:
    """Train the LBBNN run in the store, or find it cached; returns its id."""
    code = (
        "import torch; torch.set_num_threads(1)\n"
        "from core.runs import RunConfig, train_run\n"
        f"print(train_run(RunConfig(dataset={dataset!r}, hidden={tuple(hidden)!r}, "
        f"train={{'epochs': {int(epochs)}}})).run_id)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode != 0:
        raise RuntimeError(f"training the benchmark's run failed:\n{done.stderr[-3000:]}")
    return done.stdout.strip().splitlines()[-1]


# --- the measurements -------------------------------------------------------------------------------


def wait_page_complete(page: Any, heading: str, charts: int, timeout_ms: float) -> None:
    page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=timeout_ms)
    page.wait_for_function(f"{MAIN_CHARTS} >= {int(charts)} && {SCRIPT_IDLE}", timeout=timeout_ms, polling="raf")


def settle(page: Any, timeout_ms: float, quiet_ms: int = 300) -> None:
    """Wait until the script is idle and stays idle for quiet_ms (no queued rerun follows)."""
    deadline = time.monotonic() + timeout_ms / 1000
    while time.monotonic() < deadline:
        page.wait_for_function(SCRIPT_IDLE, timeout=timeout_ms, polling="raf")
        page.wait_for_timeout(quiet_ms)
        if page.evaluate(SCRIPT_IDLE):
            return
    raise TimeoutError("the page did not settle")


def threshold_steps(
    browser: Any,
    url: str,
    run_id: str,
    path: str,
    heading: str,
    charts: int,
    repetitions: int,
    timeout_ms: float,
    pause_ms: int = 300,
) -> list[float]:
    """Seconds from a key press on the threshold slider to the page showing the new threshold."""
    watch = WATCHES[path]
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(f"{url}/{path}?run={run_id}")
        wait_page_complete(page, heading, charts, timeout_ms)
        slider = page.get_by_role("slider", name=re.compile(r"^threshold on"))
        slider.focus()
        settle(page, timeout_ms)
        # Find a step whose two ends differ in what the page shows (one slider step may keep the same
        # weights on a small net): step right until the watched text changes, then alternate.
        before = page.evaluate(watch)
        if before is None:
            raise RuntimeError(f"{path}: the watched text is not on the page")
        for _ in range(60):
            page.keyboard.press("ArrowRight")
            settle(page, timeout_ms)
            after = page.evaluate(watch)
            if after != before:
                break
        else:
            raise RuntimeError(f"{path}: 60 threshold steps changed nothing on the page")
        seconds = []
        keys = ("ArrowLeft", "ArrowRight")
        for index in range(repetitions):
            shown = page.evaluate(watch)
            chart = page.evaluate(FIRST_CHART) if path == "inclusion" else None
            started = time.perf_counter()
            page.keyboard.press(keys[index % 2])
            if path == "inclusion":
                page.wait_for_function(
                    f"([shown, chart]) => {SCRIPT_IDLE} && {watch} !== shown && {FIRST_CHART} !== chart",
                    arg=[shown, chart],
                    timeout=timeout_ms,
                    polling="raf",
                )
            else:
                page.wait_for_function(
                    f"shown => {SCRIPT_IDLE} && {watch} !== shown", arg=shown, timeout=timeout_ms, polling="raf"
                )
            seconds.append(time.perf_counter() - started)
            settle(page, timeout_ms, quiet_ms=pause_ms)
        if page.locator("[data-testid='stException']").count():
            raise RuntimeError(f"{path}: the page shows an exception")
        return seconds
    finally:
        page.close()


def page_load(browser: Any, url: str, run_id: str, path: str, heading: str, charts: int, timeout_ms: float) -> float:
    """Seconds from following a link to the page until its heading and charts are drawn, script idle."""
    page = browser.new_page(viewport=VIEWPORT)
    try:
        started = time.perf_counter()
        page.goto(f"{url}/{path}?run={run_id}", wait_until="commit")
        if path == "playground":  # its fragment reruns while it trains: wait for the picture only
            page.get_by_role("heading", name=heading, exact=True).wait_for(timeout=timeout_ms)
            page.wait_for_function(f"{MAIN_CHARTS} >= {int(charts)}", timeout=timeout_ms, polling="raf")
        else:
            wait_page_complete(page, heading, charts, timeout_ms)
        seconds = time.perf_counter() - started
        if page.locator("[data-testid='stException']").count():
            raise RuntimeError(f"{path or 'train'}: the page shows an exception")
        return seconds
    finally:
        page.close()


PROGRESS_TEXT = (
    '(() => { const p = document.querySelector(\'[data-testid="stMain"] [data-testid="stProgress"]\');'
    " return p ? p.innerText : null; })()"
)


def playground_run(
    browser: Any, url: str, timeout_ms: float, shortest_fit: bool = False
) -> tuple[float, float, float, str]:
    """Seconds from opening the playground to its heading, to the first picture and to the fit the
    page reports done, and its progress text at the end. shortest_fit: once the first picture is
    drawn, the Epochs slider goes to its minimum (the Home key), which restarts the fit with the
    fewest epochs; the fit timed to done is that one (a test's short run, not the default fit)."""
    page = browser.new_page(viewport=VIEWPORT)
    try:
        started = time.perf_counter()
        page.goto(f"{url}/playground", wait_until="commit")
        page.get_by_role("heading", name="Playground", exact=True).wait_for(timeout=timeout_ms)
        heading = time.perf_counter() - started
        page.wait_for_function(f"{MAIN_CHARTS} >= 1", timeout=timeout_ms, polling="raf")
        first = time.perf_counter() - started
        if shortest_fit:
            epochs = page.get_by_role("slider", name=re.compile(r"^Epochs"))
            epochs.wait_for(timeout=timeout_ms)
            fewest = epochs.evaluate("input => input.min")  # an <input type="range">
            epochs.focus()
            epochs.press("Home")
            # the restarted fit's progress counts to the slider's minimum
            page.wait_for_function(
                f"fewest => new RegExp('/' + fewest + '\\\\b').test({PROGRESS_TEXT} || '')",
                arg=fewest,
                timeout=timeout_ms,
                polling="raf",
            )
        try:
            page.wait_for_function(f"({PROGRESS_TEXT} || '').startsWith('done')", timeout=timeout_ms, polling=50)
            converged = time.perf_counter() - started
        except Exception:  # playwright's TimeoutError: report what the page last said
            converged = math.nan
        return heading, first, converged, page.evaluate(PROGRESS_TEXT) or ""
    finally:
        page.close()


def playground_from_sidebar(browser: Any, url: str, timeout_ms: float) -> float:
    """Seconds from clicking the sidebar's Playground link in a tab showing the Glossary (the app
    loaded, no chart on the page) to the first picture."""
    page = browser.new_page(viewport=VIEWPORT)
    try:
        page.goto(f"{url}/glossary", wait_until="commit")
        page.get_by_role("heading", name="Glossary", exact=True).wait_for(timeout=timeout_ms)
        settle(page, timeout_ms)
        started = time.perf_counter()
        page.get_by_role("link", name="Playground").first.click()
        page.get_by_role("heading", name="Playground", exact=True).wait_for(timeout=timeout_ms)
        page.wait_for_function(f"{MAIN_CHARTS} >= 1", timeout=timeout_ms, polling="raf")
        return time.perf_counter() - started
    finally:
        page.close()


@dataclass(frozen=True)
class Setting:
    dataset: str = "mnist-small"
    hidden: tuple[int, ...] = (400, 600)
    epochs: int = 1
    repetitions: int = 20
    page_loads: int = 5
    playground_runs: int = 3
    playground_shortest_fit: bool = False  # the Epochs slider at its minimum before the fit is timed to done
    timeout_seconds: float = 120.0  # one wait
    max_seconds: float = 1200.0  # the whole benchmark


def run_benchmark(setting: Setting, cache_dir: Path, work_dir: Path) -> Measurements:
    from playwright.sync_api import sync_playwright

    measured = Measurements(
        setting={
            "dataset": setting.dataset,
            "network": "-".join(["784", *map(str, setting.hidden), "10"]),
            "epochs": setting.epochs,
            "repetitions": setting.repetitions,
            "page loads": setting.page_loads,
            "playground runs": setting.playground_runs,
            **({"playground fit": "the fewest epochs"} if setting.playground_shortest_fit else {}),
        }
    )
    started = time.monotonic()
    deadline = started + setting.max_seconds
    timeout_ms = setting.timeout_seconds * 1000
    env = dict(os.environ, BNN_CACHE_DIR=str(cache_dir), BNN_OFFLINE="1")
    env.setdefault("OMP_NUM_THREADS", "1")
    run_id = prepare_run(setting.dataset, setting.hidden, setting.epochs, env)
    measured.setting["run"] = run_id
    measured.load_before = os.getloadavg()
    server = Server(env, work_dir / "streamlit.log")
    try:
        server.wait_healthy()
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            try:
                # A fresh server's first page (imports torch and the data modules): for the record.
                measured.fresh_server_first_page = page_load(browser, server.url, run_id, *PAGES[0], timeout_ms)
                for path, heading, charts in PAGES:
                    name = path or "train"
                    if time.monotonic() > deadline:
                        measured.errors.append(f"stopped at --max-seconds before the {name} page's loads")
                        break
                    try:
                        measured.first_load[name] = page_load(
                            browser, server.url, run_id, path, heading, charts, timeout_ms
                        )
                        measured.page_loads[name] = [
                            page_load(browser, server.url, run_id, path, heading, charts, timeout_ms)
                            for _ in range(setting.page_loads)
                            if time.monotonic() < deadline
                        ]
                    except Exception as exc:
                        measured.errors.append(f"page load {name}: {type(exc).__name__}: {exc}")
                for path, heading, charts in PAGES:
                    if path not in WATCHES:
                        continue
                    if time.monotonic() > deadline:
                        measured.errors.append(f"stopped at --max-seconds before the {path} threshold steps")
                        break
                    try:
                        measured.threshold[path] = threshold_steps(
                            browser, server.url, run_id, path, heading, charts, setting.repetitions, timeout_ms
                        )
                    except Exception as exc:
                        measured.errors.append(f"threshold on {path}: {type(exc).__name__}: {exc}")
                for _ in range(setting.playground_runs):
                    if time.monotonic() > deadline:
                        measured.errors.append("stopped at --max-seconds before the playground runs")
                        break
                    try:
                        heading, first, converged, text = playground_run(
                            browser, server.url, timeout_ms, setting.playground_shortest_fit
                        )
                    except Exception as exc:
                        measured.errors.append(f"playground: {type(exc).__name__}: {exc}")
                        continue
                    measured.playground_heading.append(heading)
                    measured.first_picture.append(first)
                    measured.converged.append(converged)
                    measured.playground_status.append(text)
                    try:
                        measured.first_picture_in_app.append(playground_from_sidebar(browser, server.url, timeout_ms))
                    except Exception as exc:
                        measured.errors.append(f"playground from the sidebar: {type(exc).__name__}: {exc}")
            finally:
                browser.close()
        if "Traceback" in (work_dir / "streamlit.log").read_text():
            measured.errors.append(f"the server logged a traceback (see {work_dir / 'streamlit.log'})")
    finally:
        server.stop()
        measured.load_after = os.getloadavg()
        measured.wall_seconds = time.monotonic() - started
    return measured


# --- the report -------------------------------------------------------------------------------------


def _ms(value: float) -> str:
    return "-" if value is None or math.isnan(value) else f"{value * 1000:.0f}"


def table(measured: Measurements) -> str:
    lines = [
        "# Dashboard latency through the browser",
        "",
        "Setting: " + ", ".join(f"{k} {v}" for k, v in measured.setting.items()) + "; "
        f"headless chromium against `streamlit run` on 127.0.0.1, {os.cpu_count()} CPU cores.",
        "",
        f"Machine load average (1/5/15 min) before {'/'.join(f'{v:.2f}' for v in measured.load_before)}, "
        f"after {'/'.join(f'{v:.2f}' for v in measured.load_after)}; wall time {measured.wall_seconds:.0f} s.",
        "",
        "## Threshold change to updated cards and histogram (ms)",
        "",
        "| page (what must change) | n | p50 | p95 | max | target p95 | verdict |",
        "|---|---|---|---|---|---|---|",
    ]
    watched = {"pruning": "Pruning (density card)", "inclusion": "Inclusion & masks (histogram, kept count)"}
    worst_threshold = math.nan
    for path, label in watched.items():
        stats = summary(measured.threshold.get(path, []))
        if stats["n"]:
            worst_threshold = stats["p95"] if math.isnan(worst_threshold) else max(worst_threshold, stats["p95"])
        lines.append(
            f"| {label} | {stats['n']} | {_ms(stats['p50'])} | {_ms(stats['p95'])} | {_ms(stats['max'])} "
            f"| {TARGETS['threshold_p95'] * 1000:.0f} | {verdict(stats['p95'], TARGETS['threshold_p95'])} |"
        )
    lines += [
        "",
        "## Page loads from a link with the run in the query string (ms)",
        "",
        "| page | first load (server computes) | cached n | cached p50 | cached p95 | cached max "
        "| target p95 | verdict |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for path, _, _ in PAGES:
        name = path or "train"
        stats = summary(measured.page_loads.get(name, []))
        lines.append(
            f"| {name} | {_ms(measured.first_load.get(name, math.nan))} | {stats['n']} | "
            f"{_ms(stats['p50'])} | {_ms(stats['p95'])} | {_ms(stats['max'])} | "
            f"{TARGETS['page_load_p95'] * 1000:.0f} | {verdict(stats['p95'], TARGETS['page_load_p95'])} |"
        )
    lines += [
        "",
        f"A fresh server's first page (Train; imports PyTorch): {_ms(measured.fresh_server_first_page)} ms.",
        "",
        "## Playground (default toy set and settings; s)",
        "",
        "| measure | n | p50 | max | target | verdict |",
        "|---|---|---|---|---|---|",
    ]
    first = summary(measured.first_picture)
    heading = summary(measured.playground_heading)
    lines.append(
        f"| heading shown (the app's share; for the record) | {heading['n']} | {heading['p50']:.2f} | "
        f"{heading['max']:.2f} | - | - |"
    )
    lines.append(
        f"| first picture, a new tab opening the playground | {first['n']} | {first['p50']:.2f} | "
        f"{first['max']:.2f} | {TARGETS['first_picture']:.0f} | "
        f"{verdict(first['max'], TARGETS['first_picture'])} |"
    )
    in_app = summary(measured.first_picture_in_app)
    lines.append(
        f"| first picture, the sidebar's Playground link clicked on the Glossary page | {in_app['n']} | "
        f"{in_app['p50']:.2f} | {in_app['max']:.2f} | {TARGETS['first_picture']:.0f} | "
        f"{verdict(in_app['max'], TARGETS['first_picture'])} |"
    )
    done = [c for c in measured.converged if not math.isnan(c)]
    converged_max = max(done) if len(done) == len(measured.converged) and done else math.nan
    lines.append(
        f"| fit reported done | {len(done)} | {summary(done)['p50']:.2f} | {converged_max:.2f} | "
        f"{TARGETS['converged_fit']:.0f} | {verdict(converged_max, TARGETS['converged_fit'])} |"
    )
    lines += [
        "",
        "A new tab first loads the app itself (the heading row); a click in an open tab does not. "
        "The fit is timed in the new tab.",
    ]
    if measured.playground_status:
        lines += [
            "",
            "The playground's progress text at the end: "
            + "; ".join(f"`{text.strip()}`" for text in measured.playground_status)
            + ".",
        ]
    lines += [
        "",
        "Verdicts: threshold and page loads on the p95, the playground on the slowest run. "
        "Latencies are wall-clock through the browser and grow with the machine's load average.",
    ]
    if measured.errors:
        lines += ["", "## Errors", ""] + [f"- {error}" for error in measured.errors]
    return "\n".join(lines) + "\n"


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--dataset",
        default="mnist-small",
        choices=["mnist-small", "mnist"],
        help="mnist-small: bundled, offline; mnist: the full set (needs $BNN_DATA_DIR)",
    )
    parser.add_argument("--hidden", default="400,600", help="hidden widths of the cached run")
    parser.add_argument(
        "--epochs",
        type=int,
        default=1,
        help="epochs of the cached run (latency does not depend on how well it is trained)",
    )
    parser.add_argument("--repetitions", type=int, default=20, help="threshold steps per page")
    parser.add_argument("--page-loads", type=int, default=5, help="cached loads per page")
    parser.add_argument("--playground-runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds one wait may take")
    parser.add_argument("--max-seconds", type=float, default=1200.0, help="bound on the whole benchmark")
    parser.add_argument(
        "--cache-dir", type=Path, default=None, help="the run store (default $BNN_CACHE_DIR, else a temporary folder)"
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "dashboard_latency.md")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    setting = Setting(
        dataset=args.dataset,
        hidden=tuple(int(w) for w in args.hidden.split(",") if w.strip()),
        epochs=args.epochs,
        repetitions=args.repetitions,
        page_loads=args.page_loads,
        playground_runs=args.playground_runs,
        timeout_seconds=args.timeout,
        max_seconds=args.max_seconds,
    )
    with tempfile.TemporaryDirectory(prefix="bnn-latency-") as work:
        cache_dir = args.cache_dir or Path(os.environ.get("BNN_CACHE_DIR") or Path(work) / "cache")
        measured = run_benchmark(setting, Path(cache_dir), Path(work))
    text = table(measured)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 1 if measured.errors else 0


if __name__ == "__main__":
    sys.exit(main())
