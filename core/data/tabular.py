"""PHONEME and the UCI classification sets: download path, parsers, encoding.

None of these ship with the project nor with the reference data; they are
found in <data dir>/<name>/ or the download cache, or downloaded when online.
Without an official split they get a seeded, stratified 80/20 split.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from core.data.dataset import Dataset, make_dataset
from core.data.download import RemoteFile, fetch, missing_files_message, offline_reason
from core.data.locations import download_roots, resolve_data_dir, writable_download_root
from core.data.sampling import stratified_split
from core.data.tabular_parsing import Table, encode_features, encode_labels, read_delimited, read_table_any
from core.errors import DataError

TEST_FRACTION = 0.2
ADULT_COLUMNS = [
    "age",
    "workclass",
    "fnlwgt",
    "education",
    "education-num",
    "marital-status",
    "occupation",
    "relationship",
    "race",
    "sex",
    "capital-gain",
    "capital-loss",
    "hours-per-week",
    "native-country",
    "income",
]
CREDIT_COLUMNS = [f"A{i}" for i in range(1, 16)] + ["class"]


@dataclass
class ParsedTable:
    """Rows split into train/test (test empty: make a split) and the label column."""

    names: list[str]
    train_rows: list[list[str]]
    train_labels: list[str]
    test_rows: list[list[str]] = field(default_factory=list)
    test_labels: list[str] = field(default_factory=list)


def _split_off_label(table: Table, label_column: str) -> tuple:
    index = table.column_index(label_column)
    names = [n for i, n in enumerate(table.names) if i != index]
    rows = [[v for i, v in enumerate(row) if i != index] for row in table.rows]
    labels = [row[index] for row in table.rows]
    if any(label in {"", "?"} for label in labels):
        raise DataError(f"{table.path}: column {label_column!r} has missing labels")
    return names, rows, labels


# ------------------------------------------------------------------ parsers


def parse_phoneme(path: Path) -> ParsedTable:
    """ESL phoneme.data: row.names, x.1..x.256, g, speaker. Official split by speaker prefix."""
    table = read_delimited(path, delimiter=",", header=True)
    expected = [f"x.{i}" for i in range(1, 257)]
    missing = [c for c in expected + ["g", "speaker"] if c not in table.names]
    if missing:
        raise DataError(f"{path} is not the ESL phoneme.data file: missing columns {', '.join(missing[:5])}")
    feature_idx = [table.names.index(c) for c in expected]
    label_idx, speaker_idx = table.names.index("g"), table.names.index("speaker")
    rows = [[row[i] for i in feature_idx] for row in table.rows]
    labels = [row[label_idx] for row in table.rows]
    speakers = [row[speaker_idx] for row in table.rows]
    if all(s.startswith(("train.", "test.")) for s in speakers):
        is_train = [s.startswith("train.") for s in speakers]
        pick = lambda seq, keep: [v for v, t in zip(seq, is_train) if t == keep]  # noqa: E731
        return ParsedTable(expected, pick(rows, True), pick(labels, True), pick(rows, False), pick(labels, False))
    return ParsedTable(expected, rows, labels)


def parse_credit_approval(path: Path) -> ParsedTable:
    """crx.data: 15 mixed attributes and a +/- class, '?' for missing values."""
    table = read_delimited(path, delimiter=",", header=False, names=CREDIT_COLUMNS)
    return ParsedTable(*_split_off_label(table, "class"))


def parse_bank_marketing(path: Path) -> ParsedTable:
    """bank-full.csv: ';'-separated, quoted header and strings, label column 'y'."""
    table = read_delimited(path, delimiter=";", header=True)
    return ParsedTable(*_split_off_label(table, "y"))


def parse_adult(train_path: Path, test_path: Path) -> ParsedTable:
    """adult.data + adult.test (official split); test labels end in '.', first line is a note."""
    train = read_delimited(train_path, header=False, names=ADULT_COLUMNS)
    test = read_delimited(test_path, header=False, names=ADULT_COLUMNS, skip_prefixes=("|",))
    names, train_rows, train_labels = _split_off_label(train, "income")
    _, test_rows, test_labels = _split_off_label(test, "income")
    return ParsedTable(
        names, train_rows, [s.rstrip(".") for s in train_labels], test_rows, [s.rstrip(".") for s in test_labels]
    )


def parse_class_table(path: Path) -> ParsedTable:
    """ARFF or CSV with a 'Class' column (dry beans, pistachio, raisins)."""
    table = read_table_any(path)
    label = "class" if "class" in [n.lower() for n in table.names] else table.names[-1]
    return ParsedTable(*_split_off_label(table, label))


# ------------------------------------------------------------------ specs


@dataclass(frozen=True)
class TabularSpec:
    name: str
    description: str
    accepted_files: tuple[tuple[str, ...], ...]  # per needed file: accepted local names
    remote: tuple[RemoteFile, ...]
    parse: Callable[..., ParsedTable]
    n_classes: int | None
    input_shape: tuple[int, ...] | None  # None: depends on one-hot categories
    n_train: int | None = None
    n_test: int | None = None
    excel_hint: str | None = None  # official file is xlsx: where to export CSV


UCI = "https://archive.ics.uci.edu/ml/machine-learning-databases"
TABULAR_SETS: dict[str, TabularSpec] = {
    spec.name: spec
    for spec in (
        TabularSpec(
            "phoneme",
            "ESL phoneme (256 log-periodogram features, 5 phonemes)",
            (("phoneme.data", "phoneme.csv"),),
            (
                RemoteFile(
                    "phoneme.data",
                    (
                        "https://hastie.su.domains/ElemStatLearn/datasets/phoneme.data",
                        "https://web.stanford.edu/~hastie/ElemStatLearn/datasets/phoneme.data",
                    ),
                ),
            ),
            parse_phoneme,
            5,
            (256,),
        ),
        TabularSpec(
            "credit-approval",
            "UCI Credit Approval (crx.data)",
            (("crx.data",),),
            (RemoteFile("crx.data", (f"{UCI}/credit-screening/crx.data",)),),
            parse_credit_approval,
            2,
            None,
        ),
        TabularSpec(
            "bank-marketing",
            "UCI Bank Marketing (bank-full.csv)",
            (("bank-full.csv",),),
            (RemoteFile("bank-full.csv", (f"{UCI}/00222/bank.zip",), zip_member="bank-full.csv"),),
            parse_bank_marketing,
            2,
            None,
        ),
        TabularSpec(
            "adult",
            "UCI Adult (adult.data + adult.test, official split)",
            (("adult.data",), ("adult.test",)),
            (
                RemoteFile("adult.data", (f"{UCI}/adult/adult.data",)),
                RemoteFile("adult.test", (f"{UCI}/adult/adult.test",)),
            ),
            parse_adult,
            2,
            None,
            32561,
            16281,
        ),
        TabularSpec(
            "dry-beans",
            "UCI Dry Bean (16 shape features, 7 classes)",
            (("Dry_Bean_Dataset.arff", "Dry_Bean_Dataset.csv", "dry-beans.csv"),),
            (
                RemoteFile(
                    "Dry_Bean_Dataset.arff",
                    ("https://archive.ics.uci.edu/static/public/602/dry+bean+dataset.zip",),
                    zip_member=".arff",
                ),
            ),
            parse_class_table,
            7,
            (16,),
            excel_hint="dry-beans.csv",
        ),
        TabularSpec(
            "pistachio",
            "Pistachio (16 features, 2 classes; Koklu et al.)",
            (("Pistachio_16_Features_Dataset.arff", "Pistachio_16_Features_Dataset.csv", "pistachio.csv"),),
            (
                RemoteFile(
                    "Pistachio_16_Features_Dataset.arff",
                    ("https://www.muratkoklu.com/datasets/vtdhnd07.php",),
                    zip_member="Pistachio_16_Features_Dataset.arff",
                ),
            ),
            parse_class_table,
            2,
            (16,),
            excel_hint="pistachio.csv",
        ),
        TabularSpec(
            "raisins",
            "UCI Raisin (7 morphological features, 2 classes)",
            (("Raisin_Dataset.arff", "Raisin_Dataset.csv", "raisins.csv"),),
            (
                RemoteFile(
                    "Raisin_Dataset.arff",
                    ("https://archive.ics.uci.edu/static/public/850/raisin.zip",),
                    zip_member=".arff",
                ),
            ),
            parse_class_table,
            2,
            (7,),
            excel_hint="raisins.csv",
        ),
    )
}


def locate_tabular_files(name: str, data_dir: str | Path | None = None) -> list[Path] | None:
    """Local files for `name` in <data dir>/<name>/ or the download cache, else None."""
    spec = TABULAR_SETS[name]
    for root in download_roots(data_dir):
        folder = root / name
        found = []
        for alternatives in spec.accepted_files:
            match = next((folder / f for f in alternatives if (folder / f).is_file()), None)
            if match is None:
                break
            found.append(match)
        else:
            return found
    return None


def _excel_only(name: str, data_dir: str | Path | None) -> Path | None:
    for root in download_roots(data_dir):
        excel = sorted((root / name).glob("*.xls*")) if (root / name).is_dir() else []
        if excel:
            return excel[0]
    return None


def _missing_message(spec: TabularSpec, data_dir, reason: str) -> str:
    names = [alternatives[0] for alternatives in spec.accepted_files]
    if spec.excel_hint:
        names[-1] += f" (or a CSV export named {spec.excel_hint})"
    urls = ", ".join(r.urls[0] for r in spec.remote)
    return missing_files_message(
        spec.name,
        spec.name,
        names,
        resolve_data_dir(data_dir),
        extra=f"Automatic download failed: {reason}. Source: {urls}",
    )


def _obtain_files(spec: TabularSpec, data_dir) -> tuple[list[Path], str]:
    found = locate_tabular_files(spec.name, data_dir)
    if found is not None:
        root = resolve_data_dir(data_dir)
        in_data_dir = root is not None and root in found[0].parents
        return found, "data-dir" if in_data_dir else "download"
    excel = _excel_only(spec.name, data_dir)
    if excel is not None:
        raise DataError(
            f"found {excel} but Excel files are not read: open it and export CSV "
            f"(with the header row) to {excel.parent / (spec.excel_hint or 'data.csv')}"
        )
    reason = offline_reason()
    if reason:
        raise DataError(_missing_message(spec, data_dir, reason))
    folder = writable_download_root(data_dir) / spec.name
    try:
        return [fetch(r, folder, what=f"{spec.name} {r.name}") for r in spec.remote], "download"
    except DataError as exc:
        hint = (
            f" If the official download is an .xlsx file, export it as CSV to {folder / spec.excel_hint}."
            if spec.excel_hint
            else ""
        )
        raise DataError(_missing_message(spec, data_dir, str(exc)) + hint) from exc


def dataset_from_parsed(
    name: str, parsed: ParsedTable, *, seed: int, source: str, n_classes: int | None = None
) -> Dataset:
    """Split (if no official split), encode and wrap a parsed table."""
    names = parsed.names
    if parsed.test_rows:
        train_rows, test_rows = parsed.train_rows, parsed.test_rows
        train_labels, test_labels = parsed.train_labels, parsed.test_labels
    else:
        labels = np.array(parsed.train_labels)
        train_idx, test_idx = stratified_split(labels, TEST_FRACTION, seed)
        train_rows = [parsed.train_rows[i] for i in train_idx]
        test_rows = [parsed.train_rows[i] for i in test_idx]
        train_labels = labels[train_idx].tolist()
        test_labels = labels[test_idx].tolist()
    features = encode_features(names, train_rows, test_rows)
    y_train, y_test, class_names = encode_labels(train_labels, test_labels)
    if n_classes is not None and len(class_names) != n_classes:
        raise DataError(
            f"{name}: expected {n_classes} classes, found {len(class_names)} "
            f"({', '.join(class_names[:10])}); is it the right file?"
        )
    return make_dataset(
        name=name,
        task="classification",
        x_train=features.x_train,
        y_train=y_train,
        x_test=features.x_test,
        y_test=y_test,
        source=source,
        input_shape=(features.x_train.shape[1],),
        n_classes=len(class_names),
        class_names=class_names,
        params={"seed": seed} if not parsed.test_rows else {},
        x_mean=features.x_mean,
        x_std=features.x_std,
    )


def load_tabular(name: str, *, data_dir: str | Path | None = None, seed: int = 0) -> Dataset:
    spec = TABULAR_SETS[name]
    paths, source = _obtain_files(spec, data_dir)
    parsed = spec.parse(*paths)
    return dataset_from_parsed(name, parsed, seed=seed, source=source, n_classes=spec.n_classes)
