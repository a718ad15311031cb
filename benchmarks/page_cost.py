"""What one slider move costs the browser: one chromium page on the Pruning page of one `streamlit run`,
N threshold moves, the page's own counters per move.

    python -m benchmarks.page_cost                         # 20 moves, bundled mnist-small 784-400-600-10
    python -m benchmarks.page_cost --moves 40 --out benchmarks/results/page_cost.md

In a class the pages share the machine with the server (benchmarks.browser_class: ten of them on the
same two cores), so what a move costs each page is part of what every student waits for. This measures
one page alone, nothing else moving: chromium's CPU (every process, /proc), and the renderer's own
counters from the DevTools protocol (Performance.getMetrics: the main thread's task time, its
JavaScript, style and layout), plus the JavaScript heap and event listeners after a garbage collection
before and after the moves (what a long lesson would pile up). Each move presses one arrow key on the
threshold slider, alternately right and left, waits for the script run to end and then 1.2 s more
(the charts' and the cards' polls settle).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

from benchmarks.browser_class import CARDS, chromium_cpu
from benchmarks.classroom_load import Server
from benchmarks.dashboard_latency import CHROMIUM, CHROMIUM_ARGS, SCRIPT_IDLE, prepare_run

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
SETTLE_MS = 1200  # after each run's end: the polled fragments' next runs
# DevTools counters reported per move (seconds), and the page's totals read after a garbage collection
PER_MOVE = ("TaskDuration", "ScriptDuration", "RecalcStyleDuration", "LayoutDuration")
TOTALS = ("JSHeapUsedSize", "JSEventListeners", "Nodes")


async def measure(url: str, run_id: str, moves: int, timeout_s: float) -> dict:
    from playwright.async_api import async_playwright

    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            page = await (await browser.new_context(viewport={"width": 1400, "height": 1600})).new_page()
            errors: list[str] = []
            page.on("pageerror", lambda exc: errors.append(str(exc)[:200]))
            await page.goto(f"{url}/pruning?run={run_id}&mode=prune&weights=sample&R=10&threshold=0.5")
            await page.wait_for_function(f"{SCRIPT_IDLE} && {CARDS}.includes('accuracy')", timeout=timeout_s * 1e3)
            await page.wait_for_timeout(3000)
            devtools = await page.context.new_cdp_session(page)
            await devtools.send("Performance.enable")
            await devtools.send("HeapProfiler.enable")

            async def counters() -> dict[str, float]:
                await devtools.send("HeapProfiler.collectGarbage")
                metrics = (await devtools.send("Performance.getMetrics"))["metrics"]
                return {metric["name"]: metric["value"] for metric in metrics}

            slider = page.get_by_role("slider", name=re.compile(r"^threshold on"))
            before, cpu_before = await counters(), sum(chromium_cpu(os.getpid()).values())
            started = time.perf_counter()
            for move in range(moves):
                await slider.focus()
                await page.keyboard.press("ArrowRight" if move % 2 == 0 else "ArrowLeft")
                await page.wait_for_timeout(200)
                await page.wait_for_function(SCRIPT_IDLE, timeout=timeout_s * 1e3)
                await page.wait_for_timeout(SETTLE_MS)
            wall = time.perf_counter() - started
            cpu_after, after = sum(chromium_cpu(os.getpid()).values()), await counters()
            return {
                "chromium_cpu": (cpu_after - cpu_before) / moves,
                **{name: (after[name] - before[name]) / moves for name in PER_MOVE},
                "totals": {name: (before[name], after[name]) for name in TOTALS},
                "wall": wall,
                "errors": errors,
            }
        finally:
            await browser.close()


def report(measured: dict, command: str, moves: int, setting: str) -> str:
    lines = [
        "# One page's cost per slider move (the Pruning page, one chromium page alone)",
        "",
        f"`{command}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}; {setting}; load average "
        f"(1 min) at the start {os.getloadavg()[0]:.1f}.",
        "",
        "| per threshold move | ms |",
        "|---|---|",
        f"| chromium CPU, every process | {1e3 * measured['chromium_cpu']:.0f} |",
        f"| renderer main thread: tasks | {1e3 * measured['TaskDuration']:.0f} |",
        f"| of which JavaScript | {1e3 * measured['ScriptDuration']:.0f} |",
        f"| of which style | {1e3 * measured['RecalcStyleDuration']:.1f} |",
        f"| of which layout | {1e3 * measured['LayoutDuration']:.1f} |",
        "",
        f"After a garbage collection, before -> after the {moves} moves:",
        "",
        "| page total | before | after | per move |",
        "|---|---|---|---|",
        *(
            f"| {name} | {first:,.0f} | {last:,.0f} | {(last - first) / moves:+,.1f} |"
            for name, (first, last) in measured["totals"].items()
        ),
        "",
        f"- page errors: {len(measured['errors'])}" + "".join(f"\n  - {error}" for error in measured["errors"][:5]),
        f"- wall time of the moves: {measured['wall']:.0f} s",
        "",
    ]
    return "\n".join(lines)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    from core import validate
    from core.errors import BNNError

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--moves", default="20", help="threshold moves")
    parser.add_argument("--dataset", default="mnist-small", choices=["mnist-small", "mnist"])
    parser.add_argument("--hidden", default="400,600", help="hidden widths of the browsed run")
    parser.add_argument("--epochs", default="1", help="epochs of the browsed run")
    parser.add_argument("--timeout", default="120", help="seconds one wait for the page may take")
    parser.add_argument("--cache-dir", type=Path, default=None)
    parser.add_argument("--out", type=Path, default=RESULTS / "page_cost.md")
    args = parser.parse_args(argv)
    try:
        args.moves = validate.whole_number(args.moves, "--moves", 1, 200)
        args.epochs = validate.whole_number(args.epochs, "--epochs", 1, 100)
        args.timeout = validate.real_number(args.timeout, "--timeout", 1.0, 600.0)
        args.hidden = tuple(validate.whole_number(w, "--hidden", 1, 4096) for w in args.hidden.split(","))
    except BNNError as exc:
        parser.error(str(exc))
    if not 1 <= len(args.hidden) <= 4:
        parser.error("--hidden: give 1 to 4 widths separated by commas, e.g. 400,600")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="bnn-page-cost-") as work:
        cache_dir = args.cache_dir or Path(work) / "cache"
        env = dict(os.environ, BNN_CACHE_DIR=str(cache_dir), BNN_OFFLINE="1", OMP_NUM_THREADS="1")
        run_id = prepare_run(args.dataset, args.hidden, args.epochs, env)
        server = Server(env, Path(work) / "streamlit.log")
        try:
            server.wait_healthy()
            measured = asyncio.run(measure(server.url, run_id, args.moves, args.timeout))
        finally:
            server.stop()
    network = "-".join(map(str, (784, *args.hidden, 10)))
    setting = f"run {run_id} ({args.dataset}, {network}, {args.epochs} epoch(s)), prune with sampled weights, R 10"
    command = shlex.join(["python", "-m", "benchmarks.page_cost", *(argv if argv is not None else sys.argv[1:])])
    text = report(measured, command, args.moves, setting)
    print(text)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(text)
    return 1 if measured["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
