"""The process-wide training queue (dashboard/worker.py): slots, places, joining, cancelling."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

from core.errors import ConfigError, TrainingCancelled
from dashboard.worker import TrainingQueue, WorkerStatus, default_slots


class GatedTraining:
    """A fake train function: each config trains `epochs` epochs, each waiting for its gate."""

    def __init__(self, epochs: int = 2):
        self.epochs = epochs
        self.gates: dict[str, threading.Event] = {}
        self.calls: list[str] = []
        self.running = 0
        self.most_running = 0
        self._lock = threading.Lock()

    def gate(self, config: str) -> threading.Event:
        return self.gates.setdefault(config, threading.Event())

    def __call__(self, config, progress, cancel):
        with self._lock:
            self.calls.append(config)
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            for epoch in range(1, self.epochs + 1):
                while not self.gate(config).wait(0.01):
                    if cancel.is_set():
                        raise TrainingCancelled(f"training cancelled during epoch {epoch}")
                progress({"epoch": epoch, "phase": "train", "loss": 1.0, "density": 1.0})
            return SimpleNamespace(run_id=f"run-{config}")
        finally:
            with self._lock:
                self.running -= 1


def wait_for(condition, timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)


def test_one_slot_runs_one_training_and_every_request_sees_its_place():
    fake = GatedTraining()
    queue = TrainingQueue(fake, slots=1)
    a, b, c = (queue.submit(name, name, 2, label=name) for name in ("a", "b", "c"))
    wait_for(lambda: a.snapshot().status is WorkerStatus.RUNNING)
    assert [r.snapshot().status for r in (b, c)] == [WorkerStatus.QUEUED] * 2
    assert (a.snapshot().position, b.snapshot().position, c.snapshot().position) == (None, 1, 2)
    assert queue.counts() == (1, 2)
    fake.gate("a").set()
    assert a.join(5).status is WorkerStatus.DONE and a.snapshot().run_id == "run-a"
    wait_for(lambda: b.snapshot().status is WorkerStatus.RUNNING)
    assert c.snapshot().position == 1
    fake.gate("b").set()
    fake.gate("c").set()
    assert c.join(5).status is WorkerStatus.DONE
    assert fake.calls == ["a", "b", "c"] and fake.most_running == 1


def test_k_slots_run_at_most_k_trainings_at_once():
    fake = GatedTraining(epochs=1)
    queue = TrainingQueue(fake, slots=2)
    requests = [queue.submit(str(i), str(i), 1) for i in range(5)]
    wait_for(lambda: fake.running == 2)
    assert queue.counts() == (2, 3)
    for i in range(5):
        fake.gate(str(i)).set()
    for request in requests:
        assert request.join(5).status is WorkerStatus.DONE
    assert fake.most_running == 2 and sorted(fake.calls) == [str(i) for i in range(5)]


def test_a_request_for_a_config_already_queued_or_training_joins_it():
    fake = GatedTraining()
    queue = TrainingQueue(fake, slots=1)
    first = queue.submit("a", "a", 2)
    wait_for(lambda: first.snapshot().status is WorkerStatus.RUNNING)
    joined_running = queue.submit("a", "a", 2)
    waiting = queue.submit("b", "b", 2)
    joined_waiting = queue.submit("b", "b", 2)
    assert not first.joined and joined_running.joined and joined_waiting.joined and not waiting.joined
    assert first.snapshot().sharers == 2 and joined_waiting.snapshot().position == 1
    fake.gate("a").set()
    fake.gate("b").set()
    for request in (first, joined_running, waiting, joined_waiting):
        assert request.join(5).status is WorkerStatus.DONE
    assert fake.calls == ["a", "b"]  # each config trained once
    assert joined_running.snapshot().run_id == "run-a" and joined_waiting.snapshot().run_id == "run-b"


def test_cancel_withdraws_only_the_own_request_of_a_shared_training():
    fake = GatedTraining()
    queue = TrainingQueue(fake, slots=1)
    mine, theirs = queue.submit("a", "a", 2), queue.submit("a", "a", 2)
    wait_for(lambda: theirs.snapshot().status is WorkerStatus.RUNNING)
    mine.cancel()
    assert mine.snapshot().status is WorkerStatus.CANCELLED and mine.cancel_requested
    assert theirs.snapshot().status is WorkerStatus.RUNNING
    fake.gate("a").set()
    assert theirs.join(5).status is WorkerStatus.DONE
    assert mine.snapshot().status is WorkerStatus.CANCELLED


def test_cancelling_a_waiting_request_removes_it_and_the_queue_moves_up():
    fake = GatedTraining()
    queue = TrainingQueue(fake, slots=1)
    running, second, third = (queue.submit(n, n, 2) for n in ("a", "b", "c"))
    wait_for(lambda: running.snapshot().status is WorkerStatus.RUNNING)
    second.cancel()
    assert second.snapshot().status is WorkerStatus.CANCELLED
    assert third.snapshot().position == 1 and queue.counts() == (1, 1)
    fake.gate("a").set()
    fake.gate("c").set()
    assert third.join(5).status is WorkerStatus.DONE
    assert fake.calls == ["a", "c"]  # b never trained


def test_cancelling_the_only_request_stops_the_training_and_a_new_request_starts_afresh():
    fake = GatedTraining()
    queue = TrainingQueue(fake, slots=1)
    request = queue.submit("a", "a", 2)
    wait_for(lambda: request.snapshot().status is WorkerStatus.RUNNING)
    request.cancel()
    again = queue.submit("a", "a", 2)  # does not join the job that is stopping
    assert not again.joined
    assert request._job.worker.join(5).status is WorkerStatus.CANCELLED
    fake.gate("a").set()
    assert again.join(5).status is WorkerStatus.DONE
    assert fake.calls == ["a", "a"]


def test_a_training_whose_session_left_finishes():
    fake = GatedTraining(epochs=1)
    queue = TrainingQueue(fake, slots=1)
    request = queue.submit("a", "a", 1)
    worker = request._job.worker
    del request  # the session went away without cancelling
    fake.gate("a").set()
    assert worker.join(5).status is WorkerStatus.DONE and worker.snapshot().run_id == "run-a"


def test_slots_come_from_the_environment(monkeypatch):
    monkeypatch.setenv("BNN_MAX_TRAININGS", "3")
    assert default_slots() == 3
    for bad in ("0", "-1", "two"):
        monkeypatch.setenv("BNN_MAX_TRAININGS", bad)
        with pytest.raises(ConfigError, match="BNN_MAX_TRAININGS"):
            default_slots()
    monkeypatch.delenv("BNN_MAX_TRAININGS")
    import torch

    assert default_slots() == (2 if torch.cuda.is_available() else 1)


# --- the dashboard's train function: a child process ------------------------------------------------


@pytest.mark.slow  # trains in a child process: 8 s CPU
def test_a_training_in_a_child_process_stores_the_run_this_process_would_train(tmp_path, monkeypatch):
    import torch

    from core.runs import RunConfig, list_runs, load_run, train_run
    from dashboard.worker import train_in_subprocess

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "child"))
    config = RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 3})
    records = []
    result = train_in_subprocess(config, progress=records.append, cancel=threading.Event())
    assert [r["epoch"] for r in records] == [1, 2, 3]
    assert [info.run_id for info in list_runs()] == [result.run_id]
    from_child = load_run(result.run_id).model.state_dict()
    here = train_run(config, cache_dir=tmp_path / "here").model.state_dict()
    assert all(torch.equal(from_child[k], here[k]) for k in here)


@pytest.mark.slow  # two child processes, each importing torch: 12 s in CI
def test_cancel_and_errors_come_back_from_the_child(tmp_path, monkeypatch):
    from core.errors import DataError
    from core.runs import RunConfig, list_runs
    from dashboard.worker import train_in_subprocess

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(TrainingCancelled, match="cancelled"):
        train_in_subprocess(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 500}), cancel=cancel)
    assert list_runs() == []
    monkeypatch.setenv("BNN_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("BNN_OFFLINE", "1")
    with pytest.raises(DataError, match="uci-boston|boston"):
        train_in_subprocess(RunConfig(dataset="uci-boston", split=0, hidden=(8,), train={"epochs": 1}))
