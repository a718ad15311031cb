"""Seeded, stratified subsets and train/test splits."""

from __future__ import annotations

import numpy as np

from core.errors import DataError


def stratified_counts(labels: np.ndarray, total: int) -> dict:
    """Per-class counts summing to `total`, proportional to class frequencies.

    Largest-remainder rounding, so the counts are as close to proportional as
    integers allow and the result is deterministic.
    """
    classes, freq = np.unique(labels, return_counts=True)
    if total > len(labels):
        raise DataError(f"cannot draw {total} rows from a set of {len(labels)}")
    exact = freq * (total / len(labels))
    counts = np.floor(exact).astype(int)
    remainder_order = np.argsort(-(exact - counts), kind="stable")
    counts[remainder_order[: total - counts.sum()]] += 1
    return {cls: int(count) for cls, count in zip(classes.tolist(), counts)}


def stratified_subset(labels: np.ndarray, total: int, rng: np.random.Generator) -> np.ndarray:
    """Sorted row indices of a stratified random subset of size `total`."""
    chosen = []
    for cls, count in stratified_counts(labels, total).items():
        rows = np.flatnonzero(labels == cls)
        chosen.append(rng.choice(rows, size=count, replace=False))
    return np.sort(np.concatenate(chosen))


def stratified_split(labels: np.ndarray, test_fraction: float, seed: int) -> tuple:
    """(train_idx, test_idx): seeded split keeping class proportions in both parts."""
    rng = np.random.default_rng(seed)
    n_test = int(round(len(labels) * test_fraction))
    test_idx = stratified_subset(labels, n_test, rng)
    train_mask = np.ones(len(labels), dtype=bool)
    train_mask[test_idx] = False
    train_idx = np.flatnonzero(train_mask)
    return rng.permutation(train_idx), rng.permutation(test_idx)
