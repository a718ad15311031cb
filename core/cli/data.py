"""`python -m core datasets`: which datasets exist and where they come from."""

from __future__ import annotations

import argparse
import json

from core.data.registry import list_datasets


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "datasets",
        help="list datasets and their availability",
        description="List datasets: task, shapes, sizes, splits and where each comes from "
        "(bundled, data dir, download, generated or unavailable).",
    )
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--data-dir", default=None, help="folder with full datasets (default: $BNN_DATA_DIR)")
    parser.set_defaults(handler=run_datasets)


def _cell(value) -> str:
    if value is None:
        return "?"
    if isinstance(value, tuple):
        return "x".join(str(v) for v in value) if value else "?"
    return str(value)


def format_table(infos) -> str:
    header = ("name", "task", "input", "classes", "n_train", "n_test", "splits", "availability")
    rows = [
        (
            i.name,
            i.task,
            _cell(i.input_shape),
            _cell(i.n_classes) if i.n_classes else "-",
            _cell(i.n_train),
            _cell(i.n_test),
            _cell(i.splits) if i.splits else "-",
            f"{i.availability}: {i.detail}",
        )
        for i in infos
    ]
    widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header) - 1)]
    lines = []
    for row in [header] + rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths)]
        lines.append("  ".join(cells + [row[-1]]))
    return "\n".join(lines)


def format_tables(tables) -> str:
    """Stored tables: name, rows, columns, the targets trained on, the file's name and its hash prefix."""
    header = ("name", "rows", "columns", "targets", "file", "sha256")
    rows = [
        (t.name, str(t.rows), str(t.columns), ",".join(t.targets) or "-", t.file_name(), t.sha256[:12]) for t in tables
    ]
    widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths)).rstrip() for row in [header] + rows
    )


def run_datasets(args: argparse.Namespace) -> int:
    from core.data.user_table import list_tables, tables_dir

    infos = list_datasets(args.data_dir)
    tables = list_tables()
    if args.json:
        print(
            json.dumps(
                [info.to_dict() for info in infos] + [{**t.to_dict(), "availability": "stored"} for t in tables],
                indent=2,
            )
        )
    else:
        print(format_table(infos))
        print(f"stored tables ({tables_dir()}):")
        print(format_tables(tables) if tables else "none (train with --data FILE --target COLUMN to store one)")
    return 0
