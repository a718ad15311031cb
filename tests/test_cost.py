"""core.cost: the state counted against built models, monotone costs, admission and its messages."""

from __future__ import annotations

import math
import time
import tracemalloc

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core import cost
from core.errors import DataError
from core.runs.config import RunConfig

# A fixed speed: the tests do not depend on this machine's load.
SPEED = cost.Speed(matmul_flops=2e10, elements_per_second=5e8, seconds_per_op=3e-6)
LIMITS = cost.Limits(
    memory_bytes=1536 * cost.MB,
    max_weights=3_000_000,
    playground_weights=5000,
    generated_points=100_000,
    prediction_values=10_000_000,
    training_seconds=1800.0,
)


@pytest.fixture(autouse=True, scope="module")
def widths_beyond_the_request_limit():
    """The cost model is tested on widths past BNN_MAX_HIDDEN_WIDTH (4096): in use that limit refuses
    such a config first, but the model's estimates and its 'what fits' must hold beyond it too."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("BNN_MAX_HIDDEN_WIDTH", "1000000")
        yield


def config_of(hidden, dataset="two-moons", method="lbbnn", epochs=10, batch_size=100, params=None):
    return RunConfig(
        dataset=dataset,
        method=method,
        hidden=tuple(hidden),
        dataset_params=params or {},
        train={"epochs": epochs, "batch_size": batch_size},
    )


@pytest.mark.parametrize("method", sorted(cost.FAMILY_STATE))
@pytest.mark.parametrize("hidden,dataset", [((5, 7), "two-moons"), ((3,), "toy-hetero"), ((6, 4, 3), "two-spirals")])
def test_state_floats_count_a_built_model_exactly(method, hidden, dataset):
    from core.errors import ConfigError as Refused
    from core.models.network import build_model

    try:
        config = config_of(hidden, dataset, method)
    except Refused:  # a family that does not take this dataset's defaults
        pytest.skip(f"{method} on {dataset}")
    data_shape = cost.dataset_shape(dataset)
    model = build_model(config.model_config(config.load_dataset()), "cpu", torch.Generator().manual_seed(0))
    widths = cost.layer_widths(config, data_shape)
    assert model.n_weights() == cost.n_weights(widths)
    layers = cost.family_layers(method, widths)
    for layer, state, fan_in, fan_out in zip(model.layers, layers, widths, widths[1:]):
        assert sum(p.numel() for p in layer.parameters()) == state.parameters(fan_in, fan_out)
        assert sum(b.numel() for b in layer.buffers()) == state.buffers(fan_in, fan_out)
    parameters, buffers = cost.state_floats(method, widths)
    built_parameters = sum(p.numel() for p in model.parameters())
    assert parameters - cost.LIKELIHOOD_FLOATS <= built_parameters <= parameters
    assert buffers <= sum(b.numel() for b in model.buffers()) <= buffers + cost.LIKELIHOOD_FLOATS


def test_optimizer_state_is_counted_in_the_training_cost():
    """Adam keeps two moments per parameter and every parameter has a gradient: the training cost
    counts at least the state, the gradients and the moments of the built model."""
    from core.models.network import build_model

    config = config_of((20, 10), epochs=1)
    model = build_model(config.model_config(config.load_dataset()), "cpu", torch.Generator().manual_seed(0))
    optimizer = torch.optim.Adam(model.parameters())
    x = torch.randn(8, 2)
    model.train()
    loss = model(x).square().mean() if not isinstance(model(x), tuple) else model(x)[0].square().mean()
    loss.backward()
    optimizer.step()
    moments = sum(
        v.numel() for state in optimizer.state.values() for k, v in state.items() if k in ("exp_avg", "exp_avg_sq")
    )
    gradients = sum(p.grad.numel() for p in model.parameters() if p.grad is not None)
    state = sum(p.numel() for p in model.parameters()) + sum(b.numel() for b in model.buffers())
    exact = (state + gradients + moments) * 4
    need = cost.training_cost(config, cost.dataset_shape("two-moons"), SPEED)
    assert need.bytes >= exact
    parameters, _ = cost.state_floats("lbbnn", cost.layer_widths(config, cost.dataset_shape("two-moons")))
    # (parameters the loss did not reach, such as the prior's hyperparameters, get no moments)
    assert moments == 2 * gradients and gradients <= parameters


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    widths=st.lists(st.integers(1, 5000), min_size=1, max_size=3),
    grow=st.integers(1, 4000),
    layer=st.integers(0, 2),
    method=st.sampled_from(sorted(cost.FAMILY_STATE)),
)
def test_costs_grow_with_widths(widths, grow, layer, method):
    shape = cost.dataset_shape("two-moons")
    small = config_of(widths, method=method)
    bigger = list(widths)
    bigger[layer % len(bigger)] += grow
    large = config_of(bigger, method=method)
    assert cost.training_cost(large, shape, SPEED).bytes > cost.training_cost(small, shape, SPEED).bytes
    assert cost.training_cost(large, shape, SPEED).seconds > cost.training_cost(small, shape, SPEED).seconds
    assert cost.model_build_cost(large, shape).bytes > cost.model_build_cost(small, shape).bytes


@settings(max_examples=40, deadline=None)
@given(n=st.integers(1, 10**6), more=st.integers(1, 10**6), samples=st.integers(1, 200))
def test_costs_grow_with_points_and_draws(n, more, samples):
    config = config_of((16, 16))
    small, large = (cost.dataset_shape("two-moons", {"n": k, "n_test": k}) for k in (n, n + more))
    assert (
        cost.dataset_cost("two-moons", shape=large, speed=SPEED).bytes
        > cost.dataset_cost("two-moons", shape=small, speed=SPEED).bytes
    )
    assert cost.training_cost(config, large, SPEED).bytes > cost.training_cost(config, small, SPEED).bytes
    shape = cost.dataset_shape("two-moons")
    assert (
        cost.prediction_cost(config, shape, n, samples + 1, SPEED).bytes
        > cost.prediction_cost(config, shape, n, samples, SPEED).bytes
    )


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    widths=st.lists(st.integers(1, 20000), min_size=1, max_size=3),
    epochs=st.integers(1, 3000),
    n=st.integers(2, 100_000),
    budget_mb=st.integers(64, 4096),
)
def test_admitted_trainings_fit_and_refused_ones_say_what_fits(widths, epochs, n, budget_mb):
    limits = cost.Limits(memory_bytes=budget_mb * cost.MB, max_weights=3_000_000, training_seconds=3600.0)
    config = config_of(widths, epochs=epochs, params={"n": n})
    shape = cost.dataset_shape("two-moons", {"n": n})
    try:
        need = cost.admit_training(config, shape, limits, SPEED)
    except cost.AdmissionError as refusal:
        message = str(refusal)
        assert "fit" in message and "widths" in message or "epochs" in message
        if "widths up to " in message:
            text = message.split("widths up to ")[1].split(" fit")[0]
            fitting = config.replace(hidden=tuple(int(w) for w in text.split(",")))
            need = cost.training_cost(fitting, shape, SPEED)
            assert need.bytes <= limits.memory_bytes and need.weights <= limits.max_weights
        return
    assert need.bytes <= limits.memory_bytes
    assert need.weights <= limits.max_weights
    assert need.seconds <= limits.training_seconds


def test_the_refusal_of_a_large_playground_names_the_widths_that_fit():
    config = config_of((12000, 12000), epochs=100, batch_size=500)
    shape = cost.dataset_shape("two-moons")
    with pytest.raises(cost.AdmissionError) as refused:
        cost.admit_playground(config, shape, LIMITS, SPEED)
    message = str(refused.value)
    assert message.startswith("widths 12000,12000 need 144,072,002 weights (the playground allows 5,000)")
    assert "GB of memory (limit 1.5 GB)" in message and message.endswith("widths up to 67,67 fit")
    assert cost.admit_playground(config.replace(hidden=(67, 67)), shape, LIMITS, SPEED).weights <= 5000


def test_the_refusal_of_a_large_training_says_how_large_and_what_fits():
    shape = cost.dataset_shape("two-moons")
    limits = cost.Limits(memory_bytes=1536 * cost.MB)
    with pytest.raises(cost.AdmissionError) as refused:
        cost.admit_training(config_of((12000, 12000), epochs=1), shape, limits, SPEED)
    message = str(refused.value)
    assert message.startswith("widths 12000,12000 need about ") and "(limit 1.5 GB) on this server" in message
    fit = tuple(int(w) for w in message.split("widths up to ")[1].split(" fit")[0].split(","))
    assert fit[0] == fit[1] and 1000 < fit[0] < 12000
    assert cost.training_cost(config_of(fit, epochs=1), shape, SPEED).bytes <= limits.memory_bytes


def test_a_long_training_is_refused_with_the_epochs_that_fit():
    shape = cost.dataset_shape("two-moons", {"n": 100_000})
    limits = cost.Limits(memory_bytes=None, training_seconds=60.0)
    config = config_of((400, 400), epochs=3000, params={"n": 100_000})
    with pytest.raises(cost.AdmissionError, match=r"3000 epochs of widths 400,400 .* up to \d+ epochs fit"):
        cost.admit_training(config, shape, limits, SPEED)


@pytest.mark.parametrize("params", [{"n": 1e9}, {"n": 100_000_000}, {"n_test": 1_000_000}, {"n_grid": 10**8}])
def test_generator_counts_above_the_limit_are_refused_before_anything_is_allocated(params):
    from core.data import load_dataset

    dataset = "toy-hetero" if "n_grid" in params else "two-moons"
    with pytest.raises(cost.AdmissionError, match="BNN_MAX_GENERATED_POINTS"):
        cost.admit_dataset(dataset, params, LIMITS)
    with pytest.raises(DataError, match=r"at most 100,000"):
        load_dataset(dataset, **params)  # once, so first-use imports are not counted below
    tracemalloc.start()
    try:
        with pytest.raises(DataError, match=r"at most 100,000"):
            load_dataset(dataset, **params)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 1_000_000  # the smallest of these would be gigabytes


def test_the_generators_limit_is_a_setting(monkeypatch):
    from core.data import load_dataset

    monkeypatch.setenv("BNN_MAX_GENERATED_POINTS", "300")
    assert len(load_dataset("two-moons", n=300, n_test=10).x_train) == 300
    with pytest.raises(DataError, match="at most 300"):
        load_dataset("two-moons", n=301)


@settings(max_examples=40, deadline=None)
@given(n_inputs=st.integers(1, 2_000_000), wanted=st.integers(1, 100), budget_mb=st.integers(32, 2048))
def test_largest_samples_fits_and_one_more_does_not(n_inputs, wanted, budget_mb):
    limits = cost.Limits(memory_bytes=budget_mb * cost.MB, prediction_values=20_000_000, prediction_seconds=20.0)
    config = config_of((16, 16))
    shape = cost.dataset_shape("two-moons")
    allowed = cost.largest_samples(config, shape, n_inputs, limits, wanted, SPEED)
    assert 0 <= allowed <= wanted

    def fits(samples):
        need = cost.prediction_cost(config, shape, n_inputs, samples, SPEED)
        return (
            samples * n_inputs * shape.outputs <= limits.prediction_values
            and need.bytes <= limits.memory_bytes
            and need.seconds <= limits.prediction_seconds
        )

    assert allowed == 0 or fits(allowed)
    assert allowed == wanted or not fits(allowed + 1)
    if allowed < wanted:
        message = cost.samples_message(n_inputs, wanted, allowed, config, shape, limits, SPEED)
        assert f"R = {wanted} over {n_inputs:,} inputs" in message
        assert (f"R up to {allowed} fits" in message) if allowed else ("not even R = 1 fits" in message)


def test_a_regression_prediction_is_capped_by_its_cpu_time():
    """200,000 regression inputs at R = 50 took 73 s of CPU in the benchmark: a 20 s limit lowers R."""
    config = config_of((64, 64), dataset="toy-hetero", method="bnn", params={"n_test": 100_000})
    shape = cost.dataset_shape("toy-hetero", {"n_test": 100_000})
    limits = cost.Limits(memory_bytes=1536 * cost.MB, prediction_values=10_000_000, prediction_seconds=20.0)
    allowed = cost.largest_samples(config, shape, 100_000, limits, 50, SPEED)
    assert 1 <= allowed < 50
    assert cost.prediction_cost(config, shape, 100_000, allowed, SPEED).seconds <= 20.0
    assert "of CPU" in cost.samples_message(100_000, 50, allowed, config, shape, limits, SPEED)


def test_remaining_seconds_uses_the_estimate_then_the_measured_epochs():
    assert cost.remaining_seconds([], 100, estimated_seconds=50.0, elapsed=10.0) == 40.0
    assert cost.remaining_seconds([], 100) is None
    # the last five epochs' mean (2 s) x 4 epochs left: a slowdown shows at once
    assert cost.remaining_seconds([1, 1, 2, 2, 2, 2, 2], 11) == pytest.approx(8.0)
    assert cost.remaining_seconds([1.0] * 10, 10) == 0.0


def test_the_limits_are_registered_settings_with_documented_defaults(monkeypatch):
    from core.errors import InputError
    from core.settings import SETTINGS, describe

    for setting in (
        cost.MEMORY_BUDGET,
        cost.MAX_WEIGHTS,
        cost.PLAYGROUND_MAX_WEIGHTS,
        cost.MAX_GENERATED_POINTS,
        cost.MAX_PREDICTION_VALUES,
        cost.MAX_PREDICTION_SECONDS,
        cost.MAX_TRAINING_MINUTES,
    ):
        assert SETTINGS[setting.variable] is setting and setting.secret_key and setting.meaning
        assert f"`{setting.variable}`" in describe()
    defaults = cost.server_limits()
    assert defaults.memory_bytes == 1536 * cost.MB and defaults.playground_weights == 5000
    monkeypatch.setenv("BNN_MEMORY_BUDGET_MB", "512")
    assert cost.server_limits().memory_bytes == 512 * cost.MB
    assert cost.server_limits(fallback={"max_weights": 1000}.get).max_weights == 1000
    monkeypatch.setenv("BNN_MEMORY_BUDGET_MB", "lots")
    with pytest.raises(InputError, match="BNN_MEMORY_BUDGET_MB"):
        cost.server_limits()


def test_command_line_limits_are_looser():
    limits = cost.command_line_limits()
    assert limits.max_weights is None and limits.training_seconds is None and limits.prediction_values is None
    physical = cost.physical_memory_bytes()
    assert physical is None or limits.memory_bytes == physical // 2


def test_speed_probe_is_quick_and_positive():
    started = time.perf_counter()
    speed = cost.measure_speed(repeats=1)
    assert time.perf_counter() - started < 10.0  # about 0.1 s here; the bound catches a probe that sizes up
    assert speed.matmul_flops > 0 and speed.elements_per_second > 0 and speed.seconds_per_op > 0
    assert cost.Speed.from_dict(speed.as_dict()) == speed
    assert cost.load_factor() >= 1.0 and math.isfinite(cost.load_factor())


def test_sessions_opening_at_once_probe_the_servers_speed_once_and_keep_its_thread_count(monkeypatch):
    """Ten sessions opening together each used to run the speed probe, which sets torch's (process-wide)
    thread count and restores it: overlapping probes could restore each other's values."""
    import threading
    import time

    import torch

    from core import cost_model

    calls: list[int] = []

    def slow_probe(repeats: int = 15):
        calls.append(threading.get_ident())
        previous = torch.get_num_threads()
        torch.set_num_threads(1)
        time.sleep(0.05)  # the others arrive while this one has the count at 1
        torch.set_num_threads(previous)
        return cost_model.Speed(1e9, 1e8, 1e-6)

    monkeypatch.setattr(cost_model, "measure_speed", slow_probe)
    getattr(cost_model, "_probed_speed", cost_model.server_speed).cache_clear()
    before = torch.get_num_threads()
    try:
        results: list = []
        threads = [threading.Thread(target=lambda: results.append(cost_model.server_speed())) for _ in range(10)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert len(calls) == 1
        assert len(results) == 10 and all(result == results[0] for result in results)
        assert torch.get_num_threads() == before
    finally:
        getattr(cost_model, "_probed_speed", cost_model.server_speed).cache_clear()


def scale_head_config() -> RunConfig:
    """A heteroscedastic run with a scale head (train.scale_head): its homoscedastic first stage, then 3 epochs."""
    return RunConfig(
        dataset="toy-cubic",
        method="concrete-dropout",
        hidden=(8,),
        likelihood="heteroscedastic",
        train={"epochs": 4, "batch_size": 32, "scale_head": {"epochs": 3, "likelihood_options": {"noise": "point"}}},
    )


def test_a_scale_head_counts_its_first_stage_whole_unless_that_run_is_stored(tmp_path, monkeypatch):
    from core.admission_estimates import training_estimate
    from core.runs.training import first_stage_stored, train_run

    monkeypatch.setenv("BNN_CACHE_DIR", str(tmp_path / "default"))  # the dashboard's store: the default one
    config = scale_head_config()
    shape = cost.dataset_shape(config.dataset, config.dataset_params)
    open_limits = cost.Limits(memory_bytes=None)  # no limits: the estimates alone
    first = cost.training_cost(config.mean_stage(), shape, SPEED)
    head = cost.training_cost(config, shape, SPEED, first_stage_stored=True)
    assert (first.epochs, head.epochs) == (4, 3)
    both = cost.training_cost(config, shape, SPEED)
    assert math.isclose(both.seconds, first.seconds + head.seconds) and both.epochs == 7
    # one stage after the other: the larger one's memory (the head's counts the first stage's model, loaded)
    assert both.bytes == max(first.bytes, head.bytes) and both.weights == head.weights

    def admitted(store):
        stored = first_stage_stored(config, store)
        seconds = cost.estimate_seconds(config, shape, SPEED, loaded=False, first_stage_stored=stored)
        need = cost.admit_training(config, shape, open_limits, SPEED, first_stage_stored=stored)
        assert math.isclose(seconds, need.seconds)
        return need

    store = tmp_path / "store"
    absent = admitted(store)
    assert math.isclose(absent.seconds, first.seconds + head.seconds) and absent.epochs == 7
    train_run(config.mean_stage(), cache_dir=store)  # the first stage, stored: the training will load it
    stored = admitted(store)
    assert math.isclose(stored.seconds, head.seconds) and stored.epochs == 3 and stored.seconds < absent.seconds
    # the dashboard's estimate looks in the default store
    before = training_estimate(config, open_limits)
    train_run(config.mean_stage(), cache_dir=tmp_path / "default")
    after = training_estimate(config, open_limits)
    assert (before["epochs"], after["epochs"]) == (7, 3) and after["seconds"] < before["seconds"]


def test_without_a_scale_head_nothing_is_looked_up_and_the_estimate_is_one_training(tmp_path):
    from core.runs.training import first_stage_stored

    config = config_of((16, 16))
    shape = cost.dataset_shape(config.dataset, config.dataset_params)
    assert not first_stage_stored(config, tmp_path)
    assert not (tmp_path / "runs").exists()  # no store was opened
    assert cost.training_cost(config, shape, SPEED) == cost.training_cost(config, shape, SPEED, first_stage_stored=True)
