"""A training from the dashboard hands the trained run over instead of the page reading it back."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.runs import RunConfig, load_run, run_from_handover, run_handover, train_run


def _same_state(a, b) -> bool:
    a, b = a.state_dict(), b.state_dict()
    return a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)


def test_a_handed_over_run_is_the_stored_run(tmp_path):
    run = train_run(RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2}), cache_dir=tmp_path)
    back = run_from_handover(run_handover(run))
    stored = load_run(run.run_id, cache_dir=tmp_path)
    assert back.run_id == run.run_id and back.config == run.config and back.metrics == stored.metrics
    assert _same_state(back.model, stored.model) and not back.model.training
    assert back.summaries.keys() == stored.summaries.keys()
    x = stored.dataset().x_test[:25]
    np.testing.assert_array_equal(
        back.predict(x, mode="bma", samples=3).probs, stored.predict(x, mode="bma", samples=3).probs
    )


@pytest.mark.slow  # trains in a child process: 8 s CPU
def test_the_child_process_hands_its_run_over(tmp_path, monkeypatch):
    from dashboard.worker import TrainingWorker, WorkerStatus, train_in_subprocess

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path))
    config = RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})
    worker = TrainingWorker(train_in_subprocess, config, total_epochs=2).start()
    snapshot = worker.join(120)
    assert snapshot.status is WorkerStatus.DONE and snapshot.run is not None
    assert snapshot.run.run_id == snapshot.run_id and snapshot.run.from_cache is False
    assert _same_state(snapshot.run.model, load_run(snapshot.run_id).model)
