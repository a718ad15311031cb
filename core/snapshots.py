"""Per-epoch snapshots of a family's sparsity statistic, recorded while training, for playback.

At the end of every epoch (warm-start epochs included, marked by their phase) training records per
layer: a histogram of the native statistic on fixed bin edges from the family's StatisticSpec
(`StatisticSpec.histogram_edges`), the number of weights kept at the family's default threshold and
the mean statistic. For small networks (at most SNAPSHOT_MAX_WEIGHTS weights) it also keeps the
per-weight statistic itself (float16), so that masks can be replayed at any threshold; a long
training keeps every k-th epoch's (and the last), so these stay within STATISTIC_BUDGET_BYTES.

A 784-400-600-10 net costs about 0.5 kB per epoch; see TrainingSnapshots.to_arrays for the layout.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from core.models.base import HISTOGRAM_BINS, Keep, StatisticSpec

SNAPSHOT_MAX_WEIGHTS = 5000  # per-weight statistics are recorded for networks of at most this many weights
STATISTIC_BUDGET_BYTES = 2 * 1024 * 1024  # ... and at most this many bytes of them per run
STATISTIC_DTYPE = np.float16


@dataclass(frozen=True)
class TrainingSnapshots:
    """What training recorded at the end of each epoch; index i is the i-th record of the history.

    histogram[i, l, b]: weights of layer l whose statistic falls in bin b of `edges` (values beyond
    the ends count in the end bins); kept[i, l]: weights kept at the default threshold; mean[i, l]:
    the mean statistic. `statistic_index` lists the epochs (indices into the history) whose
    per-weight statistics are in `statistics` (one (S, out, in + 1) float16 array per layer); empty
    for networks larger than SNAPSHOT_MAX_WEIGHTS.
    """

    statistic: str
    keep: str
    default_threshold: float
    edges: np.ndarray  # (bins + 1,)
    phase: np.ndarray  # (E,) str
    epoch: np.ndarray  # (E,) the epoch number within its phase, as the history has it
    histogram: np.ndarray  # (E, L, bins) int
    kept: np.ndarray  # (E, L) int
    weights: np.ndarray  # (L,) int
    mean: np.ndarray  # (E, L) float
    shapes: np.ndarray  # (L, 2) int: (out, in + 1)
    statistic_index: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.int64))  # (S,)
    statistics: tuple[np.ndarray, ...] = ()

    @property
    def n_epochs(self) -> int:
        return int(len(self.phase))

    @property
    def n_layers(self) -> int:
        return int(len(self.weights))

    @property
    def spec(self) -> StatisticSpec:
        """The keep rule of the statistic (its range is the edges')."""
        return StatisticSpec(
            self.statistic, Keep(self.keep), self.default_threshold, float(self.edges[0]), float(self.edges[-1])
        )

    @property
    def density(self) -> np.ndarray:
        """(E, L) kept fraction per layer at the default threshold."""
        return self.kept / self.weights[None, :]

    @property
    def overall_density(self) -> np.ndarray:
        """(E,) kept fraction of all weights at the default threshold."""
        return self.kept.sum(axis=1) / self.weights.sum()

    @property
    def has_statistics(self) -> bool:
        return len(self.statistic_index) > 0

    def statistics_at(self, index: int) -> tuple[int, list[np.ndarray]] | None:
        """The per-weight statistics recorded at epoch `index`, or at the latest recorded epoch
        before it (long trainings keep every k-th); (that epoch's index, one float32 array per layer).
        None where none was recorded (large networks, or before the first)."""
        if not self.has_statistics:
            return None
        position = int(np.searchsorted(self.statistic_index, int(index), side="right")) - 1
        if position < 0:
            return None
        return int(self.statistic_index[position]), [s[position].astype(np.float32) for s in self.statistics]

    def masks_at(self, index: int, threshold: float | None = None) -> tuple[int, list[np.ndarray]] | None:
        """Keep masks at `threshold` (default: the family's) from statistics_at(index)."""
        found = self.statistics_at(index)
        if found is None:
            return None
        threshold = self.default_threshold if threshold is None else float(threshold)
        recorded, statistics = found
        rule = self.spec
        return recorded, [np.asarray(rule.keep_mask(s, threshold)) for s in statistics]

    # --- storage: plain arrays (an .npz, read without pickle) ------------------------------------------
    def to_arrays(self) -> dict[str, np.ndarray]:
        arrays = {
            "statistic": np.array(self.statistic),
            "keep": np.array(self.keep),
            "default_threshold": np.array(float(self.default_threshold)),
            "edges": np.asarray(self.edges, dtype=np.float64),
            "phase": np.asarray(self.phase, dtype=str),
            "epoch": np.asarray(self.epoch, dtype=np.int32),
            "histogram": np.asarray(self.histogram, dtype=np.int32),
            "kept": np.asarray(self.kept, dtype=np.int32),
            "weights": np.asarray(self.weights, dtype=np.int64),
            "mean": np.asarray(self.mean, dtype=np.float32),
            "shapes": np.asarray(self.shapes, dtype=np.int64),
            "statistic_index": np.asarray(self.statistic_index, dtype=np.int32),
        }
        for layer, values in enumerate(self.statistics):
            arrays[f"statistics_{layer}"] = np.asarray(values, dtype=STATISTIC_DTYPE)
        return arrays

    @classmethod
    def from_arrays(cls, arrays: dict[str, np.ndarray]) -> "TrainingSnapshots":
        """The snapshots of `to_arrays`; ValueError naming what does not fit."""
        try:
            shapes = np.asarray(arrays["shapes"], dtype=np.int64).reshape(-1, 2)
            n_layers = len(shapes)
            statistics = tuple(
                np.asarray(arrays[f"statistics_{layer}"])
                for layer in range(n_layers)
                if f"statistics_{layer}" in arrays
            )
            snapshots = cls(
                statistic=str(arrays["statistic"]),
                keep=Keep(str(arrays["keep"])).value,
                default_threshold=float(arrays["default_threshold"]),
                edges=np.asarray(arrays["edges"], dtype=np.float64),
                phase=np.asarray(arrays["phase"], dtype=str),
                epoch=np.asarray(arrays["epoch"], dtype=np.int64),
                histogram=np.asarray(arrays["histogram"], dtype=np.int64),
                kept=np.asarray(arrays["kept"], dtype=np.int64),
                weights=np.asarray(arrays["weights"], dtype=np.int64),
                mean=np.asarray(arrays["mean"], dtype=np.float64),
                shapes=shapes,
                statistic_index=np.asarray(arrays["statistic_index"], dtype=np.int64),
                statistics=statistics,
            )
        except KeyError as exc:
            raise ValueError(f"the array {exc} is missing") from None
        snapshots.check()
        return snapshots

    def check(self) -> None:
        epochs, layers, bins = self.n_epochs, self.n_layers, len(self.edges) - 1
        problems = []
        if self.histogram.shape != (epochs, layers, bins):
            problems.append(f"histogram has shape {self.histogram.shape}, expected {(epochs, layers, bins)}")
        if self.kept.shape != (epochs, layers) or self.mean.shape != (epochs, layers) or len(self.epoch) != epochs:
            problems.append("kept, mean and epoch do not have one row per epoch and one column per layer")
        if self.histogram.shape == (epochs, layers, bins) and not (self.histogram.sum(axis=2) == self.weights).all():
            problems.append("a histogram does not count every weight of its layer")
        if self.statistics and len(self.statistics) != layers:
            problems.append(f"per-weight statistics for {len(self.statistics)} of {layers} layers")
        for layer, values in enumerate(self.statistics):
            expected = (len(self.statistic_index), *(int(n) for n in self.shapes[layer]))
            if values.shape != expected:
                problems.append(f"statistics of layer {layer + 1} have shape {values.shape}, expected {expected}")
        if problems:
            raise ValueError("; ".join(problems))


class SnapshotRecorder:
    """Records TrainingSnapshots epoch by epoch for `model`, whose training has `total_epochs`
    records (TrainConfig.total_epochs). Everything is computed on the model's device and read
    back once per epoch."""

    def __init__(
        self,
        model: Any,
        total_epochs: int,
        bins: int = HISTOGRAM_BINS,
        max_weights: int = SNAPSHOT_MAX_WEIGHTS,
        budget_bytes: int = STATISTIC_BUDGET_BYTES,
    ):
        self.spec = model.spec
        self.edges = np.asarray(self.spec.histogram_edges(bins), dtype=np.float64)
        # Exact counts against float64 edges; MPS has no float64.
        self._dtype = torch.float32 if model.device.type == "mps" else torch.float64
        self._inner = torch.tensor(self.edges[1:-1], dtype=self._dtype, device=model.device)
        self.bins = bins
        self.shapes = np.array([layer.shape for layer in model.layers], dtype=np.int64)
        self.weights = self.shapes.prod(axis=1)
        self.total_epochs = max(1, int(total_epochs))
        n_weights = int(self.weights.sum())
        self.keep_statistics = n_weights <= max_weights
        bytes_per_epoch = n_weights * np.dtype(STATISTIC_DTYPE).itemsize
        self.stride = max(1, math.ceil(self.total_epochs * bytes_per_epoch / budget_bytes))
        self._phase: list[str] = []
        self._epoch: list[int] = []
        self._rows: list[np.ndarray] = []  # per epoch (L, bins + 2): counts, kept, mean
        self._statistic_index: list[int] = []
        self._statistics: list[list[np.ndarray]] = []

    def record(self, model: Any, record: dict[str, Any]) -> None:
        """The snapshot of `model` at the end of the epoch whose history record is `record`."""
        index = len(self._phase)
        with torch.no_grad():
            statistics = [s.detach() for s in model.native_statistics()]
            rows = []
            for statistic in statistics:
                values = statistic.reshape(-1).to(self._dtype)
                counts = torch.bincount(torch.bucketize(values, self._inner, right=True), minlength=self.bins)
                kept = self.spec.keep_mask(statistic, self.spec.default_threshold).sum()
                rows.append(
                    torch.cat([counts.to(self._dtype), kept.reshape(1).to(self._dtype), values.mean().reshape(1)])
                )
            self._rows.append(torch.stack(rows).cpu().numpy())  # one read-back per epoch
            if self.keep_statistics and (index % self.stride == 0 or index == self.total_epochs - 1):
                self._statistic_index.append(index)
                self._statistics.append([s.to(torch.float16).cpu().numpy() for s in statistics])
        self._phase.append(str(record.get("phase", "train")))
        self._epoch.append(int(record.get("epoch", index + 1)))

    def result(self) -> TrainingSnapshots:
        rows = np.stack(self._rows) if self._rows else np.zeros((0, len(self.weights), self.bins + 2))
        layers = len(self.weights)
        statistics = (
            tuple(
                np.stack([epoch[layer] for epoch in self._statistics]).astype(STATISTIC_DTYPE)
                for layer in range(layers)
            )
            if self._statistics
            else ()
        )
        return TrainingSnapshots(
            statistic=self.spec.name,
            keep=Keep(self.spec.keep).value,
            default_threshold=float(self.spec.default_threshold),
            edges=self.edges,
            phase=np.array(self._phase, dtype=str),
            epoch=np.array(self._epoch, dtype=np.int64),
            histogram=rows[:, :, : self.bins].round().astype(np.int64),
            kept=rows[:, :, self.bins].round().astype(np.int64),
            weights=self.weights.copy(),
            mean=rows[:, :, self.bins + 1].astype(np.float64),
            shapes=self.shapes,
            statistic_index=np.array(self._statistic_index, dtype=np.int64),
            statistics=statistics,
        )
