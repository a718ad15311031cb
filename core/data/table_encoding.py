"""The rows kept, the split and the input encoding of a user table (core.data.user_table's rules)."""

from __future__ import annotations

from typing import Any

import numpy as np

from core import limits, validate
from core.data.sampling import stratified_split
from core.errors import InputError

TEST_FRACTION = 0.2
MIN_ROWS = 5


def numbers_of(cells) -> np.ndarray | None:
    """The column as floats (NaN where missing), or None when a present cell is not a number."""
    text = np.array(["nan" if c is None else c for c in cells], dtype=str)
    try:
        return text.astype(np.float64)  # vectorised; refuses what float() refuses
    except (ValueError, OverflowError):
        return None


def rows_kept(table: Any, drop: bool) -> list[int]:
    counts = [
        (name, n, col.index(None) if n else -1)
        for name, col in zip(table.names, table.columns)
        for n in [col.count(None)]
    ]
    missing = [(name, n, first) for name, n, first in counts if n]
    if not missing:
        return list(range(table.n_rows))
    if not drop:
        listed = "; ".join(
            f"{validate.shown(name)}: {n} (first at {table.where(first)})" for name, n, first in missing[:8]
        )
        more = f"; and {len(missing) - 8} more columns" if len(missing) > 8 else ""
        raise InputError(
            f"data: missing values in {len(missing)} column(s): {listed}{more}; fill them in or "
            f"drop those rows (--missing drop)"
        )
    keep = [i for i in range(table.n_rows) if all(col[i] is not None for col in table.columns)]
    if len(keep) < MIN_ROWS:
        raise InputError(
            f"data: only {len(keep)} of {table.n_rows} rows have no missing value; at least {MIN_ROWS} are needed"
        )
    return keep


def finite(values: np.ndarray, cells, column: str, where) -> None:
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size:
        raise InputError(
            f"data: column {column} {where(int(bad[0]))}: {validate.shown(cells[bad[0]])} is not a finite number"
        )


def class_names(cells: tuple[str | None, ...]) -> tuple[str, ...]:
    levels = set(cells)
    numbers = numbers_of(tuple(levels))
    if numbers is not None:  # numeric classes in numeric order (2 before 10)
        return tuple(c for _, c in sorted(zip(numbers.tolist(), levels)))
    return tuple(sorted(levels))


def split(
    table: Any, split_col: int | None, keep: list[int], labels: np.ndarray, task: str, seed: int
) -> tuple[np.ndarray, np.ndarray]:
    n = len(keep)
    if n < MIN_ROWS:
        raise InputError(f"data: the table has {n} rows; at least {MIN_ROWS} are needed (train and test)")
    if split_col is not None:
        words = [str(table.columns[split_col][i]).strip().lower() for i in keep]
        for k, word in enumerate(words):
            if word not in ("train", "test"):
                raise InputError(
                    f"split-column: {validate.shown(table.names[split_col])} "
                    f"{table.where(keep[k])}: {validate.shown(table.columns[split_col][keep[k]])} "
                    f"is neither train nor test"
                )
        is_train = np.array([w == "train" for w in words])
        if is_train.all() or not is_train.any():
            raise InputError(f"split-column: {validate.shown(table.names[split_col])} needs both train and test rows")
        return np.flatnonzero(is_train), np.flatnonzero(~is_train)
    if task == "classification":
        return stratified_split(labels, TEST_FRACTION, seed)
    order = np.random.default_rng(seed).permutation(n)
    n_test = max(1, int(round(n * TEST_FRACTION)))
    return order[n_test:], order[:n_test]


def encode(table: Any, keep: list[int], train_idx: np.ndarray, test_idx: np.ndarray, exclude: set) -> tuple:
    blocks, feature_names, means, stds = [], [], [], []
    levels_max = limits.limit(limits.MAX_TABLE_LEVELS)
    for col, name in enumerate(table.names):
        if col in exclude:
            continue
        cells = table.columns[col] if len(keep) == table.n_rows else tuple(table.columns[col][i] for i in keep)
        numbers = numbers_of(cells)
        if numbers is not None:
            finite(numbers, cells, validate.shown(name), lambda k: table.where(keep[k]))
            mean = float(numbers[train_idx].mean())
            std = float(numbers[train_idx].std()) or 1.0
            blocks.append(((numbers - mean) / std)[:, None])
            feature_names.append(name)
            means.append(mean)
            stds.append(std)
            continue
        values = np.array(cells, dtype=object)
        train_levels = sorted(set(values[train_idx].tolist()))
        n_levels = len(set(cells))
        if n_levels > levels_max:
            raise InputError(
                f"data: text column {validate.shown(name)} has {n_levels} distinct values, more than "
                f"{levels_max} (${limits.MAX_TABLE_LEVELS.variable}); drop it or make it numeric"
            )
        lookup = {c: i for i, c in enumerate(train_levels)}
        # a level seen only in the test split gets index -1: a row of zeros
        index = np.array([lookup.get(c, -1) for c in cells])
        one_hot = (index[:, None] == np.arange(len(train_levels))[None, :]).astype(np.float64)
        blocks.append(one_hot)
        feature_names += [f"{name}={level}" for level in train_levels]
        means += [0.0] * len(train_levels)
        stds += [1.0] * len(train_levels)
    if not blocks:
        raise InputError("data: the table has no input columns besides the target (and split column)")
    x = np.concatenate(blocks, axis=1)
    return (
        x[train_idx],
        x[test_idx],
        feature_names,
        np.array(means, dtype=np.float32),
        np.array(stds, dtype=np.float32),
    )
