"""The target: a 50,000-row, 30-column CSV (numeric and text columns) uploads, trains with the
defaults and opens on every page in under 2 minutes on this CPU.

    BNN_OFFLINE=1 python -m benchmarks.user_table_time [--rows 50000] [--columns 30]
    # writes benchmarks/results/user_table_time.md

Phases, each timed in wall-clock seconds and this process's CPU seconds:

- upload: what the Train page does with the file's bytes (core.runs.user_data): the header for the
  pickers, the inferred task, and the command line's store_table (parse, check, encode, store);
- train: train_run of the config the form submits with every box left at its default (hidden
  widths and epochs chosen by core for the table's size);
- pages: a new session (streamlit's AppTest, no browser) opens the run on the Train, Inclusion,
  Pruning, Uncertainty and Compare pages.

The machine's load average and CPU count are recorded: on a shared machine the times are inflated.
"""

from __future__ import annotations

import argparse
import os
import platform
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results"
APP = ROOT / "dashboard" / "app.py"
PAGES = ("views/train.py", "views/inclusion.py", "views/pruning.py", "views/uncertainty.py", "views/compare.py")
TARGET_SECONDS = 120.0


def make_csv(rows: int, columns: int, seed: int = 0) -> bytes:
    """A table of `columns` columns: two thirds numeric, the rest text with 3 to 12 levels, and a
    yes/no target that depends on a few of them (so there is something to learn)."""
    rng = np.random.default_rng(seed)
    n_inputs = columns - 1
    n_text = n_inputs // 3
    numeric = rng.normal(size=(rows, n_inputs - n_text))
    levels = [[f"L{k}" for k in range(3 + i % 10)] for i in range(n_text)]
    codes = [rng.integers(0, len(lv), size=rows) for lv in levels]
    score = numeric[:, 0] - 0.5 * numeric[:, 1] + (codes[0] == 1) - 0.3 + 0.5 * rng.normal(size=rows)
    header = [f"num{i}" for i in range(numeric.shape[1])] + [f"cat{i}" for i in range(n_text)] + ["target"]
    lines = [",".join(header)]
    text = [np.array(lv)[c] for lv, c in zip(levels, codes)]
    target = np.where(score > 0, "yes", "no")
    for r in range(rows):
        lines.append(",".join([*(f"{v:.4f}" for v in numeric[r]), *(t[r] for t in text), target[r]]))
    return ("\n".join(lines) + "\n").encode()


def timed(step):
    wall, cpu = time.perf_counter(), time.process_time()
    result = step()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def open_pages(run_id: str) -> None:
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(APP), default_timeout=600)
    at.session_state["selected_run_id"] = run_id
    at.run()
    for page in PAGES:
        at.switch_page(page).run()
        problems = [e.value for e in at.exception] + [e.value for e in at.error]
        if problems:
            raise RuntimeError(f"{page}: {problems}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=50_000)
    parser.add_argument("--columns", type=int, default=30)
    parser.add_argument("--cache-dir", default=tempfile.mkdtemp(prefix="bnn-table-time-"))
    parser.add_argument("--out", default=str(RESULTS / "user_table_time.md"))
    args = parser.parse_args(argv)
    os.environ["BNN_CACHE_DIR"] = args.cache_dir
    from core.runs import RunConfig, train_run, user_data

    load_before = os.getloadavg()
    data = make_csv(args.rows, args.columns)
    name = "benchmark.csv"

    def upload():
        header = user_data.table_header(data, name)
        user_data.inferred_task(data, name, header["columns"][-1])
        return user_data.store_table(data, name, {"target": "target", "missing": "refuse"})

    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)

    def partial(text: str) -> None:  # each phase as it ends: a run stopped early still says how far it got
        print(text, flush=True)
        with out.with_suffix(".log").open("a") as handle:
            handle.write(f"{time.strftime('%H:%M:%S')} load {os.getloadavg()[0]:.1f}: {text}\n")

    stored, upload_wall, upload_cpu = timed(upload)
    partial(f"upload {upload_wall:.1f} s wall, {upload_cpu:.1f} s CPU")
    params = {"target": "target", "missing": "refuse"}
    config = RunConfig.from_dict({"dataset": stored.name, "dataset_params": params})
    partial(f"defaults: hidden {list(config.hidden)}, {config.train.epochs} epochs of {config.train.batch_size}")
    run, train_wall, train_cpu = timed(lambda: train_run(config))
    partial(f"train {train_wall:.1f} s wall, {train_cpu:.1f} s CPU")
    _, pages_wall, pages_cpu = timed(lambda: open_pages(run.run_id))
    partial(f"pages {pages_wall:.1f} s wall, {pages_cpu:.1f} s CPU")
    load_after = os.getloadavg()
    dataset = run.dataset()
    total = upload_wall + train_wall + pages_wall
    epochs = run.config.train.epochs
    steps = epochs * -(-dataset.n_train // run.config.train.batch_size)
    verdict = "PASS" if total <= TARGET_SECONDS else "FAIL"
    command = "BNN_OFFLINE=1 python -m benchmarks.user_table_time" + (
        f" --rows {args.rows} --columns {args.columns}" if (args.rows, args.columns) != (50_000, 30) else ""
    )
    lines = [
        "# A user table from upload to every page",
        "",
        f"Command: `{command}`",
        "",
        f"Table: {args.rows:,} rows x {args.columns} columns ({len(data) / 1e6:.1f} MB CSV), "
        f"{dataset.in_features} inputs after one-hot encoding, {dataset.n_train:,} training rows; "
        f"defaults: {run.config.method} hidden {list(run.config.hidden)}, {epochs} epochs of batch "
        f"{run.config.train.batch_size} ({steps:,} steps); run {run.run_id}.",
        "",
        f"Machine: {os.cpu_count()} CPUs ({platform.machine()}), load average (1/5/15 min) before "
        f"{'/'.join(f'{v:.2f}' for v in load_before)}, after {'/'.join(f'{v:.2f}' for v in load_after)}.",
        "",
        "CPU seconds are this process's; on a loaded machine the wall clock is mostly waiting for a core.",
        "",
        "| phase | wall s | CPU s (this process) |",
        "|---|---|---|",
        f"| upload (header, task, store_table) | {upload_wall:.1f} | {upload_cpu:.1f} |",
        f"| train with the defaults | {train_wall:.1f} | {train_cpu:.1f} |",
        f"| (of which the training loop, core's train_seconds) | {run.metrics.get('train_seconds', float('nan')):.1f} "
        "| |",
        f"| open Train, Inclusion, Pruning, Uncertainty, Compare | {pages_wall:.1f} | {pages_cpu:.1f} |",
        f"| **total** (target {TARGET_SECONDS:.0f} s) | **{total:.1f}** | {upload_cpu + train_cpu + pages_cpu:.1f} |",
        "",
        f"Verdict: {verdict} (wall clock, at the load above).",
        "",
    ]
    out.write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
