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
"""

from __future__ import annotations

import argparse
import re
import asyncio
import json
import os
import random
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
APP = ROOT / "dashboard" / "app.py"
RESULTS = ROOT / "benchmarks" / "results"
HOST = "127.0.0.1"  # the load test never talks to anything else

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
    # Long enough that the trainings run through the whole class (cancelled at its end, never stored).
    training_epochs: int = 1000
    training_seed_base: int = field(default_factory=lambda: 100_000 + 10 * random.SystemRandom().randrange(89_999))
    think_seconds: float = 1.0  # a student's pause between interactions (randomised 0.5x-1.5x)
    seed: int = 0


@dataclass
class Interaction:
    session: int
    kind: str
    seconds: float
    ok: bool
    started: float = 0.0  # wall clock (time.time()) when the widget value was sent
    server_session: str | None = None  # the server's id of the session (to match its script runs)
    cpu_seconds: float = 0.0  # thread CPU of the server's script runs for this interaction


SERVER_SETTINGS = ("BNN_CLASSROOM", "BNN_COMPUTE_THREADS", "BNN_PREDICT_SLOTS", "OMP_NUM_THREADS")  # named in the table


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

    def latencies(self, kinds: tuple[str, ...] | None = None) -> list[float]:
        return [i.seconds for i in self.interactions if kinds is None or i.kind in kinds]

    def cpu_by_kind(self) -> dict[str, tuple[int, float]]:
        """Interaction kind -> (count, mean thread CPU of its script runs on the server)."""
        kinds: dict[str, list[float]] = {}
        for interaction in self.interactions:
            kinds.setdefault(interaction.kind, []).append(interaction.cpu_seconds)
        return {kind: (len(values), sum(values) / len(values)) for kind, values in kinds.items()}

    def summary(self, kinds: tuple[str, ...] | None = None) -> dict[str, float]:
        values = sorted(self.latencies(kinds))
        if not values:
            return {"n": 0, "p50": float("nan"), "p95": float("nan"), "max": float("nan")}
        return {"n": len(values), "p50": statistics.median(values), "p95": percentile(values, 0.95),
                "max": values[-1]}


def percentile(sorted_values: list[float], q: float) -> float:
    """The q-quantile by linear interpolation between order statistics."""
    if len(sorted_values) == 1:
        return sorted_values[0]
    position = q * (len(sorted_values) - 1)
    low = int(position)
    high = min(low + 1, len(sorted_values) - 1)
    return sorted_values[low] + (sorted_values[high] - sorted_values[low]) * (position - low)


# --- the server --------------------------------------------------------------------------------

def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def prepare_runs(scenario: Scenario, env: dict[str, str]) -> list[str]:
    """Train (or find cached) the runs the class browses; returns their ids."""
    if scenario.preset:
        configs = (f"[dataclasses.replace(get_preset({scenario.preset!r}), seed=s) "
                   f"for s in range({scenario.browsed_runs})]")
    else:
        configs = (f"[RunConfig(dataset={scenario.dataset!r}, hidden={tuple(scenario.hidden)!r}, seed=s, "
                   f"train={{'epochs': {scenario.train_epochs}}}) for s in range({scenario.browsed_runs})]")
    code = (
        "import dataclasses, json, sys, torch; torch.set_num_threads(1)\n"
        "from core.runs import RunConfig, get_preset, train_run\n"
        f"ids = [train_run(config).run_id for config in {configs}]\n"
        "print(json.dumps(ids))\n")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=1800)
    if done.returncode != 0:
        raise RuntimeError(f"training the browsed runs failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


class Server:
    """`streamlit run dashboard/app.py` on 127.0.0.1:<free port>, stopped on exit."""

    def __init__(self, env: dict[str, str], log: Path):
        self.port = free_port()
        self.url = f"http://{HOST}:{self.port}"
        self.log = log
        self._handle = open(log, "w")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "streamlit", "run", str(APP), "--server.headless", "true",
             "--server.port", str(self.port), "--server.address", HOST, "--browser.gatherUsageStats", "false"],
            cwd=ROOT, env=env, stdout=self._handle, stderr=subprocess.STDOUT)

    def wait_healthy(self, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"streamlit exited with {self.process.returncode}:\n{self.log.read_text()}")
            try:
                with urllib.request.urlopen(f"{self.url}/_stcore/health", timeout=2) as response:
                    if response.status == 200:
                        return
            except OSError:
                time.sleep(0.5)
        raise RuntimeError(f"streamlit did not answer within {timeout} s")

    def memory_mb(self) -> tuple[float, float]:
        """(resident, peak resident) memory of the server process in MB, from /proc."""
        values = {}
        try:
            for line in Path(f"/proc/{self.process.pid}/status").read_text().splitlines():
                if line.startswith(("VmRSS:", "VmHWM:")):
                    key, amount = line.split(":", 1)
                    values[key] = float(amount.split()[0]) / 1024
        except OSError:
            pass
        return values.get("VmRSS", float("nan")), values.get("VmHWM", float("nan"))

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server process so far (not of its training children)."""
        try:
            fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
            return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
        except (OSError, ValueError, IndexError):
            return float("nan")

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()
        self._handle.close()


# --- one session speaking Streamlit's protocol ----------------------------------------------------

class RunResult:
    """What one script run sent: its elements in order, and how it ended."""

    def __init__(self) -> None:
        self.elements: list[tuple[str, Any]] = []
        self.status: int | None = None

    def of_type(self, kind: str) -> list[Any]:
        return [element for name, element in self.elements if name == kind]

    def texts(self) -> list[str]:
        texts = []
        for name, element in self.elements:
            if name in ("markdown", "heading", "alert", "text"):
                texts.append(getattr(element, "body", ""))
            elif name == "progress":
                texts.append(element.text)
        return texts


class Session:
    def __init__(self, index: int, url: str, run_id: str | None, timeout: float = 120.0):
        self.index = index
        self.ws_url = url.replace("http://", "ws://") + "/_stcore/stream"
        self.run_id = run_id
        self.timeout = timeout
        self.pages: dict[str, str] = {}  # page name -> script hash
        self.page = ""
        self.server_session: str | None = None  # the server's session id (new_session message)
        self.widgets: dict[str, Any] = {}  # widget id -> WidgetState (what the browser would resend)
        self.last: RunResult | None = None
        self._ws = None
        self._reader: asyncio.Task | None = None
        self._current: RunResult | None = None
        self._finished: asyncio.Future | None = None

    async def connect(self) -> None:
        import websockets
        self._ws = await websockets.connect(self.ws_url, subprotocols=["streamlit"], max_size=None,
                                            open_timeout=self.timeout, ping_interval=None)
        self._reader = asyncio.create_task(self._read())
        self._reader.add_done_callback(self._reader_ended)

    def _reader_ended(self, task: asyncio.Task) -> None:
        """A dropped connection or an unreadable message fails the interaction waiting for it."""
        if task.cancelled():
            return
        error = task.exception() or ConnectionError("the server closed the connection")
        if self._finished is not None and not self._finished.done():
            self._finished.set_exception(error)

    async def close(self) -> None:
        if self._ws is not None:
            await self._ws.close()
        if self._reader is not None:
            self._reader.cancel()

    async def _read(self) -> None:
        from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
        async for data in self._ws:
            msg = ForwardMsg()
            msg.ParseFromString(data)
            kind = msg.WhichOneof("type")
            if kind == "new_session":
                self._current = RunResult()
                self.server_session = msg.new_session.initialize.session_id or self.server_session
            elif kind == "navigation":
                self.pages = {page.page_name: page.page_script_hash for page in msg.navigation.app_pages}
                current = [p.page_name for p in msg.navigation.app_pages
                           if p.page_script_hash == msg.navigation.page_script_hash]
                self.page = current[0] if current else self.page
            elif kind == "delta" and msg.delta.WhichOneof("type") == "new_element" and self._current is not None:
                element = msg.delta.new_element
                name = element.WhichOneof("type")
                if name is not None:
                    self._current.elements.append((name, getattr(element, name)))
            elif kind == "script_finished":
                # A fragment's own run, or a run the app itself cut short with st.rerun() (the
                # next one follows at once): wait for the run that finishes.
                if msg.script_finished in (ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY,
                                           ForwardMsg.FINISHED_EARLY_FOR_RERUN):
                    continue
                if self._current is not None:
                    self._current.status = msg.script_finished
                if self._finished is not None and not self._finished.done():
                    self._finished.set_result(self._current)

    async def rerun(self, page: str | None = None, changes: dict[str, Any] | None = None) -> RunResult:
        """Rerun the script (on `page`, with widget `changes` by id) and wait for it to finish."""
        from streamlit.proto.BackMsg_pb2 import BackMsg

        states = dict(self.widgets)
        states.update(changes or {})
        msg = BackMsg()
        client = msg.rerun_script
        client.SetInParent()  # an empty ClientState must still make this a rerun request
        if self.run_id:
            client.query_string = f"run={self.run_id}"
        if page is not None:
            client.page_script_hash = self.pages.get(page, "")
            client.page_name = page
        elif self.page and self.page in self.pages:
            client.page_script_hash = self.pages[self.page]
        for state in states.values():
            if not state.HasField("trigger_value"):
                client.widget_states.widgets.append(state)
        for state in (changes or {}).values():
            if state.HasField("trigger_value"):
                client.widget_states.widgets.append(state)
        self._finished = asyncio.get_running_loop().create_future()
        await self._ws.send(msg.SerializeToString())
        result = await asyncio.wait_for(self._finished, self.timeout)
        self.last = result
        self._remember_widgets(result)
        return result

    def _remember_widgets(self, result: RunResult) -> None:
        """Keep the value widgets show, as the browser keeps its widget states."""
        for name, element in result.elements:
            if name == "slider":
                self.widgets[element.id] = slider_state(element.id, list(element.value))

    def find(self, kind: str, label_start: str) -> Any:
        assert self.last is not None
        for element in self.last.of_type(kind):
            if element.label.startswith(label_start):
                return element
        return None


def slider_state(widget_id: str, values: list[float]) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    state = WidgetState(id=widget_id)
    state.double_array_value.data.extend(values)
    return state


def number_state(widget_id: str, value: int) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    return WidgetState(id=widget_id, int_value=int(value))


def text_state(widget_id: str, value: str) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    return WidgetState(id=widget_id, string_value=value)


def trigger_state(widget_id: str) -> Any:
    from streamlit.proto.WidgetStates_pb2 import WidgetState
    return WidgetState(id=widget_id, trigger_value=True)


# --- what a session must (not) see ----------------------------------------------------------------

def check_result(session: Session, result: RunResult, report: Report, kind: str, expect: dict[str, Any],
                 trainer_labels: dict[int, str]) -> bool:
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
            report.leaks.append(f"{where}: threshold slider shows {slider and list(slider.value)}, "
                                f"the session set {expect['threshold']}")
            ok = False
    if "samples" in expect:
        slider = next((s for s in result.of_type("slider") if s.label.startswith("Posterior samples")), None)
        if slider is None or int(round(slider.value[0])) != expect["samples"]:
            report.leaks.append(f"{where}: R slider shows {slider and list(slider.value)}, "
                                f"the session set {expect['samples']}")
            ok = False
    own_label = trainer_labels.get(session.index)
    for text in texts:
        if "Training in the background" in text or "Training queued" in text or text.startswith(
                ("**Training**", "**Queued**")):
            if own_label is None:
                report.leaks.append(f"{where}: sees training progress it never started: {text[:120]!r}")
                ok = False
            elif text.startswith(("**Training**", "**Queued**")) and own_label not in text:
                report.leaks.append(f"{where}: sees another session's training: {text[:120]!r}")
                ok = False
    if kind in ("threshold", "samples") and ok:
        charts = [c for c in result.of_type("vega_lite_chart") if len(c.datasets) > 0 or c.HasField("data")]
        if len(result.of_type("metric")) < 4 or not charts:
            report.errors.append(f"{where}: the cards or charts are missing after the slider moved (page "
                                 f"{session.page!r}: {len(result.of_type('metric'))} cards, {len(charts)} charts, "
                                 f"elements {[name for name, _ in result.elements][:40]}; charts without data: "
                                 f"{[c.spec[:300] for c in result.of_type('vega_lite_chart') if c not in charts]})")
            ok = False
    return ok


# --- the scenario ------------------------------------------------------------------------------------

async def timed(session: Session, report: Report, kind: str, expect: dict[str, Any], trainer_labels: dict,
                page: str | None = None, changes: dict | None = None) -> RunResult | None:
    started, wall = time.perf_counter(), time.time()
    if os.environ.get("BNN_LOAD_DEBUG"):
        print(f"{time.strftime('%H:%M:%S')} session {session.index} {kind} ...", file=sys.stderr, flush=True)
    try:
        result = await session.rerun(page=page, changes=changes)
    except (asyncio.TimeoutError, OSError, Exception) as exc:  # a dropped connection or a timeout
        report.errors.append(f"session {session.index} {kind}: {type(exc).__name__}: {exc}")
        report.interactions.append(Interaction(session.index, kind, time.perf_counter() - started, False, wall,
                                               session.server_session))
        return None
    seconds = time.perf_counter() - started
    ok = check_result(session, result, report, kind, expect, trainer_labels)
    report.interactions.append(Interaction(session.index, kind, seconds, ok, wall, session.server_session))
    return result


async def browse(session: Session, report: Report, scenario: Scenario, runs: list[str], deadline: float,
                 trainer_labels: dict, rng: random.Random) -> None:
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
            await timed(session, report, "page switch", expect, trainer_labels, page=target)
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
            await timed(session, report, "threshold", dict(expect, threshold=threshold_value), trainer_labels,
                        changes=changes)
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
                result = await timed(session, report, "weights", expect, trainer_labels,
                                     changes={weights.id: text_state(weights.id, "sample")})
                slider = session.find("slider", "Posterior samples") if result is not None else None
                if slider is None or slider.disabled:
                    report.errors.append(f"session {session.index}: R slider still off with sampled weights")
                    continue
            samples_value = rng.choice(SAMPLES)
            changes = {slider.id: slider_state(slider.id, [float(samples_value)])}
            await timed(session, report, "samples", dict(expect, samples=samples_value), trainer_labels,
                        changes=changes)
    await session.close()


async def train(session: Session, report: Report, scenario: Scenario, deadline: float, trainer_labels: dict,
                stop: asyncio.Event) -> None:
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
    seed_state = text_state(seed.id, str(training_seed)) if seed in first.of_type("text_input") \
        else number_state(seed.id, training_seed)
    changes = {seed.id: seed_state,
               epochs.id: text_state(epochs.id, str(scenario.training_epochs)) if epochs in first.of_type("text_input")
               else number_state(epochs.id, scenario.training_epochs),
               hidden.id: text_state(hidden.id, scenario.training_hidden)}
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
            await timed(session, report, "cancel", expect, trainer_labels, changes={cancel.id: trigger_state(cancel.id)})
    await session.close()


async def run_class(url: str, runs: list[str], scenario: Scenario, report: Report, server: Server) -> None:
    rng = random.Random(scenario.seed)
    deadline = time.monotonic() + scenario.max_seconds
    trainer_labels: dict[int, str] = {}
    stop = asyncio.Event()
    trainers = min(2, scenario.sessions)
    sessions = [Session(i, url, None if i < trainers else runs[i % len(runs)]) for i in range(scenario.sessions)]

    async def sample_memory() -> None:
        while not stop.is_set():
            rss, peak = server.memory_mb()
            report.memory_mb.append(rss)
            report.peak_memory_mb = max(report.peak_memory_mb, peak)
            await asyncio.sleep(1.0)

    # The teacher opens the app before the class: the server's first script run imports torch
    # and the project (tens of seconds on a busy machine), which no student should wait for.
    teacher = Session(-1, url, None, timeout=300)
    await teacher.connect()
    await teacher.rerun()
    await teacher.close()
    report.memory_mb.append(server.memory_mb()[0])
    report.started = time.time()
    server_cpu, client_cpu = server.cpu_seconds(), time.process_time()
    memory = asyncio.create_task(sample_memory())
    training = [asyncio.create_task(train(s, report, scenario, deadline, trainer_labels, stop))
                for s in sessions[:trainers]]
    await asyncio.sleep(3.0)  # the trainings start first, as in class
    browsing = []
    for session in sessions[trainers:]:
        browsing.append(asyncio.create_task(browse(session, report, scenario, runs, deadline, trainer_labels,
                                                   random.Random(rng.random()))))
        await asyncio.sleep(0.1)  # students do not all click in the same millisecond
    await asyncio.gather(*browsing, return_exceptions=False)
    stop.set()
    await asyncio.gather(*training)
    await memory
    report.server_cpu_seconds = server.cpu_seconds() - server_cpu
    report.client_cpu_seconds = time.process_time() - client_cpu


def run_load_test(scenario: Scenario, cache_dir: Path | None = None, work_dir: Path | None = None) -> Report:
    work = Path(work_dir or tempfile.mkdtemp(prefix="bnn-classroom-"))
    cache = Path(cache_dir or work / "cache")
    rerun_log = work / "reruns.jsonl"
    env = dict(os.environ, BNN_CACHE_DIR=str(cache), BNN_OFFLINE="1", BNN_MAX_TRAININGS="2",
               PYTHONUNBUFFERED="1", BNN_RERUN_LOG=str(rerun_log))
    env.setdefault("BNN_CLASSROOM", "1")  # a class runs the app in classroom mode
    runs = prepare_runs(scenario, env)
    server = Server(env, work / "streamlit.log")
    report = Report(scenario, server_settings={name: env.get(name, "(unset)") for name in SERVER_SETTINGS})
    started = time.perf_counter()
    try:
        server.wait_healthy()
        asyncio.run(asyncio.wait_for(run_class(server.url, runs, scenario, report, server),
                                     scenario.max_seconds + 300))
    except asyncio.TimeoutError:
        report.errors.append(f"the class did not finish within {scenario.max_seconds + 300:.0f} s")
    finally:
        report.wall_seconds = time.perf_counter() - started
        report.load_average = os.getloadavg()
        server.stop()
    attribute_script_cpu(report, rerun_log)
    log = (work / "streamlit.log").read_text()
    if "Traceback" in log:
        report.errors.append("the server log has a traceback:\n" + log[log.index("Traceback"):][:2000])
    return report


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
    groups = [("slider release -> cards and charts (threshold, R)", ("threshold", "samples")),
              ("threshold slider", ("threshold",)), ("R slider", ("samples",)), ("page switch", ("page switch",)),
              ("open a shared link", ("open link",)), ("training sessions' polls", ("train poll",))]
    for label, kinds in groups:
        summary = report.summary(kinds)
        lines.append(f"| {label} | {summary['n']} | {summary['p50']:.2f} | {summary['p95']:.2f} | "
                     f"{summary['max']:.2f} |")
    rss = [m for m in report.memory_mb if m == m]
    browsed = (f"preset {s.preset}, seeds 0-{s.browsed_runs - 1}" if s.preset
               else f"{s.train_epochs} epoch(s) with the default settings")
    lines += [
        "",
        f"- sessions: {s.sessions} (2 training, {s.sessions - 2} browsing {s.browsed_runs} cached {s.dataset} "
        f"{'-'.join(['784', *map(str, s.hidden), '10'])} runs: {browsed}), up to {s.interactions} interactions each, "
        f"think time {s.think_seconds} s (x0.5-1.5)",
        "- server: " + ", ".join(f"{name}={value}" for name, value in report.server_settings.items()),
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
        f"load-test client {report.client_cpu_seconds:.0f} s",
        f"- wall time {report.wall_seconds:.0f} s; load average at the end {report.load_average[0]:.1f} / "
        f"{report.load_average[1]:.1f} / {report.load_average[2]:.1f} (1/5/15 min) on {os.cpu_count()} cores",
    ]
    by_kind = report.cpu_by_kind()
    if report.script_cpu_seconds == report.script_cpu_seconds:  # a rerun log was read
        lines += ["", "Server CPU per interaction kind (thread CPU of the script runs each interaction caused; "
                      "the rest of the server's CPU is its event loop, sending messages and the fragments' polls):",
                  "", "| interaction | n | CPU per interaction (s) | CPU in all (s) |", "|---|---|---|---|"]
        for kind in ("threshold", "samples", "weights", "page switch", "open link", "train", "train poll", "cancel"):
            if kind in by_kind:
                count, mean = by_kind[kind]
                lines.append(f"| {kind} | {count} | {mean:.3f} | {count * mean:.1f} |")
        lines.append(f"| script runs in all / server process | | | {report.script_cpu_seconds:.1f} / "
                     f"{report.server_cpu_seconds:.1f} |")
    if report.errors or report.leaks:
        lines += ["", "First problems:"] + [f"- {p}" for p in (report.errors + report.leaks)[:10]]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sessions", type=int, default=30)
    parser.add_argument("--interactions", type=int, default=12)
    parser.add_argument("--max-seconds", type=float, default=600.0)
    parser.add_argument("--think-seconds", type=float, default=1.0)
    parser.add_argument("--cache-dir", type=Path, default=None,
                        help="run store for the server (default: a temporary one; the browsed runs are "
                             "trained into it when missing)")
    parser.add_argument("--out", type=Path, default=RESULTS / "classroom_load.md")
    parser.add_argument("--dataset", default="mnist-small",
                        help="dataset of the browsed runs: mnist-small (bundled) or mnist (needs $BNN_DATA_DIR)")
    parser.add_argument("--preset", default=None,
                        help="browse seeds 0 and 1 of this run preset (e.g. fast-mnist, the shipped recipe) "
                             "instead of 1-epoch runs with the default settings; sets the dataset")
    parser.add_argument("--predict-slots", type=int, default=None,
                        help="the server's BNN_PREDICT_SLOTS (0: no limit; default: the app's default, one per core)")
    parser.add_argument("--note", default="", help="a line about the machine's load, written under the table")
    parser.add_argument("--json", type=Path, default=None,
                        help="also write every interaction (session, kind, start, seconds, server CPU) as JSON")
    args = parser.parse_args(argv)
    if args.sessions < 3:
        parser.error("--sessions: at least 3 (two of them train)")
    dataset = args.dataset
    if args.preset:
        from core.runs import RunConfig, get_preset
        preset = get_preset(args.preset)
        if not isinstance(preset, RunConfig):
            parser.error(f"--preset: {args.preset!r} is not a run preset")
        dataset, hidden = preset.dataset, tuple(preset.hidden)
    else:
        hidden = Scenario.hidden
    scenario = Scenario(dataset=dataset, preset=args.preset, hidden=hidden, sessions=args.sessions,
                        interactions=args.interactions, max_seconds=args.max_seconds, think_seconds=args.think_seconds)
    if args.predict_slots is not None:
        os.environ["BNN_PREDICT_SLOTS"] = str(args.predict_slots)  # the server inherits this environment
    report = run_load_test(scenario, cache_dir=args.cache_dir)
    text = table(report)
    body = [f"# Classroom load test: {args.sessions} sessions on one `streamlit run`", "",
            f"`python -m benchmarks.classroom_load --sessions {args.sessions}"
            f"{f' --preset {args.preset}' if args.preset else f' --dataset {dataset}'}"
            f"{'' if args.predict_slots is None else f' --predict-slots {args.predict_slots}'}` on "
            f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}.", "", text]
    if args.note:
        body += ["", args.note]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text("\n".join(body) + "\n")
    if args.json is not None:
        args.json.write_text(json.dumps({"started": report.started, "interactions": [
            {"session": i.session, "kind": i.kind, "start": i.started - report.started, "seconds": i.seconds,
             "ok": i.ok, "cpu": i.cpu_seconds} for i in report.interactions]}, indent=1))
    print(text)
    return 0 if not report.errors and not report.leaks else 1


if __name__ == "__main__":
    sys.exit(main())
