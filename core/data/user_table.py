"""Your own table as a dataset: a CSV or Parquet file, a target column, stored content-addressed.

A table is stored once under `<cache dir>/tables/<sha256>.csv|.parquet` (the cache dir of the run
store: $BNN_CACHE_DIR, else the user cache folder), and named `table-<first 16 hex digits>`. Runs
name it in `RunConfig.dataset` with their options in `dataset_params` (target, task, split_column,
missing), so a run id depends on the data and a run reloads after the original file is gone.

Rules (documented in docs/user-tables.md):
- missing values are empty cells and NA, N/A, NaN, nan, null, NULL, ? (Parquet: nulls and NaN); they
  are counted per column and refused, unless `missing="drop"` drops every row that has one;
- a column is numeric when every present value parses as a finite number; numeric inputs are
  standardised with the mean and standard deviation of the training split only (a constant column:
  sd 1); other columns are one-hot encoded over the levels seen in the training split (a level seen
  only in the test split encodes as all zeros), at most $BNN_MAX_TABLE_LEVELS levels;
- the task, unless given: classification when the target is not numeric, or numeric with at most
  CLASSIFICATION_MAX_LEVELS distinct values that are all whole numbers; regression otherwise;
- the split: the rows of a `split_column` that say train / test, else a seeded 80/20 split
  (stratified by class for classification); regression targets are standardised on the training split.

Every problem is one InputError line naming the column and the line (CSV lines count from 1, the
header included; Parquet rows from 1).
"""

from __future__ import annotations

import csv
import difflib
import functools
import io
import json
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from core import limits, validate
from core.data import table_encoding as encoding
from core.data.dataset import Dataset, DatasetInfo, make_dataset
from core.data.locations import user_cache_dir
from core.errors import DataError, InputError

PREFIX = "table-"
NAME_HEX = 16
NAME_PATTERN = re.compile(rf"^{PREFIX}[0-9a-f]{{{NAME_HEX}}}$")
MISSING_TOKENS = frozenset({"", "NA", "N/A", "NaN", "nan", "null", "NULL", "?"})
CLASSIFICATION_MAX_LEVELS = 10
DELIMITERS = (",", ";", "\t", "|")
TASKS = ("classification", "regression")
MISSING_CHOICES = ("refuse", "drop")
MIN_ROWS = encoding.MIN_ROWS
PARAM_KEYS = ("target", "task", "split_column", "missing")
PARQUET_MAGIC = b"PAR1"


@dataclass(frozen=True)
class RawTable:
    """Column names, each column's cells (None: missing) and each row's line number in the file."""

    names: tuple[str, ...]
    columns: tuple[tuple[str | None, ...], ...]
    lines: tuple[int, ...]
    kind: str  # "csv" or "parquet"

    @property
    def n_rows(self) -> int:
        return len(self.lines)

    def where(self, row: int) -> str:
        return f"{'line' if self.kind == 'csv' else 'row'} {self.lines[row]}"


def is_table_name(name: Any) -> bool:
    return isinstance(name, str) and name.startswith(PREFIX)


def table_name(sha256: str) -> str:
    return PREFIX + sha256[:NAME_HEX]


def tables_dir() -> Path:
    """`tables/` beside the download cache (data/) and the run store (runs/)."""
    return user_cache_dir().parent / "tables"


# --------------------------------------------------------------------------- reading bytes


def read_limited(path: str | Path) -> bytes:
    """The file's bytes, refused when missing, not a file or above $BNN_MAX_TABLE_MB."""
    text = validate.text_of(str(path), "data", 4096)
    path = Path(text).expanduser()
    if not path.exists():
        raise InputError(f"data: file {validate.shown(text)} does not exist")
    if not path.is_file():
        raise InputError(f"data: {validate.shown(text)} is not a regular file")
    most = max_bytes()
    try:
        with path.open("rb") as handle:
            data = handle.read(most + 1)
    except OSError as exc:
        raise InputError(f"data: cannot read {validate.shown(text)}: {exc.strerror or exc}") from None
    check_size(data, path.name)
    return data


def max_bytes() -> int:
    return int(limits.limit(limits.MAX_TABLE_MB) * 1_000_000)


def check_size(data: bytes | int, what: str) -> None:
    """Refuse a table above $BNN_MAX_TABLE_MB: its bytes, or an upload's size before its bytes are read."""
    if (data if isinstance(data, int) else len(data)) > max_bytes():
        raise InputError(
            f"data: {validate.shown(what)} is larger than {limits.limit(limits.MAX_TABLE_MB):g} MB "
            f"(${limits.MAX_TABLE_MB.variable})"
        )


def parse_table(data: bytes, what: str = "table") -> RawTable:
    """A RawTable from CSV (UTF-8; comma, semicolon, tab or |) or Parquet bytes, or one InputError."""
    shown = validate.shown(what)
    check_size(data, what)
    if not data.strip():
        raise InputError(f"data: {shown} is empty")
    if data[:4] == PARQUET_MAGIC:
        return _parse_parquet(data, shown)
    zero = data.find(b"\x00")
    if zero >= 0:
        line = data[:zero].count(b"\n") + 1
        raise InputError(f"data: {shown} is a binary file (a zero byte on line {line}), not a CSV or Parquet table")
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(
            f"data: {shown} is not UTF-8 text (line {line}, byte {exc.start}); save it as UTF-8 CSV"
        ) from None
    return _parse_csv(text, shown)


def _delimiter(header: str) -> str:
    counts = [header.count(d) for d in DELIMITERS]
    return DELIMITERS[int(np.argmax(counts))] if max(counts) else ","


def _parse_csv(text: str, shown: str) -> RawTable:
    first = next((ln for ln in text.splitlines() if ln.strip()), "")
    delimiter = _delimiter(first)
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter, strict=True)
    names: list[str] | None = None
    header_line = 0
    rows: list[list[str]] = []
    lines: list[int] = []
    try:
        start = 1
        for row in reader:
            if not row or all(not cell.strip() for cell in row):
                start = reader.line_num + 1
                continue
            if names is None:
                names, header_line = [cell.strip() for cell in row], start
            else:
                if len(row) != len(names):
                    raise InputError(
                        f"data: {shown} line {start} has {len(row)} fields, the header has "
                        f"{len(names)} (delimiter {delimiter!r})"
                    )
                rows.append(row)
                lines.append(start)
            start = reader.line_num + 1
    except csv.Error as exc:
        raise InputError(f"data: {shown} line {reader.line_num}: {exc}") from None
    if names is None:  # only separators and blanks (str.strip also removes \x1c-\x1f)
        raise InputError(f"data: {shown} is empty (no line with a value)")
    if len(names) < 2:
        raise InputError(
            f"data: {shown} has only one column (header {validate.shown(first)}); is the delimiter "
            f"one of comma, semicolon, tab or |?"
        )
    _check_names(names, shown, f"line {header_line}")
    if not rows:
        raise InputError(f"data: {shown} has a header but no data rows")
    columns = tuple(
        tuple(None if (c := row[i].strip()) in MISSING_TOKENS else c for row in rows) for i in range(len(names))
    )
    return RawTable(tuple(names), columns, tuple(lines), "csv")


def _check_names(names: list[str], shown: str, where: str) -> None:
    for i, name in enumerate(names):
        if not name:
            raise InputError(f"data: {shown} column {i + 1} has no name in the header ({where})")
    seen: dict[str, int] = {}
    for i, name in enumerate(names):
        if name in seen:
            raise InputError(
                f"data: {shown} has two columns named {validate.shown(name)} (columns {seen[name] + 1} and {i + 1})"
            )
        seen[name] = i


def _parse_parquet(data: bytes, shown: str) -> RawTable:
    import pandas as pd

    try:
        frame = pd.read_parquet(io.BytesIO(data))
    except Exception as exc:  # pyarrow raises many kinds for a damaged file: all are one message
        reason = (str(exc).splitlines() or [type(exc).__name__])[0][:160]
        raise InputError(f"data: {shown} is not a readable Parquet file ({reason})") from None
    names = [str(n) for n in frame.columns]
    if len(names) < 2:
        raise InputError(f"data: {shown} has only one column; a table needs inputs and a target")
    _check_names(names, shown, "Parquet schema")
    if len(frame) == 0:
        raise InputError(f"data: {shown} has no rows")
    columns = []
    for name in frame.columns:
        series = frame[name]
        integer = pd.api.types.is_integer_dtype(series.dtype)
        columns.append(
            tuple(
                None if pd.isna(v) else (str(int(v)) if integer else repr(float(v)) if isinstance(v, float) else str(v))
                for v in series.tolist()
            )
        )
    return RawTable(tuple(names), tuple(columns), tuple(range(1, len(frame) + 1)), "parquet")


# --------------------------------------------------------------------------- encoding


def _column(table: RawTable, wanted: str, what: str) -> int:
    if wanted in table.names:
        return table.names.index(wanted)
    close = difflib.get_close_matches(wanted, table.names, n=3, cutoff=0.6)
    hint = f"; did you mean {', '.join(map(repr, close))}?" if close else ""
    listed = ", ".join(map(repr, table.names[:12])) + (", ..." if len(table.names) > 12 else "")
    raise InputError(f"{what}: the table has no column {validate.shown(wanted)}{hint} (columns: {listed})")


def infer_task(cells: tuple[str | None, ...]) -> str:
    """Classification for text, or for at most CLASSIFICATION_MAX_LEVELS distinct whole numbers."""
    numbers = encoding.numbers_of(cells)
    if numbers is None:
        return "classification"
    present = numbers[~np.isnan(numbers)]
    levels = np.unique(present)
    whole = bool(np.all(np.isfinite(levels)) and np.all(levels == np.round(levels)))
    return "classification" if whole and len(levels) <= CLASSIFICATION_MAX_LEVELS else "regression"


def check_params(params: Mapping[str, Any]) -> dict[str, Any]:
    """The table options, checked, with `missing` filled in (`task` is filled in by `resolve_params`)."""
    unknown = sorted(set(params) - set(PARAM_KEYS))
    if unknown:
        raise InputError(
            f"dataset_params: unknown table option(s) {', '.join(unknown)}; known: {', '.join(PARAM_KEYS)}"
        )
    if params.get("target") is None:
        raise InputError("target: a table needs its target column (--target COLUMN)")
    out = {"target": validate.text_of(params["target"], "target", 1000)}
    if params.get("task") is not None:
        out["task"] = validate.one_of(params["task"], "task", TASKS)
    if params.get("split_column") is not None:
        out["split_column"] = validate.text_of(params["split_column"], "split-column", 1000)
        if out["split_column"] == out["target"]:
            raise InputError("split-column: the split column cannot be the target")
    out["missing"] = validate.one_of(params.get("missing") or "refuse", "missing", MISSING_CHOICES)
    return out


def build_dataset(table: RawTable, name: str, params: Mapping[str, Any], seed: int = 0) -> Dataset:
    """Split, encode and wrap a parsed table (see the module's rules)."""
    params = check_params(params)
    target = _column(table, params["target"], "target")
    split_col = _column(table, params["split_column"], "split-column") if "split_column" in params else None
    keep = encoding.rows_kept(table, params["missing"] == "drop")
    every = len(keep) == table.n_rows
    cells = lambda col: table.columns[col] if every else tuple(table.columns[col][i] for i in keep)  # noqa: E731
    y_cells = cells(target)
    task = params.get("task") or infer_task(y_cells)
    where = lambda k: table.where(keep[k])  # noqa: E731
    target_name = validate.shown(params["target"])
    if task == "regression":
        y = encoding.numbers_of(y_cells)
        if y is None:
            bad = next(k for k, c in enumerate(y_cells) if encoding.numbers_of((c,)) is None)
            raise InputError(
                f"target: {target_name} is text ({where(bad)}: {validate.shown(y_cells[bad])}); "
                f"regression needs numbers (or use --task classification)"
            )
        encoding.finite(y, y_cells, target_name, where)
        if np.all(y == y[0]):
            raise InputError(f"target: {target_name} is constant (every value is {y_cells[0]}); nothing to learn")
        labels, class_names = y, None
    else:
        class_names = encoding.class_names(y_cells)
        if len(class_names) < 2:
            raise InputError(
                f"target: {target_name} has one class only ({validate.shown(class_names[0])}); a classifier needs two"
            )
        most = limits.limit(limits.MAX_TABLE_LEVELS)
        if len(class_names) > most:
            raise InputError(
                f"target: {target_name} has {len(class_names)} classes, more than "
                f"{most} (${limits.MAX_TABLE_LEVELS.variable}); is it a regression target "
                f"(--task regression)?"
            )
        lookup = {c: i for i, c in enumerate(class_names)}
        labels = np.array([lookup[c] for c in y_cells], dtype=np.int64)
    train_idx, test_idx = encoding.split(table, split_col, keep, labels, task, seed)
    x_train, x_test, feature_names, x_mean, x_std = encoding.encode(
        table, keep, train_idx, test_idx, exclude={target, split_col}
    )
    extra: dict[str, Any] = {}
    if task == "regression":
        mean, std = float(labels[train_idx].mean()), float(labels[train_idx].std()) or 1.0
        labels = (labels - mean) / std
        extra = {"target_mean": mean, "target_std": std}
    return make_dataset(
        name=name,
        task=task,
        x_train=x_train,
        y_train=labels[train_idx],
        x_test=x_test,
        y_test=labels[test_idx],
        source="data-dir",
        n_classes=len(class_names) if class_names else None,
        class_names=class_names,
        params={**params, "task": task, "seed": seed},
        x_mean=x_mean,
        x_std=x_std,
        feature_names=tuple(feature_names),
        **extra,
    )


# --------------------------------------------------------------------------- the store


@dataclass(frozen=True)
class StoredTable:
    name: str
    sha256: str
    path: Path
    rows: int
    columns: int
    original_name: str
    targets: tuple[str, ...]

    def file_name(self) -> str:
        return self.original_name if len(self.original_name) <= 40 else self.original_name[:37] + "..."

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "sha256": self.sha256,
            "rows": self.rows,
            "columns": self.columns,
            "file": self.original_name,
            "targets": list(self.targets),
            "path": str(self.path),
        }


def _write_atomic(path: Path, data: bytes) -> None:
    """Write beside `path` and rename: a reader sees the whole file or none (never half of it)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    handle = tempfile.NamedTemporaryFile(dir=path.parent, prefix=".tmp-", delete=False)
    try:
        with handle:
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(handle.name, path)
    except BaseException:
        Path(handle.name).unlink(missing_ok=True)
        raise


def store_table(data: bytes, original_name: str, params: Mapping[str, Any], seed: int = 0) -> StoredTable:
    """Check the table with its options (nothing is written when it fails), then store it once."""
    table, sha = parsed_table(data, original_name)
    build_dataset(table, table_name(sha), params, seed)
    kind = table.kind
    path = tables_dir() / f"{sha}.{kind}"
    if not path.is_file():
        _write_atomic(path, data)
    meta_path = path.with_suffix(".json")
    meta = _read_meta(meta_path)
    targets = list(dict.fromkeys([*meta.get("targets", []), str(params.get("target"))]))
    meta = {
        "sha256": sha,
        "file": Path(original_name).name,
        "rows": table.n_rows,
        "columns": len(table.names),
        "targets": targets,
    }
    _write_atomic(meta_path, json.dumps(meta, indent=1).encode())
    _parsed.put(sha, table)
    return StoredTable(table_name(sha), sha, path, table.n_rows, len(table.names), meta["file"], tuple(targets))


def _read_meta(path: Path) -> dict[str, Any]:
    try:
        meta = json.loads(path.read_text(encoding="utf-8"))
        return meta if isinstance(meta, dict) else {}
    except (OSError, ValueError):
        return {}


def stored_path(name: str) -> Path:
    """The stored file of table `name` (table-<16 hex>), or DataError saying how to store it."""
    if not NAME_PATTERN.match(name):
        raise DataError(f"dataset: {validate.shown(name)} is not a stored table name ({PREFIX}<16 hex digits>)")
    found = sorted(p for p in tables_dir().glob(f"{name[len(PREFIX) :]}*") if p.suffix in (".csv", ".parquet"))
    if not found:
        raise DataError(
            f"dataset: table {name} is not stored in {tables_dir()}; train once with --data FILE to store it again"
        )
    return found[0]


def list_tables() -> list[StoredTable]:
    out = []
    folder = tables_dir()
    for path in sorted(folder.glob("*.csv")) + sorted(folder.glob("*.parquet")) if folder.is_dir() else []:
        meta = _read_meta(path.with_suffix(".json"))
        sha = path.stem
        out.append(
            StoredTable(
                table_name(sha),
                sha,
                path,
                int(meta.get("rows", 0)),
                int(meta.get("columns", 0)),
                str(meta.get("file", "?")),
                tuple(meta.get("targets", [])),
            )
        )
    return out


class _ParsedCache:
    """The last few parsed tables by content hash: storing, configuring and training a run read the
    same table three times, and a 50,000-row CSV takes seconds to parse."""

    def __init__(self, size: int = 2):
        self.size, self.items = size, {}

    def get(self, path: Path) -> RawTable:
        sha = path.stem
        if sha not in self.items:
            self.put(sha, parse_table(path.read_bytes(), path.name))
        return self.items[sha]

    def put(self, sha: str, table: RawTable) -> None:
        self.items.pop(sha, None)
        self.items[sha] = table
        while len(self.items) > self.size:
            self.items.pop(next(iter(self.items)))

    def cache_clear(self) -> None:
        self.items.clear()


_parsed = _ParsedCache()


def parsed_table(data: bytes, what: str) -> tuple[RawTable, str]:
    """The parsed table and its SHA-256, parsed once per content (the upload's column pickers, its
    storing and its training read the same bytes)."""
    import hashlib

    sha = hashlib.sha256(data).hexdigest()
    if sha not in _parsed.items:
        _parsed.put(sha, parse_table(data, what))
    return _parsed.items[sha], sha


def stored_columns(name: str) -> tuple[str, ...]:
    """The header of stored table `name` (its one-hot inputs are named `column=level`)."""
    return _parsed.get(stored_path(name)).names


def load_table_dataset(name: str, *, seed: int = 0, **params: Any) -> Dataset:
    """The dataset of stored table `name` with its options (target, task, split_column, missing)."""
    path = stored_path(name)
    try:
        table = _parsed.get(path)
    except InputError as exc:
        raise DataError(f"stored table {name} no longer reads: {exc}") from None
    return build_dataset(table, name, params, seed)


@functools.lru_cache(maxsize=16)
def _info(name: str, seed: int, items: tuple) -> DatasetInfo:
    data = load_table_dataset(name, seed=seed, **dict(items))
    return DatasetInfo(
        name,
        data.task,
        (data.in_features,),
        data.n_classes,
        data.n_train,
        data.n_test,
        None,
        "data-dir",
        f"stored table {stored_path(name)}",
    )


def table_info(name: str, params: Mapping[str, Any] | None, seed: int = 0) -> DatasetInfo:
    """What `dataset_info` says of a table: it needs the options, which decide task and inputs."""
    if not params:
        raise DataError(f"dataset: table {name} needs its options (target, ...) in dataset_params")
    return _info(name, seed, tuple(sorted(check_params(params).items())))


def resolve_params(name: str, params: Mapping[str, Any], seed: int = 0) -> dict[str, Any]:
    """The options with the task filled in (inferred from the stored table when not given)."""
    checked = check_params(params)
    checked["task"] = table_info(name, checked, seed).task.value
    return checked
