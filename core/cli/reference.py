"""`python -m core reference DATASET`: sample (or reopen) the NUTS reference posterior.

Progress goes to stderr; the diagnostics table (or JSON) to stdout, with a
warning on stderr when R-hat or the effective sample size is poor.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core import limits
from core.reference.posterior import PRIORS, SAMPLERS, default_config, diagnostic_warnings, stderr_progress
from core.reference.store import compute_reference
from core.runs.parsing import parse_hidden


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected an integer, got {text!r}") from None


def _checked(args: argparse.Namespace) -> dict[str, Any]:
    """The sampler's sizes within their limits, before any chain starts (`--chains 99999999999999`
    sampled for ever); None keeps the default."""

    def within(value, name, setting, low=1):
        return None if value is None else limits.count(value, name, setting, low=low)

    return {
        "samples": within(args.samples, "samples", limits.MAX_SAMPLES, low=10),
        "warmup": within(args.warmup, "warmup", limits.MAX_SAMPLES, low=0),
        "chains": within(args.chains, "chains", limits.MAX_CHAINS),
        "max_tree_depth": within(args.max_tree_depth, "max-tree-depth", limits.MAX_TREE_DEPTH),
        "seed": None if args.seed is None else limits.seed(args.seed),
        "data_seed": None if args.data_seed is None else limits.seed(args.data_seed, "data-seed"),
        "hidden": None if args.hidden is None else parse_hidden(args.hidden),
    }


def reference_command(args: argparse.Namespace, out=None) -> dict[str, Any]:
    out = out or sys.stdout
    config = default_config(args.dataset, prior=args.prior, sampler=args.sampler, **_checked(args))
    progress = None if args.quiet else stderr_progress
    posterior, from_cache = compute_reference(
        config, cache_dir=args.cache_dir, force=args.force, data_dir=args.data_dir, progress=progress
    )
    d = posterior.diagnostics
    result = {
        "reference_id": posterior.reference_id,
        "dataset": config.dataset,
        "from_cache": from_cache,
        "hidden": list(config.hidden),
        "prior": config.prior,
        "chains": config.chains,
        "samples": config.samples,
        "warmup": config.warmup,
        "seconds": round(posterior.seconds, 1),
        **{k: v for k, v in d.items() if k != "warnings"},
    }
    warnings = diagnostic_warnings(d)
    result["warnings"] = warnings
    if args.json:
        print(json.dumps(result), file=out)
    else:
        width = max(len(k) for k in result)
        for key, value in result.items():
            if key != "warnings":
                text = f"{value:.4g}" if isinstance(value, float) else str(value)
                print(f"{key.ljust(width)}  {text}", file=out)
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)
    return result


def register(subparsers) -> None:
    parser = subparsers.add_parser(
        "reference",
        help="NUTS reference posterior of a small regression net (needs pyro-ppl)",
        description="Sample the posterior of the bnn family's model (MLP, N(0, 1) weight prior, Gaussian "
        "likelihood, sampled noise scale) with Pyro's NUTS, cache it like a run, and print R-hat "
        "and effective sample sizes of the network function and the noise scale.",
    )
    parser.add_argument("dataset", metavar="DATASET", help="a regression set: toy-sine-gaps, toy-cubic, toy-hetero")
    parser.add_argument(
        "--samples", type=_int, default=None, help="kept draws per chain (default 500 on the 1-D toys, else 300)"
    )
    parser.add_argument(
        "--warmup",
        type=_int,
        default=None,
        help="warm-up (adaptation) steps per chain (default 1000 on the 1-D toys, else 300)",
    )
    parser.add_argument(
        "--chains", type=_int, default=None, help="chains, run one after the other (default 4 on the 1-D toys, else 2)"
    )
    parser.add_argument("--hidden", default=None, help="hidden widths, e.g. 64 (default: 16 on the 1-D toys, else 64)")
    parser.add_argument(
        "--prior",
        default=None,
        choices=PRIORS,
        help="gaussian (the bnn family's) or spike-slab-relaxed (lbbnn's, concrete relaxation)",
    )
    parser.add_argument(
        "--max-tree-depth", type=_int, default=None, help="NUTS tree depth limit (default 10 on the 1-D toys, else 8)"
    )
    parser.add_argument(
        "--sampler",
        default=None,
        choices=SAMPLERS,
        help="NUTS implementation (default numpyro on the 1-D toys, else pyro)",
    )
    parser.add_argument("--seed", type=_int, default=None)
    parser.add_argument("--data-seed", type=_int, default=None, help="seed of the generated dataset (default 0)")
    parser.add_argument("--force", action="store_true", help="recompute even when cached")
    parser.add_argument("--quiet", action="store_true", help="no progress on stderr")
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument("--cache-dir", default=None, help="cache folder (default: $BNN_CACHE_DIR)")
    parser.add_argument("--data-dir", default=None)
    parser.set_defaults(handler=reference_command_handler)


def reference_command_handler(args: argparse.Namespace) -> int:
    reference_command(args)
    return 0
