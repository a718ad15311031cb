"""The app's pages: dashboard/app.py runs each file as a Streamlit page script (st.navigation).
A package only so that the import contracts (pyproject.toml, lint-imports) can name the layer."""
