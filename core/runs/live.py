"""A model fitted in the calling process and thread, outside the run store (the dashboard's
playground): built as a training builds it, trained by core.train, predicted by core.predict; and
any model's statistics and weights as numpy."""

from __future__ import annotations

from typing import Any, Callable

import numpy as np
import torch

from core.data.dataset import Dataset
from core.models.network import BayesianMLP
from core.models.network import build_model as build_network
from core.predict import Prediction, predict
from core.runs.config import RunConfig
from core.train import train


def build_model(config: RunConfig, dataset: Dataset) -> BayesianMLP:
    """The untrained model of `config` on the CPU, initialised from its seed (as a training is)."""
    return build_network(config.model_config(dataset), "cpu", torch.Generator(device="cpu").manual_seed(config.seed))


def warm_up_optimiser() -> None:
    """The first optimiser of a process imports much of torch (seconds): done ahead of a fit."""
    torch.optim.Adam([torch.zeros(1, requires_grad=True)])


def train_model(
    model: BayesianMLP, dataset: Dataset, config: RunConfig, progress: Callable[[dict], None], cancel: Any
) -> None:
    """core.train.train on the dataset's training split, in this thread (no per-epoch snapshots)."""
    x = torch.from_numpy(np.ascontiguousarray(dataset.x_train))
    y = torch.from_numpy(np.ascontiguousarray(dataset.y_train))
    train(model, x, y, config.train, seed=config.seed, progress=progress, cancel=cancel, snapshots=False)


def predict_model(model: BayesianMLP, x: np.ndarray, samples: int) -> Prediction:
    """The model's bma prediction over R = samples draws (seed 0)."""
    return predict(model, x, mode="bma", samples=int(samples), seed=0)


def native_statistics(model: BayesianMLP) -> list[np.ndarray]:
    """Each layer's native statistic as float64 arrays."""
    with torch.no_grad():
        return [s.detach().cpu().numpy().astype(np.float64) for s in model.native_statistics()]


def conditional_mean_weights(model: BayesianMLP) -> list[np.ndarray]:
    """Each layer's mean weights given the weight is kept."""
    with torch.no_grad():
        return [w.detach().cpu().numpy() for w in model.conditional_mean_weights()]
