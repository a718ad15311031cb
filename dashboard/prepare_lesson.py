"""Prepare a lesson's sampled networks before class, so the class reads them instead of waiting.

    python -m dashboard.prepare_lesson first-steps [--samples 20] [--thresholds 0.3,0.5,0.7]

Why: a class asking for sampled networks nobody has drawn waits for them. Thirty sessions on cached
`fast-mnist` runs got their complete R-draw numbers at p95 10.8-11.6 s when nothing was kept and 2.1-2.4 s
when the draws were kept on disk from a class before (docs/classroom.md, `benchmarks.classroom_load`).
This command is that class before: for every run the lesson's steps show, it draws what the pages ask
for, with the server's own draw processes and settings, into the folder every server reads kept draws
from ($BNN_CACHE_DIR/draws, core.predict.shared_draws). Per run:

- bma and mpm (MED-SIM) with R draws: neither moves with the threshold slider (mpm cuts at the family's
  default);
- prune with sampled weights at each threshold the lesson's views name and at each of --thresholds
  (the slider's own plans; a threshold outside the run's range is left out, as a link's would be).

R: --samples, else the largest R the lesson's views name, else the app's default (10); lowered where
R x the test set would not fit, as the pages lower it. Runs that are not in the store are named with
the command that trains them: nothing is trained here. Draws already kept are read, not drawn again,
so a second run of this command computes nothing.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

MAX_THRESHOLDS = 50  # --thresholds: each is a plan of R draws per run


@dataclass(frozen=True)
class Plan:
    mode: str  # the canonical mode (dashboard.caching.prediction_key): bma or mpm
    threshold: float | None
    label: str  # as the page names it


def lesson_runs(lesson: Any) -> dict[str, tuple[Any, list[int]]]:
    """Each run the lesson shows: its id -> (its config, the steps that show it)."""
    runs: dict[str, tuple[Any, list[int]]] = {}
    for number, step in enumerate(lesson.steps, start=1):
        run_id = step.run_id()
        if run_id is not None:
            runs.setdefault(run_id, (step.run_config(), []))[1].append(number)
    return runs


def lesson_samples(lesson: Any) -> int:
    from dashboard.links import DEFAULT_SAMPLES

    views = [step.view["R"] for step in lesson.steps if "R" in step.view]
    return max(views) if views else DEFAULT_SAMPLES


def plans_for(run: Any, views: list[dict], extra_thresholds: list[float]) -> tuple[list[Plan], list[str]]:
    """The plans to draw for one run (`views`: those of the steps that show it), and what was left out (one line
    each)."""
    from dashboard import backend
    from dashboard.caching import prediction_key

    spec = backend.threshold_range(run.model.spec, backend.native_statistics(run.model))

    def plan(mode: str, threshold: float | None, weights: str | None, label: str) -> Plan:
        # the key the pages ask with (dashboard.cache.test_draws_ready): prune with sampled weights is mpm there
        key = prediction_key(mode, 1, backend.mode_threshold(mode, threshold, spec.default), 0, weights)
        return Plan(key["mode"], key["threshold"], label)

    plans = [plan("bma", None, None, "bma"), plan("mpm", None, None, "mpm")]
    named = [view["threshold"] for view in views if "threshold" in view]
    skipped = []
    for threshold in [*named, *extra_thresholds]:
        if not spec.low <= threshold <= spec.high:
            skipped.append(
                f"threshold {threshold:g} is outside this run's range {spec.low:g} to {spec.high:g} "
                "(the page shows its default there)"
            )
            continue
        pruned = plan("prune", threshold, "sample", f"prune at {threshold:g}")
        if all((p.mode, p.threshold) != (pruned.mode, pruned.threshold) for p in plans):
            plans.append(pruned)
    return plans, skipped


def _thresholds(text: str | None) -> list[float]:
    from dashboard.backend import validate

    if text is None:
        return []
    parts = text.split(",")
    validate.whole_number(len(parts), "--thresholds: how many", 1, MAX_THRESHOLDS)
    return [validate.real_number(part.strip(), "--thresholds", -1e6, 1e6) for part in parts]


def main(argv: list[str] | None = None, echo=print) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lesson", help="a lesson's name (assets/lessons/NAME.toml)")
    parser.add_argument("--samples", default=None, help="R, the draws per plan (default: the lesson's largest, or 10)")
    parser.add_argument("--thresholds", default=None, help="more thresholds for prune, comma-separated")
    args = parser.parse_args(argv)

    from core.errors import BNNError
    from dashboard.backend import load_lesson, validate
    from dashboard.links import MAX_SAMPLES

    try:  # every value checked before a run is loaded or a process started
        lesson = load_lesson(args.lesson)
        samples = (
            lesson_samples(lesson)
            if args.samples is None
            else validate.whole_number(args.samples, "--samples", 1, MAX_SAMPLES)
        )
        extra = _thresholds(args.thresholds)
    except BNNError as exc:
        parser.error(str(exc))
    try:
        return prepare(lesson, samples, extra, echo)
    except BNNError as exc:  # a damaged run, a draw that failed: one line, what was kept stays kept
        print(f"prepare_lesson: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:  # Ctrl-C: every draw finished so far is a file in the folder already
        print("prepare_lesson: stopped; the draws kept so far stay kept (run it again to go on)", file=sys.stderr)
        return 130


def prepare(lesson: Any, samples: int, extra_thresholds: list[float], echo=print) -> int:
    """Draw the lesson's plans into the kept-draws folder; 0 when every run was there, 1 otherwise."""
    from dashboard import backend, cache

    draws = backend.DRAW_CACHE
    if backend.dashboard_settings.draw_process_options(backend.secret)["processes"] < 1:
        echo(
            "BNN_DRAW_PROCESSES is 0: the server draws in its own process and keeps no draws on disk, "
            "so there is nothing to prepare."
        )
        return 1
    cache.install_lesson_runs(str(backend.run_store_folder()))  # as on the app's first start ($BNN_LESSON_RUNS)
    stored = {info.run_id for info in backend.list_runs()}
    cache.draw_processes_once()
    folder = cache.kept_draws_folder()
    if draws.shared is None:  # the folder could not be made (core.predict.shared_draws.share logs why)
        echo(f"the kept-draws folder {folder.name}/ beside the run store cannot be written: nothing prepared")
        return 1
    echo(f"lesson {lesson.name}: R = {samples}, draws kept in {folder.name}/ beside the run store")
    missing = 0
    for run_id, (config, steps) in lesson_runs(lesson).items():
        where = f"run {run_id} ({config.method} on {config.dataset}; step{'s' if len(steps) > 1 else ''} "
        where += ", ".join(map(str, steps)) + ")"
        if run_id not in stored:
            missing += 1
            echo(f"{where}: not in the store; train it first (the Train page, or python -m core train ...)")
            continue
        run = backend.load_run(run_id)
        allowed, lowered = backend.samples_allowed(run, run.dataset().n_test, samples)
        if lowered:
            echo(f"{where}: {lowered}")
        if allowed < 1:
            continue
        views = [lesson.steps[number - 1].view for number in steps]
        plans, skipped = plans_for(run, views, extra_thresholds)
        for line in skipped:
            echo(f"{where}: {line}")
        draws.prepare(run, run_id)
        for plan in plans:
            read, written, started = draws.draws_shared, draws.shared.written, time.monotonic()
            held = draws.extend(run, run.dataset().x_test, "test", run_id, plan.mode, allowed, plan.threshold, 0)
            echo(
                f"{where}: {plan.label}, R = {allowed}: {held} draws kept "
                f"({draws.shared.written - written} drawn, {draws.draws_shared - read} read from the folder) "
                f"in {time.monotonic() - started:.1f} s"
            )
    if draws.processes is not None:
        draws.processes.close()
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
