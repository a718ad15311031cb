"""Streamlit dashboard of the Sparse BNN Explorer: `streamlit run dashboard/app.py`.

charts/ (pure Altair charts by topic), backend.py (the one door into core, no
Streamlit), worker.py (background training), cache.py / state.py / ui.py
(Streamlit caching, session state, error display), views/ (one file per page).
"""
