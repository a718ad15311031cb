"""The Train page's form: each setting as a box checked by core.validate as it is typed, the family's
options, the noise model and the training's estimate; `config_form()` returns RunConfig fields or None.
The data is a registered dataset or the user's own table (dashboard/upload_panel.py)."""

from __future__ import annotations

import dataclasses
from typing import Any

import streamlit as st

from core.errors import BNNError, InputError
from dashboard import backend, form_memory, lesson_panel, priors, upload_panel
from dashboard.backend import limits, plain, validate
from dashboard.ui import guard, without_server_paths


@st.cache_data(ttl=60, show_spinner=False)
def dataset_table() -> list[dict[str, Any]]:
    return backend.dataset_table()


@st.cache_data(ttl=600, show_spinner=False)
def method_options() -> dict[str, dict[str, Any]]:
    """Available families and their option defaults (from each family's Options dataclass)."""
    return {name: {f.name: _default(f) for f in fields} for name, fields in backend.family_option_fields().items()}


@st.cache_data(ttl=600, show_spinner=False)
def method_option_types() -> dict[str, dict[str, Any]]:
    """Each family's option annotations (Literal[...] choices become select boxes)."""
    return {name: {f.name: str(f.type) for f in fields} for name, fields in backend.family_option_fields().items()}


@st.cache_data(ttl=600, show_spinner=False)
def dataset_option_defaults(method: str, dataset: str) -> dict[str, Any]:
    """The family's option defaults on this dataset (small regression sets have their own)."""
    return backend.family_option_defaults(method, dataset)


def _default(field: dataclasses.Field) -> Any:
    if field.default is not dataclasses.MISSING:
        return field.default
    if field.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        return field.default_factory()  # type: ignore[misc]
    return None


# The command line's limits, one rule for both (core/limits.py; each a BNN_MAX_* setting).
SEED_MAX = limits.SEED_MAX
MAX_EPOCHS = limits.limit(limits.MAX_EPOCHS)
MAX_BATCH = limits.limit(limits.MAX_BATCH_SIZE)


class _Placed(str):
    """A message already shown beside its box."""


class FormErrors(list):
    """Messages about the form's fields; any of them disables Train (nothing is clamped silently).
    A message about one box is shown beside it, the others below the form."""

    def check(self, condition: bool, message: str) -> None:
        if not condition:
            self.append(message)

    def beside(self, container: Any, message: str) -> None:
        container.error(plain(message))
        self.append(_Placed(message))

    def below(self) -> list[str]:
        return [message for message in self if not isinstance(message, _Placed)]


def number_box(
    container: Any, label: str, default: Any, key: str, parse: Any, errors: FormErrors, help: str | None = None
) -> Any:
    """A number typed as text and parsed by core.validate: taken exactly as typed, or refused beside the
    box (None). st.number_input changed what was typed: the browser read Epochs 1e9 as 1 epoch, and
    1e20 stayed in the box while training used the previous value."""
    text = container.text_input(label, str(default), key=key, help=help)
    try:
        return parse(text)
    except InputError as exc:
        errors.beside(container, str(exc))
        return None


def exact_text(value: float) -> str:
    """A float default as the box shows it: short when that is exact (0.135), else every digit."""
    short = f"{value:g}"
    return short if float(short) == value else repr(float(value))


def generator_params(text: str, dataset: str, errors: FormErrors) -> dict[str, Any]:
    """The Generator parameters box, checked as it is typed by the generator's own rules (unknown names
    list the valid ones); nothing is generated."""
    if not text.strip():
        return {}
    try:
        params = backend.parse_options(text, "Generator parameters")
        backend.check_dataset_params(dataset, params)
    except BNNError as exc:
        message = str(exc)
        errors.beside(st, message if message.startswith("Generator parameters") else f"Generator parameters: {message}")
        return {}
    return params


def parse_seed(text: str) -> int:
    """An empty box is seed 0."""
    return validate.whole_number(str(text).strip() or "0", "Seed", 0, SEED_MAX)


def family_option_widgets(method: str, dataset: str, errors: FormErrors) -> dict[str, Any]:
    """Each option of the family as a widget with its range, unit and help; returns the options
    that differ from the family's defaults on this dataset. Advanced options are folded away."""
    defaults = dataset_option_defaults(method, dataset)
    annotations = method_option_types()[method]
    main = priors.ordered([n for n in defaults if not priors.widget_for(n, method).advanced], method)
    advanced = [n for n in defaults if priors.widget_for(n, method).advanced]
    chosen: dict[str, Any] = {}
    st.markdown(f"**Prior and family options ({method})**")
    columns = st.columns(3)
    shown = 0
    for name in main:
        if not priors.relevant(name, chosen, defaults, method):  # e.g. Beta a, b only for the beta priors
            continue
        with columns[shown % 3]:
            chosen[name] = option_widget(
                method, name, defaults[name], annotations.get(name, ""), errors, option_key(method, name, defaults)
            )
        shown += 1
    if str(chosen.get("inclusion_prior")) in priors.BETA_PRIORS:
        st.checkbox(
            "Empirical Bayes: learn the Beta prior's a and b from the data",
            value=False,
            key="train_empirical_bayes",
            help="on: a_psi and b_psi are fitted (type-II maximum likelihood) during training; "
            "off: they stay as set above",
        )
    if advanced:
        with st.expander("Advanced options (initialisation, estimator)"):
            columns = st.columns(3)
            for index, name in enumerate(advanced):
                with columns[index % 3]:
                    chosen[name] = option_widget(
                        method,
                        name,
                        defaults[name],
                        annotations.get(name, ""),
                        errors,
                        option_key(method, name, defaults),
                    )
    # A form filled from a run keeps that run's values of the options it does not draw.
    carried = {
        name: value for name, value in form_memory.carried_family_options(method, dataset).items() if name not in chosen
    }
    return {**carried, **{name: value for name, value in chosen.items() if value != defaults[name]}}


def option_key(method: str, name: str, defaults: dict[str, Any]) -> str:
    """Small regression sets have other defaults: their widgets keep their own state."""
    return form_memory.option_key(method, name, defaults, method_options()[method])


def option_widget(method: str, name: str, default: Any, annotation: str, errors: FormErrors, key: str) -> Any:
    spec = priors.widget_for(name, method)
    range_text = spec.range_text()
    help_text = " ".join(
        part
        for part in (
            spec.help,
            f"accepted range {range_text}." if range_text else "",
            f"Option `{name}`, default {default!r}.",
        )
        if part
    )
    options = priors.choices(name, method)
    if isinstance(default, bool):
        return st.checkbox(spec.label, value=default, key=key, help=help_text)
    if options:
        return st.selectbox(
            spec.label,
            options,
            index=options.index(str(default)) if str(default) in options else 0,
            key=key,
            help=help_text,
        )
    if isinstance(default, (int, float)):
        # Typed as text and taken exactly: an out-of-range entry is reported beside the box, never clamped.
        whole = isinstance(default, int)
        value = number_box(
            st,
            spec.label,
            default if whole else exact_text(default),
            key,
            (lambda t: validate.whole_number(t, spec.label))
            if whole
            else (lambda t: validate.real_number(t, spec.label)),
            errors,
            help_text,
        )
        message = spec.check(name, value) if value is not None else None
        if message:
            errors.beside(st, message)
        return default if value is None else value  # (a refused box disables Train: its default is never used)
    return st.text_input(spec.label, str(default), key=key, help=help_text).strip()


def config_form() -> dict[str, Any] | None:
    """The training settings as RunConfig fields, or None when a field is invalid (every problem
    is shown as a message at once, as you type). Its values outlive a visit to another page
    (dashboard/form_memory.py)."""
    form_memory.restore()
    try:
        return form_fields()
    finally:
        form_memory.remember()


def form_fields() -> dict[str, Any] | None:
    datasets = {row["name"]: row for row in dataset_table()}
    names = list(datasets)
    errors = FormErrors()
    # ?hide=dataset or a lesson step hides the data's choice: no upload either, the choice stays, undrawn.
    # (A form filled from a table's run names its stored table: upload_panel.filled_table.)
    table = None if lesson_panel.hidden("dataset") else upload_panel.table_choice(errors)
    if table is None and st.session_state.get("train_dataset", names[0]) not in datasets:
        del st.session_state["train_dataset"]  # remembered, since gone from the list
    if table is not None:
        dataset = table["dataset"]
        with guard("Reading your table"):
            datasets[dataset] = backend.user_data.table_info(dataset, table["dataset_params"], table["file"])
        if dataset not in datasets:
            return None
    elif lesson_panel.hidden("dataset"):
        dataset = st.session_state.get("train_dataset", backend.DEFAULT_DATASET)
        dataset = dataset if dataset in datasets else backend.DEFAULT_DATASET
    else:
        dataset = st.selectbox(
            "Dataset",
            names,
            index=names.index(backend.DEFAULT_DATASET),
            key="train_dataset",
            format_func=lambda n: f"{n}  ({datasets[n]['availability']})",
            help="bundled and generated sets work offline; others need $BNN_DATA_DIR or a download.",
        )
    info = datasets[dataset]
    # The detail names the dataset's folder: as the store's or data folder's name, never the server's path.
    detail = without_server_paths(info["detail"])
    st.caption(
        plain(
            f"{info['task']}, inputs {info['input_shape']}, {info['n_train'] or '?'} train / "
            f"{info['n_test'] or '?'} test - {info['availability']}: {detail}"
        )
    )
    errors.check(info["availability"] != "unavailable", f"Dataset {dataset} is not available on this machine: {detail}")

    methods = method_options()
    method_names = list(methods)
    if st.session_state.get("train_method", method_names[0]) not in methods:
        del st.session_state["train_method"]
    if lesson_panel.hidden("method"):
        method = st.session_state.get("train_method", "lbbnn")
        method = method if method in method_names else method_names[0]
    else:
        method = st.selectbox(
            "Method (family)",
            method_names,
            key="train_method",
            index=method_names.index("lbbnn") if "lbbnn" in method_names else 0,
        )
    try:  # the default epochs follow the batch size typed (the box says when it is wrong)
        typed_batch = validate.whole_number(st.session_state.get("train_batch", 100), "Batch size", 1, MAX_BATCH)
    except InputError:
        typed_batch = 100
    defaults = (
        backend.default_settings(dataset, typed_batch)
        if table is None
        else backend.user_data.table_defaults(dataset, table["dataset_params"], typed_batch)
    )
    default_hidden = ", ".join(map(str, defaults["hidden"]))
    left, right = st.columns(2)
    hidden_text = left.text_input(
        "Hidden widths",
        "",
        key="train_hidden",
        placeholder=f"default: {default_hidden}",
        help=f"comma-separated layer widths; empty: {default_hidden} for this dataset "
        f"(the paper uses 400, 600 on MNIST)",
    )
    seed = (
        0
        if lesson_panel.hidden("seed")
        else number_box(
            right, "Seed", "0", "train_seed", parse_seed, errors, help=f"a whole number from 0 to {SEED_MAX}"
        )
    )
    left, middle, right = st.columns(3)
    # Text boxes parsed by core.validate: a value out of range is reported beside its box and disables Train.
    epochs = number_box(
        left,
        f"Epochs (0: {defaults['epochs']}, about 3000 steps)"
        if table is None
        else f"Epochs (0: {defaults['epochs']}, at most {backend.user_data.TABLE_ROW_PASSES:,} rows x epochs)",
        0,
        "train_epochs",
        lambda t: validate.whole_number(t, "Epochs", 0, MAX_EPOCHS),
        errors,
        help=f"0 trains the default for this dataset's size and the batch size; at most {MAX_EPOCHS:,}",
    )
    batch_size = number_box(
        middle,
        "Batch size",
        100,
        "train_batch",
        lambda t: validate.whole_number(t, "Batch size", 1, MAX_BATCH),
        errors,
        help=f"a whole number from 1 to {MAX_BATCH:,}",
    )
    posttrain = number_box(
        right,
        "Post-training epochs (structure fixed)",
        0,
        "train_posttrain",
        lambda t: validate.whole_number(t, "Post-training epochs", 0, MAX_EPOCHS),
        errors,
        help=f"a whole number from 0 to {MAX_EPOCHS:,}",
    )
    kl_weight = number_box(
        st,
        "KL weight (1 = the ELBO; below 1 tempers the prior)",
        exact_text(float(defaults["kl_weight"])),
        "train_kl_weight",
        lambda t: validate.real_number(t, "KL weight", 0.001, 1.0),
        errors,
        help="between 0.001 and 1. The ELBO itself prunes almost every weight of an LBBNN and fits small "
        "regression sets with a flat line; the default 0.1 keeps a readable picture "
        "(docs/why-lbbnn-over-prunes.md).",
    )
    family_options = family_option_widgets(method, dataset, errors)
    empirical_bayes = (
        bool(st.session_state.get("train_empirical_bayes"))
        and str(family_options.get("inclusion_prior")) in priors.BETA_PRIORS
    )
    with st.expander("Learning rates"):
        rate_columns = st.columns(3)
        default_rates = backend.default_learning_rates()
        rates_text = {
            group: column.text_input(f"Learning rate: {group}", f"{default_rates[group]:g}", key=f"train_lr_{group}")
            for column, group in zip(rate_columns, ("weights", "scales", "inclusion"))
        }
        lr_schedule = st.selectbox(
            "Step sizes over training",
            backend.LR_SCHEDULES,
            key="train_lr_schedule",
            help="constant, or a cosine decay to zero over the main phase: the last epochs settle instead of "
            "bouncing at full step (the UCI presets use it; docs/uci-regression.md section 8)",
        )
    noise_options = noise_model_controls(errors) if info["task"] == "regression" else {}
    dataset_params: dict[str, Any] = {} if table is None else dict(table["dataset_params"])
    if table is None and (info["task"] == "regression" or dataset.startswith(("toy-", "two-"))):
        params_text = st.text_input("Generator parameters (toy sets: name=value, ...)", "", key="train_params")
        dataset_params = generator_params(params_text, dataset, errors)
    device = st.selectbox("Device", ["auto", "cpu", "cuda"], key="train_device")
    problem = backend.device_problem(device)
    if problem:
        errors.append(problem)

    values = None
    with guard("Invalid setting"):
        train = {
            "epochs": epochs or None,
            "batch_size": batch_size,
            "posttrain_epochs": posttrain,
            "kl_weight": kl_weight,
            # core's one parser; RunConfig says what is wrong with a rate
            "learning_rates": {g: backend.parse_scalar(t.strip()) for g, t in rates_text.items()},
        }
        if empirical_bayes:
            train["empirical_bayes"] = True
        if lr_schedule != "constant":
            train["lr_schedule"] = lr_schedule
        values = {
            "dataset": dataset,
            "dataset_params": dataset_params,
            "method": method,
            "hidden": list(backend.parse_hidden(hidden_text)) if hidden_text.strip() else None,
            "family_options": family_options,
            "likelihood_options": noise_options,
            "train": train,
            "seed": seed,
            "device": device,
        }
        carried = form_memory.add_carried(values)
        if carried:
            st.caption(
                plain(
                    f"Also from run {st.session_state[form_memory.CARRIED_KEY]['from'][:8]} while its "
                    f"dataset is chosen (no box for them here): {', '.join(carried)}."
                )
            )
    for message in errors.below():  # they quote what was typed: plain text
        st.error(plain(message))
    if values is None or errors:
        return None
    # Validate the whole config now (as you type), not only after Train.
    try:
        config = backend.make_config(values)
    except BNNError as exc:
        st.error(plain(without_server_paths(f"Invalid setting: {backend.device_message(str(exc))}")))
        return None
    if not estimate_section(config, info):
        return None
    return values


def estimate_section(config: Any, info: dict[str, Any]) -> bool:
    """The training's size, memory and time (core.cost, on this server's measured speed and load),
    before it starts; False (Train disabled) when this server's limits refuse it: the message says
    why and what would fit."""
    estimate = backend.training_estimate(config)
    if estimate["n_train"]:
        epochs = estimate["epochs"]
        duration = (
            f"{epochs} epoch takes" if epochs == 1 else f"{epochs} epochs take"
        ) + f" about {backend.time_text(estimate['wall_seconds'])} on this server now"
    else:  # the training-set size is known only once the file is read
        duration = "the time depends on the training-set size, known once the data is loaded"
    text = f"{estimate['weights']:,} weights, about {backend.size_text(estimate['memory_bytes'])} of memory; {duration}"
    if estimate["refusal"]:
        st.error(f"Too large for this server: {estimate['refusal']}.")
        return False
    if estimate["wall_seconds"] > 600:
        st.warning(f"A long training: {text}.")
    else:
        st.caption(f"Estimate: {text}.")
    return True


def noise_model_controls(errors: FormErrors) -> dict[str, Any]:
    """The Gaussian likelihood's noise model (core.models.likelihoods.GaussianOptions)."""
    with st.expander("Noise model (Gaussian likelihood)"):
        left, middle, right = st.columns(3)
        noise = left.selectbox(
            "Noise",
            ["point", "fixed", "variational"],
            key="train_noise",
            help="point: learned sd; fixed; variational: Gamma posterior on the precision",
        )
        init = middle.selectbox(
            "Initial noise",
            ["value", "data"],
            key="train_noise_init",
            help="data: the residual sd of a least-squares fit to the training set",
        )
        std = number_box(
            right,
            "Noise sd (standardised)",
            0.5,
            "train_noise_std",
            positive("Noise sd"),
            errors,
            help="a positive number, in units of the standardised target",
        )
        prior = left.selectbox(
            "Precision prior",
            ["none", "gamma"],
            index=1 if noise == "variational" else 0,
            key="train_precision_prior",
            help="Gamma(a, b) on 1/sd^2; Hernandez-Lobato & Adams (2015) use (6, 6)",
        )
        a = number_box(middle, "Gamma a", 6, "train_precision_a", positive("Gamma a"), errors, help="a positive number")
        b = number_box(right, "Gamma b", 6, "train_precision_b", positive("Gamma b"), errors, help="a positive number")
    return {
        "noise": noise,
        "noise_init": init,
        "noise_std": std,
        "precision_prior": prior,
        "precision_a": a,
        "precision_b": b,
    }


def positive(name: str) -> Any:
    return lambda text: validate.real_number(text, name, 0.0, low_open=True)
