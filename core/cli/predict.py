"""`python -m core evaluate | sweep | export | explain`: thin calls to the verbs of core.runs.Run.

RUN is a run id (or unique prefix) of the run store. The `*_command` functions take a Run, or a
model and its dataset (wrapped as `Run.of(model, dataset)`), so they work without a store.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from core import limits, validate
from core.errors import PredictionError
from core.predict import onnx_export
from core.predict.modes import PredictionMode, collapsed_variant, modes_help, parse_mode
from core.predict.sweep import parse_threshold_grid
from core.runs import Run, load_run


def _load(args: argparse.Namespace) -> Run:
    return load_run(args.run, cache_dir=getattr(args, "cache_dir", None), data_dir=getattr(args, "data_dir", None))


def _as_run(model_or_run: Any, dataset: Any) -> Run:
    return model_or_run if isinstance(model_or_run, Run) else Run.of(model_or_run, dataset)


def _positive_int(text: str) -> int:
    """Posterior draws R: a whole number from 1 to $BNN_MAX_SAMPLES."""
    return limits.count(text, "samples", limits.MAX_SAMPLES)


def _float(name: str, text: str | None) -> float | None:
    if text is None:
        return None
    return validate.real_number(text, name)


def format_table(rows: list[dict[str, Any]]) -> str:
    if not rows:
        return "(no rows)"
    columns = list(rows[0])

    def cell(value: Any) -> str:
        if isinstance(value, float):
            return f"{value:.4g}"
        return "-" if value is None else str(value)

    table = [[cell(row.get(c)) for c in columns] for row in rows]
    widths = [max(len(c), *(len(r[i]) for r in table)) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in table]
    return "\n".join(lines)


def _flatten(prefix: str, value: Any, rows: list[dict[str, Any]]) -> None:
    if isinstance(value, dict):
        for key, item in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), item, rows)
    elif isinstance(value, list) and len(value) > 8:
        rows.append({"metric": prefix, "value": f"[{len(value)} values]"})
    else:
        rows.append(
            {
                "metric": prefix,
                "value": value
                if not isinstance(value, list)
                else ", ".join(f"{v:.4g}" if isinstance(v, float) else str(v) for v in value),
            }
        )


def evaluate_command(model_or_run, dataset, args: argparse.Namespace, out=None) -> dict[str, Any]:
    out = out or sys.stdout
    run = _as_run(model_or_run, dataset)
    variant = collapsed_variant(args.mode)
    if variant is not None:
        from core.predict.collapsed import evaluate_collapsed

        if args.threshold is not None or args.ood:
            raise PredictionError(f"mode {args.mode!r}: takes no --threshold or --ood")
        result = evaluate_collapsed(
            run.model, run.dataset(), variant, samples=_positive_int(str(args.samples)), seed=limits.seed(args.seed)
        )
        return _print_result(result, args, out)
    result = run.evaluate(
        mode=parse_mode(args.mode),
        samples=_positive_int(str(args.samples)),
        threshold=_float("threshold", args.threshold),
        seed=limits.seed(args.seed),
        ood=args.ood or None,
    )
    return _print_result(result, args, out)


def _print_result(result: dict[str, Any], args: argparse.Namespace, out) -> dict[str, Any]:
    if args.json:
        print(json.dumps(result), file=out)
    else:
        rows: list[dict[str, Any]] = []
        _flatten("", result, rows)
        print(format_table(rows), file=out)
        for warning in result["warnings"]:
            print(f"warning: {warning}", file=sys.stderr)
    return result


def sweep_command(model_or_run, dataset, args: argparse.Namespace, out=None):
    out = out or sys.stdout
    thresholds = parse_threshold_grid(args.thresholds) if args.thresholds is not None else None
    result = _as_run(model_or_run, dataset).sweep(
        thresholds=thresholds,
        mode=parse_mode(args.mode),
        samples=_positive_int(str(args.samples)),
        seed=limits.seed(args.seed),
    )
    if args.json:
        print(json.dumps(result.to_dict()), file=out)
    else:
        print(format_table(result.to_rows()), file=out)
    return result


def export_command(model_or_run, dataset, args: argparse.Namespace, out=None):
    out = out or sys.stdout
    # Refused before the model is touched: an empty --out once wrote model.json into the current
    # folder, and missing parents were created; only the named folder itself is ever created.
    folder = validate.folder(args.out, "out")
    export_format = validate.one_of(getattr(args, "format", "safetensors"), "format", onnx_export.FORMATS)
    run = _as_run(model_or_run, dataset)
    threshold = None if args.threshold is None else _float("threshold", args.threshold)
    if threshold is None:
        threshold = float(run.model.spec.default_threshold)
    path, metrics = run.export(threshold, folder)
    active = metrics.get("active_density")
    on_paths = f", {active:.4f} on active paths" if active is not None else ""
    written = "safetensors + JSON"
    if export_format == "onnx":
        onnx_file = onnx_export.write_onnx(run.model, threshold, path)
        x_test = run.dataset().x_test
        difference = onnx_export.verify(run.model, onnx_file, x_test, threshold)
        written += (
            f" + ONNX; onnxruntime agrees with the prune / mean-weights prediction on the {len(x_test):,} "
            f"test inputs to {difference:.1e}"
        )
    print(
        f"exported {run.model.family} at threshold {threshold:g} (density {metrics['density']:.4f}{on_paths}) "
        f"to {path} ({written})",
        file=out,
    )
    return path


def explain_command(model_or_run, dataset, args: argparse.Namespace, out=None):
    """One test example's local explanation: per feature the coefficient and contribution, median and
    95 % interval over posterior draws, the largest |median contribution| first (--top rows)."""
    out = out or sys.stdout
    run = _as_run(model_or_run, dataset)
    data = run.dataset()
    index = validate.whole_number(args.index, "index", 0, int(data.n_test) - 1)
    samples = _positive_int(str(args.samples))
    threshold = _float("threshold", args.threshold)
    output = None if args.output is None else validate.whole_number(args.output, "output", 0, None)
    features = int(data.in_features)
    top = features if args.top is None else validate.whole_number(args.top, "top", 1, features)
    result = run.explain(
        data.x_test[index], threshold=threshold, samples=samples, seed=limits.seed(args.seed), output=output
    )
    if args.json:
        print(json.dumps({"index": index, **result.to_dict()}), file=out)
        return result
    summary = result.to_dict()
    value, intercept = summary["value"], summary["intercept"]
    print(
        f"test example {index}: {result.output_name} = {value['median']:.4g} "
        f"[{value['lower']:.4g}, {value['upper']:.4g}], intercept {intercept['median']:.4g} "
        f"[{intercept['lower']:.4g}, {intercept['upper']:.4g}] ({result.samples} draws, threshold "
        f"{result.threshold:g}, {int(result.level * 100)} % intervals)",
        file=out,
    )
    rows = sorted(result.table(), key=lambda row: -abs(row["contribution"]))[:top]
    print(format_table(rows), file=out)
    return result


def _handler(command):
    def handle(args: argparse.Namespace) -> int:
        run = _load(args)
        command(run, None, args)
        return 0

    return handle


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", metavar="RUN", help="run id (or unique prefix) from `python -m core runs`")
    parser.add_argument("--cache-dir", default=None, help="run store folder (default: the user cache)")
    parser.add_argument("--data-dir", default=None, help="folder with full datasets (default: $BNN_DATA_DIR)")


def register(subparsers) -> None:
    evaluate_parser = subparsers.add_parser("evaluate", help="test-set metrics of a run for one prediction mode")
    _common(evaluate_parser)
    evaluate_parser.add_argument("--mode", default=PredictionMode.BMA.value, help=modes_help())
    evaluate_parser.add_argument("--threshold", default=None, help="cut of the native statistic (mpm, mpm-mean, prune)")
    evaluate_parser.add_argument("--samples", default="10", help="posterior draws R (>= 1)")
    evaluate_parser.add_argument(
        "--ood",
        action="append",
        default=[],
        metavar="DATASET",
        help="out-of-domain set (a dataset or uniform-noise/inverted/rotated); repeatable",
    )
    evaluate_parser.add_argument("--seed", type=int, default=0)
    evaluate_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    evaluate_parser.set_defaults(handler=_handler(evaluate_command))

    sweep_parser = subparsers.add_parser("sweep", help="accuracy (or RMSE) vs density over thresholds")
    _common(sweep_parser)
    sweep_parser.add_argument("--thresholds", default=None, help="start:stop:step (e.g. 0:1:0.02) or a list a,b,c")
    sweep_parser.add_argument(
        "--mode", default=PredictionMode.MPM_MEAN.value, help="mpm-mean (mean weights) or mpm/prune (sampled)"
    )
    sweep_parser.add_argument("--samples", default="1", help="posterior draws R for the sampled modes")
    sweep_parser.add_argument("--seed", type=int, default=0)
    sweep_parser.add_argument("--json", action="store_true")
    sweep_parser.set_defaults(handler=_handler(sweep_command))

    explain_parser = subparsers.add_parser(
        "explain", help="one test example's local explanation: each feature's contribution with 95%% intervals"
    )
    _common(explain_parser)
    explain_parser.add_argument("--index", required=True, help="test example to explain (0 .. n_test - 1)")
    explain_parser.add_argument("--threshold", default=None, help="cut of the native statistic (default: the family's)")
    explain_parser.add_argument("--samples", default="100", help="posterior draws R (>= 1)")
    explain_parser.add_argument(
        "--output", default=None, help="class whose logit is explained (default: the predicted class)"
    )
    explain_parser.add_argument("--top", default=None, help="rows shown, largest |contribution| first (default: all)")
    explain_parser.add_argument("--seed", default="0")
    explain_parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    explain_parser.set_defaults(handler=_handler(explain_command))

    export_parser = subparsers.add_parser(
        "export", help="write the pruned mean network (safetensors + JSON, or also ONNX)"
    )
    _common(export_parser)
    export_parser.add_argument("--threshold", default=None, help="cut of the native statistic (default: the family's)")
    export_parser.add_argument("--out", required=True, help="output folder")
    export_parser.add_argument(
        "--format",
        default="safetensors",
        help="safetensors (+ JSON, the default) or onnx "
        "(the same files plus model.onnx; needs pip install -e '.[export]')",
    )
    export_parser.set_defaults(handler=_handler(export_command))
