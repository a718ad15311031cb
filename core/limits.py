"""How large a request the command line and config files accept, checked before anything is built.

Each limit is a registered setting (core.settings) with a documented default: a value above it is
refused with one line naming the setting, never clamped. The defaults leave room far above every
preset (the largest: 400-600 hidden, 4000 UCI epochs, R = 10,000 test-time draws in the MC-dropout
protocol) and far below what exhausts memory or time on a laptop: a sweep over `0:1:1e-9` built a
billion thresholds (5.4 GB after 14 s) and `--epochs 99999999999999` trained for ever.

`SEED_MAX` is no setting: it is the range numpy's legacy seeding accepts (0 .. 2**32 - 1), well
inside torch.manual_seed's 64 bits even after the derived seeds (seed * 101 + index).
"""

from __future__ import annotations

from typing import Any

from core import validate
from core.errors import InputError
from core.settings import Setting, register

SEED_MAX = 2**32 - 1

MAX_HIDDEN_WIDTH = register(
    Setting(
        "BNN_MAX_HIDDEN_WIDTH",
        "whole",
        4096,
        "widest hidden layer a run may ask for (--hidden, config files)",
        1,
        1_000_000,
    )
)
MAX_HIDDEN_LAYERS = register(
    Setting("BNN_MAX_HIDDEN_LAYERS", "whole", 16, "most hidden layers a run may ask for", 1, 1000)
)
MAX_EPOCHS = register(
    Setting(
        "BNN_MAX_EPOCHS",
        "whole",
        100_000,
        "most epochs of any training phase (epochs, pre-/post-training, KL annealing, warm start)",
        1,
        10**9,
    )
)
MAX_BATCH_SIZE = register(Setting("BNN_MAX_BATCH_SIZE", "whole", 1_000_000, "largest training batch size", 1, 10**9))
MAX_SAMPLES = register(
    Setting(
        "BNN_MAX_SAMPLES",
        "whole",
        10_000,
        "most posterior draws R per prediction (evaluate, sweep), Monte Carlo samples per training step "
        "(mc_samples) and NUTS draws or warm-up steps per chain (reference)",
        1,
        10**9,
    )
)
MAX_THRESHOLDS = register(
    Setting("BNN_MAX_THRESHOLDS", "whole", 10_001, "most thresholds in one sweep (start:stop:step or a list)", 1, 10**8)
)
MAX_CHAINS = register(
    Setting(
        "BNN_MAX_CHAINS", "whole", 16, "most NUTS chains of a reference posterior (run one after the other)", 1, 10_000
    )
)
MAX_TREE_DEPTH = register(
    Setting(
        "BNN_MAX_TREE_DEPTH",
        "whole",
        15,
        "deepest NUTS tree of a reference posterior (up to 2**depth gradient steps per draw)",
        1,
        30,
    )
)
MAX_WORKERS = register(
    Setting("BNN_MAX_WORKERS", "whole", 64, "most worker processes of `python -m core grid --backend local`", 1, 10_000)
)
MAX_CONFIG_BYTES = register(
    Setting(
        "BNN_MAX_CONFIG_BYTES",
        "whole",
        1_000_000,
        "largest run or grid config file read (TOML/JSON), in bytes",
        1,
        10**9,
    )
)
MAX_CONFIG_DEPTH = register(
    Setting(
        "BNN_MAX_CONFIG_DEPTH",
        "whole",
        32,
        "deepest nesting of lists and tables in a config file or a typed option value",
        1,
        500,
    )
)
MAX_TABLE_MB = register(
    Setting(
        "BNN_MAX_TABLE_MB",
        "real",
        200.0,
        "largest CSV or Parquet table read as a dataset (--data, upload), in MB",
        0.001,
        10**6,
    )
)
MAX_TABLE_LEVELS = register(
    Setting(
        "BNN_MAX_TABLE_LEVELS",
        "whole",
        200,
        "most distinct values a text column of a user table may have (each becomes a one-hot input)",
        2,
        10**6,
    )
)


def limit(setting: Setting) -> Any:
    """The setting's current value ($variable, else its default)."""
    return setting.read()


def seed(value: Any, name: str = "seed") -> int:
    """A seed: a whole number from 0 to SEED_MAX."""
    return validate.whole_number(value, name, 0, SEED_MAX)


def at_most(number: int, name: str, setting: Setting, low: int = 1) -> int:
    """`number` itself when it is at most the setting's limit; InputError naming the setting otherwise."""
    high = limit(setting)
    if number > high:
        raise InputError(
            f"{name}: {validate.shown(number)} is above the limit {high} (${setting.variable}); "
            f"give a whole number from {low} to {high}"
        )
    return number


def count(value: Any, name: str, setting: Setting, low: int = 1) -> int:
    """A whole number from `low` up to the setting's limit; the message names the setting."""
    try:
        number = validate.whole_number(value, name, low, None)
    except InputError:
        validate.whole_number(value, name, low, limit(setting))  # raises, naming the whole range
        raise
    return at_most(number, name, setting, low)
