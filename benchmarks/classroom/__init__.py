"""The classroom load test (benchmarks/classroom_load.py runs it): the server under test (server),
a session speaking Streamlit's protocol (client), the class's scenario (scenario), its record and
table (report), and the helpers that start a server for a test (serving)."""
