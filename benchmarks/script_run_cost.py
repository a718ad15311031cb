"""CPU of one script run of each kind the classroom load test causes, in-process (Streamlit's AppTest).

    BNN_DATA_DIR=... python -m benchmarks.script_run_cost --preset fast-mnist   # the runs must be in the store

The load test (benchmarks/classroom_load.py) showed one Streamlit process spending about one core:
every script run of every session shares it under the GIL, so what a class waits for is the CPU
of the script runs. This measures that CPU without a server and without other sessions: the thread
CPU of each script run (dashboard/app.py's $BNN_RERUN_LOG, the figure the load test reports per
interaction kind) in the steady state of a class, where the settings it moves to were computed
before (every prediction and chart cached). Each kind is repeated and its median reported.

Kinds: open a shared link (a new session on ?run=<id>), page switch (to Pruning, to Inclusion & masks,
to Train), threshold move and R move on the Pruning page (values already computed), and a rerun of the
Train page (what the load test's training sessions poll).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
THRESHOLDS = (0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9)  # the load test's positions (benchmarks/classroom/scenario.py)
SAMPLES = (1, 5, 10, 20)
EPOCH_SECONDS = 2.3  # the load test's trainings: 64 epochs of mnist 100-100 in 148 s


def script_cpu(log: Path, action) -> float:
    """Thread CPU of the script runs `action` caused (dashboard/app.py writes one line per run)."""
    before = len(log.read_text().splitlines()) if log.exists() else 0
    action()
    lines = log.read_text().splitlines()[before:]
    return sum(json.loads(line)["cpu"] for line in lines)


class WatchedTraining:
    """A training under way as the Train page sees it (the queue's request interface), from `epochs`
    of `total` done on, one more every EPOCH_SECONDS (the load test's trainings' pace): the page's
    work per poll without a training process beside the measurement."""

    owner = None  # found through a link: the page shows the progress, no Cancel
    cancel_requested = False

    def __init__(self, config, epochs: int, total: int):
        self.config, self.label, self.total = config, config.label(), total
        self.started = time.time() - EPOCH_SECONDS * epochs

    def snapshot(self):
        from dashboard.training_process import WorkerSnapshot
        from dashboard.worker import WorkerStatus

        epochs = min(self.total, int((time.time() - self.started) / EPOCH_SECONDS))
        history = [
            {"phase": "train", "epoch": e, "loss": 1.0 / e, "density": 0.5 / e, "seconds": EPOCH_SECONDS}
            for e in range(1, epochs + 1)
        ]
        return WorkerSnapshot(WorkerStatus.RUNNING, history, self.total, started=self.started)


def measure(run_ids: list[str], repeats: int) -> dict[str, list[float]]:
    from streamlit.testing.v1 import AppTest

    from dashboard import backend

    log = Path(os.environ["BNN_RERUN_LOG"])
    costs: dict[str, list[float]] = {}

    def record(kind: str, at, action) -> None:
        costs.setdefault(kind, []).append(script_cpu(log, action))
        # a cheap run that drew nothing would be no measurement: every run must show its page cleanly
        problems = [e.value for e in at.exception] + [e.value for e in at.error]
        if problems:
            raise SystemExit(f"{kind}: the page failed: {problems}")
        if kind in ("threshold", "R") and not [m for m in at.metric if m.label == "accuracy" and m.value != "..."]:
            raise SystemExit(f"{kind}: no accuracy card on the Pruning page")

    def settle() -> None:
        backend.DRAW_CACHE.refiner().wait(300)

    run_id = run_ids[0]
    threshold_key, samples_key = f"widget:threshold:{run_id}", f"widget:samples:{run_id}"
    weights_key = f"widget:weights:{run_id}"
    for warm in (True, False):  # the first pass computes every setting, the second is measured
        for _ in range(1 if warm else repeats):
            at = AppTest.from_file(str(APP), default_timeout=600)
            at.query_params["run"] = run_id
            if warm:
                at.run()
            else:
                record("open link", at, at.run)
            for page, kind in (("views/pruning.py", "page switch: Pruning"),):
                if warm:
                    at.switch_page(page).run()
                else:
                    record(kind, at, lambda a=at, p=page: a.switch_page(p).run())
            settle()
            for value in THRESHOLDS:
                slider = at.slider(key=threshold_key)
                if warm:
                    slider.set_value(value).run()
                    settle()
                else:
                    record("threshold", at, lambda s=slider, v=value: s.set_value(v).run())
            at.radio(key=weights_key).set_value("sample").run()
            settle()
            for value in SAMPLES:
                slider = at.slider(key=samples_key)
                if warm:
                    slider.set_value(value).run()
                    settle()
                else:
                    record("R", at, lambda s=slider, v=value: s.set_value(v).run())
            for page, kind in (
                ("views/inclusion.py", "page switch: Inclusion & masks"),
                ("views/pruning.py", "page switch: Pruning"),
                ("views/train.py", "page switch: Train"),
            ):
                if warm:
                    at.switch_page(page).run()
                    settle()
                else:
                    record(kind, at, lambda a=at, p=page: a.switch_page(p).run())
            if not warm:
                record("Train page rerun (no training)", at, at.run)
            # what the load test's training sessions poll: the Train page with their training under way
            at.session_state["training_worker"] = WatchedTraining(_config(run_id), 40, 100)
            if warm:
                at.run()
            else:
                for _ in range(3):  # the load test's trainers poll every 2 s
                    time.sleep(2.0)
                    record("Train page poll (a training under way)", at, at.run)
            at.session_state["training_worker"] = None
            assert not at.exception, [e.value for e in at.exception]
    return costs


def _config(run_id: str):
    from dashboard import backend

    return backend.load_run(run_id).config


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="fast-mnist", help="browse seed 0 of this run preset (stored before)")
    parser.add_argument("--run", default=None, help="a stored run id instead of the preset's")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None, help="write the table here (markdown)")
    parser.add_argument("--label", default="", help="a name for this measurement (e.g. before / after)")
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats: at least 1")
    if args.run:
        run_ids = [args.run]
    else:
        from core.runs import get_preset, train_run

        run_ids = [train_run(get_preset(args.preset).replace(seed=0)).run_id]  # from the store when kept
    os.environ["BNN_RERUN_LOG"] = str(Path(tempfile.mkdtemp(prefix="bnn-script-cost-")) / "reruns.jsonl")
    load = os.getloadavg()
    costs = measure(run_ids, args.repeats)
    rows = [
        "| script run | n | median thread CPU (s) | min (s) | max (s) |",
        "|---|---|---|---|---|",
    ]
    for kind, values in costs.items():
        rows.append(
            f"| {kind} | {len(values)} | {statistics.median(values):.3f} | {min(values):.3f} | {max(values):.3f} |"
        )
    end = os.getloadavg()
    text = "\n".join(
        [
            f"{args.label}: `python -m benchmarks.script_run_cost --run {run_ids[0]} --repeats {args.repeats}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, load average {load[0]:.1f} at the start, "
            f"{end[0]:.1f} at the end ({os.cpu_count()} cores)",
            "",
            *rows,
        ]
    )
    print(text)
    if args.out is not None:
        with args.out.open("a") as handle:
            handle.write("\n" + text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
