"""Nothing in a training step or a model verb creates tensors on a fixed device,
and a training step never reads a value back to the host.

No GPU is needed: every tensor of the model and the data lives on PyTorch's
"meta" device, where operations compute shapes only, and an operation that
mixes a meta tensor with a (non-scalar) CPU tensor raises, just as one that
mixes CUDA and CPU tensors does. A CPU tensor created without device= inside
a step, a prior constant left out of the registered buffers, or a noise draw
on the default device would fail here before it fails on a GPU. A meta tensor
has no values, so a step that reads one back (.item(), a Python if on a tensor)
raises too: the steps of an epoch can queue up on a GPU without waiting.
"""

from __future__ import annotations

import pytest
import torch

from core.models.likelihoods import LIKELIHOODS
from core.models.network import ModelConfig, build_model
from core.train import DEFAULT_LEARNING_RATES, _make_optimizer, _training_step
from tests.support import VARIANT_IDS, VARIANTS

META = torch.device("meta")


def test_mixing_meta_and_cpu_tensors_or_reading_values_raises():
    """The premises of this file: the checks can fail."""
    with pytest.raises(RuntimeError):
        torch.ones(3) + torch.empty(3, device=META)
    with pytest.raises(RuntimeError):
        torch.empty((), device=META).item()


def meta_model(family: str, options: dict, likelihood: str = "categorical", out_classes: int | None = 3):
    config = ModelConfig(
        in_features=6,
        out_classes=out_classes,
        hidden=(5,),
        family=family,
        family_options=options,
        likelihood=likelihood,
    )
    return build_model(config).to(META)


def training_step(model, x: torch.Tensor, y: torch.Tensor) -> None:
    """train()'s own step, optimiser included, with two Monte Carlo samples."""
    model.train()
    optimizer = _make_optimizer(model, DEFAULT_LEARNING_RATES)
    data_term = _training_step(model, optimizer, x, y, mc_samples=2, kl_scale=0.01)
    assert data_term.device == META


@pytest.mark.parametrize("family,options", VARIANTS, ids=VARIANT_IDS)
def test_training_step_and_model_verbs_stay_on_the_model_device(family, options):
    model = meta_model(family, options)
    x = torch.empty(4, 6, device=META)
    y = torch.zeros(4, dtype=torch.long, device=META)
    training_step(model, x, y)
    for layer in model.layers:  # empirical-Bayes pre-training takes another path where a family has one
        layer.set_empirical_bayes(True)
    training_step(model, x, y)
    for layer in model.layers:
        layer.set_empirical_bayes(False)
    with torch.no_grad():
        _, kl = model.forward_with_kl(x, kl_value=True)
        tensors = [
            kl,
            model.kl(),
            model(x),
            *model.mean_weights(),
            *model.conditional_mean_weights(),
            *model.native_statistics(),
            *model.keep_masks(),
            *model.keep_masks(0.3),
        ]
        for layer in model.layers:
            tensors.append(layer.sample_weights(2)[0])
    assert all(t.device == META for t in tensors)
    # post-training on a fixed structure (the median probability model's mask)
    for layer in model.layers:
        layer.fix_structure(torch.ones(layer.shape, device=META))
    training_step(model, x, y)


@pytest.mark.parametrize("likelihood", sorted(LIKELIHOODS))
def test_every_likelihood_trains_on_the_model_device(likelihood):
    out_classes = {"categorical": 3, "bernoulli": 2}.get(likelihood)
    model = meta_model("lbbnn", {}, likelihood, out_classes)
    x = torch.empty(4, 6, device=META)
    y = torch.zeros(4, dtype=torch.long if likelihood == "categorical" else torch.float32, device=META)
    training_step(model, x, y)
    assert all(p.device == META for p in model.likelihood.parameters())
