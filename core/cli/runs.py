"""`python -m core train | presets | runs | show | rm | grid`. Progress on stderr, results on stdout.
`show` is a thin call to Run.summary (core.runs.run)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from datetime import datetime
from typing import Any

from core import limits, validate
from core.errors import ConfigError, RunStoreError
from core.jsonable import jsonable
from core.predict.metrics.headline import stored_headline
from core.runs.config import RunConfig, read_config_file
from core.runs.parsing import parse_hidden, parse_pair_list, parse_pairs
from core.runs.presets import PRESETS, GridSpec

CACHE_HELP = "run store folder (default: $BNN_CACHE_DIR, else the user cache dir); runs live in <dir>/runs"


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_train(subparsers)
    presets = subparsers.add_parser(
        "presets",
        help="list the presets and what each one is",
        description="List every preset (single runs and grids) with its description.",
    )
    presets.add_argument("--json", action="store_true", help="print JSON")
    presets.set_defaults(handler=run_presets)

    runs = subparsers.add_parser("runs", help="list cached runs", description="List the runs in the store.")
    runs.add_argument("--json", action="store_true", help="print JSON")
    runs.add_argument("--cache-dir", default=None, help=CACHE_HELP)
    runs.set_defaults(handler=run_runs)

    show = subparsers.add_parser(
        "show",
        help="print a run's config and metrics",
        description="Print a cached run's config and metrics (checksums verified).",
    )
    show.add_argument("run", metavar="RUN", help="run id or a unique prefix of one")
    show.add_argument("--json", action="store_true", help="print JSON")
    show.add_argument("--cache-dir", default=None, help=CACHE_HELP)
    show.set_defaults(handler=run_show)

    rm = subparsers.add_parser("rm", help="delete a cached run", description="Delete a run from the store.")
    rm.add_argument("run", metavar="RUN", help="run id or a unique prefix of one")
    rm.add_argument("--yes", "-y", action="store_true", help="do not ask for confirmation")
    rm.add_argument("--cache-dir", default=None, help=CACHE_HELP)
    rm.set_defaults(handler=run_rm)

    grid = subparsers.add_parser(
        "grid",
        help="run a grid of runs and summarise it",
        description="Run every (setup x method x seed) of a grid preset or a TOML/JSON grid file, skipping "
        "stored runs, then write a summary table (medians with min and max over seeds) as "
        "Markdown and CSV.",
    )
    grid.add_argument(
        "grid",
        metavar="PRESET|FILE",
        help=f"grid preset ({', '.join(k for k, v in PRESETS.items() if isinstance(v, GridSpec))}) "
        f"or a .toml/.json grid file",
    )
    grid.add_argument("--backend", choices=("local", "ray"), default="local")
    grid.add_argument("--workers", type=int, default=1, help="worker processes for --backend local")
    grid.add_argument("--ray-address", default=None, help="Ray cluster address (default: $RAY_ADDRESS, else local)")
    grid.add_argument(
        "--gpus-per-run",
        type=float,
        default=None,
        help="GPUs each Ray task asks for (default: 1 when the cluster has GPUs, else 0)",
    )
    grid.add_argument("--out", default="grid-results", help="folder for the summary tables")
    grid.add_argument("--seeds", default=None, help="override the seeds, e.g. 0,1,2")
    grid.add_argument("--methods", default=None, help="override the methods, e.g. lbbnn,bnn")
    grid.add_argument(
        "--setups", default=None, help="run only these setups of the grid, e.g. paper-mnist (default: all)"
    )
    grid.add_argument("--data-dir", default=None, help="folder with full datasets (default: $BNN_DATA_DIR)")
    grid.add_argument("--cache-dir", default=None, help=CACHE_HELP)
    grid.add_argument("--json", action="store_true", help="print the per-run results as JSON")
    grid.set_defaults(handler=run_grid_command)


# --- train -------------------------------------------------------------------------------------
def _register_train(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "train",
        help="train a run (or return the cached one)",
        description="Train one run. Start from --preset or --config FILE (TOML/JSON); the other flags override "
        "fields. A run whose id is already stored is returned at once.",
    )
    source = parser.add_mutually_exclusive_group()
    source.add_argument(
        "--preset",
        default=None,
        help=f"start from a preset ({', '.join(k for k, v in PRESETS.items() if isinstance(v, RunConfig))})",
    )
    source.add_argument("--config", default=None, metavar="FILE", help="start from a TOML or JSON config file")
    data = parser.add_argument_group("data")
    data.add_argument("--dataset", default=None)
    data.add_argument("--split", type=int, default=None, help="UCI regression split")
    data.add_argument(
        "--param",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="generator parameter of a toy dataset (repeatable)",
    )
    data.add_argument("--data-seed", type=int, default=None, help="seed of generated data / 80-20 splits")
    data.add_argument("--data-dir", default=None, help="folder with full datasets (default: $BNN_DATA_DIR)")
    table = parser.add_argument_group("your own table (CSV or Parquet; see docs/user-tables.md)")
    table.add_argument(
        "--data",
        default=None,
        metavar="FILE",
        help="train on this CSV or Parquet file (stored by its content in <cache dir>/tables)",
    )
    table.add_argument("--target", default=None, metavar="COLUMN", help="the column to predict")
    table.add_argument(
        "--task",
        default=None,
        choices=("classification", "regression"),
        help="default: inferred from the target (text, or at most 10 distinct whole numbers: classification)",
    )
    table.add_argument(
        "--split-column",
        default=None,
        metavar="COLUMN",
        help="a column saying train or test per row (default: a seeded 80/20 split)",
    )
    table.add_argument(
        "--missing",
        default=None,
        choices=("refuse", "drop"),
        help="rows with missing values: refuse the table (default) or drop those rows",
    )
    model = parser.add_argument_group("model")
    model.add_argument("--method", default=None, help="family (paper names accepted, e.g. LBBNN-SSP-MF)")
    model.add_argument("--hidden", default=None, help="hidden widths, e.g. 400,600")
    model.add_argument("--activation", default=None)
    model.add_argument("--likelihood", default=None)
    model.add_argument(
        "--option",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="family option, e.g. prior_inclusion=0.1 (repeatable)",
    )
    model.add_argument(
        "--bias-prior",
        default=None,
        choices=("spike-and-slab", "gaussian"),
        help="lbbnn: the bias gets an inclusion indicator (spike-and-slab) or a plain Gaussian prior",
    )
    noise = parser.add_argument_group("noise model (gaussian likelihood)")
    noise.add_argument(
        "--noise",
        default=None,
        choices=("point", "fixed", "variational"),
        help="point estimate of the noise sd, fixed, or a Gamma posterior on the precision",
    )
    noise.add_argument("--noise-std", type=float, default=None, help="initial (or fixed) noise sd, standardised units")
    noise.add_argument(
        "--noise-init",
        default=None,
        choices=("value", "data"),
        help="start at --noise-std, or at the residual sd of a least-squares fit",
    )
    noise.add_argument(
        "--precision-prior",
        default=None,
        metavar="none|gamma|A,B",
        help="Gamma(A, B) prior on the noise precision ('gamma' = Gamma(6, 6), as in Hernandez-Lobato & Adams 2015)",
    )
    schedule = parser.add_argument_group("training")
    schedule.add_argument("--epochs", type=int, default=None)
    schedule.add_argument("--pretrain-epochs", type=int, default=None)
    schedule.add_argument("--posttrain-epochs", type=int, default=None)
    schedule.add_argument("--posttrain-structure", default=None, help="mpm or alpha")
    schedule.add_argument("--batch-size", type=int, default=None)
    schedule.add_argument(
        "--lr",
        default=None,
        metavar="GROUP=RATE,...",
        help=f"learning rates per group, e.g. weights=1e-2,inclusion=1e-3 (each above 0, at most "
        f"{validate.MAX_LEARNING_RATE:g})",
    )
    schedule.add_argument(
        "--pretrain-lr", default=None, metavar="GROUP=RATE,...", help="pre-training learning rates per group"
    )
    schedule.add_argument("--mc-samples", type=int, default=None)
    schedule.add_argument("--kl-anneal-epochs", type=int, default=None)
    schedule.add_argument("--warm-start-epochs", type=int, default=None)
    schedule.add_argument(
        "--kl-weight",
        type=float,
        default=None,
        help="weight of the KL after annealing, in (0, 1]: 1 is the ELBO, below 1 a tempered "
        "objective (see docs/why-lbbnn-over-prunes.md)",
    )
    schedule.add_argument(
        "--lr-schedule",
        default=None,
        choices=("constant", "cosine"),
        help="step sizes of the main phase: constant, or a cosine decay to zero over its epochs",
    )
    schedule.add_argument(
        "--target-density",
        default=None,
        metavar="D",
        help="stop the main phase after the first epoch whose median-probability-model "
        "density is at most D, 0 < D <= 1 (as the R package LBBNN's min_density)",
    )
    schedule.add_argument("--empirical-bayes", action=argparse.BooleanOptionalAction, default=None)
    schedule.add_argument(
        "--compile",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="torch.compile LBBNN's training kernels (~20 s once, then faster epochs)",
    )
    schedule.add_argument(
        "--cuda-graphs",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="replay each training step as one CUDA graph (CUDA devices only; an LBBNN epoch on full MNIST "
        "took 0.31 s against 2.59 s eager on an H100, benchmarks/results/gpu_notes.md)",
    )
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--device", default=None, help="auto, cpu, cuda, cuda:N or mps")
    parser.add_argument("--force", action="store_true", help="train again even if the run is stored")
    parser.add_argument("--cache-dir", default=None, help=CACHE_HELP)
    parser.add_argument(
        "--json", action="store_true", help="print run id, from_cache, seconds per epoch and final metrics as JSON"
    )
    parser.add_argument("--quiet", action="store_true", help="no per-epoch progress lines")
    parser.set_defaults(handler=run_train)


def _noise_options(args: argparse.Namespace) -> dict[str, Any]:
    options = {"noise": args.noise, "noise_std": args.noise_std, "noise_init": args.noise_init}
    options = {k: v for k, v in options.items() if v is not None}
    prior = args.precision_prior
    if prior is not None:
        if prior in ("none", "gamma"):
            options["precision_prior"] = prior
        else:
            parts = prior.split(",")
            try:
                a, b = (float(p) for p in parts)
            except ValueError:
                raise ConfigError(f"--precision-prior: expected none, gamma or A,B (e.g. 6,6), got {prior!r}") from None
            options.update(precision_prior="gamma", precision_a=a, precision_b=b)
    return options


def _rates(text: str, flag: str) -> dict[str, Any]:
    rates = parse_pair_list(text, flag)
    if not rates:
        raise ConfigError(f"{flag}: write GROUP=RATE,... such as weights=1e-2, got {validate.shown(text)}")
    return rates


def config_from_args(args: argparse.Namespace) -> RunConfig:
    """The preset or file, then every given flag on top."""
    # An empty --preset or --config is refused by name, never taken as "no preset" (which trained
    # the default mnist-small run).
    if args.preset is not None:
        from core.runs.presets import get_preset

        preset = get_preset(args.preset)
        if isinstance(preset, GridSpec):
            raise ConfigError(f"preset: {args.preset!r} is a grid; run it with `python -m core grid {args.preset}`")
        values = preset.to_dict()
    elif args.config is not None:
        values = RunConfig.from_dict(read_config_file(args.config)).to_dict()
    else:
        values = {}
    if args.method is not None and args.method != values.get("method"):
        values["family_options"] = {}  # another family's options do not carry over
    fields = {
        "dataset": args.dataset,
        "split": args.split,
        "data_seed": args.data_seed,
        "method": args.method,
        "activation": args.activation,
        "likelihood": args.likelihood,
        "seed": args.seed,
        "device": args.device,
    }
    values.update({k: v for k, v in fields.items() if v is not None})
    _table_args(args, values)
    if args.hidden is not None:
        values["hidden"] = list(parse_hidden(args.hidden))
    if args.param:
        values["dataset_params"] = {**values.get("dataset_params", {}), **parse_pairs(args.param, "--param")}
    if args.option:
        values["family_options"] = {**values.get("family_options", {}), **parse_pairs(args.option, "--option")}
    if args.bias_prior is not None:
        values["family_options"] = {**values.get("family_options", {}), "bias_prior": args.bias_prior}
    noise = _noise_options(args)
    if noise:
        values["likelihood_options"] = {**values.get("likelihood_options", {}), **noise}
    train = dict(values.get("train", {}))
    schedule = {
        "epochs": args.epochs,
        "pretrain_epochs": args.pretrain_epochs,
        "posttrain_epochs": args.posttrain_epochs,
        "posttrain_structure": args.posttrain_structure,
        "batch_size": args.batch_size,
        "mc_samples": args.mc_samples,
        "kl_anneal_epochs": args.kl_anneal_epochs,
        "warm_start_epochs": args.warm_start_epochs,
        "kl_weight": args.kl_weight,
        "empirical_bayes": args.empirical_bayes,
        "compile": args.compile,
        "cuda_graphs": args.cuda_graphs,
        "lr_schedule": args.lr_schedule,
        "target_density": None
        if args.target_density is None
        else validate.real_number(args.target_density, "target-density", 0.0, 1.0, low_open=True),
    }
    train.update({k: v for k, v in schedule.items() if v is not None})
    if args.lr is not None:
        train["learning_rates"] = {**train.get("learning_rates", {}), **_rates(args.lr, "--lr")}
    if args.pretrain_lr is not None:
        train["pretrain_learning_rates"] = {
            **train.get("pretrain_learning_rates", {}),
            **_rates(args.pretrain_lr, "--pretrain-lr"),
        }
    values["train"] = train
    return RunConfig.from_dict(values)


def _table_args(args: argparse.Namespace, values: dict[str, Any]) -> None:
    """--data FILE and the table options (--target, --task, --split-column, --missing)."""
    options = {"target": args.target, "task": args.task, "split_column": args.split_column, "missing": args.missing}
    options = {k: v for k, v in options.items() if v is not None}
    if args.data is not None:
        if args.dataset is not None:
            raise ConfigError("--data and --dataset: give one (--data trains on your own table)")
        if args.param:
            raise ConfigError("--param: a table takes no generator parameters")
        for key in ("dataset", "split"):
            values.pop(key, None)
        values.update(data=args.data, dataset_params={}, **options)
    elif options:
        from core.data.user_table import is_table_name

        if not is_table_name(values.get("dataset")):
            raise ConfigError(f"--{next(iter(options)).replace('_', '-')}: only for a table; give --data FILE")
        values["dataset_params"] = {**values.get("dataset_params", {}), **options}


def run_presets(args: argparse.Namespace) -> int:
    from core.runs.presets import describe_preset

    rows = [
        {"name": name, "kind": "grid" if isinstance(p, GridSpec) else "run", "description": describe_preset(name)}
        for name, p in PRESETS.items()
    ]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    width = max(len(r["name"]) for r in rows)
    for r in rows:
        print(f"{r['name']:<{width}}  [{r['kind']}] {r['description']}")
    return 0


def _epoch_printer(config: RunConfig):
    total = config.train.total_epochs()
    count = [0]

    def show(record: dict[str, Any]) -> None:
        count[0] += 1
        print(
            f"epoch {count[0]:>{len(str(total))}}/{total} [{record['phase']}] loss {record['loss']:.4g} "
            f"density {record['density']:.3f} {record['seconds']:.2f} s",
            file=sys.stderr,
            flush=True,
        )

    return show


def run_train(args: argparse.Namespace) -> int:
    from core import cost
    from core.runs.training import first_stage_stored, train_run

    config = config_from_args(args)
    started = time.perf_counter()
    print(f"run: {config.label()}", file=sys.stderr, flush=True)
    # Costed before anything is allocated. The command line trains on the user's own machine: only
    # memory is limited (half of it, or $BNN_MEMORY_BUDGET_MB), not weights or time as on a server.
    limits = cost.command_line_limits()
    shape = cost.admit_dataset(config.dataset, config.dataset_params, limits)
    # a scale head's first stage counts whole unless it is stored in the store this training uses
    stored = first_stage_stored(config, args.cache_dir, args.data_dir)
    need = cost.admit_training(config, shape, limits, first_stage_stored=stored)
    if not args.quiet:
        print(
            f"estimate: {need.weights:,} weights, about {cost.size_text(need.bytes)} of memory"
            + (f", {cost.time_text(need.wall_seconds())}" if need.epochs else ""),
            file=sys.stderr,
            flush=True,
        )
    run = train_run(
        config,
        cache_dir=args.cache_dir,
        progress=None if args.quiet else _epoch_printer(config),
        force=args.force,
        data_dir=args.data_dir,
    )
    seconds = time.perf_counter() - started
    print(f"{'cached' if run.from_cache else 'trained'} run {run.run_id} in {seconds:.2f} s", file=sys.stderr)
    if args.json:
        print(
            json.dumps(
                jsonable(
                    {
                        "run_id": run.run_id,
                        "from_cache": run.from_cache,
                        "seconds_per_epoch": run.seconds_per_epoch,
                        "metrics": run.metrics,
                        "path": str(run.path),
                    }
                ),
                indent=1,
            )
        )
    else:
        print(run.run_id)
        for key, value in sorted(run.metrics.items()):
            print(f"  {key}: {_short(value)}")
    return 0


# --- runs / show / rm -----------------------------------------------------------------------------
def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def _size(n: int) -> str:
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def _headline(metrics: dict[str, Any]) -> str:
    """The first stored headline metric (accuracy or RMSE) and the density."""
    headline = stored_headline(metrics)
    keys = ([headline[0]] if headline else []) + [k for k in ("density",) if k in metrics]
    return ", ".join(f"{k} {_short(metrics[k])}" for k in keys)


def run_runs(args: argparse.Namespace) -> int:
    from core.runs.store import RunStore

    runs = RunStore(args.cache_dir).list()
    if args.json:
        print(json.dumps(jsonable([run.to_dict() for run in runs]), indent=1))
        return 0
    if not runs:
        print(f"no runs in {RunStore(args.cache_dir).root}", file=sys.stderr)
        return 0
    header = ("id", "dataset", "method", "created", "size", "metrics")
    rows = []
    for run in runs:
        created = datetime.fromtimestamp(run.created).strftime("%Y-%m-%d %H:%M") if run.created else "-"
        metrics = _headline(run.metrics) if run.status == "ok" else f"CORRUPT: {run.error}"
        rows.append((run.run_id, run.dataset or "?", run.method or "?", created, _size(run.size_bytes), metrics))
    widths = [max(len(r[c]) for r in rows + [header]) for c in range(len(header) - 1)]
    for row in [header] + rows:
        print("  ".join([cell.ljust(w) for cell, w in zip(row[:-1], widths)] + [row[-1]]))
    return 0


def run_show(args: argparse.Namespace) -> int:
    from core.runs.training import load_run

    run = load_run(args.run, cache_dir=args.cache_dir)
    summary = run.summary()
    if args.json:
        print(
            json.dumps(
                jsonable(
                    {
                        "run_id": run.run_id,
                        "path": str(run.path),
                        "config": run.config.to_dict(),
                        "metrics": run.metrics,
                        "info": run.info,
                        # epochs trained (a bundled run keeps a thinned history)
                        "epochs": run.info.get("epochs", len(run.history)),
                        "summary": summary,
                    }
                ),
                indent=1,
            )
        )
        return 0
    print(f"run {run.run_id}  ({run.path})")
    print("config:")
    for key, value in run.config.to_dict().items():
        print(f"  {key}: {json.dumps(value)}")
    print("metrics:")
    for key, value in sorted(run.metrics.items()):
        print(f"  {key}: {_short(value)}")
    print(
        f"structure at {summary['statistic']} {summary['keep']} {summary['threshold']:g}: "
        f"density {summary['density']:.4g}"
    )
    for layer in summary["layers"]:
        prior = ", ".join(f"{k} {_short(v)}" for k, v in layer["prior"].items())
        print(
            f"  layer {layer['layer']} {layer['shape'][0]}x{layer['shape'][1]}: kept {layer['kept']}/"
            f"{layer['weights']} (density {layer['density']:.4g}), mean {summary['statistic']} "
            f"{layer['mean_statistic']:.4g}" + (f", prior {prior}" if prior else "")
        )
    return 0


def run_rm(args: argparse.Namespace) -> int:
    from core.runs.store import RunStore

    store = RunStore(args.cache_dir)
    run_id = store.resolve(args.run)
    if not args.yes:
        if not sys.stdin.isatty():
            raise RunStoreError(f"rm {run_id}: pass --yes to delete without a prompt")
        answer = input(f"delete run {run_id}? [y/N] ").strip().lower()
        if answer not in ("y", "yes"):
            print("kept", file=sys.stderr)
            return 1
    store.delete(run_id)
    print(f"deleted {run_id}")
    return 0


# --- grid -----------------------------------------------------------------------------------------
def run_grid_command(args: argparse.Namespace) -> int:
    import dataclasses

    from core.runs.grid import load_grid, run_grid

    workers = limits.count(args.workers, "workers", limits.MAX_WORKERS)
    gpus = None if args.gpus_per_run is None else validate.real_number(args.gpus_per_run, "gpus-per-run", 0)
    out_dir = validate.folder(args.out, "out", create_parents=True)
    spec = load_grid(args.grid)
    changes = {}
    if args.seeds is not None:
        seeds = tuple(limits.seed(s, "seeds") for s in args.seeds.split(",") if s.strip())
        if not seeds:
            raise ConfigError(f"seeds: expected integers like 0,1,2, got {validate.shown(args.seeds)}")
        changes["seeds"] = seeds
    if args.methods is not None:
        changes["methods"] = tuple(m.strip() for m in args.methods.split(",") if m.strip())
        if not changes["methods"]:
            raise ConfigError(f"methods: expected names like lbbnn,bnn, got {validate.shown(args.methods)}")
    if args.setups is not None:
        wanted = [name.strip() for name in args.setups.split(",") if name.strip()]
        unknown = [name for name in wanted if name not in spec.setups]
        if unknown or not wanted:
            raise ConfigError(
                f"setups: {', '.join(unknown) or repr(args.setups)} not in grid {spec.name!r}; "
                f"its setups: {', '.join(spec.setups)}"
            )
        changes["setups"] = {name: spec.setups[name] for name in wanted}
    if changes:
        spec = dataclasses.replace(spec, **changes)
    result = run_grid(
        spec,
        cache_dir=args.cache_dir,
        backend=args.backend,
        workers=workers,
        out_dir=out_dir,
        data_dir=args.data_dir,
        ray_address=args.ray_address,
        num_gpus=gpus,
    )
    if args.json:
        print(json.dumps(jsonable([cell.__dict__ for cell in result.cells], fallback=str), indent=1))
    else:
        print(result.markdown_path.read_text(encoding="utf-8") if result.markdown_path else "")
    return 1 if result.failed else 0
