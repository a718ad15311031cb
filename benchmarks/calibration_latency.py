"""The target: the reliability diagram of a cached MNIST run within 1 s of opening the
Uncertainty page. Measured on the server side, under streamlit's AppTest (no browser):

    BNN_OFFLINE=1 python -m benchmarks.calibration_latency [--hidden 400,600] [--repeats 5]
    # writes benchmarks/results/calibration_latency.md

Trains (or finds cached) the 784-400-600-10 LBBNN on mnist-small (1 epoch) in --cache-dir, opens the
app on it, then times from the switch to the Uncertainty page until its reliability diagram's spec
is built (dashboard.calibration_panels.reliability_chart returns; the page sends each element as it
is produced, so the browser has it a few ms later) and until the whole page's script is done:

- first open: every Streamlit cache and the draw cache empty (the server predicts the test set);
- cached opens: new sessions on the same server (the prediction and the diagram are cached).

The machine's load average is recorded: on a shared machine absolute times are inflated.
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

RESULTS = ROOT / "benchmarks" / "results"
TARGET_SECONDS = 1.0


def open_and_time(app: Path, run_id: str, marks: list[float]) -> tuple[float, float]:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(app), default_timeout=600)
    at.session_state["selected_run_id"] = run_id
    at.run()
    marks.clear()
    started = time.perf_counter()
    at.switch_page("views/uncertainty.py").run()
    total = time.perf_counter() - started
    if at.exception or at.error:
        raise RuntimeError(f"the page failed: {[e.value for e in at.exception] + [e.value for e in at.error]}")
    if not marks:
        raise RuntimeError("the reliability diagram was not drawn")
    return marks[0] - started, total


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", default="mnist-small")
    parser.add_argument("--hidden", default="400,600")
    parser.add_argument("--epochs", type=int, default=1)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--cache-dir", default=os.environ.get("BNN_CACHE_DIR") or tempfile.mkdtemp(prefix="bnn-calib-"))
    parser.add_argument("--out", default=str(RESULTS / "calibration_latency.md"))
    args = parser.parse_args(argv)
    os.environ["BNN_CACHE_DIR"] = args.cache_dir
    hidden = tuple(int(w) for w in args.hidden.split(",") if w.strip())

    from core.runs import RunConfig, train_run

    run = train_run(RunConfig(dataset=args.dataset, hidden=hidden, train={"epochs": args.epochs}))

    import streamlit as st

    from dashboard import backend, cache
    from dashboard import calibration_panels as panels

    marks: list[float] = []
    original = panels.reliability_chart

    def timed(*a, **k):
        value = original(*a, **k)
        marks.append(time.perf_counter())
        return value

    panels.reliability_chart = timed  # the page calls it through the module: every open is seen

    app = ROOT / "dashboard" / "app.py"
    load_before = os.getloadavg()
    st.cache_data.clear()
    st.cache_resource.clear()
    cache.cached_run_list.clear()
    backend.clear_draws()
    first = open_and_time(app, run.run_id, marks)
    cached = [open_and_time(app, run.run_id, marks) for _ in range(args.repeats)]
    load_after = os.getloadavg()

    def row(name: str, values: list[float]) -> str:
        ms = [v * 1000 for v in values]
        return (
            f"| {name} | {len(ms)} | {statistics.median(ms):.0f} | {max(ms):.0f} | {TARGET_SECONDS * 1000:.0f} | "
            f"{'PASS' if max(ms) <= TARGET_SECONDS * 1000 else 'FAIL'} |"
        )

    net = "-".join(map(str, (784, *hidden, 10)))
    lines = [
        "# Reliability diagram latency on the Uncertainty page",
        "",
        (
            f"Setting: {args.dataset}, LBBNN {net}, {args.epochs} epoch(s), run {run.run_id}, bma R = 10 (the page's "
            f"default), {run.dataset().n_test} test inputs; server side under streamlit's AppTest, "
            "2 CPU cores shared."
        ),
        "",
        (
            f"Command: `BNN_OFFLINE=1 python -m benchmarks.calibration_latency --hidden {args.hidden} "
            f"--repeats {args.repeats}`"
        ),
        "",
        (
            f"Machine load average (1/5/15 min) before {'/'.join(f'{v:.2f}' for v in load_before)}, after "
            f"{'/'.join(f'{v:.2f}' for v in load_after)}."
        ),
        "",
        (
            "| open (time from opening the page until the diagram's spec is built) | n | median ms | max ms | "
            "target ms | verdict |"
        ),
        "|---|---|---|---|---|---|",
        row("first open (predicts the test set)", [first[0]]),
        row("cached opens (new sessions)", [c[0] for c in cached]),
        "",
        "| whole page script | n | median ms | max ms |",
        "|---|---|---|---|",
        f"| first open | 1 | {first[1] * 1000:.0f} | {first[1] * 1000:.0f} |",
        (
            f"| cached opens | {len(cached)} | {statistics.median(c[1] for c in cached) * 1000:.0f} | "
            f"{max(c[1] for c in cached) * 1000:.0f} |"
        ),
        "",
    ]
    Path(args.out).write_text("\n".join(lines), encoding="utf-8")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
