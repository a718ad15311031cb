"""`python -m core`: the command-line entry point. The whole CLI lives in this package.

Each group of subcommands lives in its own module of core/cli/ that exposes `register(subparsers)`
(data: datasets; runs: train, presets, runs, show, rm, grid; predict: evaluate, sweep, export, thin
calls to the run verbs of core.runs.Run; reference: reference);
the registered handler takes the parsed args and returns an exit code.
Progress goes to stderr, results to stdout. A `BNNError` becomes one line on
stderr and exit code 2, never a traceback; so do the environment's refusals that no check can
foresee (a disk that fills, a folder whose permissions change, memory that runs out).
Every folder argument is checked before the command runs (`check_folders`); every other value is
checked where it is parsed (core.validate, core.limits, core.runs.parsing, RunConfig).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path

from core import validate
from core.errors import BNNError
from core.settings import CACHE_DIR

# Modules that add subcommands, in the order `--help` lists them.
COMMAND_MODULES = [
    "core.cli.data",
    "core.cli.runs",
    "core.cli.predict",
    "core.cli.reference",
]


def program_name() -> str:
    """How the user called the command line: the console script `sparse-bnn`, or `python -m core`."""
    return "sparse-bnn" if Path(sys.argv[0]).name == "sparse-bnn" else "python -m core"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=program_name(),
        description="Sparse BNN Explorer: train, evaluate and cache sparse Bayesian neural networks.",
    )
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


# Commands that only read the run store: a read-only store may be listed and shown.
READ_ONLY_COMMANDS = ("runs", "show")


def check_folders(args: argparse.Namespace) -> None:
    """The store (--cache-dir, else $BNN_CACHE_DIR) and --data-dir, before the command touches them:
    `--cache-dir /proc/1` once failed in the middle of training with FileNotFoundError."""
    if hasattr(args, "cache_dir"):
        if args.cache_dir is not None:
            given, name = args.cache_dir, "cache-dir"
        else:
            given, name = CACHE_DIR.read(), CACHE_DIR.variable
        if given is not None:
            validate.folder(given, name, writable=args.command not in READ_ONLY_COMMANDS, create_parents=True)
    if getattr(args, "data_dir", None) is not None:
        validate.folder(args.data_dir, "data-dir", writable=False, must_exist=True)


def check_run_id(args: argparse.Namespace) -> None:
    """RUN (show, rm, evaluate, sweep, export): hex digits, at most a run id long, so that a typo
    or 10,000 characters is refused in one short line before the store is searched."""
    from core.runs.config import RUN_ID_LENGTH

    if isinstance(getattr(args, "run", None), str):
        validate.text_of(
            args.run,
            "run",
            RUN_ID_LENGTH,
            r"[0-9a-f]+",
            "a run id or its first digits (0-9, a-f; list them with `python -m core runs`)",
        )


def _out_of_memory(exc: BaseException) -> bool:
    """torch's allocators report exhaustion as RuntimeError (CPU) or torch.OutOfMemoryError."""
    text = str(exc)
    return isinstance(exc, MemoryError) or "can't allocate memory" in text or "out of memory" in text.lower()


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "handler", None):
        parser.print_help()
        return 0
    try:
        check_folders(args)
        check_run_id(args)
        return int(args.handler(args) or 0)
    except BNNError as exc:
        print(f"error: {_one_line(exc)}", file=sys.stderr)
        return 2
    except OSError as exc:
        where = f": {exc.filename}" if exc.filename else ""
        print(f"error: {exc.strerror or exc}{where}; check the folder and its free space", file=sys.stderr)
        return 2
    except (MemoryError, RuntimeError) as exc:
        if not _out_of_memory(exc):
            raise
        print("error: out of memory; use smaller --hidden widths, --batch-size or --samples", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


def _one_line(exc: BaseException) -> str:
    """An error's message on one line (a message quoting outside text may hold line breaks)."""
    return " ".join(str(exc).split("\n"))
