"""The background training worker and the dashboard's backend helpers (no Streamlit runtime)."""

from __future__ import annotations

import math
import threading
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from core.errors import ConfigError, DataError
from dashboard import backend
from dashboard.worker import TrainingWorker, WorkerStatus


def fake_training(
    epochs: int, fail_at: int | None = None, error: Exception | None = None, gate: threading.Event | None = None
):
    def train(config, progress, cancel):
        for epoch in range(1, epochs + 1):
            if gate is not None:
                gate.wait(5)
            if cancel.is_set():
                from core.errors import TrainingCancelled

                raise TrainingCancelled(f"training cancelled during epoch {epoch}")
            if fail_at == epoch:
                raise error
            progress({"epoch": epoch, "phase": "train", "loss": 1.0 / epoch, "density": 1.0})
        return SimpleNamespace(run_id=f"run-{config}")

    return train


def test_worker_records_progress_and_the_run_id():
    worker = TrainingWorker(fake_training(3), "abc", total_epochs=3).start()
    snapshot = worker.join(5)
    assert snapshot.status is WorkerStatus.DONE
    assert snapshot.run_id == "run-abc"
    assert [h["epoch"] for h in snapshot.history] == [1, 2, 3]
    assert snapshot.fraction == 1.0 and not snapshot.is_active


def test_worker_reports_a_bnn_error_as_its_message():
    worker = TrainingWorker(fake_training(3, fail_at=2, error=DataError("dataset 'x': not there")), "c", 3).start()
    snapshot = worker.join(5)
    assert snapshot.status is WorkerStatus.FAILED
    assert snapshot.error == "dataset 'x': not there"
    assert len(snapshot.history) == 1 and snapshot.run_id is None


def test_worker_turns_a_crash_into_a_message():
    worker = TrainingWorker(fake_training(2, fail_at=1, error=ZeroDivisionError("boom")), "c", 2).start()
    snapshot = worker.join(5)
    assert snapshot.status is WorkerStatus.FAILED
    assert "ZeroDivisionError" in snapshot.error and "boom" in snapshot.error


def test_cancel_stops_a_running_worker_between_epochs():
    gate = threading.Event()
    worker = TrainingWorker(fake_training(100, gate=gate), "c", 100).start()
    assert worker.snapshot().status is WorkerStatus.RUNNING
    worker.cancel()
    gate.set()
    snapshot = worker.join(5)
    assert snapshot.status is WorkerStatus.CANCELLED
    assert len(snapshot.history) < 100
    with pytest.raises(RuntimeError):
        worker.start()


def test_cancel_reaches_core_training(tmp_path, monkeypatch):
    """The real training loop checks the worker's Event and nothing is stored."""
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    from core.runs import list_runs

    config = backend.make_config({"dataset": "two-moons", "hidden": [4], "train": {"epochs": 500}})
    worker = TrainingWorker(backend.train_run, config, backend.total_epochs(config))
    worker.cancel()  # set before start: the first minibatch sees it
    snapshot = worker.start().join(60)
    assert snapshot.status is WorkerStatus.CANCELLED
    assert "cancel" in snapshot.error
    assert list_runs() == []


def test_parse_hidden_and_options():
    assert backend.parse_hidden("400, 600") == (400, 600)
    assert backend.parse_hidden(" 8 ,") == (8,)
    for bad in ("", "a, 2", "0", "4, -1"):
        with pytest.raises(ConfigError, match="hidden"):
            backend.parse_hidden(bad)
    assert backend.parse_options("prior_inclusion=0.1, slab=student-t, beta_a=2, flag=true") == {
        "prior_inclusion": 0.1,
        "slab": "student-t",
        "beta_a": 2,
        "flag": True,
    }
    assert backend.parse_options("  ") == {}
    with pytest.raises(ConfigError, match="name=value"):
        backend.parse_options("prior_inclusion")


def test_threshold_range_replaces_an_infinite_end_by_the_data():
    spec = SimpleNamespace(name="signal_to_noise", low=0.0, high=math.inf, default_threshold=0.83, keep="above")
    stats = [np.array([[0.1, 3.0], [2.0, 0.5]]), np.array([[7.4]])]
    limits = backend.threshold_range(spec, stats)
    assert limits.low == 0.0 and 7.4 < limits.high <= 7.4 * 1.1
    assert limits.default == 0.83 and limits.keep_above
    # keeping above the slider's top keeps nothing
    assert sum(m.sum() for m in backend.masks_at(stats, limits.high, limits.keep_above)) == 0
    finite = SimpleNamespace(name="log_alpha", low=-8.0, high=8.0, default_threshold=3.0, keep="below")
    limits = backend.threshold_range(finite, stats)
    assert (limits.low, limits.high, limits.default, limits.keep_above) == (-8.0, 8.0, 3.0, False)


@pytest.mark.parametrize("family", ["lbbnn", "bnn", "fnn"])
def test_masks_from_statistics_equal_the_models_keep_masks(family):
    from core.models.network import ModelConfig, build_model

    torch.manual_seed(0)
    model = build_model(ModelConfig(in_features=5, out_classes=3, hidden=(7,), family=family))
    stats = backend.native_statistics(model)
    limits = backend.threshold_range(model.spec, stats)
    for threshold in np.linspace(limits.low, limits.high, 7):
        threshold = model.spec.check_threshold(threshold)
        ours = backend.masks_at(stats, threshold, limits.keep_above)
        theirs = [m.numpy() for m in model.keep_masks(threshold)]
        assert all(np.array_equal(a, b) for a, b in zip(ours, theirs))


def test_effective_threshold_only_for_modes_that_cut():
    assert backend.effective_threshold("bma", 0.7) is None
    assert backend.effective_threshold("mean", 0.7) is None
    for mode in ("mpm", "mpm-mean", "prune"):
        assert backend.effective_threshold(mode, 0.7) == 0.7


def test_ood_sets_for_images_and_tabular_data():
    images = SimpleNamespace(name="mnist-small", task="classification", input_shape=(28, 28))
    assert backend.ood_set_names(images) == ["fashion-mnist-small", "uniform-noise", "inverted", "rotated"]
    moons = SimpleNamespace(name="two-moons", task="classification", input_shape=(2,))
    assert backend.ood_set_names(moons) == ["uniform-noise"]
    assert backend.ood_set_names(SimpleNamespace(name="toy-cubic", task="regression", input_shape=(1,))) == []
