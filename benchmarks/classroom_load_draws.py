"""What background draws cost a server's script runs: drawn in the server's threads, or in draw processes.

    BNN_DATA_DIR=<folder with MNIST> python -m benchmarks.classroom_load_draws --cache-dir <store> \\
        --run 06337ffb2442df5a --out benchmarks/results/classroom_load_draws.md

One process stands for the dashboard server: a poller asks the draw cache's Refiner for a class's
plans every 0.5 s (as the pages' fragments do, keeping them wanted) while the main thread runs a
stand-in for script runs, a fixed piece of pure-Python work (about 20 ms of one core), back to back,
and records each one's wall time. The draws run either in the Refiner's threads in this process
(BNN_DRAW_PROCESSES=0, the code before draw processes) or in draw processes (core.predict.draw_process,
niceness 10). The two are run alternately, `--rounds` times each, on the same plans from a fresh cache:
what the script runs wait (their wall time against their CPU), how long the draws take to complete,
and the CPU of this process and of the children. On a shared machine the wall times depend on its
load (the load average is written beside them); the CPU split does not.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import threading
import time
from pathlib import Path

import torch

from core.predict import DrawCache
from core.runs import load_run

RESULTS = Path(__file__).resolve().parent / "results"
PLANS = (("prune", 0.3, "sample"), ("prune", 0.5, "sample"), ("mpm", 0.7, None))


def script_stand_in() -> float:
    """About 20 ms of pure-Python work (what holds the interpreter lock in a script run): its wall time."""
    started = time.perf_counter()
    total = 0
    for index in range(150_000):
        total += index % 7
    return time.perf_counter() - started


def children_cpu() -> float:
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                rest = (entry / "stat").read_text().rsplit(")", 1)[1].split()
                if int(rest[1]) == os.getpid():
                    total += (int(rest[11]) + int(rest[12])) / tick
            except (OSError, ValueError, IndexError):
                continue
    return total


def one_round(run, store: str, processes: int, samples: int, timeout: float) -> dict:
    cache = DrawCache()
    x = run.dataset().x_test
    if processes:
        cache.use_processes(processes, functools.partial(load_run, cache_dir=store), niceness=10, timeout=600)
        refiner = cache.refiner()  # warm: the children import torch and load the run before the class starts
        deadline = time.monotonic() + timeout
        while not refiner.ready(run, x, "test", run.run_id, "bma", processes, None).complete:
            assert time.monotonic() < deadline, "the draw processes did not start"
            time.sleep(0.2)
    refiner = cache.refiner()
    done = threading.Event()

    def poll() -> None:
        while not done.is_set():
            progress = [refiner.ready(run, x, "test", run.run_id, m, samples, t, 0, w) for m, t, w in PLANS]
            if all(p.complete for p in progress):
                done.set()
                return
            time.sleep(0.5)

    cpu, child_cpu, started = time.process_time(), children_cpu(), time.perf_counter()
    poller = threading.Thread(target=poll, daemon=True)
    poller.start()
    waits = []
    while not done.is_set() and time.perf_counter() - started < timeout:
        waits.append(script_stand_in())
    wall = time.perf_counter() - started
    done.set()
    result = {
        "wall": wall,
        "server_cpu": time.process_time() - cpu,
        "children_cpu": children_cpu() - child_cpu,
        "waits": sorted(waits),
        "complete": all(refiner.ready(run, x, "test", run.run_id, m, samples, t, 0, w).complete for m, t, w in PLANS),
        "load": os.getloadavg()[0],
    }
    cache.use_processes(None)
    refiner.close(5)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache-dir", required=True, help="run store holding --run")
    parser.add_argument("--run", default="06337ffb2442df5a", help="run id (default: fast-mnist, seed 0)")
    parser.add_argument("--samples", default="10", help="posterior draws R per plan (1 to 100)")
    parser.add_argument("--rounds", default="2", help="rounds of both placements (1 to 50)")
    parser.add_argument("--timeout", default="600", help="seconds a round may take (1 to 7200)")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    from core import validate
    from core.errors import BNNError

    try:  # every number checked, and the run found, before anything is drawn or written
        args.samples = validate.whole_number(args.samples, "--samples", 1, 100)
        args.rounds = validate.whole_number(args.rounds, "--rounds", 1, 50)
        args.timeout = validate.real_number(args.timeout, "--timeout", 1.0, 7200.0)
        torch.set_num_threads(1)  # classroom mode: one thread per computation, in the server and the children
        run = load_run(args.run, cache_dir=args.cache_dir)
    except BNNError as exc:
        parser.error(str(exc))
    rows = []
    for round_ in range(args.rounds):
        for processes, label in ((0, "server threads"), (2, "2 draw processes")):
            result = one_round(run, args.cache_dir, processes, args.samples, args.timeout)
            waits = result["waits"]
            stand_in = statistics.median(waits) if waits else float("nan")
            p95 = waits[min(len(waits) - 1, int(0.95 * len(waits)))] if waits else float("nan")
            rows.append(
                f"| {round_ + 1} | {label} | {result['wall']:.1f} | {len(waits)} | {stand_in * 1000:.0f} | "
                f"{p95 * 1000:.0f} | {result['server_cpu']:.1f} | {result['children_cpu']:.1f} | "
                f"{'yes' if result['complete'] else 'no'} | {result['load']:.1f} |"
            )
            print(rows[-1], flush=True)
    text = "\n".join(
        [
            "# Background draws: in the server's threads or in draw processes",
            "",
            f"`python -m benchmarks.classroom_load_draws --cache-dir <store> --run {args.run} --samples "
            f"{args.samples} --rounds {args.rounds}` on {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, "
            f"{os.cpu_count()} cores; plans: {', '.join(f'{m} at {t}' for m, t, _ in PLANS)}, R = {args.samples} "
            "each, one torch thread. A stand-in script run is about 20 ms of pure-Python work; its wall time is "
            "what it waited for the interpreter lock and the cores.",
            "",
            "| round | draws in | seconds to all draws | stand-in runs | stand-in wall p50 (ms) | p95 (ms) | "
            "CPU of the server process (s) | CPU of its children (s) | complete | load average (1 min) |",
            "|---|---|---|---|---|---|---|---|---|---|",
            *rows,
        ]
    )
    if args.out:
        args.out.write_text(text + "\n", encoding="utf-8")
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
