"""Fairness of the process-wide training queue (dashboard/worker.py): per-session limits, turns
round-robin across sessions, closed tabs' requests dropped, the teacher's view and cancel.

The training function is a fake that trains until the test opens its gate, so every test is
about the queue's bookkeeping and runs in well under a second."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.errors import TrainingCancelled
from dashboard.worker import QueueLimits, QueueRefused, TrainingQueue, WorkerStatus


class Gates:
    """A fake train function: the job for config `c` runs until `open(c)`; obeys cancel."""

    def __init__(self):
        self.gates: dict[str, threading.Event] = {}
        self.started: list[str] = []
        self._lock = threading.Lock()

    def gate(self, config: str) -> threading.Event:
        with self._lock:
            return self.gates.setdefault(config, threading.Event())

    def __call__(self, config, progress, cancel):
        with self._lock:
            self.started.append(config)
        gate = self.gate(config)
        while not gate.wait(0.005):
            if cancel.is_set():
                raise TrainingCancelled("training cancelled")
        progress({"epoch": 1, "phase": "train", "loss": 1.0, "density": 1.0})
        return SimpleNamespace(run_id=f"run-{config}")


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.002)


def finish(queue: TrainingQueue, gates: Gates, request) -> None:
    """Let a running request's job end and wait until the queue has started the next one."""
    gates.gate(request.config).set()
    request._job.worker.join(5)


# --- limits: what is refused says why and what would fit -----------------------------------------


def test_a_session_holds_one_running_and_one_queued_training_by_default():
    gates = Gates()
    queue = TrainingQueue(gates, slots=1)
    first = queue.submit("a1", "a1", 10, owner="A")
    second = queue.submit("a2", "a2", 10, owner="A")
    with pytest.raises(QueueRefused, match=r"already have 2 training\(s\).*most one session may have.*\(2\)"):
        queue.submit("a3", "a3", 10, owner="A")
    assert queue.submit("b1", "b1", 10, owner="B")  # another session is not affected
    assert queue.submit("a1", "a1", 10, owner="A") is first  # asking again is the same request
    second.cancel()
    assert queue.submit("a3", "a3", 10, owner="A")  # a freed place can be used again
    for name in ("a1", "b1", "a3"):
        gates.gate(name).set()
    for request in queue.requests_of("A") + queue.requests_of("B"):
        request.join(5)


def test_a_training_above_the_time_cap_is_refused_with_what_would_fit():
    queue = TrainingQueue(Gates(), slots=1, limits=QueueLimits(training_seconds=600))
    # The tester's 100,000 epochs on mnist-small, estimated at 373 min
    with pytest.raises(QueueRefused) as refused:
        queue.submit("long", "long", 100_000, owner="A", seconds=373 * 60)
    text = str(refused.value)
    assert "about 6.2 h by the estimate" in text and "10 min one training may take" in text
    assert "about 2,680 epochs of it would fit" in text
    assert queue.counts() == (0, 0)


def test_a_session_time_cap_counts_its_running_and_queued_trainings():
    gates = Gates()
    queue = TrainingQueue(gates, slots=1, limits=QueueLimits(session_seconds=1000, per_session=5))
    running = queue.submit("a1", "a1", 100, owner="A", seconds=600)
    with pytest.raises(QueueRefused) as refused:
        queue.submit("a2", "a2", 100, owner="A", seconds=500)
    text = str(refused.value)
    assert "hold about 10 min of the 17 min" in text and "about 80 epochs of it would fit now" in text
    assert queue.submit("a2", "a2", 100, owner="A", seconds=400)
    gates.gate("a1").set()
    gates.gate("a2").set()
    running.join(5)


# --- turns: round-robin across sessions -------------------------------------------------------------


def test_a_sessions_second_training_waits_behind_every_other_sessions_first():
    gates = Gates()
    queue = TrainingQueue(gates, slots=1)
    a1 = queue.submit("a1", "a1", 1, owner="A")
    a2 = queue.submit("a2", "a2", 1, owner="A")
    b1 = queue.submit("b1", "b1", 1, owner="B")
    c1 = queue.submit("c1", "c1", 1, owner="C")
    wait_for(lambda: a1.snapshot().status is WorkerStatus.RUNNING)
    assert [r.snapshot().position for r in (b1, c1, a2)] == [1, 2, 3]
    for request in (a1, b1, c1, a2):
        wait_for(lambda request=request: request.snapshot().status is WorkerStatus.RUNNING)
        finish(queue, gates, request)
    assert gates.started == ["a1", "b1", "c1", "a2"]


def test_a_session_whose_training_ended_queues_behind_the_others_waiting():
    """The victim of the tester's three tabs: once A's training ends, A's next one (even if asked
    before B's) waits until B's has had its turn."""
    gates = Gates()
    queue = TrainingQueue(gates, slots=1)
    a1 = queue.submit("a1", "a1", 1, owner="A")
    a2 = queue.submit("a2", "a2", 1, owner="A")
    b1 = queue.submit("b1", "b1", 1, owner="B")
    finish(queue, gates, a1)
    wait_for(lambda: b1.snapshot().status is WorkerStatus.RUNNING)
    assert a2.snapshot().position == 1
    a3 = None
    a2.cancel()  # cancelling and asking again does not jump the line either
    a3 = queue.submit("a3", "a3", 1, owner="A")
    c1 = queue.submit("c1", "c1", 1, owner="C")
    assert a3.snapshot().position == 1 and c1.snapshot().position == 2  # A's next was first in line
    finish(queue, gates, b1)
    finish(queue, gates, a3)
    finish(queue, gates, c1)
    assert gates.started == ["a1", "b1", "a3", "c1"]


def test_a_new_session_queues_behind_the_sessions_already_waiting():
    gates = Gates()
    queue = TrainingQueue(gates, slots=1)
    a1 = queue.submit("a1", "a1", 1, owner="A")
    b1 = queue.submit("b1", "b1", 1, owner="B")
    reloaded = queue.submit("a-again", "a-again", 1, owner="A after a reload")
    assert (b1.snapshot().position, reloaded.snapshot().position) == (1, 2)
    for request in (a1, b1, reloaded):
        finish(queue, gates, request)
    assert gates.started == ["a1", "b1", "a-again"]


def test_joining_another_sessions_job_makes_it_the_joiners_first():
    gates = Gates()
    queue = TrainingQueue(gates, slots=1)
    a1 = queue.submit("a1", "a1", 1, owner="A")
    a2 = queue.submit("shared", "shared", 1, owner="A")
    b1 = queue.submit("b1", "b1", 1, owner="B")
    c1 = queue.submit("shared", "shared", 1, owner="C")
    assert c1.joined and c1._job is a2._job
    assert (b1.snapshot().position, c1.snapshot().position) == (1, 2)  # C's first, behind B's first
    for request in (a1, b1, c1):
        finish(queue, gates, request)
    assert gates.started == ["a1", "b1", "shared"]


def test_the_estimated_wait_adds_up_the_trainings_ahead():
    gates = Gates()
    queue = TrainingQueue(gates, slots=1)
    running = queue.submit("a1", "a1", 10, owner="A", seconds=100)
    b1 = queue.submit("b1", "b1", 10, owner="B", seconds=50)
    c1 = queue.submit("c1", "c1", 10, owner="C", seconds=20)
    # (the running one's estimate less the seconds it has run: a few on a busy machine)
    assert 90 <= b1.snapshot().eta <= 100 and 140 <= c1.snapshot().eta <= 150
    unknown = queue.submit("d1", "d1", 10, owner="D")
    late = queue.submit("e1", "e1", 10, owner="E", seconds=1)
    assert unknown.snapshot().eta is not None and late.snapshot().eta is None  # after an unknown: unknown
    for request in (running, b1, c1, unknown, late):
        finish(queue, gates, request)


# --- closed tabs and the teacher ----------------------------------------------------------------------


def test_a_closed_tabs_waiting_request_is_dropped_after_the_grace_period_its_running_one_goes_on():
    gates, clock = Gates(), Clock()
    queue = TrainingQueue(gates, slots=1, limits=QueueLimits(grace_seconds=60), clock=clock)
    here = {"A": True}
    running = queue.submit("a1", "a1", 1, owner="A", presence=lambda: here["A"])
    waiting = queue.submit("a2", "a2", 1, owner="A", presence=lambda: here["A"])
    here["A"] = False
    queue.sweep()
    clock.now = 59
    queue.sweep()
    assert waiting.snapshot().status is WorkerStatus.QUEUED  # a reload comes back within the grace
    clock.now = 61
    queue.sweep()
    assert waiting.snapshot().status is WorkerStatus.CANCELLED
    assert "closed or reloaded more than 60 s ago" in waiting.snapshot().error
    assert running.snapshot().status is WorkerStatus.RUNNING
    (entry,) = queue.overview()
    assert entry.status is WorkerStatus.RUNNING and entry.label == running.label
    assert entry.who.endswith("(tab closed)")
    # nobody is left to cancel it, but the teacher can
    assert queue.cancel_job(entry.job_id)
    assert running.join(5).status is WorkerStatus.CANCELLED
    assert "teacher" in running.snapshot().error
    assert queue.counts() == (0, 0) and queue.overview() == []
    assert gates.started == ["a1"]


def test_a_returning_session_keeps_its_waiting_request():
    gates, clock = Gates(), Clock()
    queue = TrainingQueue(gates, slots=1, limits=QueueLimits(grace_seconds=60), clock=clock)
    here = [True]
    first = queue.submit("a1", "a1", 1, owner="A", presence=lambda: here[0])
    waiting = queue.submit("a2", "a2", 1, owner="A", presence=lambda: here[0])
    here[0] = False
    queue.sweep()
    clock.now = 30
    here[0] = True  # the connection came back
    queue.sweep()
    here[0] = False
    clock.now = 80  # 50 s since it left again
    queue.sweep()
    assert waiting.snapshot().status is WorkerStatus.QUEUED
    finish(queue, gates, first)
    finish(queue, gates, waiting)
    assert waiting.snapshot().status is WorkerStatus.DONE


def test_an_owners_queued_request_stays_while_any_of_its_pages_is_connected():
    """Tabs of one browser share an owner: closing one of them, or reloading (the new page comes
    back through `touch`), keeps the owner's queued training; closing them all drops it."""
    gates, clock = Gates(), Clock()
    queue = TrainingQueue(gates, slots=1, limits=QueueLimits(grace_seconds=60), clock=clock)
    pages = {"tab 1": True, "tab 2": True, "reloaded": True}
    first = queue.submit("a1", "a1", 1, owner="A", presence=lambda: pages["tab 1"])
    waiting = queue.submit("a2", "a2", 1, owner="A", presence=lambda: pages["tab 2"])
    pages["tab 2"] = False
    clock.now = 100
    queue.sweep()
    assert waiting.snapshot().status is WorkerStatus.QUEUED  # tab 1 is still open
    pages["tab 1"] = False
    queue.touch("A", lambda: pages["reloaded"])
    clock.now = 200
    queue.sweep()
    assert waiting.snapshot().status is WorkerStatus.QUEUED  # the reloaded page is open
    pages["reloaded"] = False
    queue.sweep()
    clock.now = 261
    queue.sweep()
    assert waiting.snapshot().status is WorkerStatus.CANCELLED
    finish(queue, gates, first)


def test_the_overview_lists_who_what_state_place_and_eta():
    gates = Gates()
    queue = TrainingQueue(gates, slots=1)
    a1 = queue.submit("a1", "a1", 10, label="lbbnn [8] on two-moons", owner="A", who="tab-aaaa", seconds=60)
    b1 = queue.submit("b1", "b1", 10, label="bnn [8] on two-moons", owner="B", who="tab-bbbb", seconds=30)
    queue.submit("b1", "b1", 10, owner="C", who="tab-cccc", seconds=30)
    running, waiting = queue.overview()
    assert (running.who, running.label, running.status, running.place) == (
        "tab-aaaa",
        "lbbnn [8] on two-moons",
        WorkerStatus.RUNNING,
        None,
    )
    assert (waiting.who, waiting.status, waiting.place) == ("tab-bbbb, tab-cccc", WorkerStatus.QUEUED, 1)
    assert 0 < running.eta <= 60 and 0 < waiting.eta <= 60
    assert queue.cancel_job(waiting.job_id)
    assert b1.snapshot().status is WorkerStatus.CANCELLED and "teacher" in b1.snapshot().error
    assert not queue.cancel_job(waiting.job_id)
    finish(queue, gates, a1)


# --- any sequence of inputs ---------------------------------------------------------------------------

SESSIONS = ("A", "B", "C")
# Submits and finishes weigh more: the orders of turns only show after several of them.
operations = st.lists(
    st.one_of(
        st.tuples(st.just("submit"), st.sampled_from(SESSIONS)),
        st.tuples(st.just("submit"), st.sampled_from(SESSIONS)),
        st.tuples(st.just("finish"), st.integers(0, 3)),
        st.tuples(st.just("join"), st.sampled_from(SESSIONS)),
        st.tuples(st.just("cancel"), st.sampled_from(SESSIONS)),
        st.tuples(st.just("finish"), st.integers(0, 3)),
        st.tuples(st.just("leave"), st.sampled_from(SESSIONS)),
        st.tuples(st.just("wait"), st.integers(1, 90)),
        st.tuples(st.just("teacher"), st.integers(0, 3)),
    ),
    max_size=30,
)


def external_ranks(queue: TrainingQueue) -> dict[int, int]:
    """Each waiting job's rank, worked out from what the queue shows (requests_of, statuses):
    the fewest of one requester's jobs running or waiting ahead of it."""
    ranks: dict[int, int] = {}
    with queue._lock:  # a consistent moment (trainings end in their own threads)
        owners = {r.owner for job in (*queue._running, *queue._waiting.values()) for r in job.requests.values()}
        mine = {owner: queue.requests_of(owner) for owner in owners}
        for job in queue._waiting.values():
            ranks[job.id] = min(
                sum(
                    1
                    for r in mine[request.owner]
                    if r._job is not job and (r.snapshot().status is WorkerStatus.RUNNING or r.job_id < job.id)
                )
                for request in job.requests.values()
            )
    return ranks


def settle(queue: TrainingQueue) -> None:
    """Wait until every cancelled running job has stopped (a training stops in its own thread)."""
    for job in list(queue._running):
        if job.worker.cancel_requested:
            job.worker.join(5)


@pytest.mark.parametrize("slots", [1, 2])
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=operations)
def test_any_sequence_keeps_the_queue_fair_and_loses_nothing(slots, steps):
    gates, clock = Gates(), Clock()
    limits = QueueLimits(per_session=2, grace_seconds=60)
    queue = TrainingQueue(gates, slots=slots, limits=limits, clock=clock)
    present = {s: True for s in SESSIONS}
    requests: list = []
    # a session's next job: (job id, the session's id, how many other sessions' jobs started since)
    counter = iter(range(10_000))
    ahead_of: dict[int, dict[str, int]] = {}  # job id of a session's first -> starts per other creator
    creator: dict[int, str] = {}

    def note_starts(before: set[int]) -> None:
        started = [job for job in queue._running if job.id not in before]
        for job in started:
            for waiting_id, per_creator in ahead_of.items():
                if waiting_id in {j.id for j in queue._waiting.values()} and creator[waiting_id] not in {
                    r.owner for r in job.requests.values()
                }:
                    per_creator[creator[job.id]] = per_creator.get(creator[job.id], 0) + 1

    for op, arg in steps:
        ranks_before = external_ranks(queue)
        running_before = {job.id for job in queue._running}
        if op in ("submit", "join") and present[arg]:
            key = f"{arg}-{next(counter)}"
            if op == "join":
                others = [j for j in queue._waiting.values() if arg not in {r.owner for r in j.requests.values()}]
                if not others:
                    continue
                key = others[0].key
            first = not queue.requests_of(arg)
            try:
                request = queue.submit(key, key, 1, owner=arg, presence=lambda s=arg: present[s])
            except QueueRefused as refused:
                assert len(queue.requests_of(arg)) == limits.per_session, refused
                continue
            requests.append(request)
            creator.setdefault(request.job_id, arg)
            if first and not request.joined and request.snapshot().status is WorkerStatus.QUEUED:
                ahead_of[request.job_id] = {}
        elif op == "cancel":
            mine = queue.requests_of(arg)
            if mine:
                mine[-1].cancel()
        elif op == "finish" and queue._running:
            job = queue._running[arg % len(queue._running)]
            waiting = dict(ranks_before)
            gates.gate(job.key).set()
            job.worker.join(5)
            started = [j for j in queue._running if j.id not in running_before]
            for new in started:  # no session's first waits behind another's second
                assert waiting[new.id] == min(waiting.values()), (waiting, new.id)
        elif op == "leave":
            present[arg] = False
        elif op == "wait":
            clock.now += arg
            queue.sweep()
        elif op == "teacher":
            entries = queue.overview()
            if entries:
                queue.cancel_job(entries[arg % len(entries)].job_id)
        settle(queue)
        note_starts(running_before)
        # per-session caps and slots hold after every step
        for session in SESSIONS:
            assert len(queue.requests_of(session)) <= limits.per_session
        assert len(queue._running) <= slots
        # a gone session's waiting requests do not outlive the grace period
        for request in requests:
            if not present[request.owner] and request.snapshot().status is WorkerStatus.QUEUED:
                assert (
                    request._job.requests.keys() - {request.id} or queue._sessions[request.owner].gone_since is not None
                )
    # Whatever one session did, another session's first job saw at most one of its trainings start
    # ahead of it (with one slot: the one first in line when it asked).
    if slots == 1:
        for per_creator in ahead_of.values():
            assert all(count <= 1 for count in per_creator.values()), per_creator
    # every job finishes or is cancelled; nothing is left behind
    for gate_key in [j.key for j in (*queue._running, *queue._waiting.values())]:
        gates.gate(gate_key).set()
    for request in requests:
        assert request.join(5).status in (WorkerStatus.DONE, WorkerStatus.CANCELLED)
    assert queue.counts() == (0, 0)
    assert all(not queue.requests_of(session) for session in SESSIONS)
    assert queue._sessions == {} and queue._next_since == {}


# --- the short lane: a default-size training never waits behind another session's long one --------


def lane_queue(gates: Gates, slots: int = 1) -> TrainingQueue:
    return TrainingQueue(gates, slots=slots, limits=QueueLimits(per_session=2, short_seconds=100.0))


def test_a_short_training_starts_beside_a_long_one_and_the_lane_holds_one():
    gates = Gates()
    queue = lane_queue(gates)
    long_a = queue.submit("a-long", "a-long", 10, owner="A", seconds=1000.0)
    wait_for(lambda: "a-long" in gates.started)
    short_b = queue.submit("b-short", "b-short", 10, owner="B", seconds=60.0)
    wait_for(lambda: "b-short" in gates.started)  # no wait for A's 1000 s
    assert short_b._job.lane and not long_a._job.lane
    short_c = queue.submit("c-short", "c-short", 10, owner="C", seconds=60.0)
    long_d = queue.submit("d-long", "d-long", 10, owner="D", seconds=1000.0)
    time.sleep(0.05)
    assert gates.started == ["a-long", "b-short"]  # the lane holds one; the slot holds A
    # C's short training waits for B's short one only (its estimated start says so too).
    place, start = queue.place(short_c._job)
    assert place == 1 and start == pytest.approx(60.0, abs=2.0) and queue.place(long_d._job)[0] == 2
    finish(queue, gates, short_b)
    wait_for(lambda: "c-short" in gates.started)
    assert short_c._job.lane and "d-long" not in gates.started  # a long job never takes the lane
    finish(queue, gates, long_a)
    wait_for(lambda: "d-long" in gates.started)
    for request in (short_c, long_d):
        finish(queue, gates, request)
    assert all(r.snapshot().status is WorkerStatus.DONE for r in (long_a, short_b, short_c, long_d))


def test_no_lane_while_a_slot_runs_a_short_training_or_when_it_is_off():
    gates = Gates()
    queue = lane_queue(gates)
    short_a = queue.submit("a-short", "a-short", 10, owner="A", seconds=50.0)
    wait_for(lambda: "a-short" in gates.started)
    short_b = queue.submit("b-short", "b-short", 10, owner="B", seconds=50.0)
    time.sleep(0.05)
    assert gates.started == ["a-short"]  # waiting for one short training is the bound already
    finish(queue, gates, short_a)
    finish(queue, gates, short_b)
    off = TrainingQueue(gates, slots=1, limits=QueueLimits(short_seconds=0.0))
    long_c = off.submit("c-long", "c-long", 10, owner="C", seconds=1000.0)
    wait_for(lambda: "c-long" in gates.started)
    short_d = off.submit("d-short", "d-short", 10, owner="D", seconds=5.0)
    time.sleep(0.05)
    assert "d-short" not in gates.started
    finish(off, gates, long_c)
    finish(off, gates, short_d)


def test_the_lane_keeps_turns_among_short_trainings():
    gates = Gates()
    queue = lane_queue(gates)
    long_a = queue.submit("a-long", "a-long", 10, owner="A", seconds=1000.0)
    wait_for(lambda: "a-long" in gates.started)
    short_b1 = queue.submit("b1", "b1", 10, owner="B", seconds=10.0)
    wait_for(lambda: "b1" in gates.started)
    short_b2 = queue.submit("b2", "b2", 10, owner="B", seconds=10.0)  # B's second
    short_c1 = queue.submit("c1", "c1", 10, owner="C", seconds=10.0)  # C's first: goes before B's second
    finish(queue, gates, short_b1)
    wait_for(lambda: "c1" in gates.started)
    assert "b2" not in gates.started
    for request in (short_c1, short_b2, long_a):
        finish(queue, gates, request)
