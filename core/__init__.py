"""Sparse BNN Explorer core: train, evaluate and cache sparse Bayesian neural networks.

No Streamlit import anywhere in this package: the dashboard depends on core, never
the other way round.
"""

__version__ = "0.1.0"
