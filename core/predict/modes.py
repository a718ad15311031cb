"""Prediction modes (Hubin & Storvik 2024, section 3.4).

| mode       | paper name | structure                       | weights              |
|------------|------------|---------------------------------|----------------------|
| `bma`      | SIM-SIM    | sampled with the weights        | R draws              |
| `mean`     | ALL-MEA    | none: the posterior-mean net    | E_q[w]               |
| `mpm`      | MED-SIM    | statistic cut at its default    | R draws given kept   |
| `mpm-mean` | MED-MEA    | statistic cut at its default    | E_q[w given kept]    |
| `prune`    | PRN        | statistic cut at `threshold`    | R draws or the means |

For LBBNN the default cut alpha > 0.5 is the median probability model; every
other family cuts its own native statistic (|mu|/sigma, log alpha, |w| ...) at
its default, so every family answers every mode.
"""

from __future__ import annotations

from enum import Enum

from core.errors import PredictionError


class PredictionMode(str, Enum):
    BMA = "bma"
    MEAN = "mean"
    MPM = "mpm"
    MPM_MEAN = "mpm-mean"
    PRUNE = "prune"

    @property
    def paper_name(self) -> str:
        return PAPER_NAMES[self]

    @property
    def uses_threshold(self) -> bool:
        return self in (PredictionMode.MPM, PredictionMode.MPM_MEAN, PredictionMode.PRUNE)

    @property
    def cuts_at_default(self) -> bool:
        """mpm and mpm-mean: the median probability model, the statistic cut at the family's default
        whatever threshold is asked (on the pages: whatever the slider says)."""
        return self in (PredictionMode.MPM, PredictionMode.MPM_MEAN)

    @classmethod
    def default_cut_modes(cls) -> tuple["PredictionMode", ...]:
        """The modes that cut at the family's default (`cuts_at_default`)."""
        return tuple(mode for mode in cls if mode.cuts_at_default)

    @classmethod
    def paper_table(cls, samples: tuple[int, ...] = (1, 10)) -> tuple[tuple[str, "PredictionMode", int], ...]:
        """The columns of the paper's comparison table (Hubin & Storvik 2024): (column, mode, R), the
        sampling modes once per R in `samples`, the mean-weight modes once at R = 1."""
        order = (cls.BMA, cls.MPM, cls.MPM_MEAN, cls.MEAN)
        return tuple(
            (f"{mode.paper_name} R={r}", mode, r) if mode.draws_samples() else (mode.paper_name, mode, 1)
            for mode in order
            for r in (samples if mode.draws_samples() else samples[:1])
        )

    def weight_choice(self, weights: "str | WeightChoice | None" = None) -> "WeightChoice":
        """The weights the mode predicts with: prune takes `weights` (default sample); the others
        imply theirs (mean and mpm-mean: the means; bma and mpm: R draws)."""
        if self is PredictionMode.PRUNE:
            return WeightChoice.SAMPLE if weights is None else parse_weight_choice(weights)
        return WeightChoice.MEAN if self in (PredictionMode.MEAN, PredictionMode.MPM_MEAN) else WeightChoice.SAMPLE

    def same_numbers_as(self, weights: "str | WeightChoice | None" = None) -> "PredictionMode":
        """The mode that predicts exactly what this one does with `weights`: prune with sampled
        weights is mpm at the same threshold, prune with mean weights is mpm-mean (the same network,
        the same draws); every other mode is itself."""
        if self is PredictionMode.PRUNE:
            return PredictionMode.MPM if self.weight_choice(weights) is WeightChoice.SAMPLE else PredictionMode.MPM_MEAN
        return self

    def draws_samples(self, weights: "str | WeightChoice | None" = None) -> bool:
        """Whether the prediction averages R posterior draws (else R does not matter)."""
        return self.weight_choice(weights) is WeightChoice.SAMPLE

    @property
    def description(self) -> str:
        """One line for help texts and the dashboard: the paper name, then what the mode does."""
        return f"{self.paper_name}: {DESCRIPTIONS[self]}"


class WeightChoice(str, Enum):
    """How a pruned network's kept weights are set: R posterior draws or their means."""

    SAMPLE = "sample"
    MEAN = "mean"

    @classmethod
    def choices(cls) -> tuple[str, ...]:
        """The choices as a form offers them: the means first (one network, what a sweep traces)."""
        return (cls.MEAN.value, cls.SAMPLE.value)


PAPER_NAMES = {
    PredictionMode.BMA: "SIM-SIM",
    PredictionMode.MEAN: "ALL-MEA",
    PredictionMode.MPM: "MED-SIM",
    PredictionMode.MPM_MEAN: "MED-MEA",
    PredictionMode.PRUNE: "PRN",
}
DESCRIPTIONS = {
    PredictionMode.BMA: "average over R sampled networks (structure and weights)",
    PredictionMode.MEAN: "one dense network with the posterior-mean weights",
    PredictionMode.MPM: "structure cut at the threshold, R sampled weight sets",
    PredictionMode.MPM_MEAN: "structure cut at the threshold, mean weights (no sampling)",
    PredictionMode.PRUNE: "structure cut at the threshold, sampled or mean weights",
}
MODE_ALIASES = {name.lower(): mode for mode, name in PAPER_NAMES.items()}

# Regression only, outside PredictionMode (they integrate the last layer out instead of choosing
# a structure): the collapsed predictive of core.predict.collapsed, by variant.
COLLAPSED_MODES = {"collapsed": "gaussian", "collapsed-box": "box"}
# A regression set's predictives: "mode" (the chosen PredictionMode) or a collapsed variant.
REGRESSION_PREDICTIVES = {
    "mode": "the prediction mode above (mean, epistemic and total 95% bands)",
    "collapsed": "collapsed: body sampled, last layer's Gaussian q integrated out exactly",
    "collapsed-box": "collapsed, box q on the widest last-layer terms and triangular noise "
    "(Zeng & Van den Broeck 2023)",
}


def modes_help() -> str:
    """The modes and their paper names in one line (CLI help)."""
    names = ", ".join(m.value for m in PredictionMode)
    papers = ", ".join(m.paper_name for m in PredictionMode)
    return (
        f"{names} (paper names {papers}); regression also collapsed (Gaussian last layer integrated out) "
        "or collapsed-box (Zeng & Van den Broeck 2023's box)"
    )


def collapsed_variant(value: str | PredictionMode) -> str | None:
    """The collapsed-predictive variant a mode name asks for, or None for the modes of PredictionMode."""
    return COLLAPSED_MODES.get(str(getattr(value, "value", value)).strip().lower())


def parse_mode(value: str | PredictionMode) -> PredictionMode:
    """A mode from its name or paper alias, case-insensitive."""
    if isinstance(value, PredictionMode):
        return value
    key = str(value).strip().lower()
    try:
        return PredictionMode(key)
    except ValueError:
        pass
    if key in MODE_ALIASES:
        return MODE_ALIASES[key]
    known = [m.value for m in PredictionMode] + list(PAPER_NAMES.values())
    raise PredictionError(f"mode: unknown {value!r}; choose one of {', '.join(known)}")


def parse_weight_choice(value: str | WeightChoice) -> WeightChoice:
    try:
        return WeightChoice(str(getattr(value, "value", value)).strip().lower())
    except ValueError:
        raise PredictionError(f"weights: unknown {value!r}; choose 'sample' or 'mean'") from None


# --- what a mode means on the dashboard's pages ------------------------------------------------------

# Modes that cut at the family's default (the median probability model), whatever the slider says.
DEFAULT_CUT_MODES = tuple(mode.value for mode in PredictionMode.default_cut_modes())
# The Compare page's table: (column, mode, R), as Hubin & Storvik (2024) tabulate them.
COMPARE_MODES = tuple((column, mode.value, r) for column, mode, r in PredictionMode.paper_table())


def uses_threshold(mode: str) -> bool:
    return parse_mode(mode).uses_threshold


def effective_threshold(mode: str, threshold: float | None) -> float | None:
    """The threshold a mode reads (None for bma / mean, which refuse one)."""
    return float(threshold) if threshold is not None and uses_threshold(mode) else None


def mode_threshold(mode: str, threshold: float | None, default: float) -> float | None:
    """The cut a mode predicts with on the pages: mpm / mpm-mean are the median probability model,
    the statistic cut at the family's default; prune cuts at the slider; bma / mean cut nothing."""
    return effective_threshold(mode, default if mode in DEFAULT_CUT_MODES else threshold)


def mode_uses_slider(mode: str) -> bool:
    return mode not in DEFAULT_CUT_MODES and uses_threshold(mode)


def mode_draws_samples(mode: str, weights: str | None = None) -> bool:
    return PredictionMode(mode).draws_samples(weights)


def same_numbers_mode(mode: str, weights: str | None = None) -> str:
    """The mode that predicts exactly what `mode` with `weights` does (PredictionMode.same_numbers_as)."""
    return parse_mode(mode).same_numbers_as(weights).value
