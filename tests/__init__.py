"""The test suite is a package so that test modules share helpers (tests/support.py) by a plain
import, `from tests.support import ...`, instead of importing one another."""
