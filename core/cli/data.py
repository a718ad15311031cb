"""`python -m core datasets`: which datasets exist and where they come from."""

from __future__ import annotations

import argparse
import json

from core.data.registry import list_datasets


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "datasets", help="list datasets and their availability",
        description="List datasets: task, shapes, sizes, splits and where each comes from "
                    "(bundled, data dir, download, generated or unavailable).")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--data-dir", default=None,
                        help="folder with full datasets (default: $BNN_DATA_DIR)")
    parser.set_defaults(handler=run_datasets)


def _cell(value) -> str:
    if value is None:
        return "?"
    if isinstance(value, tuple):
        return "x".join(str(v) for v in value) if value else "?"
    return str(value)


def format_table(infos) -> str:
    header = ("name", "task", "input", "classes", "n_train", "n_test", "splits", "availability")
    rows = [(i.name, i.task, _cell(i.input_shape), _cell(i.n_classes) if i.n_classes else "-",
             _cell(i.n_train), _cell(i.n_test), _cell(i.splits) if i.splits else "-",
             f"{i.availability}: {i.detail}") for i in infos]
    widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header) - 1)]
    lines = []
    for row in [header] + rows:
        cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths)]
        lines.append("  ".join(cells + [row[-1]]))
    return "\n".join(lines)


def run_datasets(args: argparse.Namespace) -> int:
    infos = list_datasets(args.data_dir)
    if args.json:
        print(json.dumps([info.to_dict() for info in infos], indent=2))
    else:
        print(format_table(infos))
    return 0
