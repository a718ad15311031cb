"""`python -m core`: the command-line entry point. The whole CLI lives in this package.

Each group of subcommands lives in its own module of core/cli/ that exposes `register(subparsers)`
(data: datasets; runs: train, presets, runs, show, rm, grid; predict: evaluate, sweep, export, thin
calls to the run verbs of core.runs.Run; reference: reference);
the registered handler takes the parsed args and returns an exit code.
Progress goes to stderr, results to stdout. A `BNNError` becomes one line on
stderr and exit code 2, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import sys

from core.errors import BNNError

# Modules that add subcommands, in the order `--help` lists them.
COMMAND_MODULES = [
    "core.cli.data",
    "core.cli.runs",
    "core.cli.predict",
    "core.cli.reference",
]


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m core",
        description="Sparse BNN Explorer: train, evaluate and cache sparse Bayesian neural networks.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    try:
        return int(args.handler(args) or 0)
    except BNNError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
