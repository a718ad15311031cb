"""Option vocabularies as str-Enums, accepted as an enum member or its string (in the spirit of
laplace-torch's utils/enums.py).

Members are `enum.StrEnum`s: they compare equal to their strings, format and serialise (json,
TOML, the run store, run ids) as their strings, so configs and run ids written with plain strings
are unchanged. `parse` turns a string (any case, surrounding spaces ignored) into a member and
names the field and the choices when it is not one.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any, TypeVar

from core.errors import ConfigError

E = TypeVar("E", bound="OptionEnum")


class OptionEnum(StrEnum):
    @classmethod
    def parse(cls: type[E], value: Any, field: str | None = None) -> E:
        if isinstance(value, cls):
            return value
        key = str(getattr(value, "value", value)).strip().lower()
        try:
            return cls(key)
        except ValueError:
            choices = ", ".join(member.value for member in cls)
            raise ConfigError(f"{field or cls.__name__}: must be one of {choices}, got {value!r}") from None

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


class Task(OptionEnum):
    CLASSIFICATION = "classification"
    REGRESSION = "regression"


class Estimator(OptionEnum):
    """A family's training estimator; each family accepts its own subset (its ESTIMATORS)."""

    LOCAL_REPARAMETERISATION = "local-reparameterisation"
    RELAXED_BERNOULLI = "relaxed-bernoulli"  # LBBNN: the paper's weight sampling with relaxed indicators
    WEIGHT_SAMPLING = "weight-sampling"  # Gaussian families: one weight draw per minibatch


class Slab(OptionEnum):
    GAUSSIAN = "gaussian"
    STUDENT_T = "student-t"


class InclusionPrior(OptionEnum):
    """The prior on the inclusion indicators (its parameter psi is the option prior_inclusion)."""

    BERNOULLI = "bernoulli"
    BETA_BERNOULLI = "beta-bernoulli"
    BETA_BINOMIAL = "beta-binomial"

    @classmethod
    def beta_priors(cls) -> tuple[str, ...]:
        """The priors with a Beta(a, b) on psi (options beta_a, beta_b; empirical Bayes may fit them)."""
        return (cls.BETA_BERNOULLI.value, cls.BETA_BINOMIAL.value)


class VariationalFamily(OptionEnum):
    FACTORISED = "factorised"
    STRUCTURED = "structured"


class LearningRateSchedule(OptionEnum):
    """How the step sizes move over the main training phase: held, or a cosine decay to zero."""

    CONSTANT = "constant"
    COSINE = "cosine"


class PosttrainStructure(OptionEnum):
    """The structure fixed for post-training: the median probability model, or alpha itself."""

    MPM = "mpm"
    ALPHA = "alpha"
