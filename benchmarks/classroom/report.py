"""The load test's record and its table: every interaction's latency and server CPU, what went
wrong, and the Markdown table benchmarks/results/classroom_load.md is made of."""

from __future__ import annotations

import json
import os
import re
import statistics
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from benchmarks.classroom.draws import DrawCounts, Wait

if TYPE_CHECKING:
    from benchmarks.classroom.scenario import Scenario


@dataclass
class Interaction:
    session: int
    kind: str
    seconds: float
    ok: bool
    started: float = 0.0  # wall clock (time.time()) when the widget value was sent
    server_session: str | None = None  # the server's id of the session (to match its script runs)
    cpu_seconds: float = 0.0  # thread CPU of the server's script runs for this interaction
    # to the complete R-draw numbers (the page's fragment polls after a partial first update); None: never
    complete_seconds: float | None = None
    left: bool = False  # the student moved on before the complete numbers (--patience): not in their percentiles


# named in the table
SERVER_SETTINGS = (
    "BNN_CLASSROOM",
    "BNN_COMPUTE_THREADS",
    "BNN_PREDICT_SLOTS",
    "BNN_DRAW_PROCESSES",
    "BNN_DRAW_NICENESS",
    "BNN_TRAINING_NICENESS",
    "BNN_GIL_SWITCH_SECONDS",
    "OMP_NUM_THREADS",
)


@dataclass
class Report:
    scenario: Scenario
    interactions: list[Interaction] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    leaks: list[str] = field(default_factory=list)
    memory_mb: list[float] = field(default_factory=list)
    peak_memory_mb: float = 0.0
    wall_seconds: float = 0.0
    training_epochs_seen: dict[int, int] = field(default_factory=dict)
    trainers_saw_own_progress: dict[int, bool] = field(default_factory=dict)
    load_average: tuple[float, float, float] = (0.0, 0.0, 0.0)
    server_cpu_seconds: float = float("nan")  # the server process's CPU time during the class
    client_cpu_seconds: float = float("nan")  # this process's (the sessions') CPU time during the class
    script_cpu_seconds: float = float("nan")  # of which the script runs' own threads (from the rerun log)
    started: float = 0.0  # wall clock when the class began (after the teacher's first page)
    server_settings: dict[str, str] = field(default_factory=dict)  # the server's environment, as given to it
    thread_seconds: dict[int, float] = field(default_factory=dict)  # server thread id -> its CPU in the class
    thread_names: dict[int, str] = field(default_factory=dict)  # server thread id -> its Python name
    fragment_runs: int = 0  # fragment polls the refining sessions sent (each a fragment's own script run)
    fragment_moves: int = 0  # interactions the server answered with a run of one fragment (a browser's way)
    draw_process_seconds: dict[int, float] = field(default_factory=dict)  # draw process pid -> its CPU in the class
    server_cpu_by_process: list[float] = field(default_factory=list)  # each server process's CPU (--servers)
    proxy_cpu_seconds: float | None = None  # dashboard.serve's proxy process (--proxy-processes), in server CPU
    proxy_peak_memory_mb: float | None = None  # its peak resident memory (VmHWM), in the server's peak
    waits: list[Wait] = field(default_factory=list)  # what each partial first update waited for, and how long
    draws: DrawCounts | None = None  # the draws the servers computed, against the waits

    def latencies(self, kinds: tuple[str, ...] | None = None) -> list[float]:
        return [i.seconds for i in self.interactions if kinds is None or i.kind in kinds]

    def cpu_by_kind(self) -> dict[str, tuple[int, float]]:
        """Interaction kind -> (count, mean thread CPU of its script runs on the server)."""
        kinds: dict[str, list[float]] = {}
        for interaction in self.interactions:
            kinds.setdefault(interaction.kind, []).append(interaction.cpu_seconds)
        return {kind: (len(values), sum(values) / len(values)) for kind, values in kinds.items()}

    def summary(self, kinds: tuple[str, ...] | None = None, complete: bool = False) -> dict[str, float]:
        """n, p50, p95 and max of the latency to the first update (complete: to the complete numbers; an
        interaction that never completed counts as infinitely slow)."""
        values = sorted(
            self.latencies(kinds)
            if not complete
            else [
                float("inf") if i.complete_seconds is None else i.complete_seconds
                for i in self.interactions
                if (kinds is None or i.kind in kinds) and not i.left
            ]
        )
        if not values:
            return {"n": 0, "p50": float("nan"), "p95": float("nan"), "max": float("nan")}
        return {"n": len(values), "p50": statistics.median(values), "p95": percentile(values, 0.95), "max": values[-1]}


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


def attribute_script_cpu(report: Report, rerun_log: Path) -> None:
    """Each script run the server logged (dashboard/app.py, $BNN_RERUN_LOG) goes to the interaction of
    its session that was under way when it started; runs of the class's time count in
    report.script_cpu_seconds."""
    try:
        runs = [json.loads(line) for line in rerun_log.read_text().splitlines() if line.strip()]
    except OSError:
        return
    by_session: dict[str, list[Interaction]] = {}
    for interaction in report.interactions:
        if interaction.server_session:
            by_session.setdefault(interaction.server_session, []).append(interaction)
    total = 0.0
    for run in runs:
        if run.get("start", 0.0) < report.started or not run.get("session"):
            continue  # before the class, or not a session's (a process outside the server)
        total += run.get("cpu", 0.0)
        for interaction in by_session.get(run.get("session"), []):
            if interaction.started - 0.05 <= run["start"] <= interaction.started + interaction.seconds + 0.05:
                interaction.cpu_seconds += run.get("cpu", 0.0)
                break
    report.script_cpu_seconds = total


# --- the table -------------------------------------------------------------------------------------


def table(report: Report) -> str:
    s = report.scenario
    lines = [
        "| interaction | n | p50 (s) | p95 (s) | max (s) |",
        "|---|---|---|---|---|",
    ]
    sliders = ("threshold", "samples")
    groups = [
        ("slider release -> first update of cards and charts (threshold, R)", sliders, False),
        ("slider release -> complete R-draw numbers (threshold, R)", sliders, True),
        ("threshold slider: first update", ("threshold",), False),
        ("threshold slider: complete", ("threshold",), True),
        ("R slider: first update", ("samples",), False),
        ("R slider: complete", ("samples",), True),
        ("page switch", ("page switch",), False),
        ("open a shared link", ("open link",), False),
        ("training sessions' polls", ("train poll",), False),
    ]
    for label, kinds, complete in groups:
        summary = report.summary(kinds, complete=complete)
        lines.append(
            f"| {label} | {summary['n']} | {summary['p50']:.2f} | {summary['p95']:.2f} | {summary['max']:.2f} |"
        )
    moved = [i for i in report.interactions if i.kind in sliders]
    refined = [i for i in moved if i.complete_seconds is None or i.complete_seconds > i.seconds]
    waited = sum(i.complete_seconds - i.seconds for i in refined if i.complete_seconds is not None)
    left = [i for i in report.interactions if i.left]
    rss = [m for m in report.memory_mb if m == m]
    browsed = (
        f"preset {s.preset}, seeds 0-{s.browsed_runs - 1}"
        if s.preset
        else f"{s.train_epochs} epoch(s) with the default settings"
    )
    lines += [
        "",
        f"- sessions: {s.sessions} (2 training, {s.sessions - 2} browsing {s.browsed_runs} cached {s.dataset} "
        f"{'-'.join(['784', *map(str, s.hidden), '10'])} runs: {browsed}), up to {s.interactions} interactions each, "
        f"think time {s.think_seconds} s (x0.5-1.5); "
        + (
            "a slider move inside an st.fragment reruns that fragment alone, as a browser's"
            if s.fragment_moves
            else "every slider move reruns the whole page (--full-page-moves)"
        ),
        "- server: " + ", ".join(f"{name}={value}" for name, value in report.server_settings.items()),
        f"- slider moves whose first update rested on fewer than R draws (refined in place): {len(refined)} of "
        f"{len(moved)}; never completed: {sum(i.complete_seconds is None and not i.left for i in moved)}; "
        + (
            ""
            if s.patience is None
            else f"left before the complete numbers (a student waits at most {s.patience:g} s after a release, "
            f"then moves on; not in the complete rows): {len(left)} ({sum(i.kind in sliders for i in left)} slider "
            "moves); "
        )
        + "their wait from the first "
        f"update to the complete numbers {waited:.0f} s in all (mean {waited / max(len(refined), 1):.1f} s)",
    ]
    if report.draws is not None:
        lines += report.draws.lines(len(moved), len(report.interactions), sum(report.draw_process_seconds.values()))
    lines += [
        f"- interactions answered by a run of one fragment alone: {report.fragment_moves} of "
        f"{len(report.interactions)}",
        f"- errors: {len(report.errors)}; cross-session leaks: {len(report.leaks)}",
        f"- server memory (resident): {rss[0] if rss else float('nan'):.0f} MB after the teacher's first page, "
        f"{max(rss) if rss else float('nan'):.0f} MB at most while sampled, "
        f"peak (VmHWM) {report.peak_memory_mb:.0f} MB",
        f"- trainings: epochs seen by the two training sessions {sorted(report.training_epochs_seen.values())} "
        f"(BNN_MAX_TRAININGS=2, {s.training_hidden.replace(', ', '-')} on {s.dataset}, {s.training_epochs} epochs, "
        f"seeds {s.training_seed_base} and {s.training_seed_base + 1}: configs no earlier class stored; both "
        f"cancelled at the end)",
        f"- CPU time during the class: server {report.server_cpu_seconds:.0f} s "
        f"({report.server_cpu_seconds / max(len(report.interactions), 1):.3f} s per interaction, all kinds), "
        f"load-test client {report.client_cpu_seconds:.0f} s"
        + (
            ""
            if len(report.server_cpu_by_process) < 2
            else f" (server processes, sessions split by index: "
            f"{', '.join(f'{cpu:.0f}' for cpu in report.server_cpu_by_process)} s)"
            if report.proxy_cpu_seconds is None
            else f" (server processes behind the proxy: "
            f"{', '.join(f'{cpu:.0f}' for cpu in report.server_cpu_by_process)} s; the proxy "
            f"{report.proxy_cpu_seconds:.1f} s, peak resident memory "
            f"{report.proxy_peak_memory_mb or float('nan'):.0f} MB)"
        ),
        f"- wall time {report.wall_seconds:.0f} s; load average at the end {report.load_average[0]:.1f} / "
        f"{report.load_average[1]:.1f} / {report.load_average[2]:.1f} (1/5/15 min) on {os.cpu_count()} cores",
    ]
    by_kind = report.cpu_by_kind()
    if report.script_cpu_seconds == report.script_cpu_seconds:  # a rerun log was read
        lines += [
            "",
            "Server CPU per interaction kind (thread CPU of the script runs each interaction caused; "
            "the rest of the server's CPU is its event loop, sending messages and the fragments' polls):",
            "",
            "| interaction | n | CPU per interaction (s) | CPU in all (s) |",
            "|---|---|---|---|",
        ]
        for kind in ("threshold", "samples", "weights", "page switch", "open link", "train", "train poll", "cancel"):
            if kind in by_kind:
                count, mean = by_kind[kind]
                lines.append(f"| {kind} | {count} | {mean:.3f} | {count * mean:.1f} |")
        lines.append(
            f"| script runs in all / server process | | | {report.script_cpu_seconds:.1f} / "
            f"{report.server_cpu_seconds:.1f} |"
        )
    lines += thread_table(report)
    if report.errors or report.leaks:
        lines += ["", "First problems:"] + [f"- {p}" for p in (report.errors + report.leaks)[:10]]
    return "\n".join(lines)


# Python thread names (the server's thread log, benchmarks/classroom/server.py) -> what they do in the server.
THREAD_GROUPS = (
    ("ScriptRunner", "script runs and fragment polls (ScriptRunner threads)"),
    ("bnn-refiner", "background draws (bnn-refiner threads)"),
    ("MainThread", "main thread: tornado event loop, websocket sends and receives"),
)


def thread_groups(report: Report) -> dict[str, tuple[int, float]]:
    """Group -> (threads, CPU seconds during the class); a thread no script run saw alive is unnamed."""
    names = report.thread_names
    groups: dict[str, tuple[int, float]] = {}
    for tid, seconds in report.thread_seconds.items():
        name = names.get(tid)
        group = (
            next(
                (label for prefix, label in THREAD_GROUPS if name.startswith(prefix)),
                "other: " + re.sub(r"[-_]\d+(_\d+)?$", "-N", name),  # Thread-12, ThreadPoolExecutor-0_3
            )
            if name
            else "threads not started by Python's threading (torch's, if any)"
        )
        count, total = groups.get(group, (0, 0.0))
        groups[group] = (count + 1, total + seconds)
    return groups


def thread_table(report: Report) -> list[str]:
    """The server process's CPU during the class by thread group (/proc/<pid>/task), and what the fragment
    polls cost: the script-runner threads' CPU less the full script runs' (the rerun log)."""
    if not report.thread_seconds:
        return []
    groups = thread_groups(report)
    lines = [
        "",
        "Server CPU by thread (user + system: /proc/<pid>/task/*/stat at the class's start and end, and each "
        "thread's time.thread_time as it ended"
        + (
            "; behind dashboard.serve the processes run without the load test's thread log, so the threads that "
            "ended during the class are in no record"
            if report.proxy_cpu_seconds is not None
            else ""
        )
        + "):",
        "",
        "| threads | seen | CPU (s) | share of the server's |",
        "|---|---|---|---|",
    ]
    total = report.server_cpu_seconds
    seen = 0.0
    for group, (count, seconds) in sorted(groups.items(), key=lambda item: -item[1][1]):
        seen += seconds
        lines.append(f"| {group} | {count} | {seconds:.1f} | {seconds / total:.0%} |")
    lines.append(
        f"| not in any thread's record (process-wide work, rounding) | | {total - seen:.1f} | "
        f"{(total - seen) / total:.0%} |"
    )
    lines.append(f"| server process | | {total:.1f} | 100% |")
    if report.draw_process_seconds:
        draws = sum(report.draw_process_seconds.values())
        lines.append(
            f"| beside it: background draws in draw processes (bnn-draws children, their own interpreters, "
            f"lower priority) | {len(report.draw_process_seconds)} | {draws:.1f} | |"
        )
        lines.append(f"| server process and draw processes | | {total + draws:.1f} | |")
    scripts = next((s for g, (_, s) in groups.items() if g.startswith("script runs")), None)
    if scripts is not None and report.script_cpu_seconds == report.script_cpu_seconds:
        fragments = max(0.0, scripts - report.script_cpu_seconds)
        lines += [
            "",
            f"- fragment polls: {report.fragment_runs} fragment runs by the refining sessions; script-runner CPU "
            f"{scripts:.1f} s less the full script runs' {report.script_cpu_seconds:.1f} s (rerun log) = "
            f"{fragments:.1f} s, {fragments / max(report.fragment_runs, 1):.3f} s per fragment run",
        ]
    return lines
