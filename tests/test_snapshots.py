"""Per-epoch snapshots of the statistic (for playback): recorded while training, stored
beside the run, and equal to what the final model says at the last epoch."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from core.data import load_dataset
from core.errors import RunStoreError
from core.models.base import HISTOGRAM_BINS, Keep, StatisticSpec
from core.models.network import BayesianMLP, ModelConfig
from core.runs import RunConfig, load_run, train_run
from core.runs.store import MANIFEST, SNAPSHOTS, RunStore
from core.snapshots import SnapshotRecorder, TrainingSnapshots
from core.train import TrainConfig, train


def moons(n=200):
    ds = load_dataset("two-moons", n=n)
    return torch.tensor(ds.x_train), torch.tensor(ds.y_train)


def trained(family, hidden=(8,), epochs=3, warm_start=0, **options):
    x, y = moons()
    model = BayesianMLP(
        ModelConfig(in_features=2, out_classes=2, hidden=hidden, family=family, family_options=options),
        torch.Generator().manual_seed(0),
    )
    result = train(model, x, y, TrainConfig(epochs=epochs, batch_size=50, warm_start_epochs=warm_start), seed=0)
    return model, result


def truth_histogram(statistic: np.ndarray, edges: np.ndarray) -> np.ndarray:
    """np.histogram over the fixed edges, every value counted: beyond the ends in the end bins."""
    values = np.clip(np.asarray(statistic, dtype=np.float64).ravel(), edges[0], edges[-1])
    return np.histogram(values, bins=edges)[0]


@pytest.mark.parametrize("family", ["lbbnn", "bnn", "sparse-vd", "horseshoe", "concrete-dropout"])
def test_last_snapshot_is_the_final_models_histogram_density_and_mean(family):
    model, result = trained(family, hidden=(8, 4))
    snapshots = result.snapshots
    assert snapshots.n_epochs == len(result.history) == 3
    assert snapshots.statistic == model.spec.name and snapshots.keep == model.spec.keep.value
    np.testing.assert_array_equal(snapshots.edges, model.spec.histogram_edges())
    with torch.no_grad():
        statistics = [s.double().numpy() for s in model.native_statistics()]
        masks = [m.numpy() for m in model.keep_masks()]
    for layer, (statistic, mask) in enumerate(zip(statistics, masks)):
        np.testing.assert_array_equal(snapshots.histogram[-1, layer], truth_histogram(statistic, snapshots.edges))
        assert snapshots.kept[-1, layer] == int(mask.sum())
        assert snapshots.mean[-1, layer] == pytest.approx(statistic.mean(), rel=1e-6, abs=1e-7)
        # the per-weight statistic (float16) of this small net, and the mask it replays away from the cut
        recorded, replayed = snapshots.statistics_at(snapshots.n_epochs - 1)
        assert recorded == snapshots.n_epochs - 1
        np.testing.assert_array_equal(replayed[layer], statistic.astype(np.float16).astype(np.float32))
        far = np.abs(statistic - model.spec.default_threshold) > 1e-2 * max(1.0, abs(model.spec.default_threshold))
        np.testing.assert_array_equal(snapshots.masks_at(snapshots.n_epochs - 1)[1][layer][far], mask[far])
    # the history's density is the snapshots' overall density, epoch by epoch
    np.testing.assert_allclose(snapshots.overall_density, [h["density"] for h in result.history])


def test_every_epoch_of_every_phase_is_recorded_and_warm_start_is_marked():
    model, result = trained("lbbnn", epochs=2, warm_start=2)
    snapshots = result.snapshots
    assert list(snapshots.phase) == [h["phase"] for h in result.history] == ["warm-start"] * 2 + ["train"] * 2
    assert list(snapshots.epoch) == [h["epoch"] for h in result.history]
    # during the warm start the point net trains: the Bayesian net's statistic has not moved
    np.testing.assert_array_equal(snapshots.histogram[0], snapshots.histogram[1])
    assert not np.array_equal(snapshots.histogram[1], snapshots.histogram[2])


def test_snapshots_can_be_switched_off():
    x, y = moons()
    model = BayesianMLP(ModelConfig(in_features=2, out_classes=2, hidden=(4,)))
    assert train(model, x, y, TrainConfig(epochs=1), snapshots=False).snapshots is None


def test_histogram_edges_come_from_the_spec():
    inclusion = StatisticSpec("p", Keep.ABOVE, 0.5, 0.0, 1.0)
    np.testing.assert_allclose(inclusion.histogram_edges(4), [0, 0.25, 0.5, 0.75, 1.0])
    snr = StatisticSpec("snr", Keep.ABOVE, 0.83, 0.0, math.inf)
    edges = np.asarray(snr.histogram_edges())
    assert len(edges) == HISTOGRAM_BINS + 1 and edges[0] == 0.0 and np.all(np.diff(edges) > 0)
    np.testing.assert_allclose(edges[[1, -1]], [0.83e-3, 0.83e3])
    np.testing.assert_allclose(np.diff(np.log(edges[1:])), np.log(1e6) / (HISTOGRAM_BINS - 1))
    magnitude = StatisticSpec("magnitude", Keep.ABOVE, 0.0, 0.0, math.inf)
    np.testing.assert_allclose(magnitude.histogram_edges()[1], 1e-3)


def test_large_nets_keep_no_per_weight_statistic_and_long_trainings_thin_it():
    big = BayesianMLP(ModelConfig(in_features=100, out_classes=10, hidden=(50,)))  # 5560 weights
    recorder = SnapshotRecorder(big, total_epochs=2)
    for epoch in range(2):
        recorder.record(big, {"phase": "train", "epoch": epoch + 1})
    snapshots = recorder.result()
    assert not snapshots.has_statistics and snapshots.statistics_at(1) is None and snapshots.masks_at(1) is None
    assert snapshots.histogram.sum(axis=2).tolist() == [[5050, 510]] * 2
    small = BayesianMLP(ModelConfig(in_features=2, out_classes=2, hidden=(8,)))  # 42 weights, 84 bytes per epoch
    recorder = SnapshotRecorder(small, total_epochs=10, budget_bytes=84 * 4)
    for epoch in range(10):
        recorder.record(small, {"phase": "train", "epoch": epoch + 1})
    snapshots = recorder.result()
    assert snapshots.statistic_index.tolist() == [0, 3, 6, 9]  # every third, and the last
    assert snapshots.statistics_at(5)[0] == 3  # an epoch between two recorded ones replays the earlier


CONFIG = RunConfig(dataset="two-moons", hidden=(8,), train={"epochs": 2})


def test_a_stored_run_has_its_snapshots_checksummed_and_reads_them_back(tmp_path):
    run = train_run(CONFIG, cache_dir=tmp_path)
    manifest = json.loads((run.path / MANIFEST).read_text())
    assert SNAPSHOTS in manifest["files"]
    back = load_run(run.run_id, cache_dir=tmp_path).snapshots()
    fresh = run.snapshots()
    assert back.n_epochs == 2
    for name, value in fresh.to_arrays().items():
        np.testing.assert_array_equal(back.to_arrays()[name], value)


def test_a_run_handed_over_by_the_training_process_reads_its_snapshots(tmp_path):
    from core.runs import run_from_handover, run_handover

    run = train_run(CONFIG, cache_dir=tmp_path)
    handed = run_from_handover(run_handover(run))
    np.testing.assert_array_equal(handed.snapshots().histogram, run.snapshots().histogram)


def test_old_runs_without_snapshots_still_load(tmp_path):
    run = train_run(CONFIG, cache_dir=tmp_path)
    # a run folder as written before snapshots were recorded: no file, not in the manifest
    (run.path / SNAPSHOTS).unlink()
    manifest = json.loads((run.path / MANIFEST).read_text())
    del manifest["files"][SNAPSHOTS]
    (run.path / MANIFEST).write_text(json.dumps(manifest))
    old = load_run(run.run_id, cache_dir=tmp_path)
    assert old.snapshots() is None
    assert old.summary()["density"] == run.summary()["density"]
    RunStore(tmp_path).verify(run.run_id)


def test_a_corrupted_snapshots_file_is_a_clear_error(tmp_path):
    run = train_run(CONFIG, cache_dir=tmp_path)
    data = bytearray((run.path / SNAPSHOTS).read_bytes())
    data[len(data) // 2] ^= 0xFF
    (run.path / SNAPSHOTS).write_bytes(bytes(data))
    with pytest.raises(RunStoreError, match="snapshots.npz does not match its checksum"):
        load_run(run.run_id, cache_dir=tmp_path)


def test_snapshots_that_do_not_fit_together_are_refused():
    _, result = trained("lbbnn", epochs=2)
    arrays = result.snapshots.to_arrays()
    arrays["histogram"] = arrays["histogram"][:, :, :-1]
    with pytest.raises(ValueError, match="histogram has shape"):
        TrainingSnapshots.from_arrays(arrays)
    del arrays["kept"]
    with pytest.raises(ValueError, match="kept"):
        TrainingSnapshots.from_arrays(arrays)
