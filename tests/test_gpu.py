"""Every family on a CUDA GPU: trains, predicts in every mode, round-trips through the store,
and agrees with the CPU.

Run with `python -m pytest -m gpu` (benchmarks/gpu_check.sh does). Without CUDA these tests are
deselected and the session's summary says how many were not run (tests/conftest.py): they are
never reported as passed on a machine that cannot run them.

What "agrees" means here. The GPU and the CPU draw different random numbers, so a network trained
on each differs; what must agree is (1) the same weights giving the same numbers on both devices
(deterministic modes to 1e-4 in probability: float32 matmuls reassociate differently), and (2) a
GPU-trained run reaching the accuracy a CPU-trained run of the same config reaches, within the
spread seeds give on this tiny problem (0.1 on two-moons).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from core.predict.modes import PredictionMode
from core.runs import RunConfig
from core.runs.training import load_run, train_run
from tests.support import VARIANT_IDS, VARIANTS

pytestmark = pytest.mark.gpu

CUDA = torch.device("cuda")
DETERMINISTIC_MODES = [mode.value for mode in PredictionMode if not mode.draws_samples()]


def tiny_config(family: str, options: dict, **changes) -> RunConfig:
    values = {
        "dataset": "two-moons",
        "hidden": [16, 16],
        "method": family,
        "family_options": dict(options),
        "train": {"epochs": 30},
        "seed": 0,
    }
    values.update(changes)
    return RunConfig.from_dict(values)


@pytest.fixture(scope="module")
def cuda_available():
    if not torch.cuda.is_available():  # deselected by conftest; this guards a direct `pytest tests/test_gpu.py::...`
        pytest.skip("no CUDA device: the GPU tests were not run")


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_family_trains_predicts_and_round_trips_on_the_gpu(family, options, tmp_path, cuda_available):
    check_family_on("cuda", family, options, tmp_path)


def check_family_on(device: str, family: str, options: dict, tmp_path) -> None:
    """The checks, for any device (run on "cpu" it checks the checks' own plumbing)."""
    config = tiny_config(family, options)
    run = train_run(config, cache_dir=tmp_path, device=device)
    assert all(p.device.type == device for p in run.model.parameters())
    x_test = run.dataset().x_test
    gpu_predictions = {}
    for mode in PredictionMode:
        prediction = run.predict(x_test, mode=mode.value, samples=8, seed=3)
        assert np.isfinite(prediction.probs).all(), mode
        np.testing.assert_allclose(prediction.probs.sum(axis=1), 1.0, atol=1e-5)
        gpu_predictions[mode.value] = prediction.probs

    # The store: loaded back onto the GPU, the same numbers bit for bit (same device, same seed).
    again = load_run(run.run_id, cache_dir=tmp_path, device=device)
    for mode, probs in gpu_predictions.items():
        np.testing.assert_array_equal(again.predict(x_test, mode=mode, samples=8, seed=3).probs, probs)

    # The same weights on the CPU: deterministic modes agree to float32 reassociation.
    on_cpu = load_run(run.run_id, cache_dir=tmp_path, device="cpu")
    for mode in DETERMINISTIC_MODES:
        np.testing.assert_allclose(on_cpu.predict(x_test, mode=mode).probs, gpu_predictions[mode], atol=1e-4)

    # A CPU-trained run of the same config reaches the same quality.
    cpu_run = train_run(config, cache_dir=tmp_path / "cpu", device="cpu")
    gpu_accuracy = float((gpu_predictions["mpm-mean"].argmax(axis=1) == run.dataset().y_test).mean())
    cpu_accuracy = float((cpu_run.predict(x_test, mode="mpm-mean").probs.argmax(axis=1) == run.dataset().y_test).mean())
    assert abs(gpu_accuracy - cpu_accuracy) <= 0.1, (gpu_accuracy, cpu_accuracy)


def test_regression_run_on_the_gpu_matches_the_cpu(tmp_path, cuda_available):
    config = tiny_config("lbbnn", {}, dataset="toy-sine-gaps", likelihood="gaussian", train={"epochs": 40})
    run = train_run(config, cache_dir=tmp_path, device="cuda")
    on_cpu = load_run(run.run_id, cache_dir=tmp_path, device="cpu")
    x = run.dataset().x_test
    np.testing.assert_allclose(
        on_cpu.predict(x, mode="mean").mean, run.predict(x, mode="mean").mean, rtol=1e-4, atol=1e-4
    )
    assert np.isfinite(run.predict(x, mode="bma", samples=16).mean).all()


def test_the_gpu_is_where_the_work_runs(tmp_path, cuda_available):
    """A guard on the check itself: train_run(device="cuda") must not silently fall back to the CPU."""
    config = tiny_config("lbbnn", {}, train={"epochs": 1})
    before = torch.cuda.memory_allocated(CUDA)
    run = train_run(config, cache_dir=tmp_path, device="cuda")
    assert next(run.model.parameters()).device.type == "cuda"
    assert torch.cuda.memory_allocated(CUDA) > before


@pytest.mark.parametrize(
    "family,changes",
    [
        ("lbbnn", {"conv": [[3, 5], [4, 5]], "hidden": [6]}),
        ("sparse-vd", {"conv": [[3, 5], [4, 5]], "hidden": [6]}),
        ("lbbnn", {"family_options": {"input_skip": True}}),
    ],
    ids=["lbbnn-conv", "sparse-vd-conv", "lbbnn-input-skip"],
)
def test_conv_and_input_skip_runs_on_the_gpu_match_the_cpu(family, changes, tmp_path, cuda_available):
    """The layers added after the first GPU run (conv blocks, input skips): trained on the GPU, the same
    weights give the same deterministic predictions on the CPU, and sampled ones are finite."""
    dataset = "mnist-small" if "conv" in changes else "two-moons"
    config = tiny_config(family, changes.pop("family_options", {}), dataset=dataset, train={"epochs": 2}, **changes)
    run = train_run(config, cache_dir=tmp_path, device="cuda")
    assert all(p.device.type == "cuda" for p in run.model.parameters())
    x = run.dataset().x_test[:256]
    on_cpu = load_run(run.run_id, cache_dir=tmp_path, device="cpu")
    for mode in DETERMINISTIC_MODES:
        np.testing.assert_allclose(on_cpu.predict(x, mode=mode).probs, run.predict(x, mode=mode).probs, atol=1e-4)
    assert np.isfinite(run.predict(x, mode="bma", samples=8, seed=1).probs).all()


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_replayed_steps_on_the_gpu_reach_the_eager_runs_quality(family, options, tmp_path, cuda_available):
    """train.cuda_graphs (core/step_graphs.py): every variant's step is captured and replayed, with no
    fall-back to eager steps, and the run reaches the eager GPU run's accuracy within the seeds' spread."""
    replayed = train_run(
        tiny_config(family, options, train={"epochs": 30, "cuda_graphs": True}), cache_dir=tmp_path, device="cuda"
    )
    assert {record.get("cuda_graphs") for record in replayed.history} == {"replayed"}, replayed.history[-1]
    eager = train_run(tiny_config(family, options), cache_dir=tmp_path / "eager", device="cuda")
    x_test, y_test = replayed.dataset().x_test, replayed.dataset().y_test

    def accuracy(run) -> float:
        return float((run.predict(x_test, mode="mpm-mean").probs.argmax(axis=1) == y_test).mean())

    assert abs(accuracy(replayed) - accuracy(eager)) <= 0.1, (accuracy(replayed), accuracy(eager))


def _trained_on_cuda(family: str, cuda_graphs: bool, capturable_eager: bool = False):
    import core.train as train_module
    from core.models.network import BayesianMLP, ModelConfig

    generator = torch.Generator().manual_seed(0)
    x = torch.randn(400, 2, generator=generator)
    y = (x[:, 0] * x[:, 1] > 0).long()
    model = BayesianMLP(
        ModelConfig(in_features=2, out_classes=2, hidden=(16, 16), family=family), torch.Generator().manual_seed(0)
    ).to(CUDA)
    config = train_module.TrainConfig(epochs=3, batch_size=50, kl_anneal_epochs=2, cuda_graphs=cuda_graphs)
    plain_adam = train_module._adam
    if capturable_eager:  # the optimiser a replay uses, in eager steps
        train_module._adam = lambda params, capturable=False: plain_adam(params, capturable=True)
    try:
        result = train_module.train(model, x.to(CUDA), y.to(CUDA), config, seed=0, snapshots=False)
    finally:
        train_module._adam = plain_adam
    return model, result


@pytest.mark.parametrize("family", ["fnn", "lbbnn"])
def test_replayed_steps_on_the_gpu_take_the_eager_steps(family, cuda_available):
    """The same steps as eager steps with the same (capturable) optimiser: the buffers a replay reads hold
    the right batch, KL scale and step sizes, and a replay draws the noise an eager step draws from the
    run's registered generator. Twice replayed: bit for bit the same run."""
    eager, _ = _trained_on_cuda(family, cuda_graphs=False, capturable_eager=True)
    replayed, result = _trained_on_cuda(family, cuda_graphs=True)
    again, _ = _trained_on_cuda(family, cuda_graphs=True)
    assert result.history[-1]["cuda_graphs"] == "replayed"
    for (name, a), (_, b), (_, c) in zip(
        eager.state_dict().items(), replayed.state_dict().items(), again.state_dict().items()
    ):
        torch.testing.assert_close(c, b, rtol=0, atol=0, msg=f"{name}: two replayed runs differ")
        torch.testing.assert_close(b, a, rtol=1e-5, atol=1e-6, msg=f"{name}: replayed and eager steps differ")


def test_a_step_that_cannot_be_captured_trains_on_eagerly_with_its_generator(cuda_available):
    """A step that reads a value back to the host cannot be captured; the phase goes on eagerly, and the
    run's noise generator (registered with the failed capture) still draws: the same numbers as a
    generator that never met a capture."""
    from core.step_graphs import WARMUP_STEPS, CudaGraphBackend, ReplayedSteps

    def body_drawing_from(generator):
        def body(index, kl_scale):
            noise = torch.randn(4, generator=generator, device=CUDA)
            return noise.sum() * float(kl_scale)  # float(): a read back to the host, refused in a capture

        return body

    generator = torch.Generator(device=CUDA).manual_seed(5)
    steps = ReplayedSteps(body_drawing_from(generator), 2, CUDA, CudaGraphBackend(CUDA, generator))
    reference_generator = torch.Generator(device=CUDA).manual_seed(5)
    reference = body_drawing_from(reference_generator)
    index = torch.arange(2, device=CUDA)
    for _ in range(WARMUP_STEPS + 3):
        out = steps(index, 1.0)
        torch.testing.assert_close(out, reference(index, torch.tensor(1.0)))
    assert steps.state.startswith("eager: "), steps.state
    torch.randn(3, device=CUDA)  # the default generator draws too
