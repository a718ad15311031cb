"""Benchmarks: run each from the repository root as `python -m benchmarks.<name>` (see its docstring);
they write their measurements into benchmarks/results/ and RESULTS.md."""
