"""A classroom against one `streamlit run`: N concurrent sessions, two of them training.

    python -m benchmarks.classroom_load --sessions 30          # writes benchmarks/results/classroom_load.md

Starts `streamlit run dashboard/app.py` on 127.0.0.1 (a free port, never another
address) with its own run store, trains the browsed runs into it first if they
are missing, then opens N sessions as clients speaking Streamlit's websocket
protocol (the protobuf BackMsg/ForwardMsg messages the browser sends and
receives; no browser, so the client's own cost stays small next to the
server's). Two sessions train different configs from the Train page form
(with $BNN_MAX_TRAININGS=2, so both run at once) and poll their progress; the
others open a run from a shared link (?run=<id>) and, in random order, switch
pages and move the threshold and R sliders on the Pruning page.

Per interaction it records the latency from sending the new widget value (the
browser sends it on slider release) to the server's "script finished" after
the updated metric cards and charts were sent; and it checks what each
session received: the run named in the page caption, the threshold and R
sliders' values, and any training progress must be the session's own (a
"leak" otherwise); an exception element, an error box or a failed run counts
as an error. The server's resident memory is read from /proc while it runs.

Bounded: at most --interactions per session and --max-seconds overall, then
the trainings are cancelled and the server is stopped.

The parts live in benchmarks/classroom/ (server, client, scenario, report); this file is the
command line.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

from benchmarks.classroom.report import Report, percentile, table  # noqa: E402,F401  (callers import them here)
from benchmarks.classroom.scenario import Scenario, run_load_test  # noqa: E402
from benchmarks.classroom.server import Server, proxy_processes  # noqa: E402,F401
from core.errors import InputError  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--interactions", type=int, default=12)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--think-seconds", type=float, default=1.0)
    parser.add_argument(
        "--cache-dir",
        type=Path,
        default=None,
        help="run store for the server (default: a temporary one; the browsed runs are trained into it when missing)",
    )
    parser.add_argument("--out", type=Path, default=RESULTS / "classroom_load.md")
    parser.add_argument(
        "--dataset",
        default="mnist-small",
        help="dataset of the browsed runs: mnist-small (bundled) or mnist (needs $BNN_DATA_DIR)",
    )
    parser.add_argument(
        "--preset",
        default=None,
        help="browse seeds 0 and 1 of this run preset (e.g. fast-mnist, the shipped recipe) "
        "instead of 1-epoch runs with the default settings; sets the dataset",
    )
    parser.add_argument(
        "--predict-slots",
        type=int,
        default=None,
        help="the server's BNN_PREDICT_SLOTS (0: no limit; default: the app's default, one per core)",
    )
    parser.add_argument(
        "--servers",
        type=int,
        default=1,
        help="streamlit processes sharing the class, session i on server i mod N, as a sticky proxy would place "
        "browsers (measures that design; the app ships one process)",
    )
    parser.add_argument(
        "--proxy-processes",
        default="0",
        help="serve the class with `python -m dashboard.serve --processes N` (what the app ships: one address, "
        "a proxy keeping each browser on one of N processes) instead of --servers' direct connections",
    )
    parser.add_argument(
        "--patience",
        type=float,
        default=None,
        help="seconds a student waits for the complete numbers after a slider release before the next move "
        "(default: until they are complete); the moves left before them are counted, not timed",
    )
    parser.add_argument(
        "--kept-draws",
        action="store_true",
        help="keep the draws earlier classes left on disk (<cache-dir>/draws: a lesson taught again); by default "
        "they are emptied first and the class computes every draw",
    )
    parser.add_argument(
        "--full-page-moves",
        action="store_true",
        help="send every slider move as a run of the whole page (the protocol before 2026-11-28); by default a "
        "move of a control inside an st.fragment reruns that fragment alone, as a browser sends it",
    )
    parser.add_argument("--note", default="", help="a line about the machine's load, written under the table")
    parser.add_argument(
        "--json",
        type=Path,
        default=None,
        help="also write every interaction (session, kind, start, seconds, server CPU) as JSON",
    )
    args = parser.parse_args(argv)
    if args.sessions < 3:
        parser.error("--sessions: at least 3 (two of them train)")
    if not 1 <= args.servers <= 8:
        parser.error(f"--servers: 1 to 8, got {args.servers}")
    try:
        args.proxy_processes = proxy_processes(args.proxy_processes)  # shared with benchmarks.browser_class
    except InputError as exc:
        parser.error(str(exc))
    if args.proxy_processes and args.servers != 1:
        parser.error("--proxy-processes and --servers: give one of them")
    if args.patience is not None and not 0 < args.patience <= 600:
        parser.error(f"--patience: more than 0 and at most 600 seconds, got {args.patience:g}")
    dataset = args.dataset
    if args.preset:
        from core.runs import RunConfig, get_preset

        preset = get_preset(args.preset)
        if not isinstance(preset, RunConfig):
            parser.error(f"--preset: {args.preset!r} is not a run preset")
        dataset, hidden = preset.dataset, tuple(preset.hidden)
    else:
        hidden = Scenario.hidden
    scenario = Scenario(
        dataset=dataset,
        preset=args.preset,
        hidden=hidden,
        sessions=args.sessions,
        interactions=args.interactions,
        max_seconds=args.max_seconds,
        think_seconds=args.think_seconds,
        servers=args.servers,
        proxy_processes=args.proxy_processes,
        patience=args.patience,
        kept_draws=args.kept_draws,
        fragment_moves=not args.full_page_moves,
    )
    if args.predict_slots is not None:
        os.environ["BNN_PREDICT_SLOTS"] = str(args.predict_slots)  # the server inherits this environment
    report = run_load_test(scenario, cache_dir=args.cache_dir)
    text = table(report)
    if args.proxy_processes:
        serving = f"`python -m dashboard.serve --processes {args.proxy_processes}` (one address)"
    else:
        serving = "one `streamlit run`" if args.servers == 1 else f"{args.servers} `streamlit run` processes"
    body = [
        f"# Classroom load test: {args.sessions} sessions on {serving}",
        "",
        f"`python -m benchmarks.classroom_load --sessions {args.sessions}"
        f"{f' --preset {args.preset}' if args.preset else f' --dataset {dataset}'}"
        f"{'' if args.predict_slots is None else f' --predict-slots {args.predict_slots}'}"
        f"{'' if args.servers == 1 else f' --servers {args.servers}'}"
        f"{f' --proxy-processes {args.proxy_processes}' if args.proxy_processes else ''}"
        f"{'' if args.patience is None else f' --patience {args.patience:g}'}"
        f"{' --kept-draws' if args.kept_draws else ''}"
        f"{' --full-page-moves' if args.full_page_moves else ''}` on "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.",
        "",
        text,
    ]
    if args.note:
        body += ["", args.note]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(body) + "\n")
    if args.json is not None:
        args.json.write_text(
            json.dumps(
                {
                    "started": report.started,
                    "interactions": [
                        {
                            "session": i.session,
                            "kind": i.kind,
                            "start": i.started - report.started,
                            "seconds": i.seconds,
                            "complete": i.complete_seconds,
                            "left": i.left,
                            "ok": i.ok,
                            "cpu": i.cpu_seconds,
                        }
                        for i in report.interactions
                    ],
                },
                indent=1,
            )
        )
    print(text)
    return 0 if not report.errors and not report.leaks else 1


if __name__ == "__main__":
    sys.exit(main())
