"""The training queue shared by dashboard.serve's server processes (dashboard/shared_queue.py): the
machine's slots hold across processes, turns are taken machine-wide, and the places, counts and the
teacher's list see every process's jobs. Two queues in one process stand for two processes (each has
its own lock files open, and flock tells them apart as it tells processes apart); one test runs two
real processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from core.errors import TrainingCancelled
from dashboard.shared_queue import SharedQueue
from dashboard.worker import QueueLimits, TrainingQueue, WorkerStatus

ROOT = Path(__file__).resolve().parents[1]


class Trainings:
    """Training functions that run until released (or cancelled), recording who started when."""

    def __init__(self) -> None:
        self.started: list[str] = []
        self.release: dict[str, threading.Event] = {}
        self.lock = threading.Lock()

    def __call__(self, config, progress=None, cancel=None):
        with self.lock:
            self.started.append(config)
            done = self.release.setdefault(config, threading.Event())
        while not done.wait(0.01):
            if cancel.is_set():
                raise TrainingCancelled("cancelled")
        return None

    def finish(self, config: str) -> None:
        with self.lock:
            self.release.setdefault(config, threading.Event()).set()


def until(condition, seconds: float = 10.0) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.02)
    return condition()


@pytest.fixture
def two(tmp_path):
    """Two server processes' queues sharing one slot (and a short lane for trainings up to 60 s)."""
    trainings = Trainings()
    limits = QueueLimits(short_seconds=60.0)
    queues = [
        TrainingQueue(trainings, 1, limits, shared=SharedQueue(tmp_path, 1, k), token_prefix=f"s{k}-") for k in (0, 1)
    ]
    yield queues, trainings
    for queue in queues:
        queue.close()


def test_one_slot_for_the_machine_and_the_next_in_turn_takes_it_whichever_process_has_it(two):
    (a, b), trainings = two
    a1 = a.submit("a1", "a1", 10, "a1", owner="alice", seconds=600)
    assert until(lambda: trainings.started == ["a1"])
    b1 = b.submit("b1", "b1", 10, "b1", owner="bob", seconds=600)
    a2 = a.submit("a2", "a2", 10, "a2", owner="alice", seconds=600)
    time.sleep(1.2)  # both queues polled for a free slot a few times
    assert trainings.started == ["a1"], "a second training ran beside the first on a one-slot machine"
    assert b1.snapshot().status is WorkerStatus.QUEUED and a2.snapshot().status is WorkerStatus.QUEUED
    # places count both processes' waiting jobs: bob's first training before alice's second
    assert until(lambda: (b1.snapshot().position, a2.snapshot().position) == (1, 2))
    assert a.counts() == b.counts() == (1, 2)
    trainings.finish("a1")
    # process a frees the slot, but its own next job is not the machine's next: bob's is
    assert until(lambda: trainings.started == ["a1", "b1"])
    time.sleep(0.7)
    assert trainings.started == ["a1", "b1"] and a2.snapshot().status is WorkerStatus.QUEUED
    trainings.finish("b1")
    assert until(lambda: trainings.started == ["a1", "b1", "a2"])
    assert a1.token.startswith("s0-") and b1.token.startswith("s1-")
    trainings.finish("a2")


def test_the_short_lane_opens_only_while_every_slot_of_the_machine_runs_a_long_training(two):
    (a, b), trainings = two
    a.submit("long", "long", 10, "long", owner="alice", seconds=600)
    assert until(lambda: trainings.started == ["long"])
    short = b.submit("short", "short", 10, "short", owner="bob", seconds=30)
    assert until(lambda: trainings.started == ["long", "short"])  # beside the long one, in the lane
    other = a.submit("short2", "short2", 10, "short2", owner="carol", seconds=30)
    time.sleep(1.0)
    assert trainings.started == ["long", "short"], "the lane holds one training on the machine"
    assert other.snapshot().status is WorkerStatus.QUEUED
    trainings.finish("short")
    assert until(lambda: trainings.started == ["long", "short", "short2"])
    for config in ("long", "short2"):
        trainings.finish(config)
    assert short.snapshot().status is not WorkerStatus.FAILED


def test_the_teachers_list_shows_every_process_and_cancels_anothers_job(two):
    (a, b), trainings = two
    a.submit("a1", "a1", 10, "a1", owner="alice", who="student a", seconds=600)
    assert until(lambda: trainings.started == ["a1"])
    waiting = b.submit("b1", "b1", 10, "b1", owner="bob", who="student b", seconds=600)

    def listed():
        return [(e.label, e.status, e.place, e.process) for e in a.overview()]

    assert until(lambda: listed() == [("a1", WorkerStatus.RUNNING, None, None), ("b1", WorkerStatus.QUEUED, 1, 1)])
    entry = a.overview()[1]
    assert entry.who == "student b" and entry.key == f"1-{entry.job_id}" and entry.eta is not None
    assert a.cancel_job(entry.job_id, process=entry.process)
    assert until(lambda: waiting.snapshot().status is WorkerStatus.CANCELLED)
    assert "teacher" in waiting.snapshot().error
    assert until(lambda: [e.label for e in a.overview()] == ["a1"])
    trainings.finish("a1")


def test_a_dead_processs_leftover_queue_takes_no_turn(tmp_path):
    trainings = Trainings()
    ghost = SharedQueue(tmp_path, 1, 1)
    ghost.publish(
        [
            {
                "job_id": 1,
                "who": "gone",
                "label": "gone",
                "status": "queued",
                "seconds": 10,
                "lane": False,
                "turn": [0, 0.0],  # first in turn, forever
                "finished_epochs": 0,
                "total_epochs": 1,
            }
        ]
    )
    os.close(ghost._alive)  # its process ended without tidying up: the kernel drops its lock
    queue = TrainingQueue(trainings, 1, shared=SharedQueue(tmp_path, 1, 0))
    try:
        queue.submit("x", "x", 1, "x", owner="alice", seconds=10)
        assert until(lambda: trainings.started == ["x"])
        assert queue.counts() == (1, 0)
        trainings.finish("x")
    finally:
        queue.close()


def test_a_hung_processs_queue_takes_no_turn_but_is_still_listed(tmp_path):
    trainings = Trainings()
    hung = SharedQueue(tmp_path, 1, 1)  # alive (its lock is held), but it stopped rewriting its queue
    job = {
        "job_id": 7,
        "who": "student h",
        "label": "h",
        "status": "queued",
        "seconds": 10,
        "lane": False,
        "turn": [0, 0.0],
        "finished_epochs": 0,
        "total_epochs": 1,
    }
    (tmp_path / "queue-1.json").write_text(json.dumps({"process": 1, "written": time.time() - 3600, "jobs": [job]}))
    queue = TrainingQueue(trainings, 1, shared=SharedQueue(tmp_path, 1, 0))
    try:
        queue.submit("x", "x", 1, "x", owner="alice", seconds=10)
        assert until(lambda: trainings.started == ["x"])
        assert [(e.label, e.process) for e in queue.overview()] == [("x", None), ("h", 1)]
        trainings.finish("x")
    finally:
        queue.close()
        hung.close()


def test_a_single_process_queue_is_unchanged(tmp_path):
    """No shared folder (streamlit run): no poll thread, tokens without a process prefix."""

    def polls() -> int:
        return sum(t.name == "bnn-shared-queue" for t in threading.enumerate())

    trainings = Trainings()
    before = polls()
    queue = TrainingQueue(trainings, 1)
    request = queue.submit("x", "x", 1, "x", owner="alice", seconds=10)
    assert until(lambda: trainings.started == ["x"])
    assert len(request.token) == 16 and polls() <= before
    trainings.finish("x")


# --- two real processes ---------------------------------------------------------------------------------

COMPETITOR = """
import json, os, sys, time
from dashboard.shared_queue import SharedQueue
from dashboard.worker import QueueLimits, TrainingQueue

folder, process, log = sys.argv[1], int(sys.argv[2]), sys.argv[3]

def train(config, progress=None, cancel=None):
    with open(log, "a") as out:
        out.write(json.dumps(["start", config, time.time()]) + "\\n")
    time.sleep(0.3)
    with open(log, "a") as out:
        out.write(json.dumps(["end", config, time.time()]) + "\\n")

queue = TrainingQueue(train, 2, QueueLimits(per_session=5), shared=SharedQueue(folder, 2, process))
requests = [queue.submit(f"p{process}-{i}", f"p{process}-{i}", 1, owner=f"o{process}-{i % 2}") for i in range(4)]
for request in requests:
    request.join(60)
queue.close()
print(json.dumps([r.snapshot().status.value for r in requests]))
"""


def test_two_real_processes_never_run_more_trainings_than_the_machines_slots(tmp_path):
    log = tmp_path / "trainings.jsonl"
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    processes = [
        subprocess.Popen(
            [sys.executable, "-c", COMPETITOR, str(tmp_path / "shared"), str(k), str(log)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k in (0, 1)
    ]
    for process in processes:
        out, err = process.communicate(timeout=120)
        assert process.returncode == 0, err
        assert json.loads(out.strip().splitlines()[-1]) == ["done"] * 4
    events = sorted((json.loads(line) for line in log.read_text().splitlines()), key=lambda e: (e[2], e[0] == "start"))
    assert len(events) == 16  # eight trainings, four of each process
    running, most = 0, 0
    for kind, _, _ in events:
        running += 1 if kind == "start" else -1
        most = max(most, running)
    assert most == 2, f"at most 2 trainings at once on the machine, saw {most}"


ORPHAN = """
import multiprocessing, sys, threading, time
from core.runs import RunConfig
from dashboard.training_process import train_in_subprocess

config = RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 50000})
threading.Thread(target=train_in_subprocess, args=(config,), daemon=True).start()
while not multiprocessing.active_children():
    time.sleep(0.05)
print(" ".join(str(c.pid) for c in multiprocessing.active_children() if c.name == "bnn-training"), flush=True)
time.sleep(600)
"""


@pytest.mark.slow  # a training process (imports torch): about 5 s
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the death signal is Linux's")
def test_a_training_process_ends_when_its_server_process_is_killed(tmp_path):
    """Else a killed server process's trainings train on unseen, beyond the machine's slots, while
    dashboard.serve restarts it with its slots free."""
    env = dict(os.environ, PYTHONPATH=str(ROOT), BNN_CACHE_DIR=str(tmp_path))
    server = subprocess.Popen([sys.executable, "-c", ORPHAN], cwd=ROOT, env=env, stdout=subprocess.PIPE, text=True)
    try:
        training = int(server.stdout.readline().split()[0])
        time.sleep(2.0)  # into its training loop
        assert Path(f"/proc/{training}").exists()
    finally:
        server.kill()
        server.wait()

    def gone() -> bool:
        try:
            return Path(f"/proc/{training}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True

    assert until(gone, 30), "the training process outlived its killed server process"
