"""Every family trains with its defaults on every dataset available offline.

The config is built exactly as `python -m core train --dataset D --method F` builds it (the
family's option defaults, the dataset's defaults for widths, epochs and small regression sets),
so a default that a family refuses fails here. Then only the sizes shrink (one hidden layer of 4
units, at most one epoch per phase, 48 training and 32 test rows) and the run goes through the
training path of `train_run` without the store: the model is built, trained, measured and
summarised. Offline sets: the generated toys and the bundled subsets; the full sets of
$BNN_DATA_DIR (MNIST, Fashion-MNIST, the UCI regression sets) in a `fulldata` test of their own.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch

from core.data.registry import DATASET_NAMES, dataset_info
from core.models.registry import FAMILY_PATHS
from core.runs.config import RunConfig
from core.runs.training import _train

FAMILIES = list(FAMILY_PATHS)
OFFLINE_SETS = [name for name in DATASET_NAMES if dataset_info(name).availability in ("generated", "bundled")]
FULL_SETS = ["mnist", "fashion-mnist"] + [name for name in DATASET_NAMES if name.startswith("uci-")]
TRAIN_ROWS, TEST_ROWS = 48, 32
PHASES = ("epochs", "pretrain_epochs", "posttrain_epochs", "warm_start_epochs", "kl_anneal_epochs")


@functools.lru_cache(maxsize=None)
def _subset(name: str, data_dir: str | None):
    """The dataset cut to a few rows (loaded once per test session: full MNIST takes seconds)."""
    dataset = RunConfig(dataset=name).load_dataset(data_dir)
    rng = np.random.default_rng(0)
    train = rng.permutation(dataset.n_train)[:TRAIN_ROWS]
    test = rng.permutation(dataset.n_test)[:TEST_ROWS]
    return dataclasses.replace(
        dataset,
        x_train=dataset.x_train[train],
        y_train=dataset.y_train[train],
        x_test=dataset.x_test[test],
        y_test=dataset.y_test[test],
    )


def _train_with_defaults(family: str, name: str, data_dir: str | None = None) -> None:
    config = RunConfig(dataset=name, method=family)  # the CLI's defaults: raises if one is refused
    tiny = {phase: min(getattr(config.train, phase), 1) for phase in PHASES}
    config = config.replace(hidden=[4], train={**tiny, "batch_size": 16})
    dataset = _subset(name, data_dir)
    _, model = _train(config, dataset, "matrix", torch.device("cpu"), None, None)
    assert model.family == family


def test_the_matrix_covers_every_family_and_the_offline_sets():
    assert {"lbbnn", "lbbnn-lfmvn", "bnn", "horseshoe", "sparse-vd", "fnn"} <= set(FAMILIES)
    assert {"toy-sine-gaps", "two-moons", "mnist-small", "fashion-mnist-small"} <= set(OFFLINE_SETS)


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_with_its_defaults_on_every_offline_set(family):
    failures = []
    for name in OFFLINE_SETS:
        try:
            _train_with_defaults(family, name)
        except Exception as exc:  # collect every dataset's failure, not only the first
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)


@pytest.mark.slow
@pytest.mark.fulldata
@pytest.mark.parametrize("family", FAMILIES)
def test_every_family_trains_with_its_defaults_on_every_full_set(family, data_dir):
    failures = []
    for name in FULL_SETS:
        try:
            _train_with_defaults(family, name, str(data_dir))
        except Exception as exc:
            failures.append(f"{name}: {type(exc).__name__}: {exc}")
    assert not failures, "\n".join(failures)
