"""The runs commands moved to core/cli/runs.py (the CLI is one package); kept for older imports."""

from core.cli.runs import config_from_args, register  # noqa: F401
