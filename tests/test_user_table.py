"""Your own table (core.data.user_table): malformed files get one message each through the command
line, random bytes give a table or one InputError, standardisation uses training statistics only,
one-hot encoding is exact, the content address enters the run id, and a run trained on a table
evaluates and reloads after the source file is gone."""

from __future__ import annotations

import io
import json

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from core.cli import main
from core.data import user_table
from core.errors import InputError

NAME = "table-0123456789abcdef"


@pytest.fixture
def cache(isolated_data_env, monkeypatch):
    user_table._parsed.cache_clear()
    user_table._info.cache_clear()
    return isolated_data_env


def _good_rows(n: int = 40) -> str:
    rng = np.random.default_rng(0)
    lines = ["a,b,color,label"]
    for i in range(n):
        a, b = rng.normal(size=2)
        lines.append(f"{a:.3f},{b:.3f},{['red', 'green', 'blue'][i % 3]},{'yes' if a + b > 0 else 'no'}")
    return "\n".join(lines) + "\n"


def _tiny_parquet(tmp_path):
    import pandas as pd

    path = tmp_path / "bad.parquet"
    pd.DataFrame({"a": [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], "y": ["p", "q"] * 3}).to_parquet(path)
    data = path.read_bytes()
    path.write_bytes(data[:40] + b"\x01" * 30 + data[-12:])  # header and footer magic kept, body broken
    return path


# (file name, content as bytes or a callable(tmp_path) -> path, extra argv, env, expected fragment)
MALFORMED = [
    ("empty.csv", b"", [], {}, "is empty"),
    ("blank.csv", b"\n  \n\n", [], {}, "is empty"),
    ("binary.csv", b"a,label\n1,\x00\x01\x02\n", [], {}, "is a binary file (a zero byte on line 2)"),
    ("latin1.csv", "a,label\n1,x\n2,caf\u00e9\n".encode("latin-1"), [], {}, "is not UTF-8 text (line 3"),
    ("spaces.csv", b"a b label\n1 2 x\n3 4 y\n", [], {}, "has only one column"),
    ("ragged.csv", b"a,b,label\n1,2,x\n3,4,y\n5,z\n", [], {}, "line 4 has 2 fields, the header has 3"),
    ("typo.csv", _good_rows().encode(), ["--target", "lable"], {}, "no column 'lable'; did you mean 'label'?"),
    ("constant.csv", b"a,label\n1,3\n2,3\n3,3\n4,3\n5,3\n6,3\n", ["--task", "regression"], {}, "is constant"),
    ("oneclass.csv", b"a,label\n1,x\n2,x\n3,x\n4,x\n5,x\n6,x\n", [], {}, "has one class only ('x')"),
    (
        "levels.csv",
        ("id,a,label\n" + "".join(f"u{i},{i},{'xy'[i % 2]}\n" for i in range(20))).encode(),
        [],
        {"BNN_MAX_TABLE_LEVELS": "5"},
        "text column 'id' has 20 distinct values, more than 5",
    ),
    ("big.csv", _good_rows(100).encode(), [], {"BNN_MAX_TABLE_MB": "0.001"}, "larger than 0.001 MB"),
    (
        "missing.csv",
        b"a,b,label\n1,2,x\n,3,y\n4,NA,x\n5,,y\n6,7,x\n8,9,y\n",
        [],
        {},
        "missing values in 2 column(s): 'a': 1 (first at line 3); 'b': 2 (first at line 4)",
    ),
    ("header.csv", b"a,b,label\n", [], {}, "has a header but no data rows"),
    ("duplicate.csv", b"a,a,label\n1,2,x\n", [], {}, "has two columns named 'a' (columns 1 and 2)"),
    ("noname.csv", b"a,,label\n1,2,x\n", [], {}, "column 2 has no name in the header (line 1)"),
    ("textreg.csv", b"a,label\n1,x\n2,y\n3,z\n4,x\n5,y\n", ["--task", "regression"], {}, "is text (line 2: 'x')"),
    ("inf.csv", b"a,label\n1,x\ninf,y\n3,x\n4,y\n5,x\n", [], {}, "column 'a' line 3: 'inf' is not a finite number"),
    (
        "split.csv",
        b"a,s,label\n1,train,x\n2,test,y\n3,maybe,x\n4,train,y\n5,test,x\n",
        ["--split-column", "s"],
        {},
        "'s' line 4: 'maybe' is neither train nor test",
    ),
    ("bad.parquet", _tiny_parquet, [], {}, "is not a readable Parquet file"),
    ("short.csv", b"a,label\n1,x\n2,y\n", [], {}, "at least 5 are needed"),
    ("quote.csv", b'a,label\n1,x\n2,"y\n', [], {}, "line 3"),
    (
        "nothing-else.csv",
        b"s,label\ntrain,x\ntest,y\ntrain,y\ntest,x\ntrain,x\n",
        ["--split-column", "s"],
        {},
        "no input columns besides the target",
    ),
]


@pytest.mark.parametrize("name,content,argv,env,expected", MALFORMED, ids=[m[0] for m in MALFORMED])
def test_a_malformed_file_gets_one_message_and_nothing_is_stored(
    cache, tmp_path, monkeypatch, capsys, name, content, argv, env, expected
):
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    if callable(content):
        path = content(tmp_path)
    else:
        path = tmp_path / name
        path.write_bytes(content)
    argv = ["--target", "label", *argv] if "--target" not in argv else argv
    code = main(["train", "--data", str(path), *argv, "--epochs", "1", "--hidden", "2", "--quiet"])
    captured = capsys.readouterr()
    assert code == 2
    lines = captured.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), captured.err
    assert expected in lines[0]
    assert "Traceback" not in captured.err + captured.out
    tables = cache.parent / "cache" / "tables"
    assert not tables.exists() or not [p for p in tables.iterdir()], "a refused table was stored"


def test_the_corpus_is_at_least_fifteen_distinct_problems():
    assert len({m[4] for m in MALFORMED}) >= 15


def test_a_file_that_does_not_exist(cache, tmp_path, capsys):
    assert main(["train", "--data", str(tmp_path / "nope.csv"), "--target", "y", "--quiet"]) == 2
    assert "does not exist" in capsys.readouterr().err


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    data=st.one_of(
        st.binary(max_size=300), st.text(alphabet=',;\t|"\n abcxy0123456789.-eNA?', max_size=300).map(str.encode)
    )
)
def test_random_bytes_give_a_table_or_one_input_error(data):
    try:
        table = user_table.parse_table(data, "random.csv")
    except InputError as exc:
        assert "\n" not in str(exc).strip()
        return
    assert len(table.names) >= 2 and all(len(col) == table.n_rows for col in table.columns)
    try:
        dataset = user_table.build_dataset(table, NAME, {"target": table.names[-1], "missing": "drop"})
    except InputError:
        return
    assert dataset.n_train + dataset.n_test <= table.n_rows
    assert np.all(np.isfinite(dataset.x_train)) and np.all(np.isfinite(dataset.x_test))


def _table(text: str):
    return user_table.parse_table(text.encode(), "t.csv")


def test_numeric_columns_are_standardised_with_training_statistics_only():
    values = [1.0, 2.0, 4.0, 8.0, 100.0, -50.0]
    sides = ["train", "train", "train", "train", "test", "test"]
    text = "v,side,y\n" + "".join(f"{v},{s},{'ab'[i % 2]}\n" for i, (v, s) in enumerate(zip(values, sides)))
    data = user_table.build_dataset(_table(text), NAME, {"target": "y", "split_column": "side"})
    train = np.array(values[:4])
    mean, std = train.mean(), train.std()  # population sd of the training split: 2.5947...
    np.testing.assert_allclose(data.x_train[:, 0], (train - mean) / std, rtol=1e-6)
    np.testing.assert_allclose(data.x_test[:, 0], (np.array([100.0, -50.0]) - mean) / std, rtol=1e-6)
    assert abs(float(data.x_mean[0]) - 3.75) < 1e-6 and abs(float(data.x_std[0]) - std) < 1e-5
    everything = np.array(values)
    assert not np.allclose(data.x_test[:, 0], (everything[4:] - everything.mean()) / everything.std())


def test_regression_targets_are_standardised_on_the_training_split():
    text = "x,side,y\n" + "".join(
        f"{i},{'train' if i < 6 else 'test'},{v}\n" for i, v in enumerate([0.5, 1.5, 2.5, 3.5, 4.5, 5.5, 10.0, 20.0])
    )
    data = user_table.build_dataset(_table(text), NAME, {"target": "y", "split_column": "side"})
    assert data.task == "regression"
    assert data.target_mean == pytest.approx(3.0) and data.target_std == pytest.approx(
        np.std([0.5, 1.5, 2.5, 3.5, 4.5, 5.5])
    )
    np.testing.assert_allclose(data.unstandardise(data.y_test), [10.0, 20.0], rtol=1e-5)


def test_one_hot_encoding_is_exact():
    text = (
        "color,size,side,y\n"
        "red,1,train,a\nblue,2,train,b\nred,3,train,a\ngreen,4,train,b\n"
        "blue,5,test,a\npurple,6,test,b\n"
    )
    data = user_table.build_dataset(_table(text), NAME, {"target": "y", "split_column": "side"})
    assert data.feature_names == ("color=blue", "color=green", "color=red", "size")
    np.testing.assert_array_equal(data.x_train[:, :3], [[0, 0, 1], [1, 0, 0], [0, 0, 1], [0, 1, 0]])
    # a level seen only in the test split is all zeros
    np.testing.assert_array_equal(data.x_test[:, :3], [[1, 0, 0], [0, 0, 0]])
    assert data.class_names == ("a", "b")
    np.testing.assert_array_equal(data.y_train, [0, 1, 0, 1])


@pytest.mark.parametrize(
    "cells,task",
    [
        (("a", "b", "a"), "classification"),
        (tuple(str(i % 3) for i in range(30)), "classification"),
        (tuple(str(i) for i in range(10)), "classification"),
        (tuple(str(i) for i in range(11)), "regression"),
        (("0.5", "1", "2"), "regression"),
        (("1.0", "2.0", None), "classification"),
    ],
)
def test_the_task_rule(cells, task):
    assert user_table.infer_task(cells) == task


def test_numeric_classes_keep_numeric_order():
    text = "x,y\n" + "".join(f"{i},{[2, 10, 1][i % 3]}\n" for i in range(12))
    data = user_table.build_dataset(_table(text), NAME, {"target": "y"})
    assert data.class_names == ("1", "2", "10")


def test_missing_values_dropped_on_request_and_the_split_is_seeded():
    text = "a,b,y\n" + "".join(f"{i},{'' if i % 4 == 0 else i * 2},{'xy'[i % 2]}\n" for i in range(40))
    data = user_table.build_dataset(_table(text), NAME, {"target": "y", "missing": "drop"}, seed=3)
    assert data.n_train + data.n_test == 30 and data.n_test == 6
    again = user_table.build_dataset(_table(text), NAME, {"target": "y", "missing": "drop"}, seed=3)
    other = user_table.build_dataset(_table(text), NAME, {"target": "y", "missing": "drop"}, seed=4)
    np.testing.assert_array_equal(data.x_test, again.x_test)
    assert not np.array_equal(data.x_test, other.x_test)


def test_parquet_reads_like_csv(tmp_path):
    import pandas as pd

    frame = pd.DataFrame({"n": [1, 2, 3, 4, 5, 6], "c": list("pqpqpq"), "y": ["u", "v"] * 3})
    buffer = io.BytesIO()
    frame.to_parquet(buffer)
    table = user_table.parse_table(buffer.getvalue(), "t.parquet")
    assert table.kind == "parquet" and table.names == ("n", "c", "y")
    assert table.columns[0] == ("1", "2", "3", "4", "5", "6")
    csv_table = _table(frame.to_csv(index=False))
    params = {"target": "y"}
    a = user_table.build_dataset(table, NAME, params)
    b = user_table.build_dataset(csv_table, NAME, params)
    np.testing.assert_array_equal(a.x_train, b.x_train)


def test_the_content_address_enters_the_run_id(cache, tmp_path):
    from core.runs.config import RunConfig

    first, moved, changed = tmp_path / "a.csv", tmp_path / "b.csv", tmp_path / "c.csv"
    first.write_text(_good_rows())
    moved.write_text(_good_rows())
    changed.write_text(_good_rows().replace("yes", "no", 1))
    configs = [RunConfig.from_dict({"data": str(p), "target": "label", "hidden": [2]}) for p in (first, moved, changed)]
    assert configs[0].dataset == configs[1].dataset != configs[2].dataset
    assert configs[0].dataset_params == {"target": "label", "task": "classification", "missing": "refuse"}
    ids = [c.run_id(c.load_dataset().fingerprint) for c in configs]
    assert ids[0] == ids[1] != ids[2]
    # the task given explicitly at its inferred value is the same run
    explicit = RunConfig.from_dict({"data": str(first), "target": "label", "task": "classification", "hidden": [2]})
    assert explicit.canonical_json() == configs[0].canonical_json()


def test_train_evaluate_and_reload_after_the_file_is_gone(cache, tmp_path, capsys):
    from core.runs import load_run

    path = tmp_path / "mine.csv"
    path.write_text(_good_rows(60))
    code = main(
        [
            "train",
            "--data",
            str(path),
            "--target",
            "label",
            "--hidden",
            "4",
            "--epochs",
            "2",
            "--pretrain-epochs",
            "0",
            "--posttrain-epochs",
            "0",
            "--mc-samples",
            "1",
            "--quiet",
            "--json",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    run_id = json.loads(out)["run_id"]
    assert main(["evaluate", run_id, "--json"]) == 0
    before = capsys.readouterr().out
    assert main(["datasets"]) == 0
    listing = capsys.readouterr().out
    run = load_run(run_id)
    assert run.config.dataset in listing and "mine.csv" in listing and "label" in listing
    path.unlink()
    user_table._parsed.cache_clear()
    user_table._info.cache_clear()
    reloaded = load_run(run_id)
    dataset = reloaded.dataset()
    assert dataset.name == run.config.dataset and dataset.class_names == ("no", "yes")
    assert dataset.feature_names[:2] == ("a", "b")
    assert main(["evaluate", run_id, "--json"]) == 0
    assert capsys.readouterr().out == before


def test_a_missing_stored_table_is_one_message(cache, capsys):
    code = main(["train", "--dataset", "table-00000000000000ff", "--target", "y", "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and "is not stored" in err and len(err.strip().splitlines()) == 1


def test_table_options_without_a_table_are_refused(cache, capsys):
    assert main(["train", "--dataset", "two-moons", "--target", "y", "--quiet"]) == 2
    assert "give --data FILE" in capsys.readouterr().err
