"""The paper's names in one place, for a student."""

from __future__ import annotations

import streamlit as st

from dashboard import explain

st.header("Glossary")
st.markdown(explain.PAGE_INTROS["glossary"])
for term, meaning in explain.GLOSSARY:
    st.markdown(f"**{term}**: {meaning}")
