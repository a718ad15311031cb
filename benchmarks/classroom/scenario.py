"""The class: who does what (two sessions train, the rest browse shared runs and move sliders), what
each session must (not) see, and the whole test from server start to report."""

from __future__ import annotations

import asyncio
import os
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from benchmarks.classroom.client import RunResult, Session, number_state, slider_state, text_state, trigger_state
from benchmarks.classroom.draws import Wait, count_draws, kept_draws_at_start, read_draws
from benchmarks.classroom.report import SERVER_SETTINGS, Interaction, Report, attribute_script_cpu
from benchmarks.classroom.server import ProxiedServers, ServerGroup, ThreadCpu, prepare_runs

# Values a class is asked to try: slider positions (threshold steps of the pruning page) and R.
THRESHOLDS = (0.1, 0.25, 0.4, 0.5, 0.6, 0.75, 0.9)
SAMPLES = (1, 5, 10, 20)


@dataclass(frozen=True)
class Scenario:
    sessions: int = 30
    interactions: int = 12  # per browsing session
    max_seconds: float = 600.0
    hidden: tuple[int, ...] = (400, 600)  # the browsed runs: MNIST 784-400-600-10
    dataset: str = "mnist-small"
    browsed_runs: int = 2
    train_epochs: int = 1
    preset: str | None = None  # browse this run preset's seeds 0.. instead (e.g. fast-mnist, the shipped recipe)
    training_hidden: str = "100, 100"  # what the two training sessions train
    # Long enough that the trainings run through the whole class (cancelled at its end, never stored), and
    # within the admission limit, whose CPU estimate follows the machine's measured speed: on a loaded 2-core
    # machine 1000 and then 400 epochs were refused as over 10 min of CPU, so no training ran beside the class.
    training_epochs: int = 100
    training_seed_base: int = field(default_factory=lambda: 100_000 + 10 * random.SystemRandom().randrange(89_999))
    think_seconds: float = 1.0  # a student's pause between interactions (randomised 0.5x-1.5x)
    seed: int = 0
    servers: int = 1  # streamlit processes, session i on server i mod servers (ServerGroup)
    proxy_processes: int = 0  # >0: `python -m dashboard.serve --processes N` instead (ProxiedServers)
    # None: a student waits for the complete numbers before the next move; else for at most this many
    # seconds after the slider's release (then moves on, as a student does who will not wait)
    patience: float | None = None
    # False: the run store's kept draws ($BNN_CACHE_DIR/draws) are emptied first, so the class computes every
    # draw (a cold class); True: kept, as when a lesson is taught again on the same server
    kept_draws: bool = False
    # True: a slider move inside an st.fragment reruns that fragment alone, as a browser sends it (the Pruning
    # page's body); False: every move reruns the whole page, the protocol of the load tests before 2026-11-28
    fragment_moves: bool = True


# --- what a session must (not) see ----------------------------------------------------------------


def check_result(
    session: Session,
    result: RunResult,
    report: Report,
    kind: str,
    expect: dict[str, Any],
    trainer_labels: dict[int, str],
) -> bool:
    """Errors and cross-session leaks in one run's output; True when clean."""
    from streamlit.proto.Alert_pb2 import Alert

    ok = True
    where = f"session {session.index} {kind}"
    if result.status != 0:
        report.errors.append(f"{where}: script finished with status {result.status}")
        ok = False
    for exception in result.of_type("exception"):
        report.errors.append(f"{where}: exception {exception.type}: {exception.message[:200]}")
        ok = False
    for alert in result.of_type("alert"):
        if alert.format == Alert.ERROR:
            report.errors.append(f"{where}: error box: {alert.body[:200]}")
            ok = False
    texts = result.texts()
    run_id = expect.get("run_id")
    if run_id:
        for text in texts:
            text = re.sub(r"\\(.)", r"\1", text)  # the caption is Markdown-escaped (core.validate.plain)
            if text.startswith("Run ") and ":" in text:
                shown = text[4:].split(":", 1)[0]
                if shown != run_id:
                    report.leaks.append(f"{where}: page shows run {shown}, the session's is {run_id}")
                    ok = False
        for slider in result.of_type("slider"):
            if slider.id.endswith(tuple(f":{other}" for other in expect.get("other_runs", ()))):
                report.leaks.append(f"{where}: a slider of another run ({slider.id})")
                ok = False
    if "threshold" in expect:
        slider = next((s for s in result.of_type("slider") if s.label.startswith("threshold")), None)
        if slider is None or abs(slider.value[0] - expect["threshold"]) > 1e-6:
            report.leaks.append(
                f"{where}: threshold slider shows {slider and list(slider.value)}, "
                f"the session set {expect['threshold']}"
            )
            ok = False
    if "samples" in expect:
        slider = next((s for s in result.of_type("slider") if s.label.startswith("Posterior samples")), None)
        if slider is None or int(round(slider.value[0])) != expect["samples"]:
            report.leaks.append(
                f"{where}: R slider shows {slider and list(slider.value)}, the session set {expect['samples']}"
            )
            ok = False
    own_label = trainer_labels.get(session.index)
    for text in texts:
        if (
            "Training in the background" in text
            or "Training queued" in text
            or text.startswith(("**Training**", "**Queued**"))
        ):
            if own_label is None:
                report.leaks.append(f"{where}: sees training progress it never started: {text[:120]!r}")
                ok = False
            elif text.startswith(("**Training**", "**Queued**")) and own_label not in text:
                report.leaks.append(f"{where}: sees another session's training: {text[:120]!r}")
                ok = False
    if kind in ("threshold", "samples") and ok:
        charts = [c for c in result.of_type("vega_lite_chart") if len(c.datasets) > 0 or c.HasField("data")]
        if len(result.of_type("metric")) < 4 or not charts:
            report.errors.append(
                f"{where}: the cards or charts are missing after the slider moved (page "
                f"{session.page!r}: {len(result.of_type('metric'))} cards, {len(charts)} charts, "
                f"elements {[name for name, _ in result.elements][:40]}; charts without data: "
                f"{[c.spec[:300] for c in result.of_type('vega_lite_chart') if c not in charts]})"
            )
            ok = False
    return ok


# --- the scenario ------------------------------------------------------------------------------------


async def timed(
    session: Session,
    report: Report,
    kind: str,
    expect: dict[str, Any],
    trainer_labels: dict,
    page: str | None = None,
    changes: dict | None = None,
    patience: float | None = None,
) -> RunResult | None:
    started, wall = time.perf_counter(), time.time()
    if os.environ.get("BNN_LOAD_DEBUG"):
        print(f"{time.strftime('%H:%M:%S')} session {session.index} {kind} ...", file=sys.stderr, flush=True)
    try:
        result = await session.rerun(page=page, changes=changes)
    except (asyncio.TimeoutError, OSError, Exception) as exc:  # a dropped connection or a timeout
        report.errors.append(f"session {session.index} {kind}: {type(exc).__name__}: {exc}")
        report.interactions.append(
            Interaction(session.index, kind, time.perf_counter() - started, False, wall, session.server_session)
        )
        return None
    seconds = time.perf_counter() - started
    report.fragment_moves += result.fragment
    complete: float | None = seconds
    left = False  # the student moved on before the complete numbers (Scenario.patience)
    if partial(result):  # the first update rests on some of the R draws: follow the page's polls to the rest
        waiting, failed = waited_for(session, result), False
        try:
            result, complete, left = await refine(session, report, result, started, trainer_labels, patience)
        except (asyncio.TimeoutError, OSError, Exception) as exc:
            report.errors.append(f"session {session.index} {kind} (refining): {type(exc).__name__}: {exc}")
            report.interactions.append(
                Interaction(session.index, kind, seconds, False, wall, session.server_session, complete_seconds=None)
            )
            complete, failed = None, True
        if waiting is not None:  # what the session waited for, and until when (the draw counts)
            until = time.time() if complete is None else wall + complete
            report.waits.append(Wait(session.index, *waiting, wall, until))
        if failed:
            return None
    ok = check_result(session, result, report, kind, expect, trainer_labels)
    report.interactions.append(
        Interaction(
            session.index, kind, seconds, ok, wall, session.server_session, complete_seconds=complete, left=left
        )
    )
    return result


# The Pruning page's caption while its cards rest on some of the R draws (dashboard/views/pruning.py).
PARTIAL = re.compile(r"Based on (\d+) of (\d+) draws")


def partial(result: RunResult) -> bool:
    return any(PARTIAL.search(text) for text in result.texts())


def waited_for(session: Session, result: RunResult) -> tuple[str, float, int] | None:
    """(run, threshold, R) of a partial first update: the draws 0..R-1 the session now waits for."""
    samples = next((int(m.group(2)) for m in map(PARTIAL.search, result.texts()) if m), None)
    slider = next((s for s in result.of_type("slider") if s.label.startswith("threshold")), None)
    if samples is None or slider is None or session.run_id is None:
        return None
    return session.run_id, float(slider.value[0]), samples


async def refine(
    session: Session,
    report: Report,
    result: RunResult,
    started: float,
    trainer_labels: dict,
    patience: float | None = None,
) -> tuple[RunResult, float | None, bool]:
    """Poll the page's fragments as the browser does until a run shows the complete numbers: (that run,
    seconds from the widget change to it, False), or None seconds when nothing polls (the page never
    refines); with `patience`, (the last run, None, True) once that many seconds passed without them
    (the student moved on)."""
    due_at: dict[str, float] = {}  # fragment id -> when its own timer fires (each has its run_every, as in a browser)
    while partial(result):
        if not session.auto_reruns:
            report.errors.append(f"session {session.index}: partial cards and no fragment polls for the rest")
            return result, None, False
        if patience is not None and time.perf_counter() - started >= patience:
            return result, None, True
        now = time.perf_counter()
        for fragment_id, every in session.auto_reruns.items():
            due_at.setdefault(fragment_id, now + every)
        first = min(due_at[f] for f in session.auto_reruns)
        await asyncio.sleep(max(0.0, first - now))
        now = time.perf_counter()
        due = [f for f in session.auto_reruns if due_at[f] <= now + 0.01]
        for fragment_id in due:
            due_at[fragment_id] = now + session.auto_reruns[fragment_id]
        polled = await session.poll_fragments(due)
        report.fragment_runs += sum(run.fragment for run in polled)
        for run in polled:
            if run.fragment:  # a fragment's run: only its own errors are checked here
                check_result(session, run, report, "refine", {}, trainer_labels)
        full = [run for run in polled if not run.fragment]
        if full:
            result = full[-1]
        elif polled and not any(partial(run) for run in polled):
            return polled[-1], time.perf_counter() - started, False
    return result, time.perf_counter() - started, False


async def browse(
    session: Session,
    report: Report,
    scenario: Scenario,
    runs: list[str],
    deadline: float,
    trainer_labels: dict,
    rng: random.Random,
) -> None:
    others = [r for r in runs if r != session.run_id]
    expect: dict[str, Any] = {"run_id": session.run_id, "other_runs": others}
    await session.connect()
    if await timed(session, report, "open link", {"run_id": None}, trainer_labels) is None:
        return
    if await timed(session, report, "page switch", expect, trainer_labels, page="Pruning") is None:
        return
    threshold_value = samples_value = None
    for _ in range(scenario.interactions):
        if time.monotonic() > deadline:
            break
        await asyncio.sleep(scenario.think_seconds * rng.uniform(0.5, 1.5))
        action = rng.choices(["threshold", "samples", "page switch"], weights=[4, 3, 2])[0]
        if action == "page switch" or session.page != "Pruning":
            target = "Pruning" if session.page != "Pruning" else rng.choice(["Inclusion & masks", "Train"])
            await timed(session, report, "page switch", expect, trainer_labels, page=target, patience=scenario.patience)
            continue
        if action == "threshold":
            slider = session.find("slider", "threshold")
            if slider is None:
                report.errors.append(f"session {session.index}: no threshold slider on {session.page}")
                continue
            low, high = slider.min, slider.max
            threshold_value = round(low + (high - low) * rng.choice(THRESHOLDS), 6)
            step = slider.step or 0.01
            threshold_value = round(low + round((threshold_value - low) / step) * step, 10)
            changes = {slider.id: slider_state(slider.id, [threshold_value])}
            await timed(
                session,
                report,
                "threshold",
                dict(expect, threshold=threshold_value),
                trainer_labels,
                changes=changes,
                patience=scenario.patience,
            )
        else:
            slider = session.find("slider", "Posterior samples")
            if slider is None:
                report.errors.append(f"session {session.index}: no R slider on {session.page}")
                continue
            if slider.disabled:  # Pruning opens in prune with mean weights, which draw nothing: sample them
                weights = session.find("radio", "Weights of the kept connections")
                if weights is None:
                    report.errors.append(f"session {session.index}: R is off and there is no weights choice")
                    continue
                result = await timed(
                    session,
                    report,
                    "weights",
                    expect,
                    trainer_labels,
                    changes={weights.id: text_state(weights.id, "sample")},
                    patience=scenario.patience,
                )
                slider = session.find("slider", "Posterior samples") if result is not None else None
                if slider is None or slider.disabled:
                    report.errors.append(f"session {session.index}: R slider still off with sampled weights")
                    continue
            samples_value = rng.choice(SAMPLES)
            changes = {slider.id: slider_state(slider.id, [float(samples_value)])}
            await timed(
                session,
                report,
                "samples",
                dict(expect, samples=samples_value),
                trainer_labels,
                changes=changes,
                patience=scenario.patience,
            )
    await session.close()


async def train(
    session: Session, report: Report, scenario: Scenario, deadline: float, trainer_labels: dict, stop: asyncio.Event
) -> None:
    """A session that trains from the form (seed = its index) and polls its progress until `stop`."""
    expect: dict[str, Any] = {}
    await session.connect()
    first = await timed(session, report, "open link", expect, trainer_labels)
    if first is None:
        return
    fields = {e.label: e for e in first.of_type("text_input") + first.of_type("number_input")}
    epochs_label = next((label for label in fields if label.startswith("Epochs")), None)
    seed, epochs, hidden = fields.get("Seed"), fields.get(epochs_label), fields.get("Hidden widths")
    button = next((b for b in first.of_type("button") if b.label == "Train"), None)
    if not (seed and epochs and hidden and button):
        report.errors.append(f"session {session.index}: the Train form is incomplete")
        return
    # The seed is a text field (a number field clamped out-of-range seeds silently).
    # A seed no earlier class used: a stored run of the same config would come back at once from the
    # cache, and nothing would train while the class browses (every seed has six digits, so neither
    # trainer's label is a prefix of the other's).
    training_seed = scenario.training_seed_base + session.index
    seed_state = (
        text_state(seed.id, str(training_seed))
        if seed in first.of_type("text_input")
        else number_state(seed.id, training_seed)
    )
    changes = {
        seed.id: seed_state,
        epochs.id: text_state(epochs.id, str(scenario.training_epochs))
        if epochs in first.of_type("text_input")
        else number_state(epochs.id, scenario.training_epochs),
        hidden.id: text_state(hidden.id, scenario.training_hidden),
    }
    session.widgets.update(changes)
    trainer_labels[session.index] = f"seed {training_seed}"
    await timed(session, report, "train", expect, trainer_labels, changes={button.id: trigger_state(button.id)})
    epochs_seen = 0
    while not stop.is_set() and time.monotonic() < deadline:
        await asyncio.sleep(2.0)
        result = await timed(session, report, "train poll", expect, trainer_labels)
        if result is None:
            break
        if os.environ.get("BNN_LOAD_DEBUG"):
            print(f"session {session.index} sees {[t[:80] for t in result.texts()]}", file=sys.stderr)
        if any(t.startswith("**Training**") and trainer_labels[session.index] in t for t in result.texts()):
            report.trainers_saw_own_progress[session.index] = True
        for progress in result.of_type("progress"):
            text = progress.text
            if text.startswith("epoch "):
                epochs_seen = max(epochs_seen, int(text.split()[1].split("/")[0]))
    report.training_epochs_seen[session.index] = epochs_seen
    if session.last is not None:  # cancel the own request before leaving
        cancel = next((b for b in session.last.of_type("button") if b.label.startswith("Cancel")), None)
        if cancel is not None:
            await timed(
                session, report, "cancel", expect, trainer_labels, changes={cancel.id: trigger_state(cancel.id)}
            )
    await session.close()


async def run_class(runs: list[str], scenario: Scenario, report: Report, server: ServerGroup | ProxiedServers) -> None:
    rng = random.Random(scenario.seed)
    deadline = time.monotonic() + scenario.max_seconds
    trainer_labels: dict[int, str] = {}
    stop = asyncio.Event()
    trainers = min(2, scenario.sessions)
    sessions = [
        Session(
            i,
            server.url_of(i),
            None if i < trainers else runs[i % len(runs)],
            fragment_moves=scenario.fragment_moves,
        )
        for i in range(scenario.sessions)
    ]

    threads = ThreadCpu(server.pids, server.thread_log)

    async def sample_memory() -> None:
        while not stop.is_set():
            rss, peak = server.memory_mb()
            report.memory_mb.append(rss)
            report.peak_memory_mb = max(report.peak_memory_mb, peak)
            await asyncio.sleep(1.0)

    # The teacher opens the app before the class: the server's first script run imports torch
    # and the project (tens of seconds on a busy machine), which no student should wait for.
    for address in server.urls:
        teacher = Session(-1, address, None, timeout=300)
        await teacher.connect()
        await teacher.rerun()
        await teacher.close()
    report.memory_mb.append(server.memory_mb()[0])
    report.started = time.time()
    server_cpu, client_cpu = server.cpu_seconds(), time.process_time()
    proxy_cpu = server.proxy_cpu_seconds() if isinstance(server, ProxiedServers) else None
    each_cpu = [handle.cpu_seconds() for handle in server.servers]
    draws_before = server.draw_process_cpu()
    threads.begin()
    memory = asyncio.create_task(sample_memory())
    training = [
        asyncio.create_task(train(s, report, scenario, deadline, trainer_labels, stop)) for s in sessions[:trainers]
    ]
    await asyncio.sleep(3.0)  # the trainings start first, as in class
    browsing = []
    for session in sessions[trainers:]:
        browsing.append(
            asyncio.create_task(
                browse(session, report, scenario, runs, deadline, trainer_labels, random.Random(rng.random()))
            )
        )
        await asyncio.sleep(0.1)  # students do not all click in the same millisecond
    await asyncio.gather(*browsing, return_exceptions=False)
    stop.set()
    await asyncio.gather(*training)
    await memory
    threads.finish()
    report.server_cpu_seconds = server.cpu_seconds() - server_cpu
    report.server_cpu_by_process = [handle.cpu_seconds() - before for handle, before in zip(server.servers, each_cpu)]
    if proxy_cpu is not None:
        report.proxy_cpu_seconds = server.proxy_cpu_seconds() - proxy_cpu
        report.proxy_peak_memory_mb = server.proxy_memory_mb()[1]
    draws_after = server.draw_process_cpu()  # a child that ended during the class is not counted
    report.draw_process_seconds = {pid: cpu - draws_before.get(pid, 0.0) for pid, cpu in draws_after.items()}
    report.thread_seconds, report.thread_names = threads.used()
    report.client_cpu_seconds = time.process_time() - client_cpu


def run_load_test(scenario: Scenario, cache_dir: Path | None = None, work_dir: Path | None = None) -> Report:
    work = Path(work_dir or tempfile.mkdtemp(prefix="bnn-classroom-"))
    cache = Path(cache_dir or work / "cache")
    rerun_log = work / "reruns.jsonl"
    env = dict(
        os.environ,
        BNN_CACHE_DIR=str(cache),
        BNN_OFFLINE="1",
        BNN_MAX_TRAININGS="2",
        PYTHONUNBUFFERED="1",
        BNN_RERUN_LOG=str(rerun_log),
        BNN_THREAD_LOG=str(work / "threads.jsonl"),
    )
    env.setdefault("BNN_CLASSROOM", "1")  # a class runs the app in classroom mode
    runs = prepare_runs(scenario, env)
    kept_at_start = kept_draws_at_start(cache, scenario.kept_draws)
    if scenario.proxy_processes:
        server: ServerGroup | ProxiedServers = ProxiedServers(env, work / "serve.log", scenario.proxy_processes)
    else:
        server = ServerGroup(
            env, [work / ("streamlit.log" if k == 0 else f"streamlit{k}.log") for k in range(scenario.servers)]
        )
    report = Report(scenario, server_settings={name: env.get(name, "(unset)") for name in SERVER_SETTINGS})
    started = time.perf_counter()
    try:
        server.wait_healthy()
        asyncio.run(asyncio.wait_for(run_class(runs, scenario, report, server), scenario.max_seconds + 300))
    except asyncio.TimeoutError:
        report.errors.append(f"the class did not finish within {scenario.max_seconds + 300:.0f} s")
    finally:
        report.wall_seconds = time.perf_counter() - started
        report.load_average = os.getloadavg()
        server.stop()
    attribute_script_cpu(report, rerun_log)
    report.draws = count_draws(read_draws(rerun_log, report.started), report.waits, kept_at_start)
    for path in dict.fromkeys(handle.log for handle in server.servers):  # the proxy's processes share one log
        log = path.read_text()
        if "Traceback" in log:
            report.errors.append("the server log has a traceback:\n" + log[log.index("Traceback") :][:2000])
    return report
