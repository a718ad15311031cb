"""The Train form's memory, and the form filled from a run's config.

Streamlit discards a widget's state at the end of every script run that does not draw it: going to
the Pruning page and back reset the Train form to its defaults. The form's values are therefore
copied, after each drawing, into a dict of our own (`memory()`, kept in the session state) and copied
back into the widgets' keys before the next drawing when Streamlit has dropped them (as
state.persistent_widget does for the view settings). A reload starts a new Streamlit session: where
the browser is recognised (its XSRF cookie, state.session_owner) the dict is the browser's, kept in
this server process, so the reloaded form is the one left.

"Train the same with another family / seed" writes a run's config into the same widget keys
(`fill_from_config`). What the form has no box for (the split, the data seed, the activation, the
likelihood, the family's options the form does not draw, the training's other settings such as
pre-training or KL annealing) is carried beside the form (`CARRIED_KEY`) and added to the config
the form submits while its dataset stays the run's, so the submitted config is the run's config with
only the family or seed changed.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections import OrderedDict
from typing import Any

import streamlit as st

from dashboard import backend

MEMORY_KEY = "train_form_memory"
CARRIED_KEY = "train_form_carried"  # {"from": run id, "config": the filled config's fields}
# The form's widget keys: these and every key with one of the prefixes (family options, learning rates).
FORM_KEYS = (
    "train_dataset",
    "train_method",
    "train_hidden",
    "train_seed",
    "train_epochs",
    "train_batch",
    "train_posttrain",
    "train_kl_weight",
    "train_empirical_bayes",
    "train_noise",
    "train_noise_init",
    "train_noise_std",
    "train_precision_prior",
    "train_precision_a",
    "train_precision_b",
    "train_params",
    "train_device",
)
FORM_PREFIXES = ("train_opt_", "train_lr_")
DEVICES = ("auto", "cpu", "cuda")  # the form's device choices
RATE_GROUPS = ("weights", "scales", "inclusion")
# The form's noise boxes start at the Gaussian likelihood's defaults (core.models.likelihoods.GaussianOptions).
NOISE_DEFAULTS = {
    "noise": "point",
    "noise_init": "value",
    "noise_std": 0.5,
    "precision_prior": "none",
    "precision_a": 6.0,
    "precision_b": 6.0,
}
NOISE_KEYS = {
    "noise": "train_noise",
    "noise_init": "train_noise_init",
    "noise_std": "train_noise_std",
    "precision_prior": "train_precision_prior",
    "precision_a": "train_precision_a",
    "precision_b": "train_precision_b",
}
# Config fields without a box in the form, carried from the filled run while its dataset is chosen.
CARRIED_FIELDS = ("split", "data_seed", "activation", "likelihood")
FORM_TRAIN_FIELDS = (
    "epochs",
    "batch_size",
    "posttrain_epochs",
    "kl_weight",
    "learning_rates",
    "empirical_bayes",
    "lr_schedule",
)


def is_form_key(key: str) -> bool:
    return key in FORM_KEYS or key.startswith(FORM_PREFIXES)


_browsers: OrderedDict[str, dict[str, Any]] = OrderedDict()
_browsers_lock = threading.Lock()


def browser_memory(owner: str) -> dict[str, Any]:
    """The form's memory shared by the sessions of one browser (a reload is a new Streamlit session):
    the most recently used BNN_FORM_MEMORY_BROWSERS browsers are kept in this server process."""
    from dashboard.settings import form_memory_browsers

    with _browsers_lock:
        kept = _browsers.setdefault(owner, {})
        _browsers.move_to_end(owner)
        while len(_browsers) > form_memory_browsers():
            _browsers.popitem(last=False)
        return kept


def memory() -> dict[str, Any]:
    """This session's memory: its browser's when the browser is recognised (state.session_owner), so a
    reload finds the form as it was; else the session's own."""
    kept = st.session_state.get(MEMORY_KEY)
    if kept is None:
        from dashboard import state

        owner = state.session_owner()
        kept = browser_memory(owner) if owner.startswith("browser:") else {}
        st.session_state[MEMORY_KEY] = kept
    return kept


def restore() -> None:
    """Before the form is drawn: the remembered values back into the widgets' keys Streamlit dropped."""
    for key, value in memory().items():
        if key not in st.session_state:
            st.session_state[key] = value


def remember() -> None:
    """After the form is drawn: its widgets' values into the memory."""
    kept = memory()
    for key in list(st.session_state.keys()):
        if isinstance(key, str) and is_form_key(key):
            kept[key] = st.session_state[key]


def exact_text(value: float) -> str:
    """A float as its box shows it: short when that is exact (0.135), else every digit."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def option_defaults(method: str) -> dict[str, Any]:
    """The family's option defaults (its Options dataclass)."""

    def default(field: dataclasses.Field) -> Any:
        if field.default is not dataclasses.MISSING:
            return field.default
        if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            return field.default_factory()  # type: ignore[misc]
        return None

    return {f.name: default(f) for f in backend.family_option_fields()[method]}


def option_key(method: str, name: str, dataset_defaults: dict[str, Any], family_defaults: dict[str, Any]) -> str:
    """The widget key of option `name`: small regression sets (other defaults) keep their own widgets."""
    suffix = "" if dataset_defaults == family_defaults else "_small_regression"
    return f"train_opt_{method}_{name}{suffix}"


def option_text(value: Any, default: Any, choices: list[str] | None) -> Any:
    """An option's value as its widget holds it (the widget's kind follows the default, as the form draws it)."""
    if isinstance(default, bool):
        return bool(value)
    if choices:
        return str(value)
    if isinstance(default, int):
        return str(int(value))
    if isinstance(default, float):
        return exact_text(float(value))
    return str(value)


def form_values(config: dict[str, Any]) -> dict[str, Any]:
    """The form's widget values (by key) that reproduce `config` (a RunConfig's to_dict())."""
    from dashboard import priors

    train = config["train"]
    method, dataset = config["method"], config["dataset"]
    values: dict[str, Any] = {
        "train_dataset": dataset,
        "train_method": method,
        "train_hidden": ", ".join(str(width) for width in config["hidden"]),
        "train_seed": str(config["seed"]),
        "train_epochs": str(train["epochs"]),
        "train_batch": str(train["batch_size"]),
        "train_posttrain": str(train["posttrain_epochs"]),
        "train_kl_weight": exact_text(float(train["kl_weight"])),
        "train_empirical_bayes": bool(train.get("empirical_bayes", False)),
        "train_lr_schedule": str(train.get("lr_schedule", "constant")),
        "train_params": ", ".join(f"{name}={json.dumps(value)}" for name, value in config["dataset_params"].items()),
        "train_device": config["device"] if config["device"] in DEVICES else "auto",
    }
    for group in RATE_GROUPS:
        values[f"train_lr_{group}"] = exact_text(float(train["learning_rates"][group]))
    noise = {**NOISE_DEFAULTS, **config.get("likelihood_options", {})}
    for name, key in NOISE_KEYS.items():
        values[key] = exact_text(float(noise[name])) if isinstance(NOISE_DEFAULTS[name], float) else str(noise[name])
    dataset_defaults = backend.family_option_defaults(method, dataset)
    family_defaults = option_defaults(method)
    options = {**dataset_defaults, **config["family_options"]}
    for name, default in dataset_defaults.items():
        key = option_key(method, name, dataset_defaults, family_defaults)
        values[key] = option_text(options[name], default, priors.choices(name, method))
    return values


def fill_from_config(run_id: str, config: dict[str, Any], method: str | None = None, seed: int | None = None) -> None:
    """Fill the form with `config` (a RunConfig's to_dict()), the family or seed changed. Another
    family starts from its own option defaults on the dataset (the options of two families differ)."""
    config = json.loads(json.dumps(config))  # a copy
    if method is not None and method != config["method"]:
        config["method"] = method
        config["family_options"] = {}
    if seed is not None:
        config["seed"] = int(seed)
    values = form_values(config)
    for key in [key for key in st.session_state.keys() if isinstance(key, str) and is_form_key(key)]:
        del st.session_state[key]  # nothing of the previous form stays behind
    kept = memory()
    kept.clear()
    for key, value in values.items():
        st.session_state[key] = value
        kept[key] = value
    st.session_state[CARRIED_KEY] = {"from": run_id, "config": config}


def carried(dataset: str) -> dict[str, Any] | None:
    """The filled run's config while the form's dataset is still the run's, else None."""
    entry = st.session_state.get(CARRIED_KEY)
    if not entry or entry["config"]["dataset"] != dataset:
        return None
    return entry["config"]


def carried_family_options(method: str, dataset: str) -> dict[str, Any]:
    """The filled run's family options (its family only): the form adds those it does not draw."""
    config = carried(dataset)
    return dict(config["family_options"]) if config is not None and config["method"] == method else {}


def add_carried(values: dict[str, Any]) -> list[str]:
    """Add to the form's config fields what the filled run had and the form has no box for; returns
    their names (the form says which were carried)."""
    config = carried(values["dataset"])
    if config is None:
        return []
    names = []
    for name in CARRIED_FIELDS:
        if config.get(name) is not None:
            values[name] = config[name]
            names.append(name)
    for name, value in config["train"].items():
        if name not in FORM_TRAIN_FIELDS:
            values["train"][name] = value
            names.append(name)
    return names
