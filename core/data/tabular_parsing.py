"""Parsers for delimited text and ARFF tables, and their encoding as features.

A table here is (column names, rows of strings). Encoding: numeric columns
(every present value parses as a number) get missing values imputed with the
training mean and are standardised with training statistics; other columns
are one-hot encoded (a missing value is a category of its own).
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from core.errors import DataError

MISSING = {"?", ""}


@dataclass
class Table:
    names: list[str]
    rows: list[list[str]]
    path: Path

    def column_index(self, wanted: str) -> int:
        lowered = [n.lower() for n in self.names]
        if wanted.lower() not in lowered:
            raise DataError(f"{self.path} has no column {wanted!r} (columns: {', '.join(self.names[:20])})")
        return lowered.index(wanted.lower())


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise DataError(f"cannot read {path}: {exc.strerror or exc}") from exc


def read_delimited(
    path: str | Path,
    *,
    delimiter: str = ",",
    header: bool = True,
    names: list[str] | None = None,
    skip_prefixes: tuple[str, ...] = (),
) -> Table:
    """Rows of a delimited file with quotes handled; blank and skipped lines dropped."""
    path = Path(path)
    lines = [
        line
        for line in _read_text(path).splitlines()
        if line.strip() and not line.lstrip().startswith(skip_prefixes or ("\0",))
    ]
    reader = csv.reader(io.StringIO("\n".join(lines)), delimiter=delimiter, skipinitialspace=True)
    rows = [[cell.strip() for cell in row] for row in reader]
    if header:
        if not rows:
            raise DataError(f"{path} is empty")
        names = rows.pop(0)
    if names is None:
        names = [f"column_{i}" for i in range(len(rows[0]) if rows else 0)]
    for number, row in enumerate(rows, start=2 if header else 1):
        if len(row) != len(names):
            raise DataError(
                f"{path}: row {number} has {len(row)} fields, expected {len(names)} (delimiter {delimiter!r})"
            )
    return Table(list(names), rows, path)


def read_arff(path: str | Path) -> Table:
    """The attributes and data rows of an ARFF file (dense format)."""
    path = Path(path)
    names: list[str] = []
    data_lines: list[str] = []
    in_data = False
    for raw in _read_text(path).splitlines():
        line = raw.strip()
        if not line or line.startswith("%"):
            continue
        if in_data:
            data_lines.append(line)
            continue
        keyword = line.split(None, 1)[0].lower()
        if keyword == "@attribute":
            rest = line.split(None, 1)[1]
            if rest[0] in "'\"":
                quote = rest[0]
                names.append(rest[1 : rest.index(quote, 1)])
            else:
                names.append(rest.split(None, 1)[0])
        elif keyword == "@data":
            in_data = True
    if not names or not in_data:
        raise DataError(f"{path} is not an ARFF file (needs @attribute lines and @data)")
    if any(line.startswith("{") for line in data_lines):
        raise DataError(f"{path} uses sparse ARFF rows, which are not supported; export CSV")
    reader = csv.reader(
        io.StringIO("\n".join(data_lines)),
        delimiter=",",
        quotechar="'" if "'" in "".join(data_lines[:5]) else '"',
        skipinitialspace=True,
    )
    rows = [[cell.strip() for cell in row] for row in reader]
    for number, row in enumerate(rows, start=1):
        if len(row) != len(names):
            raise DataError(f"{path}: data row {number} has {len(row)} values, expected {len(names)} attributes")
    return Table(names, rows, path)


def read_table_any(path: str | Path) -> Table:
    """ARFF or CSV (comma or semicolon) by extension/content; header row required for CSV."""
    path = Path(path)
    if path.suffix.lower() in {".xlsx", ".xls"}:
        raise DataError(
            f"{path} is an Excel file; open it and export it as CSV (header row included) to {path.with_suffix('.csv')}"
        )
    if path.suffix.lower() == ".arff":
        return read_arff(path)
    first_line = next((ln for ln in _read_text(path).splitlines() if ln.strip()), "")
    if first_line.lower().startswith(("@relation", "%")):
        return read_arff(path)
    delimiter = ";" if first_line.count(";") > first_line.count(",") else ","
    return read_delimited(path, delimiter=delimiter, header=True)


def _as_float(values: list[str]) -> np.ndarray | None:
    """Column as float (NaN for missing), or None if a present value is not numeric."""
    out = np.empty(len(values), dtype=np.float64)
    for i, value in enumerate(values):
        if value in MISSING:
            out[i] = np.nan
            continue
        try:
            out[i] = float(value)
        except ValueError:
            return None
    return out


@dataclass
class EncodedFeatures:
    x_train: np.ndarray
    x_test: np.ndarray
    feature_names: list[str]
    x_mean: np.ndarray
    x_std: np.ndarray


def encode_features(names: list[str], train_rows: list[list[str]], test_rows: list[list[str]]) -> EncodedFeatures:
    """Numeric columns imputed+standardised on train stats; categorical one-hot."""
    all_rows = train_rows + test_rows
    n_train = len(train_rows)
    blocks, feature_names, means, stds = [], [], [], []
    for col, name in enumerate(names):
        values = [row[col] for row in all_rows]
        numeric = _as_float(values)
        if numeric is not None:
            train_part = numeric[:n_train]
            present = train_part[~np.isnan(train_part)]
            mean = float(present.mean()) if present.size else 0.0
            numeric = np.where(np.isnan(numeric), mean, numeric)
            std = float(numeric[:n_train].std()) or 1.0
            blocks.append(((numeric - mean) / std)[:, None])
            feature_names.append(name)
            means.append(mean)
            stds.append(std)
        else:
            categories = sorted(set(values))
            lookup = {c: i for i, c in enumerate(categories)}
            one_hot = np.zeros((len(values), len(categories)))
            one_hot[np.arange(len(values)), [lookup[v] for v in values]] = 1.0
            blocks.append(one_hot)
            feature_names += [f"{name}={c}" for c in categories]
            means += [0.0] * len(categories)
            stds += [1.0] * len(categories)
    x = np.concatenate(blocks, axis=1) if blocks else np.zeros((len(all_rows), 0))
    return EncodedFeatures(
        x[:n_train], x[n_train:], feature_names, np.array(means, dtype=np.float32), np.array(stds, dtype=np.float32)
    )


def encode_labels(train_labels: list[str], test_labels: list[str]) -> tuple:
    """(y_train, y_test, class_names) with classes in sorted order."""
    class_names = tuple(sorted(set(train_labels) | set(test_labels)))
    lookup = {c: i for i, c in enumerate(class_names)}
    return (
        np.array([lookup[v] for v in train_labels], dtype=np.int64),
        np.array([lookup[v] for v in test_labels], dtype=np.int64),
        class_names,
    )
