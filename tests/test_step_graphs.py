"""Training steps replayed as CUDA graphs (train.cuda_graphs, core/step_graphs.py), on the CPU.

A CUDA graph needs a CUDA device; what can be checked without one is everything around it: the
buffers a replay reads (the rows' indices, the KL scale, the step sizes on the device), the sequence of
warm-up steps, one capture and replays, the ragged last batch, the fall-back when a capture fails, and
the option's validation and run id. `CallingBackend` stands in for the graph: its "capture" runs nothing
and its replay calls the step again, reading the same buffers a CUDA graph reads. Trained with it, a run
must take exactly the steps an eager run takes. tests/test_gpu.py runs the real graphs on a GPU.
"""

from __future__ import annotations

import pytest
import torch

import core.train as train_module
from core import step_graphs
from core.errors import ConfigError
from core.models.network import BayesianMLP, ModelConfig
from core.runs import RunConfig
from core.step_graphs import WARMUP_STEPS, CallingBackend, ReplayedSteps
from core.train import TrainConfig, train
from tests.support import VARIANT_IDS, VARIANTS


def two_moons(n: int = 90, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 2, generator=generator)
    y = (x[:, 0] * x[:, 1] > 0).long()
    return x, y


class CountingBackend(CallingBackend):
    def __init__(self, fail: bool = False):
        self.warmups = self.captures = self.replays = 0
        self.fail = fail

    def warmup(self, body):
        self.warmups += 1
        return super().warmup(body)

    def capture(self, body, like):
        self.captures += 1
        if self.fail:
            raise RuntimeError("CUDA error: operation not permitted when stream is capturing")
        replay, out = super().capture(body, like)

        def counted() -> None:
            self.replays += 1
            replay()

        return counted, out


@pytest.fixture
def graphs_on_cpu(monkeypatch):
    """train.cuda_graphs allowed on the CPU, with a stand-in backend that counts what it is asked."""
    backends: list[CountingBackend] = []
    fail = {"capture": False}

    def backend(device, generator):
        backends.append(CountingBackend(fail=fail["capture"]))
        return backends[-1]

    monkeypatch.setattr(step_graphs, "CUDA_GRAPH_DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(step_graphs, "graph_backend", backend)
    return backends, fail


def eager_with_capturable_adam(monkeypatch, family: str, options: dict, config: TrainConfig):
    """The eager run of `config` with the optimiser a replay uses (step sizes on the device): a replayed run
    must take exactly its steps. (The plain fused Adam rounds differently: 6e-8 apart after four epochs.)"""
    plain = train_module._adam
    with monkeypatch.context() as patch:
        patch.setattr(train_module, "_adam", lambda params, capturable=False: plain(params, capturable=True))
        return trained(family, options, config)


def weights(model) -> dict[str, torch.Tensor]:
    """The model's state, less what is a clock reading (laplace's fit_seconds)."""
    return {name: value for name, value in model.state_dict().items() if not name.endswith("fit_seconds")}


def trained(family: str, options: dict, config: TrainConfig, seed: int = 0):
    x, y = two_moons()
    model = BayesianMLP(
        ModelConfig(in_features=2, out_classes=2, hidden=(8,), family=family, family_options=dict(options)),
        torch.Generator().manual_seed(seed),
    )
    result = train(model, x, y, config, seed=seed, snapshots=False)
    return model, result


# 90 rows in batches of 20: four full batches and a ragged one of 10 an epoch. Annealed KL and a cosine
# schedule: the KL scale and the step sizes change every epoch, as the buffers must follow.
CHANGING = dict(epochs=4, batch_size=20, kl_anneal_epochs=3, lr_schedule="cosine")


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_replayed_steps_take_the_eager_steps(family, options, graphs_on_cpu, monkeypatch):
    backends, _ = graphs_on_cpu
    eager_model, eager = eager_with_capturable_adam(monkeypatch, family, options, TrainConfig(**CHANGING))
    plain_model, _ = trained(family, options, TrainConfig(**CHANGING))
    replayed_model, replayed = trained(family, options, TrainConfig(**CHANGING, cuda_graphs=True))
    assert backends and backends[0].captures == 1 and backends[0].replays > 0
    assert [r["cuda_graphs"] for r in replayed.history] == ["replayed"] * len(replayed.history)
    for (name, a), (_, b) in zip(weights(eager_model).items(), weights(replayed_model).items()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=f"{family} {name}")
    for (name, a), (_, b) in zip(weights(plain_model).items(), weights(replayed_model).items()):
        torch.testing.assert_close(b.double(), a.double(), rtol=0, atol=1e-5, msg=f"{family} {name}")
    assert [r["data_term"] for r in replayed.history] == [r["data_term"] for r in eager.history]


def test_a_phase_warms_up_captures_once_and_replays_each_full_batch(graphs_on_cpu):
    backends, _ = graphs_on_cpu
    _, result = trained("lbbnn", {}, TrainConfig(**CHANGING, cuda_graphs=True))
    (backend,) = backends
    full_batches = 4 * CHANGING["epochs"]
    assert backend.warmups == WARMUP_STEPS
    assert backend.captures == 1
    assert backend.replays == full_batches - WARMUP_STEPS  # the ragged batches ran eagerly
    assert result.history[-1]["cuda_graphs"] == "replayed"


def test_every_phase_and_the_warm_start_get_their_own_graph(graphs_on_cpu, monkeypatch):
    backends, _ = graphs_on_cpu
    config = TrainConfig(
        epochs=2, pretrain_epochs=2, posttrain_epochs=2, warm_start_epochs=2, batch_size=20, cuda_graphs=True
    )
    eager_model, _ = eager_with_capturable_adam(
        monkeypatch, "lbbnn", {}, TrainConfig(**{**config.as_dict(), "cuda_graphs": False})
    )
    model, result = trained("lbbnn", {}, config)
    assert len(backends) == 4 and all(b.captures == 1 for b in backends)
    assert {r["phase"] for r in result.history} == {"warm-start", "pretrain", "train", "posttrain"}
    for (name, a), (_, b) in zip(weights(eager_model).items(), weights(model).items()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)


def test_a_capture_that_fails_trains_on_eagerly_and_says_why(graphs_on_cpu, monkeypatch):
    backends, fail = graphs_on_cpu
    fail["capture"] = True
    eager_model, _ = eager_with_capturable_adam(monkeypatch, "lbbnn", {}, TrainConfig(**CHANGING))
    model, result = trained("lbbnn", {}, TrainConfig(**CHANGING, cuda_graphs=True))
    assert backends[0].captures == 1 and backends[0].replays == 0
    assert result.history[-1]["cuda_graphs"].startswith("eager: CUDA error: operation not permitted")
    for (name, a), (_, b) in zip(weights(eager_model).items(), weights(model).items()):
        torch.testing.assert_close(b, a, rtol=0, atol=0, msg=name)


def test_the_replayed_output_is_the_last_steps_value():
    values = iter(range(100))
    seen = []

    def body(index, kl_scale):
        seen.append((index.tolist(), float(kl_scale)))
        return torch.tensor(float(next(values)))

    steps = ReplayedSteps(body, batch_size=2, device=torch.device("cpu"), backend=CallingBackend())
    outputs = [float(steps(torch.tensor([i, i + 1]), 0.5 * i)) for i in range(6)]
    assert outputs == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # capture runs nothing: each call is one step
    assert seen == [([i, i + 1], 0.5 * i) for i in range(6)]
    assert float(steps(torch.tensor([7]), 1.0)) == 6.0  # a ragged batch: eager, its own scale
    assert seen[-1] == ([7], 1.0)


def test_cuda_graphs_needs_a_cuda_device():
    x, y = two_moons()
    model = BayesianMLP(ModelConfig(in_features=2, out_classes=2, hidden=(8,), family="lbbnn"))
    with pytest.raises(ConfigError, match="train.cuda_graphs: .* needs a CUDA device; this run trains on cpu"):
        train(model, x, y, TrainConfig(epochs=1, cuda_graphs=True))
    with pytest.raises(ConfigError, match="train.cuda_graphs: .*needs a CUDA device, not 'cpu'"):
        RunConfig.from_dict({"dataset": "two-moons", "train": {"cuda_graphs": True}, "device": "cpu"})
    for value in ("yes", 1, None):
        with pytest.raises(ConfigError, match="train.cuda_graphs: must be true or false"):
            RunConfig.from_dict({"dataset": "two-moons", "train": {"cuda_graphs": value}})


def test_the_option_off_keeps_every_earlier_run_id_and_on_changes_it():
    base = RunConfig.from_dict({"dataset": "two-moons", "hidden": [8]})
    off = RunConfig.from_dict({"dataset": "two-moons", "hidden": [8], "train": {"cuda_graphs": False}})
    on = RunConfig.from_dict({"dataset": "two-moons", "hidden": [8], "train": {"cuda_graphs": True}})
    assert "cuda_graphs" not in base.canonical_json()
    assert off.run_id("data") == base.run_id("data")
    assert on.run_id("data") != base.run_id("data")
