"""Errors a user can cause. Each carries a message that says what to do.

The CLI and the dashboard catch `BNNError` and show its message; anything else
is a bug and surfaces as one.
"""


class BNNError(Exception):
    """Base class for every error caused by user input or the environment."""


class DataError(BNNError):
    """A dataset is unknown, missing, corrupt or asked for with bad arguments."""


class ConfigError(BNNError, ValueError):
    """A hyperparameter or config field has an invalid value."""


class TrainingDivergedError(BNNError):
    """The loss became NaN or infinite."""


class TrainingCancelled(BNNError):
    """Training was stopped by the user (cancel flag or Ctrl-C)."""


class RunStoreError(BNNError):
    """A cached run is missing, corrupt or locked."""


class PredictionError(BNNError, ValueError):
    """A prediction was asked for with invalid arguments (mode, threshold, samples)."""


class InputError(ConfigError):
    """A value from outside (command line, config file, link, form, upload) failed its rule.

    The message is plain text: it names the value, shows what was given (shortened) and says what
    is allowed. Nothing of the given text is ever rendered as markup."""
