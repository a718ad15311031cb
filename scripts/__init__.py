"""Maintenance scripts (`python -m scripts.<name>` from the repository root, or `python scripts/<name>.py`
after `pip install -e .`)."""
