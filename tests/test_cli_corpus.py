"""Bad input to every subcommand: a clean refusal, never a traceback, never a hang.

Each case runs `core.cli.main(argv)` in process (a thread joined with a time limit: a hang fails
the case instead of the suite) and must exit 2 with exactly one `error:` line on stderr (or
argparse's usage and error), no traceback text, and nothing written outside the run store: the
current folder is an empty temporary one and must stay empty. A few cases also run as a real
`python -m core` process. Placeholders: {RUN} a stored tiny run, {FILE} a plain file, {MISSING} a
path that does not exist, {RO} a read-only folder, {DIR} a writable folder, {CFG:name} the config
files written below.
"""

from __future__ import annotations

import contextlib
import io
import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from core.cli import main

# In process a refusal takes milliseconds and a case that loads the run well under a second; the
# limit leaves room for a loaded 2-core machine. The sweep of 0:1:1e-9 used to run for minutes.
CASE_SECONDS = 10
HUGE = "99999999999999999999999"  # 23 digits: past int64, numpy's and torch's seeds
DIGITS_5000 = "9" * 5000  # Python refuses int() of more than 4300 digits
DEEP = "[" * 5000 + "]" * 5000  # json.loads recurses per level: RecursionError near 1000

CONFIGS = {
    "nested.json": DEEP,
    "nested.toml": "a = " + DEEP,
    "nested-table.json": '{"family_options": ' + '{"a": ' * 100 + "1" + "}" * 100 + "}",
    "bigint.json": '{"seed": ' + DIGITS_5000 + "}",
    "huge-number.json": '{"seed": 1' + "0" * 300 + "}",
    "huge-float.json": '{"seed": 1e400}',
    "huge-width.json": '{"hidden": [100000000000000000000]}',
    "list.json": "[1, 2]",
    "string.json": '"train"',
    "null.json": "null",
    "broken.json": '{"seed": ',
    "broken.toml": "seed = \n",
    "binary.toml": "\udcff\udcfe\x00garbage",
    "unknown-field.json": '{"nonsense": 1}',
    "hidden-text.json": '{"hidden": "wide"}',
    "hidden-negative.json": '{"hidden": [-4]}',
    "hidden-object.json": '{"hidden": {"a": 1}}',
    "seed-text.json": '{"seed": "zero"}',
    "seed-negative.json": '{"seed": -1}',
    "seed-bool.json": '{"seed": true}',
    "train-number.json": '{"train": 5}',
    "epochs-text.json": '{"train": {"epochs": "many"}}',
    "epochs-huge.json": '{"train": {"epochs": 99999999999999}}',
    "batch-zero.json": '{"train": {"batch_size": 0}}',
    "rates-list.json": '{"train": {"learning_rates": [1, 2]}}',
    "rate-nan.json": '{"train": {"learning_rates": {"weights": NaN}}}',
    "options-list.json": '{"family_options": [1]}',
    "dataset-number.json": '{"dataset": 5}',
    "device-number.json": '{"device": 5}',
    "wrong-suffix.yaml": '{"seed": 0}',
    "grid-methods.json": '{"methods": 5, "setups": {"a": "quick-mnist"}}',
    "grid-seeds.json": '{"seeds": ["x"], "setups": {"a": "quick-mnist"}}',
    "grid-setups.json": '{"setups": [1]}',
    "grid-setup-name.json": '{"setups": {"a": "no-such-preset"}}',
    "grid-empty.json": "{}",
    "grid-list.json": "[]",
    "grid-splits.json": '{"setups": {"a": "quick-mnist"}, "splits": {"a": "x"}}',
    "grid-overrides.json": '{"setups": {"a": "quick-mnist"}, "method_overrides": {"lbbnn": 5}}',
    "grid-seed-huge.json": '{"setups": {"a": "quick-mnist"}, "seeds": [99999999999999999999999]}',
    "grid-unknown.json": '{"nonsense": 1}',
}

T = ["train", "--dataset", "toy-sine-gaps", "--method", "bnn", "--hidden", "4", "--epochs", "1", "--quiet"]
E = ["evaluate", "{RUN}"]
S = ["sweep", "{RUN}"]
X = ["export", "{RUN}"]
R = ["reference", "toy-sine-gaps"]

CASES: list[list[str]] = [
    # top level
    ["nonsense"],
    ["--bogus"],
    ["train", "--bogus"],
    # datasets
    ["datasets", "--data-dir", ""],
    ["datasets", "--data-dir", "/proc/1"],
    ["datasets", "--data-dir", "{MISSING}"],
    ["datasets", "--data-dir", "{FILE}"],
    ["datasets", "extra"],
    # train: names
    ["train", "--dataset", ""],
    ["train", "--dataset", "nope"],
    ["train", "--dataset", "../../etc/passwd"],
    ["train", "--dataset", "toy-sine-gaps", "--method", ""],
    ["train", "--dataset", "toy-sine-gaps", "--method", "nope"],
    [*T, "--activation", "nope"],
    [*T, "--activation", ""],
    [*T, "--likelihood", "categorical"],
    [*T, "--likelihood", "nope"],
    [*T, "--device", ""],
    [*T, "--device", "tpu"],
    [*T, "--device", "cuda:x"],
    [*T, "--posttrain-structure", "nope"],
    [*T, "--bias-prior", "nope"],
    [*T, "--noise", "nope"],
    ["train", "--preset", "nope"],
    ["train", "--preset", ""],
    ["train", "--preset", "quick-paper"],
    ["train", "--preset", "quick-mnist", "--config", "{CFG:list.json}"],
    # train: widths
    *[
        [*T, "--hidden", bad]
        for bad in (
            "",
            "0",
            "-1",
            "a",
            "1e20",
            "100000000000000000000",
            "inf",
            "nan",
            "2.5",
            "4,0",
            "1," * 40,
            "100000",
            "100000,100000,100000",
            ",",
            DIGITS_5000,
        )
    ],
    # train: counts and seeds (argparse's int() lets 23 digits through)
    *[[*T, flag, bad] for flag in ("--seed", "--data-seed") for bad in ("-1", HUGE, "4294967296")],
    *[[*T, flag, bad] for flag in ("--seed", "--epochs", "--batch-size") for bad in ("x", "1e20", "1.5", "")],
    [*T, "--epochs", "-1"],
    [*T, "--epochs", "99999999999999"],
    [*T, "--batch-size", "0"],
    [*T, "--batch-size", "-5"],
    [*T, "--batch-size", "99999999999999"],
    [*T, "--mc-samples", "999999999999"],
    [*T, "--mc-samples", "-1"],
    [*T, "--pretrain-epochs", "-1"],
    [*T, "--pretrain-epochs", "99999999999999"],
    [*T, "--posttrain-epochs", "99999999999999"],
    [*T, "--kl-anneal-epochs", "-1"],
    [*T, "--warm-start-epochs", "99999999999999"],
    [*T, "--split", "0"],
    [*T, "--split", HUGE],
    # train: reals
    *[[*T, "--kl-weight", bad] for bad in ("nan", "inf", "0", "-1", "2")],
    *[[*T, "--noise-std", bad] for bad in ("nan", "inf", "0", "-1", "1e400")],
    [*T, "--kl-weight", "x"],
    *[[*T, "--precision-prior", bad] for bad in ("x", "", "1,", "nan,1", "-1,2", "1e400,1", "1,2,3")],
    # train: name=value pairs
    *[
        [*T, "--lr", bad]
        for bad in (
            "weights",
            "weights=",
            "weights=0",
            "weights=-1",
            "weights=inf",
            "weights=nan",
            "nope=1",
            "=1",
            "weights=1e400",
            "weights=" + DEEP[:900],
            "weights=" + DIGITS_5000,
            "weights=[1,2]",
            "weights=true",
        )
    ],
    [*T, "--pretrain-lr", "weights=0"],
    *[
        [*T, "--option", bad]
        for bad in (
            "x",
            "nope=1",
            "init_sigma=-1",
            "init_sigma=nan",
            "init_sigma=" + DEEP[:900],
            "init_sigma=" + DIGITS_5000,
            "estimator=nope",
            "=",
            "init_sigma=[[1]]",
        )
    ],
    *[[*T, "--param", bad] for bad in ("n=-1", "n=99999999999999", "n=1e400", "nope=1", "n=", "n=x")],
    # train: files and folders
    *[["train", "--config", f"{{CFG:{name}}}"] for name in CONFIGS if not name.startswith("grid-")],
    ["train", "--config", ""],
    ["train", "--config", "{MISSING}.json"],
    ["train", "--config", "{DIR}/folder.json"],
    ["train", "--config", "{BIG}"],
    *[[*T, "--cache-dir", bad] for bad in ("", "/proc/1", "/proc/1/runs", "{FILE}", "{FILE}/sub", "{RO}", "{RO}/sub")],
    [*T, "--data-dir", "{MISSING}"],
    [*T, "--data-dir", "/proc/1"],
    # presets, runs, show, rm
    ["presets", "--bogus"],
    ["presets", "extra"],
    ["runs", "--cache-dir", ""],
    ["runs", "--cache-dir", "/proc/1"],
    ["runs", "--cache-dir", "{FILE}"],
    ["show", "nope"],
    ["show", ""],
    ["show", "../../etc"],
    ["show", "x" * 10_000],
    ["show", "*"],
    ["show", "{RUN}", "--cache-dir", "/proc/1"],
    ["show", "{RUN}", "--cache-dir", "{FILE}"],
    ["show"],
    ["rm", "nope", "--yes"],
    ["rm", "", "--yes"],
    ["rm", "{RUN}"],
    ["rm", "{RUN}", "--yes", "--cache-dir", "{RO}"],
    ["rm", "{RUN}", "--yes", "--cache-dir", "/proc/1"],
    # grid (each refused before anything trains)
    ["grid", "nope"],
    ["grid", ""],
    ["grid", "{MISSING}.toml"],
    ["grid", "{FILE}"],
    *[["grid", f"{{CFG:{name}}}"] for name in CONFIGS if name.startswith("grid-") or name.startswith("nested")],
    *[["grid", "quick-paper", "--workers", bad] for bad in ("0", "-1", HUGE)],
    ["grid", "quick-paper", "--workers", "x"],
    *[["grid", "quick-paper", "--gpus-per-run", bad] for bad in ("nan", "-1", "inf")],
    *[["grid", "quick-paper", "--seeds", bad] for bad in ("x", "-1", HUGE, ",", "")],
    ["grid", "quick-paper", "--methods", ","],
    ["grid", "quick-paper", "--methods", ""],
    ["grid", "quick-paper", "--methods", "nope"],
    ["grid", "quick-paper", "--setups", "nope"],
    ["grid", "quick-paper", "--setups", ""],
    *[["grid", "quick-paper", "--out", bad] for bad in ("", "/proc/1", "{FILE}", "{RO}")],
    ["grid", "quick-paper", "--backend", "nope"],
    ["grid", "quick-paper", "--cache-dir", "/proc/1"],
    # evaluate
    *[[*E, "--samples", bad] for bad in ("0", "-1", "", "abc", "1e20", "99999999999999999999", "inf", "nan", "2.5")],
    *[[*E, "--seed", bad] for bad in ("-1", HUGE, "x")],
    *[[*E, "--mode", "mpm", "--threshold", bad] for bad in ("nan", "inf", "", "abc", "1e400", "-5")],
    [*E, "--threshold", "0.5"],
    [*E, "--mode", ""],
    [*E, "--mode", "nope"],
    [*E, "--ood", "nope"],
    [*E, "--ood", ""],
    ["evaluate", "nope"],
    ["evaluate", ""],
    [*E, "--cache-dir", "/proc/1"],
    [*E, "--data-dir", "{MISSING}"],
    # sweep
    *[
        [*S, "--thresholds", bad]
        for bad in (
            "0:1:1e-9",
            "0:1e9:1",
            "0:inf:0.1",
            "nan:1:0.1",
            "1:0:0.1",
            "0:1:0",
            "0:1:-0.1",
            "",
            ",,,",
            "a:b:c",
            "0:1",
            "1," * 20000,
            "1e400",
            "0:1:1e-320",
            "-1e308:1e308:1e-5",
            "0:1:0.1:5",
        )
    ],
    *[[*S, "--mode", "mpm", "--samples", bad] for bad in ("0", HUGE, "x", "")],
    [*S, "--mode", "bma"],
    [*S, "--mode", "nope"],
    [*S, "--seed", HUGE],
    ["sweep", "nope"],
    # export
    *[
        [*X, "--threshold", "0.5", "--out", bad]
        for bad in ("", " ", "{MISSING}/x/y", "{FILE}", "{FILE}/x", "/proc/1/x", "/proc/1", "{RO}", "{RO}/x")
    ],
    *[[*X, "--out", "{DIR}/out", "--threshold", bad] for bad in ("nan", "", "abc", "inf", "1e400", "-5")],
    [*X, "--threshold", "0.5"],
    ["export", "nope", "--threshold", "0.5", "--out", "{DIR}/out"],
    # explain
    *[["explain", "{RUN}", "--index", bad] for bad in ("", "-1", "x", "1e20", HUGE, "2.5", "nan", "99999")],
    *[
        ["explain", "{RUN}", "--index", "0", flag, bad]
        for flag in ("--samples", "--top", "--output", "--seed")
        for bad in ("0" if flag != "--output" and flag != "--seed" else "-1", "x", HUGE)
    ],
    ["explain", "{RUN}", "--index", "0", "--threshold", "nan"],
    ["explain", "{RUN}"],
    ["explain", "nope", "--index", "0"],
    # train: input skip and target density
    [*T, "--option", "input_skip=yes"],
    [
        "train",
        "--dataset",
        "toy-sine-gaps",
        "--method",
        "laplace",
        "--hidden",
        "4",
        "--epochs",
        "1",
        "--quiet",
        "--option",
        "input_skip=true",
    ],
    *[[*T, "--target-density", bad] for bad in ("0", "-1", "1.5", "nan", "inf", "x", "")],
    # reference (refused before any sampling)
    ["reference", "nope"],
    ["reference", ""],
    ["reference", "mnist-small", "--samples", "0"],
    *[[*R, "--samples", bad] for bad in ("0", "5", HUGE, "x")],
    *[[*R, "--warmup", bad] for bad in ("-1", HUGE)],
    *[[*R, "--chains", bad] for bad in ("0", "99999999999999")],
    *[[*R, "--max-tree-depth", bad] for bad in ("0", "99")],
    *[[*R, "--hidden", bad] for bad in ("1e20", "", "a")],
    [*R, "--prior", "nope"],
    [*R, "--seed", "-1"],
    [*R, "--seed", HUGE],
    [*R, "--data-seed", HUGE],
    [*R, "--cache-dir", "/proc/1"],
]


def _case_id(argv: list[str]) -> str:
    text = " ".join(a if len(a) <= 24 else a[:12] + f"...({len(a)})" for a in argv)
    return text or "(empty)"


@pytest.fixture(scope="module")
def corpus_env(tmp_path_factory):
    """A store with one tiny run, the files and folders the placeholders name."""
    root = tmp_path_factory.mktemp("corpus")
    store = root / "store"
    config_dir = root / "configs"
    config_dir.mkdir()
    for name, text in CONFIGS.items():
        (config_dir / name).write_bytes(text.encode("utf-8", "surrogateescape"))
    big = config_dir / "big.json"
    big.write_text('{"seed": 0, "pad": "' + "x" * 2_000_000 + '"}')
    a_file = root / "plain.txt"
    a_file.write_text("not a folder")
    readonly = root / "readonly"
    readonly.mkdir()
    readonly.chmod(0o555)
    folder = root / "dir"
    (folder / "folder.json").mkdir(parents=True)
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            [
                "train",
                "--dataset",
                "toy-sine-gaps",
                "--method",
                "bnn",
                "--hidden",
                "4",
                "--epochs",
                "1",
                "--quiet",
                "--cache-dir",
                str(store),
            ]
        )
    assert code == 0, err.getvalue()
    run_id = out.getvalue().split()[0]
    return {
        "RUN": run_id,
        "FILE": str(a_file),
        "MISSING": str(root / "missing"),
        "RO": str(readonly),
        "DIR": str(folder),
        "BIG": str(big),
        "store": store,
        "configs": config_dir,
        "root": root,
    }


def _fill(argv: list[str], env: dict) -> list[str]:
    filled = []
    for arg in argv:
        for key in ("RUN", "FILE", "MISSING", "RO", "DIR", "BIG"):
            arg = arg.replace("{" + key + "}", env[key])
        if arg.startswith("{CFG:"):
            arg = str(env["configs"] / arg[5:-1])
        filled.append(arg)
    return filled


def _run_in_thread(argv: list[str]) -> tuple[object, str, str]:
    """(exit code or the exception raised, stdout, stderr) of main(argv); a hang fails the test."""
    out, err = io.StringIO(), io.StringIO()
    result: list[object] = []

    def target() -> None:
        try:
            result.append(main(argv))
        except SystemExit as exc:  # argparse
            result.append(exc.code)
        except BaseException as exc:  # reported below as the failure it is
            import traceback

            err.write(traceback.format_exc())
            result.append(exc)

    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        worker = threading.Thread(target=target, daemon=True)
        worker.start()
        worker.join(CASE_SECONDS)
    if worker.is_alive():
        pytest.fail(f"hung: {_case_id(argv)} ran past {CASE_SECONDS} s")
    return result[0], out.getvalue(), err.getvalue()


def _snapshot(root: Path, skip: tuple[Path, ...]) -> set[str]:
    files = set()
    for path in root.rglob("*"):
        if not any(path == s or s in path.parents for s in skip):
            files.add(str(path.relative_to(root)))
    return files


def _deny_writes_under(readonly: str, monkeypatch) -> None:
    """Root may write into a mode-555 folder: report it read-only to the checks, as for other users."""
    real_access = os.access

    def access(path, mode, *args, **kwargs):
        if mode & os.W_OK and (str(path) == readonly or str(path).startswith(readonly + "/")):
            return False
        return real_access(path, mode, *args, **kwargs)

    monkeypatch.setattr(os, "access", access)


def assert_clean_refusal(code, err: str, argv: list[str]) -> None:
    assert "Traceback" not in err, err
    assert not isinstance(code, BaseException), err
    assert code == 2, f"exit {code} for {_case_id(argv)}; stderr: {err[-500:]}"
    lines = [line for line in err.splitlines() if line.strip()]
    if lines and lines[0].startswith("usage:"):  # argparse: usage, then 'prog: error: ...'
        assert sum(": error: " in line for line in lines) == 1, err
    else:
        errors = [line for line in lines if line.startswith("error:")]
        assert len(errors) == 1, err
        assert len(errors[0]) < 600, errors[0]


@pytest.mark.parametrize("argv", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_is_refused_in_one_line(argv, corpus_env, tmp_path, monkeypatch):
    env = corpus_env
    argv = _fill(argv, env)
    monkeypatch.setenv("BNN_CACHE_DIR", str(env["store"]))
    monkeypatch.chdir(tmp_path)
    _deny_writes_under(env["RO"], monkeypatch)
    before = _snapshot(env["root"], (env["store"],))
    code, _, err = _run_in_thread(argv)
    assert_clean_refusal(code, err, argv)
    assert list(tmp_path.iterdir()) == [], "wrote into the current folder"
    assert _snapshot(env["root"], (env["store"],)) == before, "wrote outside the store"
    assert (env["store"] / "runs" / env["RUN"]).is_dir(), "the stored run is gone"


def test_the_corpus_covers_every_subcommand():
    from core.cli import build_parser

    parser = build_parser()
    commands = set(parser._subparsers._group_actions[0].choices)
    covered = {case[0] for case in CASES}
    assert commands <= covered, commands - covered
    assert len(CASES) >= 145


@pytest.mark.parametrize(
    "argv",
    [
        ["sweep", "{RUN}", "--thresholds", "0:1:1e-9"],
        ["train", "--dataset", "toy-sine-gaps", "--hidden", "1e20"],
        ["export", "{RUN}", "--threshold", "0.5", "--out", ""],
        ["train", "--config", "{CFG:nested.json}"],
    ],
    ids=["sweep-1e-9", "hidden-1e20", "export-empty-out", "nested-config"],
)
@pytest.mark.slow  # a Python process each, importing torch: 5 s CPU
def test_a_real_process_refuses_in_one_line(argv, corpus_env, tmp_path):
    env = corpus_env
    project = Path(__file__).resolve().parents[1]
    environ = {**os.environ, "BNN_CACHE_DIR": str(env["store"]), "PYTHONPATH": str(project)}
    done = subprocess.run(
        [sys.executable, "-m", "core", *_fill(argv, env)],
        cwd=tmp_path,
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert_clean_refusal(done.returncode, done.stderr, argv)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "raised, message",
    [
        (OSError(28, "No space left on device", "/store/runs/x"), "error: No space left on device: /store/runs/x"),
        (PermissionError(13, "Permission denied", "/store"), "error: Permission denied: /store"),
        (
            RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 40000400000 bytes"),
            "error: out of memory",
        ),
        (MemoryError(), "error: out of memory"),
    ],
)
def test_the_environments_refusals_become_one_line(raised, message, monkeypatch, capsys):
    """What no check can foresee (a disk that fills, memory that runs out) still ends in one line."""

    def handler(args):
        raise raised

    monkeypatch.setattr("core.cli.runs.run_presets", handler)
    assert main(["presets"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(message) and err.count("\n") == 1 and "Traceback" not in err


def test_a_programming_error_still_surfaces(monkeypatch):
    def handler(args):
        raise RuntimeError("a bug")

    monkeypatch.setattr("core.cli.runs.run_presets", handler)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["presets"])


def test_bad_settings_and_a_bad_cache_variable_are_one_line(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    a_file = tmp_path / "file"
    a_file.write_text("x")
    monkeypatch.setenv("BNN_CACHE_DIR", str(a_file))
    assert main(["runs"]) == 2
    assert capsys.readouterr().err.startswith("error: BNN_CACHE_DIR: ")
    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "store"))
    monkeypatch.setenv("BNN_MAX_EPOCHS", "lots")
    assert main(["train", "--dataset", "two-moons", "--epochs", "1"]) == 2
    assert capsys.readouterr().err.splitlines()[-1].startswith("error: BNN_MAX_EPOCHS: ")
    monkeypatch.setenv("BNN_MAX_EPOCHS", "5")
    assert main(["train", "--dataset", "two-moons", "--epochs", "6"]) == 2
    assert "above the limit 5 ($BNN_MAX_EPOCHS)" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == [a_file]
