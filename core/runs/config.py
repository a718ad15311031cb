"""RunConfig: one frozen, validated description of a run, and its run id.

The run id is a hash of the canonical serialisation (sorted keys, numbers
normalised so that 1, 1.0 and 1e0 are the same, defaults filled in, device
left out) together with SCHEMA_VERSION and the dataset's fingerprint: the
same config on the same data always gives the same id, any change that can
alter the trained model gives a new one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import tomllib

from core import limits, validate
from core.errors import BNNError, ConfigError
from core.models.conv_network import check_conv
from core.models.likelihoods import LIKELIHOODS, likelihood_options
from core.models.network import ACTIVATIONS, ModelConfig, check_input_skip
from core.models.registry import canonical_family, family_class
from core.runs.parsing import check_hidden, parse_hidden
from core.scale_head import check_scale_head_model
from core.train import (
    DEFAULT_LEARNING_RATES,
    DEFAULT_PRETRAIN_LEARNING_RATES,
    WARM_START_LEARNING_RATE,
    TrainConfig,
    check_learning_rate,
)

if TYPE_CHECKING:
    from core.data import Dataset

# Bump when the meaning of a config or the training code changes in a way
# that makes old runs incomparable: every run id changes with it.
SCHEMA_VERSION = 2
RUN_ID_LENGTH = 16
DEVICE_PATTERN = re.compile(r"^(auto|cpu|mps|cuda(:\d+)?)$")
TRAIN_FIELDS = tuple(f.name for f in dataclasses.fields(TrainConfig))
TRAIN_INT_FIELDS = (
    "epochs",
    "pretrain_epochs",
    "posttrain_epochs",
    "batch_size",
    "mc_samples",
    "kl_anneal_epochs",
    "warm_start_epochs",
    "warm_start_mean_epochs",
)
# The limit of each integer training field (core.limits): checked before a model or loader is built.
TRAIN_INT_LIMITS = {
    "epochs": limits.MAX_EPOCHS,
    "pretrain_epochs": limits.MAX_EPOCHS,
    "posttrain_epochs": limits.MAX_EPOCHS,
    "kl_anneal_epochs": limits.MAX_EPOCHS,
    "warm_start_epochs": limits.MAX_EPOCHS,
    "warm_start_mean_epochs": limits.MAX_EPOCHS,
    "batch_size": limits.MAX_BATCH_SIZE,
    "mc_samples": limits.MAX_SAMPLES,
}


def _as_int(value: Any, name: str, minimum: int | None = None) -> int:
    """An integer from an int or an integral float (TOML/JSON may give 3.0); bools are refused."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ConfigError(f"{name}: must be an integer, got {validate.shown(value)}")
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        raise ConfigError(f"{name}: must be an integer, got {validate.shown(value)}")
    value = int(value)
    if minimum is not None and value < minimum:
        raise ConfigError(f"{name}: must be >= {minimum}, got {validate.shown(value)}")
    return value


def _seed(value: Any, name: str) -> int:
    """A seed: an integer from 0 to limits.SEED_MAX (numpy's and torch's common range)."""
    value = _as_int(value, name, minimum=0)
    if value > limits.SEED_MAX:
        raise ConfigError(
            f"{name}: {validate.shown(value)} is too large; give a whole number from 0 to "
            f"{limits.SEED_MAX} (the range numpy and torch seed with)"
        )
    return value


def _train_from(value: Any) -> TrainConfig:
    """A TrainConfig with integer fields coerced and learning-rate defaults filled in."""
    if isinstance(value, TrainConfig):
        values = dataclasses.asdict(value)
    elif isinstance(value, Mapping):
        values = dict(value)
        unknown = sorted(set(values) - set(TRAIN_FIELDS))
        if unknown:
            raise ConfigError(f"train: unknown field(s) {', '.join(unknown)}; known: {', '.join(TRAIN_FIELDS)}")
    else:
        raise ConfigError(f"train: must be a TrainConfig or a table of training settings, got {value!r}")
    for name in TRAIN_INT_FIELDS:
        if name in ("epochs", "kl_anneal_epochs") and values.get(name) is None:
            values.pop(name, None)  # the default: filled in from the dataset by RunConfig
            continue
        if name in values:
            values[name] = limits.at_most(
                _as_int(values[name], f"train.{name}"), f"train.{name}", TRAIN_INT_LIMITS[name], low=0
            )
    head = values.get("scale_head")
    if isinstance(head, Mapping) and "epochs" in head:  # its epochs under the same limit as every phase's
        head = dict(head)
        head["epochs"] = limits.at_most(
            _as_int(head["epochs"], "train.scale_head.epochs", minimum=1),
            "train.scale_head.epochs",
            limits.MAX_EPOCHS,
            low=1,
        )
        values["scale_head"] = head
    elif isinstance(head, Mapping):
        values["scale_head"] = dict(head)
    for name in ("empirical_bayes", "compile", "cuda_graphs"):
        if name in values and not isinstance(values[name], bool):
            raise ConfigError(f"train.{name}: must be true or false, got {values[name]!r}")
    for name, defaults in (
        ("learning_rates", DEFAULT_LEARNING_RATES),
        ("pretrain_learning_rates", DEFAULT_PRETRAIN_LEARNING_RATES),
    ):
        given = values.get(name, {})
        if not isinstance(given, Mapping):
            raise ConfigError(f"train.{name}: must map group names to rates, got {given!r}")
        unknown = sorted(set(given) - set(DEFAULT_LEARNING_RATES))
        if unknown:
            raise ConfigError(
                f"train.{name}: unknown group(s) {', '.join(unknown)}; groups are {', '.join(DEFAULT_LEARNING_RATES)}"
            )
        # Partial rates mean "these groups changed": filling in the rest keeps
        # {weights: 1e-2} and the full default table the same run.
        values[name] = {**defaults, **{k: check_learning_rate(v, f"train.{name}.{k}") for k, v in given.items()}}
    try:
        return TrainConfig(**values)
    except ConfigError as exc:
        raise ConfigError(f"train.{exc}") from None


# The per-dataset defaults have their own module; their names stay importable from here.
from core.runs.dataset_defaults import (  # noqa: E402, F401
    DEFAULT_HIDDEN,
    DEFAULT_HIDDEN_LOW_DIMENSIONAL,
    SMALL_REGRESSION_FAMILY_DEFAULTS,
    SMALL_REGRESSION_HIDDEN,
    SMALL_REGRESSION_KL_ANNEAL_FRACTION,
    dataset_option_defaults,
    default_activation,
    default_hidden,
    family_option_defaults,
    is_small_regression,
)


def _training_size(name: str, params: Mapping[str, Any]) -> int:
    """The training-set size the default number of epochs is chosen for (without loading the data)."""
    from core.data.registry import dataset_info

    if isinstance(params.get("n"), int) and params["n"] > 0:
        return params["n"]
    n_train = dataset_info(name, params=dict(params)).n_train
    return int(n_train) if n_train else 10_000  # sets whose size is known only from their file


def _dataset_task(name: str, params: Mapping[str, Any] | None = None) -> str:
    from core.data.registry import check_name, dataset_info

    try:
        check_name(name)
        return dataset_info(name, params=dict(params) if isinstance(params, Mapping) else None).task
    except BNNError as exc:
        raise ConfigError(f"dataset: {exc}") from None


@dataclass(frozen=True)
class RunConfig:
    """Everything that determines a trained model (plus the device, which does not)."""

    dataset: str = "mnist-small"
    split: int | None = None
    dataset_params: dict[str, Any] = field(default_factory=dict)
    data_seed: int = 0  # seed of generated data and of 80/20 splits; `seed` is the training seed
    method: str = "lbbnn"
    hidden: tuple[int, ...] | None = None  # None: default_hidden(dataset)
    # Conv blocks [filters, kernel] before the hidden layers (core.models.conv_network; image datasets only);
    # empty: a fully connected network, left out of the stored config so earlier run ids stay.
    conv: tuple[tuple[int, int], ...] = ()
    activation: str | None = None  # None: default_activation(method, dataset)
    likelihood: str | None = None  # None: categorical for classification, gaussian for regression
    # The likelihood's noise model (core.models.likelihoods.GaussianOptions); only non-default
    # values are kept, so configs that leave it out keep their run ids.
    likelihood_options: dict[str, Any] = field(default_factory=dict)
    family_options: dict[str, Any] = field(default_factory=dict)
    train: TrainConfig = field(default_factory=TrainConfig)
    seed: int = 0
    device: str = "auto"

    def __post_init__(self) -> None:
        put = lambda name, value: object.__setattr__(self, name, value)  # noqa: E731
        if not isinstance(self.dataset, str) or not self.dataset:
            raise ConfigError(f"dataset: must be a dataset name, got {self.dataset!r}")
        from core.data import toy, uci, user_table

        if user_table.is_table_name(self.dataset):
            # a stored table: its options (target, task, split_column, missing) are its dataset_params
            if not isinstance(self.dataset_params, Mapping):
                raise ConfigError(f"dataset_params: must be a table of options, got {self.dataset_params!r}")
            try:
                put(
                    "dataset_params",
                    user_table.resolve_params(self.dataset, self.dataset_params, _seed(self.data_seed, "data_seed")),
                )
            except BNNError as exc:
                raise ConfigError(str(exc)) from None
        task = _dataset_task(self.dataset, self.dataset_params)
        if self.split is not None:
            if self.dataset not in uci.UCI_REGRESSION:
                raise ConfigError(
                    f"split: only the UCI regression sets have numbered splits, not {self.dataset!r}; leave split unset"
                )
            put("split", _as_int(self.split, "split", minimum=0))
        if not isinstance(self.dataset_params, Mapping):
            raise ConfigError(f"dataset_params: must be a table of generator parameters, got {self.dataset_params!r}")
        if self.dataset_params and self.dataset not in toy.GENERATORS and not user_table.is_table_name(self.dataset):
            raise ConfigError(
                f"dataset_params: {self.dataset!r} takes no generator parameters; only {', '.join(toy.GENERATORS)} do"
            )
        put("dataset_params", _plain(dict(self.dataset_params), "dataset_params"))
        put("data_seed", _seed(self.data_seed, "data_seed"))
        put("method", canonical_family(self.method))
        hidden = self.hidden if self.hidden is not None else default_hidden(self.dataset)
        if isinstance(hidden, str):
            hidden = parse_hidden(hidden)
        if not isinstance(hidden, (list, tuple)):
            raise ConfigError(f"hidden: must be a list of positive layer widths, got {validate.shown(self.hidden)}")
        put("hidden", check_hidden(hidden, self.hidden))
        put("conv", check_conv(self.conv, _image_shape(self.dataset) if self.conv else None, self.dataset, self.method))
        if self.activation is None:
            put("activation", default_activation(self.method, self.dataset))
        if self.activation not in ACTIVATIONS:
            raise ConfigError(f"activation: unknown {self.activation!r}; choose one of {', '.join(ACTIVATIONS)}")
        likelihood = self.likelihood or ("categorical" if task == "classification" else "gaussian")
        if likelihood not in LIKELIHOODS:
            raise ConfigError(f"likelihood: unknown {likelihood!r}; choose one of {', '.join(LIKELIHOODS)}")
        if LIKELIHOODS[likelihood].task != task:
            fitting = [name for name, cls in LIKELIHOODS.items() if cls.task == task]
            raise ConfigError(
                f"likelihood: {likelihood!r} does not fit the {task} dataset {self.dataset!r}; "
                f"use one of {', '.join(fitting)}"
            )
        put("likelihood", likelihood)
        if not isinstance(self.likelihood_options, Mapping):
            raise ConfigError(f"likelihood_options: must be a table of options, got {self.likelihood_options!r}")
        parsed = likelihood_options(likelihood, dict(self.likelihood_options))
        put("likelihood_options", _plain(parsed.non_defaults() if parsed is not None else {}, "likelihood_options"))
        if not isinstance(self.family_options, Mapping):
            raise ConfigError(f"family_options: must be a table of options, got {self.family_options!r}")
        try:
            options_class = family_class(self.method).Options
        except ImportError as exc:
            raise ConfigError(
                f"method: the {self.method!r} family is not available in this installation ({exc})"
            ) from None
        small_regression = is_small_regression(self.dataset)
        # stored configs name every option, so this fills only what a user left out
        given = {**dataset_option_defaults(options_class, self.dataset), **dict(self.family_options)}
        try:
            options = options_class.from_dict(given)
        except ConfigError as exc:
            raise ConfigError(f"family_options ({self.method}): {exc}") from None
        except TypeError as exc:
            raise ConfigError(f"family_options ({self.method}): {exc}") from None
        try:
            check_input_skip(self.method, options)
        except ConfigError as exc:
            raise ConfigError(f"family_options ({self.method}): {exc}") from None
        # Defaults filled in: an option given at its default value is the same run. input_skip off is
        # left out: runs made before the option existed keep their ids.
        family_options = _plain(dataclasses.asdict(options), "family_options")
        if family_options.get("input_skip") and self.conv:
            raise ConfigError("input_skip: a convolutional network has no input-skip form; leave conv unset")
        if family_options.get("input_skip") is False:
            family_options.pop("input_skip")
        put("family_options", family_options)
        train = _train_from(self.train)
        if train.epochs is None and user_table.is_table_name(self.dataset):  # a table's own default length
            from core.runs.user_data import default_epochs

            train = dataclasses.replace(
                train, epochs=default_epochs(_training_size(self.dataset, self.dataset_params), train.batch_size)
            )
        put(
            "train",
            train.resolved(
                _training_size(self.dataset, self.dataset_params),
                SMALL_REGRESSION_KL_ANNEAL_FRACTION if small_regression else 0.0,
            ),
        )
        if self.train.scale_head is not None:
            check_scale_head_model(self.method, likelihood)
        put("seed", _seed(self.seed, "seed"))
        device = str(self.device).strip().lower()
        if not DEVICE_PATTERN.match(device):
            raise ConfigError(f"device: unknown device {self.device!r}; use auto, cpu, cuda, cuda:N or mps")
        put("device", device)
        if self.train.cuda_graphs and not (device == "auto" or device.startswith("cuda")):
            raise ConfigError(
                f"train.cuda_graphs: replays each step as a CUDA graph and needs a CUDA device, not {device!r}; "
                "leave it off (false) or train on cuda"
            )

    # --- serialisation ---------------------------------------------------------------------
    @property
    def family(self) -> str:
        """The family of the run: `method` is its name in stored configs and on the CLI (--method)."""
        return self.method

    def to_dict(self) -> dict[str, Any]:
        return {
            "dataset": self.dataset,
            "split": self.split,
            "dataset_params": dict(self.dataset_params),
            "data_seed": self.data_seed,
            "method": self.method,
            "hidden": list(self.hidden),
            **({"conv": [list(block) for block in self.conv]} if self.conv else {}),
            "activation": self.activation,
            "likelihood": self.likelihood,
            **({"likelihood_options": dict(self.likelihood_options)} if self.likelihood_options else {}),
            "family_options": dict(self.family_options),
            "train": _train_dict(self.train),
            "seed": self.seed,
            "device": self.device,
        }

    @classmethod
    def from_dict(cls, values: Mapping[str, Any]) -> "RunConfig":
        if not isinstance(values, Mapping):
            raise ConfigError(f"config: must be a table of fields, got {type(values).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        values = dict(values)
        # Accept the paper's "model" section and top-level training fields as a convenience.
        for name in list(values):
            if name in TRAIN_FIELDS and name not in known:
                values.setdefault("train", {})
                values["train"] = {**dict(values["train"]), name: values.pop(name)}
        _table_from_file(values)
        unknown = sorted(set(values) - known)
        if unknown:
            raise ConfigError(f"config: unknown field(s) {', '.join(unknown)}; known: {', '.join(sorted(known))}")
        return cls(**values)

    def replace(self, **changes: Any) -> "RunConfig":
        """A copy with fields changed; `train` may be a dict of training fields to change."""
        if isinstance(changes.get("train"), Mapping):
            changes["train"] = {**dataclasses.asdict(self.train), **changes["train"]}
        return RunConfig.from_dict({**self.to_dict(), **changes})

    def mean_stage(self) -> "RunConfig":
        """The homoscedastic run a scale head (train.scale_head) is fitted on: the Gaussian likelihood with
        the table's noise options, every other setting as here. Only for a config with a scale head."""
        if self.train.scale_head is None:
            raise ConfigError("train.scale_head: unset; this run has no homoscedastic first stage")
        return self.replace(
            likelihood="gaussian",
            likelihood_options=dict(self.train.scale_head["likelihood_options"]),
            train={"scale_head": None},
        )

    def canonical_json(self) -> str:
        """Sorted keys, normalised numbers, device excluded: what the run id hashes."""
        values = self.to_dict()
        values.pop("device")
        return json.dumps(normalise(values), sort_keys=True, separators=(",", ":"), ensure_ascii=True)

    def run_id(self, dataset_fingerprint: str) -> str:
        text = f"bnn-run\nschema={SCHEMA_VERSION}\ndata={dataset_fingerprint}\n{self.canonical_json()}"
        return hashlib.sha256(text.encode("utf-8")).hexdigest()[:RUN_ID_LENGTH]

    # --- what training needs -----------------------------------------------------------------
    def load_dataset(self, data_dir: str | Path | None = None) -> "Dataset":
        from core.data import load_dataset

        return load_dataset(
            self.dataset, split=self.split, data_dir=data_dir, seed=self.data_seed, **self.dataset_params
        )

    def model_config(self, dataset: "Dataset") -> ModelConfig:
        return ModelConfig(
            in_features=dataset.in_features,
            out_classes=dataset.n_classes,
            hidden=self.hidden,
            family=self.method,
            family_options=dict(self.family_options),
            activation=self.activation,
            likelihood=self.likelihood,
            likelihood_options=dict(self.likelihood_options),
            **self.conv_fields(),
        )

    def conv_fields(self) -> dict[str, Any]:
        """ModelConfig's conv and image_shape (from the dataset's registry entry); {} without conv blocks."""
        if not self.conv:
            return {}
        return {"conv": self.conv, "image_shape": _image_shape(self.dataset)}

    def label(self) -> str:
        """Short human description, e.g. 'lbbnn 784-400-600-10 on mnist-small, seed 0'."""
        split = f" split {self.split}" if self.split is not None else ""
        conv = "".join(f"c{filters}k{kernel}-" for filters, kernel in self.conv)
        return f"{self.method} [{conv}{'-'.join(map(str, self.hidden))}] on {self.dataset}{split}, seed {self.seed}"


def _image_shape(dataset: str) -> tuple[int, int, int] | None:
    from core.data.registry import dataset_info
    from core.models.conv_network import image_shape_of

    try:
        return image_shape_of(dataset_info(dataset).input_shape)
    except BNNError:
        return None


TABLE_KEYS = ("target", "task", "split_column", "missing")


def _table_from_file(values: dict[str, Any]) -> None:
    """`data = FILE` (CSV or Parquet) with `target`, `task`, `split_column`, `missing`: the file is
    checked and stored (core.data.user_table) and becomes `dataset = "table-<hash>"` with those options
    in `dataset_params`, so a config names the data by its content, not by where it was."""
    if "data" not in values:
        if any(key in values for key in TABLE_KEYS):
            raise ConfigError(
                f"config: {', '.join(k for k in TABLE_KEYS if k in values)} need data = FILE (a CSV or Parquet table)"
            )
        return
    from core.data import user_table

    params = {
        **dict(values.get("dataset_params") or {}),
        **{key: values.pop(key) for key in TABLE_KEYS if key in values},
    }
    path = values.pop("data")
    seed = _seed(values.get("data_seed", 0), "data_seed")
    stored = user_table.store_table(user_table.read_limited(path), str(path), params, seed)
    values["dataset"] = stored.name
    values["dataset_params"] = params


def _train_dict(train: TrainConfig) -> dict[str, Any]:
    """The training settings as plain values; a constant learning-rate schedule (the default, and
    what every run before the option existed used) is left out so those runs keep their ids."""
    values = _plain(dataclasses.asdict(train), "train")
    for name in ("lr_schedule", "posttrain_lr_schedule"):
        if values.get(name) == "constant":
            values.pop(name)
    for name in ("target_density", "posttrain_density"):  # unset: the runs made before each option keep their ids
        if values.get(name) is None:
            values.pop(name, None)
    if values.get("warm_start_learning_rate") == WARM_START_LEARNING_RATE:  # likewise
        values.pop("warm_start_learning_rate")
    if values.get("warm_start_mean_epochs") == 0:  # off (the default): likewise
        values.pop("warm_start_mean_epochs")
    if values.get("scale_head") is None:  # off (the default): likewise
        values.pop("scale_head", None)
    if values.get("cuda_graphs") is False:  # off (the default): likewise
        values.pop("cuda_graphs")
    return values


def _plain(value: Any, name: str) -> Any:
    """Check a value is JSON-like (numbers, strings, bools, None, lists, tables) and copy it
    (option enums become their strings: stored configs and run ids hold strings)."""
    if isinstance(value, Enum):
        return _plain(value.value, name)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, f"{name}.{k}") for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v, f"{name}[{i}]") for i, v in enumerate(value)]
    if value is None or isinstance(value, (bool, int, float, str)):
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"{name}: must be finite, got {value!r}")
        return value
    raise ConfigError(f"{name}: unsupported value {value!r} of type {type(value).__name__}")


def normalise(value: Any) -> Any:
    """Numbers in one canonical form: integral values as ints, others as round-trip floats."""
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        number = float(value)
        if math.isfinite(number) and number.is_integer() and abs(number) < 2**53:
            return int(number)
        return number
    if isinstance(value, Mapping):
        return {str(k): normalise(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [normalise(v) for v in value]
    return value


def stored_config(values: Mapping[str, Any]) -> RunConfig:
    """The RunConfig of a stored run, including runs written by earlier versions.

    A stored config has every field filled in, so a field it lacks did not exist yet when it was
    written: `train.kl_weight` (before it, the objective was always the ELBO, weight 1).
    """
    values = dict(values)
    train = values.get("train")
    if isinstance(train, Mapping) and "kl_weight" not in train:
        values["train"] = {**train, "kl_weight": 1.0}
    return RunConfig.from_dict(values)


def load_config(path: str | Path) -> RunConfig:
    """A RunConfig from a TOML (.toml) or JSON (.json) file."""
    values = read_config_file(path)
    return RunConfig.from_dict(values)


def read_config_file(path: str | Path) -> dict[str, Any]:
    """The table of a TOML or JSON config file, refused with one ConfigError line when the file is
    missing or unreadable, larger than $BNN_MAX_CONFIG_BYTES (checked before parsing: at most that
    many bytes plus one are read), unparsable, or nested deeper than $BNN_MAX_CONFIG_DEPTH (json and
    tomllib recurse per level and overflow the stack on a few thousand brackets; Python refuses
    integers of over 4300 digits with ValueError)."""
    if not isinstance(path, (str, Path)) or not str(path).strip():
        raise ConfigError(f"config: give a .toml or .json file, got {validate.shown(path)}")
    path = Path(path)
    if path.suffix.lower() not in (".json", ".toml"):
        raise ConfigError(f"config: {validate.shown(str(path))} must end in .toml or .json")
    if not path.exists():
        raise ConfigError(f"config: file {str(path)!r} does not exist")
    if not path.is_file():
        raise ConfigError(f"config: {validate.shown(str(path))} is not a regular file")
    most = limits.limit(limits.MAX_CONFIG_BYTES)
    try:
        with path.open("rb") as handle:
            text = handle.read(most + 1)  # a file under /proc reports size 0: read, do not stat
    except OSError as exc:
        raise ConfigError(f"config: cannot read {validate.shown(str(path))}: {exc.strerror or exc}") from None
    if len(text) > most:
        raise ConfigError(
            f"config: {validate.shown(str(path))} is larger than {most} bytes "
            f"(${limits.MAX_CONFIG_BYTES.variable}); a run or grid config is a few hundred"
        )
    depth = limits.limit(limits.MAX_CONFIG_DEPTH)
    try:
        if path.suffix.lower() == ".json":
            values = json.loads(text)
        else:
            values = tomllib.loads(text.decode("utf-8"))
    except RecursionError:
        raise ConfigError(f"config: {path}: lists and tables nest deeper than {depth} levels") from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError, TOMLDecodeError, >4300-digit ints
        reason = (
            "it holds an integer of over 4300 digits"
            if "integer string conversion" in str(exc)
            else str(exc).splitlines()[0][:200]
        )
        raise ConfigError(f"config: cannot parse {path}: {reason}") from None
    if not isinstance(values, dict):
        raise ConfigError(f"config: {path} must hold a table of fields, got a JSON {type(values).__name__}")
    return validate.nested_within(values, f"config {path}", depth)
