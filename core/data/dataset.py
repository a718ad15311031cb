"""The `Dataset` and `DatasetInfo` records every loader returns."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from core.enums import Task

Source = Literal["bundled", "data-dir", "download", "generated"]
Availability = Literal["bundled", "data-dir", "download", "generated", "unavailable"]


@dataclass(frozen=True, eq=False)
class Dataset:
    """Train/test arrays plus what is needed to interpret them.

    Inputs are float32 (n, d); labels int64 (classification) or float32
    (regression, possibly standardised: see `unstandardise`).
    """

    name: str
    task: Task
    x_train: np.ndarray
    y_train: np.ndarray
    x_test: np.ndarray
    y_test: np.ndarray
    n_classes: int | None
    input_shape: tuple[int, ...]
    class_names: tuple[str, ...] | None
    source: Source
    fingerprint: str
    x_grid: np.ndarray | None = None
    y_grid_mean: np.ndarray | None = None
    target_mean: float = 0.0
    target_std: float = 1.0
    x_mean: np.ndarray | None = None
    x_std: np.ndarray | None = None
    split: int | None = None
    params: dict[str, Any] = field(default_factory=dict)
    feature_names: tuple[str, ...] | None = None  # tables: input names ("col" or "col=level" for one-hot)

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", Task.parse(self.task, "task"))

    @property
    def in_features(self) -> int:
        return int(self.x_train.shape[1])

    @property
    def n_train(self) -> int:
        return int(self.x_train.shape[0])

    @property
    def n_test(self) -> int:
        return int(self.x_test.shape[0])

    def unstandardise(self, y: np.ndarray | float) -> np.ndarray:
        """Standardised targets (or predicted means) back to original units."""
        return np.asarray(y) * self.target_std + self.target_mean

    def unstandardise_std(self, s: np.ndarray | float) -> np.ndarray:
        """Standard deviations in standardised units back to original units."""
        return np.asarray(s) * self.target_std

    def __repr__(self) -> str:
        return (
            f"Dataset(name={self.name!r}, task={self.task!r}, n_train={self.n_train}, "
            f"n_test={self.n_test}, in_features={self.in_features}, source={self.source!r}, "
            f"fingerprint={self.fingerprint[:12]}...)"
        )


@dataclass(frozen=True)
class DatasetInfo:
    """What `list_datasets` knows about a dataset without loading it."""

    name: str
    task: Task
    input_shape: tuple[int, ...] | None  # None: depends on the file (one-hot columns)
    n_classes: int | None
    n_train: int | None
    n_test: int | None
    splits: int | None
    availability: Availability
    detail: str

    def __post_init__(self) -> None:
        object.__setattr__(self, "task", Task.parse(self.task, "task"))

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "task": self.task.value,
            "input_shape": None if self.input_shape is None else list(self.input_shape),
            "n_classes": self.n_classes,
            "n_train": self.n_train,
            "n_test": self.n_test,
            "splits": self.splits,
            "availability": self.availability,
            "detail": self.detail,
        }


def compute_fingerprint(
    name: str, arrays: list[np.ndarray], *, split: int | None = None, params: dict[str, Any] | None = None
) -> str:
    """sha256 over the identity of a load and the bytes of its arrays.

    Called once per load; run ids derive from it so they change when data does.
    """
    digest = hashlib.sha256()
    header = {"name": name, "split": split, "params": params or {}}
    digest.update(json.dumps(header, sort_keys=True, default=str).encode())
    for array in arrays:
        contiguous = np.ascontiguousarray(array)
        digest.update(f"{contiguous.dtype.str}{contiguous.shape}".encode())
        digest.update(memoryview(contiguous).cast("B"))
    return digest.hexdigest()


def make_dataset(
    *,
    name: str,
    task: Task,
    x_train: np.ndarray,
    y_train: np.ndarray,
    x_test: np.ndarray,
    y_test: np.ndarray,
    source: Source,
    input_shape: tuple[int, ...] | None = None,
    n_classes: int | None = None,
    class_names: tuple[str, ...] | None = None,
    split: int | None = None,
    params: dict[str, Any] | None = None,
    fingerprint_override: str | None = None,
    **extra: Any,
) -> Dataset:
    """Cast arrays to the contract dtypes, fingerprint them and build the record.

    `fingerprint_override` lets a loader pass a digest of cheaper source arrays
    (e.g. uint8 images) instead of hashing the float32 copies.
    """
    label_dtype = np.int64 if task == "classification" else np.float32
    x_train = np.ascontiguousarray(x_train, dtype=np.float32).reshape(len(x_train), -1)
    x_test = np.ascontiguousarray(x_test, dtype=np.float32).reshape(len(x_test), -1)
    y_train = np.ascontiguousarray(y_train, dtype=label_dtype).reshape(-1)
    y_test = np.ascontiguousarray(y_test, dtype=label_dtype).reshape(-1)
    params = dict(params or {})
    fingerprint = fingerprint_override or compute_fingerprint(
        name, [x_train, y_train, x_test, y_test], split=split, params=params
    )
    return Dataset(
        name=name,
        task=task,
        x_train=x_train,
        y_train=y_train,
        x_test=x_test,
        y_test=y_test,
        n_classes=n_classes,
        input_shape=tuple(input_shape or (x_train.shape[1],)),
        class_names=class_names,
        source=source,
        fingerprint=fingerprint,
        split=split,
        params=params,
        **extra,
    )
