"""Local explanations with intervals: each input feature's contribution to one output at one x.

For one input x and one output c (a class's logit, the network output before the softmax; for
regression the predictive mean's output, in the units the model was trained in), every posterior
draw r of the pruned network (the weights kept at `threshold`, drawn from q(w | kept): the MED-SIM /
prune-with-sampled-weights networks) is a function f_r. We report, per feature j,

- the *coefficient* J_rj = d f_r,c / d x_j at x, the Jacobian of the sampled network;
- the *contribution* J_rj * x_j;

and their median and central `level` (default 95 %) interval over the draws, plus the intercept
f_r,c(x) - sum_j J_rj x_j. For ReLU networks (and every piecewise-linear activation) f_r is linear on
the region around x where no unit changes sign, so these are the exact local linear coefficients:
f_r,c(x) = intercept_r + sum_j contribution_rj, as the R package LBBNN's local explanations report.
For smooth activations they are the gradient (a first-order description only).

Only the active paths (core.predict.structure.active_masks) carry x to the output, so the
Jacobian is computed on the active network; a feature with no active path has coefficient 0 in
every draw. A linearised posterior (`laplace`) is refused: its draws are not networks of their own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from core.errors import PredictionError
from core.jsonable import jsonable
from core.predict.engine import as_inputs, check_samples, check_threshold, resolve_model
from core.predict.structure import active_masks, active_network

DEFAULT_SAMPLES = 100
DEFAULT_LEVEL = 0.95


@dataclass
class Explanation:
    """Per feature: coefficient and contribution, median and interval over draws (see the module)."""

    x: np.ndarray  # (d,) the explained input
    output: int  # the explained output (class index; 0 for regression)
    output_name: str  # "logit of class c" or "predicted mean"
    threshold: float
    samples: int
    level: float
    seed: int
    coefficients: np.ndarray  # (R, d) per draw: d f_r,c / dx at x
    values: np.ndarray  # (R,) f_r,c(x)
    active_features: np.ndarray  # (d,) bool: the feature has an active path to an output

    @property
    def contributions(self) -> np.ndarray:
        """(R, d) per draw: coefficient times the feature's value."""
        return self.coefficients * self.x[None, :]

    @property
    def intercepts(self) -> np.ndarray:
        """(R,) f_r,c(x) minus the sum of the contributions (the local linear model's constant)."""
        return self.values - self.contributions.sum(axis=1)

    def _summary(self, values: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        tail = (1.0 - self.level) / 2.0
        low, median, high = np.quantile(values, [tail, 0.5, 1.0 - tail], axis=0)
        return median, low, high

    def table(self) -> list[dict[str, Any]]:
        """One row per feature: value, coefficient and contribution (median, lower, upper)."""
        coef, contrib = self._summary(self.coefficients), self._summary(self.contributions)
        return [
            {
                "feature": j,
                "value": float(self.x[j]),
                "active": bool(self.active_features[j]),
                "coefficient": float(coef[0][j]),
                "coefficient_lower": float(coef[1][j]),
                "coefficient_upper": float(coef[2][j]),
                "contribution": float(contrib[0][j]),
                "contribution_lower": float(contrib[1][j]),
                "contribution_upper": float(contrib[2][j]),
            }
            for j in range(len(self.x))
        ]

    def to_dict(self) -> dict[str, Any]:
        intercept = self._summary(self.intercepts)
        value = self._summary(self.values)
        return jsonable(
            {
                "output": self.output,
                "output_name": self.output_name,
                "threshold": self.threshold,
                "samples": self.samples,
                "level": self.level,
                "seed": self.seed,
                "value": {"median": value[0], "lower": value[1], "upper": value[2]},
                "intercept": {"median": intercept[0], "lower": intercept[1], "upper": intercept[2]},
                "features": self.table(),
            }
        )


def explainable(model_or_run: Any) -> bool:
    """Whether the family's draws are networks of their own (a linearised posterior's are not) and fully
    connected (a conv network's explanation is not written)."""
    model = resolve_model(model_or_run)
    return model.posterior is None and model.geometry is None


def explain(
    model_or_run: Any,
    x: Any,
    threshold: float | None = None,
    samples: int = DEFAULT_SAMPLES,
    seed: int = 0,
    output: int | None = None,
    level: float = DEFAULT_LEVEL,
) -> Explanation:
    """Explain output `output` (default: the class the draws' mean probability predicts; regression:
    the mean) at the single input x (d,) or (1, d) by R = `samples` draws of the network pruned at
    `threshold` (default: the family's). See the module docstring for what is reported."""
    model = resolve_model(model_or_run)
    if model.geometry is not None:
        raise PredictionError("explain: works on fully connected networks; this run has convolutional blocks (conv)")
    if not explainable(model):
        raise PredictionError(
            f"explain: the {model.family} family's draws are a linearisation about the "
            f"mean, not networks of their own; explain another family's run"
        )
    samples = check_samples(samples)
    if not 0.0 < float(level) < 1.0:
        raise PredictionError(f"level: must lie in (0, 1), got {level!r}")
    threshold = model.spec.default_threshold if threshold is None else check_threshold(model, threshold)
    array = np.asarray(x.detach().cpu() if isinstance(x, torch.Tensor) else x, dtype=np.float64)
    if array.ndim == 2 and array.shape[0] == 1:
        array = array[0]
    if array.ndim != 1:
        raise PredictionError(
            f"explain: give one input of {model.config.in_features} features, got shape {array.shape}"
        )
    if not np.all(np.isfinite(array)):
        raise PredictionError("explain: the input holds a value that is not a finite number")
    as_inputs(model, array[None])  # the shape check predictions make
    point = torch.as_tensor(array[None], dtype=torch.float64, device=model.device)  # float64 all through
    with torch.no_grad():
        masks = model.keep_masks(threshold)
        draws = model.sample_weights(samples, int(seed), masks=masks)
        # Each draw written with its active weights only (constants folded): the same function of x.
        networks = [active_network([w[r].double() for w in draws], masks, model.activation) for r in range(samples)]
        weights = [torch.stack([net[layer] for net in networks]) for layer in range(len(draws))]
    inputs = point.expand(samples, -1).clone().unsqueeze(1).requires_grad_(True)  # (R, 1, d)
    with torch.enable_grad():
        out = model.forward_with_weights(inputs, weights)[:, 0, :]  # (R, outputs)
        if model.likelihood.task == "classification":
            chosen = predicted_class(model, out.detach()) if output is None else check_output(output, out.shape[1])
            name = f"logit of class {chosen}"
        else:
            if output not in (None, 0):
                raise PredictionError(f"output: a regression model has one explained output (0), got {output!r}")
            chosen, name = 0, "predicted mean"
        (gradient,) = torch.autograd.grad(out[:, chosen].sum(), inputs)
    used = active_masks(masks)
    first = used[0][:, :-1].any(dim=0)
    d = model.config.in_features
    for index in range(1, len(used)):
        if model.input_skip:
            width = used[index - 1].shape[0]
            first = first | used[index][:, width : width + d].any(dim=0)
    return Explanation(
        x=array,
        output=int(chosen),
        output_name=name,
        threshold=float(threshold),
        samples=samples,
        level=float(level),
        seed=int(seed),
        coefficients=gradient[:, 0, :].cpu().numpy(),
        values=out[:, chosen].detach().cpu().numpy(),
        active_features=first.cpu().numpy(),
    )


def predicted_class(model, logits: torch.Tensor) -> int:
    """The class of the highest mean probability over the draws."""
    probabilities = model.likelihood.probabilities(logits.float().unsqueeze(1))[:, 0, :]
    return int(probabilities.mean(dim=0).argmax())


def check_output(output: Any, n_outputs: int) -> int:
    if isinstance(output, bool) or not isinstance(output, (int, np.integer)) or not 0 <= int(output) < n_outputs:
        raise PredictionError(f"output: give a class from 0 to {n_outputs - 1}, got {output!r}")
    return int(output)
