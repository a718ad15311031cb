"""benchmarks.classroom_load_draws refuses bad numbers and a missing run in one line, before drawing."""

from __future__ import annotations

import pytest

from benchmarks import classroom_load_draws


@pytest.mark.parametrize(
    "extra, flag",
    [
        (["--rounds", "-1"], "--rounds"),
        (["--rounds", ""], "--rounds"),
        (["--rounds", "99999999999"], "--rounds"),
        (["--samples", "0"], "--samples"),
        (["--timeout", "nan"], "--timeout"),
        ([], "no cached run"),
    ],
)
def test_bad_arguments_end_in_one_line(tmp_path, capsys, extra, flag):
    with pytest.raises(SystemExit) as stopped:
        classroom_load_draws.main(["--cache-dir", str(tmp_path), *extra])
    assert stopped.value.code == 2
    assert flag in capsys.readouterr().err
