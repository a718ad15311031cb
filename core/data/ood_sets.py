"""Which out-of-domain sets go with a dataset: its partner image set and the synthetic shifts."""

from __future__ import annotations

import numpy as np

from core.data.dataset import Dataset
from core.data.ood import OOD_SYNTHETIC, load_ood

OOD_PARTNER = {
    "mnist-small": "fashion-mnist-small",
    "fashion-mnist-small": "mnist-small",
    "mnist": "fashion-mnist",
    "fashion-mnist": "mnist",
}


def ood_set_names(dataset: Dataset) -> list[str]:
    """OOD sets offered for a dataset: the partner image set (when loadable) and the synthetic shifts."""
    if dataset.task != "classification":
        return []
    names = [OOD_PARTNER[dataset.name]] if dataset.name in OOD_PARTNER else []
    return names + [name for name in OOD_SYNTHETIC if len(dataset.input_shape) == 2 or name == "uniform-noise"]


def load_ood_inputs(dataset: Dataset, name: str, n: int | None = None, seed: int = 0) -> np.ndarray:
    """The OOD set `name` for `dataset`, at most as many inputs as its test split."""
    return load_ood(dataset, name, seed=seed, n=None if n is None else min(n, len(dataset.x_test)))
