"""read_panel: a long-format table (unique_id, ds, y) in, a SeriesCollection out, or one FptError
line naming the file, the series, the date and the fix. Small real CSV and parquet files."""

from __future__ import annotations

import os
import sys

import numpy as np
import pandas as pd
import pytest
from helpers import raises_naming

from fpt.data.collection import SeriesCollection
from fpt.data.panel import period_of, read_panel


def monthly(start: str, n: int) -> list[str]:
    return [str(d.date()) for d in pd.date_range(start, periods=n, freq="MS")]


def table_text(series: dict[str, list[tuple[object, object]]], header: str = "unique_id,ds,y") -> str:
    """A CSV of each series' (time, value) rows, series after series."""
    return header + "\n" + "".join(f"{sid},{t},{y}\n" for sid, rows in series.items() for t, y in rows)


def write(tmp_path, text: str, name: str = "panel.csv"):
    path = tmp_path / name
    path.write_text(text)
    return path


# Two monthly series of different lengths; B first in the file, so first in the collection.
GOOD = {
    "B": list(zip(monthly("2019-06-01", 9), [10, 11.5, 12, 13, 14, 15, 16, 17, 18])),
    "A": list(zip(monthly("2020-01-01", 7), [1, 2, 3, 4, 5, 6, -7.25])),
}


def test_csv_round_trips(tmp_path):
    path = write(tmp_path, table_text(GOOD))
    collection = read_panel(path, horizon=3)
    assert isinstance(collection, SeriesCollection)
    assert collection.ids == ["B", "A"] and all(type(i) is str for i in collection.ids)
    assert collection.lengths().tolist() == [9, 7]
    assert collection.history[1].dtype == np.float64
    assert collection.history[1].tolist() == [1, 2, 3, 4, 5, 6, -7.25]
    assert collection.dates[0].dtype == np.dtype("datetime64[ns]")
    assert [str(d)[:10] for d in collection.dates[0]] == monthly("2019-06-01", 9)
    expected = pd.infer_freq(pd.date_range("2020-01-01", periods=7, freq="MS"))
    assert collection.freq == expected == "MS"  # what pandas 2.x infers for month starts
    assert collection.period == 12 and collection.horizon == 3 and collection.future is None
    assert collection.notes == {"source": str(path), "series": 2, "freq": "MS"}


def test_parquet_round_trips_with_typed_columns(tmp_path):
    pytest.importorskip("pyarrow")
    frame = pd.DataFrame(
        {
            "store": [7] * 5 + [3] * 6,  # integer ids become strings
            "when": [
                *pd.date_range("2021-01-01", periods=5, freq="QS"),
                *pd.date_range("2020-04-01", periods=6, freq="QS"),
            ],
            "sales": np.arange(11, dtype=np.float32) / 4,
        }
    )
    path = tmp_path / "sales.parquet"
    frame.to_parquet(path)
    collection = read_panel(path, 2, id_column="store", time_column="when", value_column="sales")
    assert collection.ids == ["7", "3"] and collection.lengths().tolist() == [5, 6]
    assert collection.history[1].tolist() == [1.25, 1.5, 1.75, 2.0, 2.25, 2.5]
    assert collection.dates[1][0] == np.datetime64("2020-04-01")
    assert collection.freq == pd.infer_freq(frame["when"][:5]) == "QS-OCT"  # pandas anchors Jan/Apr/Jul/Oct so
    assert collection.period == 4 and collection.name == "panel:sales"


def test_integer_time_steps_have_no_dates(tmp_path):
    path = write(tmp_path, table_text({"s1": [(t, t * 2) for t in range(1, 8)], "s2": [(t, 1) for t in range(5, 12)]}))
    collection = read_panel(path, horizon=2, period=7)
    assert collection.dates is None and collection.freq is None and collection.notes["freq"] is None
    assert collection.period == 7 and collection.lengths().tolist() == [7, 7]
    assert collection.history[0].tolist() == [2, 4, 6, 8, 10, 12, 14]
    assert read_panel(path, horizon=2).period == 1  # no freq, no season unless told


def test_time_zones_become_utc_and_a_given_freq_is_kept(tmp_path):
    rows = [("2021-01-01T01:00:00+01:00", 1), ("2021-01-01T02:00:00+01:00", 2), ("2021-01-01T02:00:00Z", 3)]
    collection = read_panel(write(tmp_path, table_text({"x": rows})), horizon=1, freq="h")
    assert collection.dates[0].astype(str).tolist() == [
        "2021-01-01T00:00:00.000000000",
        "2021-01-01T01:00:00.000000000",
        "2021-01-01T02:00:00.000000000",
    ]
    assert collection.freq == "h" and collection.period == 24


def test_short_series_are_skipped_and_counted(tmp_path):
    series = {f"short{i}": list(zip(monthly("2020-01-01", 4), range(4))) for i in range(7)}
    series["long"] = list(zip(monthly("2020-01-01", 7), range(7)))
    collection = read_panel(write(tmp_path, table_text(series)), horizon=3)  # needs 2 * 3 + 1 = 7
    assert collection.ids == ["long"]
    assert collection.notes["skipped"] == {
        "count": 7,
        "ids": ["short0", "short1", "short2", "short3", "short4"],
        "min_length": 7,
    }
    assert collection.notes["series"] == 1
    assert "skipped" not in read_panel(write(tmp_path, table_text(series), "b.csv"), 1, min_length=4).notes


def test_every_series_too_short_says_what_horizon_fits(tmp_path):
    series = {"a": list(zip(monthly("2020-01-01", 5), range(5))), "b": list(zip(monthly("2020-01-01", 9), range(9)))}
    path = write(tmp_path, table_text(series))
    raises_naming(lambda: read_panel(path, horizon=6), "shorter than 13", "5 to 9", "a horizon of at most 4")
    raises_naming(lambda: read_panel(path, horizon=2, min_length=10), "shorter than 10", "min_length")


def test_a_missing_path_a_folder_and_a_fifo_are_refused(tmp_path):
    raises_naming(lambda: read_panel(tmp_path / "none.csv", 2), "none.csv", "no such file")
    raises_naming(lambda: read_panel(tmp_path, 2), "is a folder")
    fifo = tmp_path / "pipe.csv"
    os.mkfifo(fifo)
    raises_naming(lambda: read_panel(fifo, 2), "pipe.csv", "not a regular file")  # returns: no open, no block


def test_parquet_without_pyarrow_names_the_pip_command(tmp_path, monkeypatch):
    path = write(tmp_path, "not parquet", "table.parquet")
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    raises_naming(lambda: read_panel(path, 2), "pyarrow", 'pip install "fpt[forecasting]"')


def with_row(k: int, row: str) -> str:
    """The good table of one series A (8 month starts, 2020) with its row k replaced by `row`."""
    lines = table_text({"A": list(zip(monthly("2020-01-01", 8), range(1, 9)))}).splitlines()
    lines[k + 1] = row
    return "\n".join(lines) + "\n"


GOOD_A = with_row(0, "A,2020-01-01,1")
TWO_KINDS = table_text(
    {
        "A": list(zip(monthly("2020-01-01", 8), range(8))),
        "Q": list(zip(pd.date_range("2020-01-01", periods=8, freq="QS").strftime("%Y-%m-%d"), range(8))),
    }
)


@pytest.mark.parametrize(
    "name, text, options, expected",
    [
        ("empty.csv", "", {}, ["is empty"]),
        ("header.csv", "unique_id,ds,y\n", {}, ["no rows"]),
        ("t.txt", GOOD_A, {}, ["'.txt'", ".csv or .parquet"]),
        ("p.csv", GOOD_A.replace("unique_id", "series"), {}, ["'unique_id'", "'series'", "--id-column"]),
        ("p.csv", GOOD_A, {"time_column": "date"}, ["'date'", "'ds'", "--time-column"]),
        ("p.csv", GOOD_A.replace(",y\n", ",value\n"), {}, ["'y'", "'value'", "--value-column"]),
        ("p.csv", with_row(3, ",2020-04-01,4"), {}, ["row 4", "no series id"]),
        ("p.csv", with_row(3, "A,2020-04-01,4,9"), {}, ["not valid CSV", "line 5"]),
        ("p.csv", with_row(3, "A,2020-13-45,4"), {}, ["'A'", "'2020-13-45'", "does not parse"]),
        ("p.csv", with_row(3, "A,,4"), {}, ["'A'", "no time", "'ds'"]),
        ("p.csv", with_row(3, "A,2020-03-01,4"), {}, ["'A'", "two rows at 2020-03-01"]),
        ("p.csv", with_row(2, "A,2019-12-01,3"), {}, ["'A'", "not in time order", "2019-12-01 comes after 2020-02-01"]),
        ("p.csv", with_row(3, "A,2020-04-01,abc"), {}, ["'A'", "2020-04-01", "'abc'", "not a number"]),
        ("p.csv", with_row(3, "A,2020-04-01,"), {}, ["'A'", "2020-04-01", "an empty cell"]),
        ("p.csv", with_row(3, "A,2020-04-01,NA"), {}, ["'A'", "2020-04-01", "'NA'", "fill or drop"]),
        ("p.csv", with_row(3, "A,2020-04-01,-inf"), {}, ["'A'", "2020-04-01", "'-inf'", "not a finite"]),
        ("p.csv", with_row(3, "A,2020-04-01,1e39"), {}, ["'A'", "2020-04-01", "'1e39'", "float32"]),
        ("p.csv", with_row(3, "A,2020-04-01," + "9" * 5000), {}, ["'A'", "float32"]),
        ("p.csv", with_row(3, "A,2020-04-01,x" + "y" * 5000), {}, ["'A'", "(5,001 characters)"]),
        ("p.csv", with_row(3, "A,2020-04-02,4"), {}, ["'A'", "no row for 2020-04-01", "fill the gap"]),
        ("p.csv", with_row(7, "A,2020-10-01,8"), {}, ["'A'", "no row for 2020-08-01", "fill the gap"]),
        ("p.csv", TWO_KINDS, {}, ["'A' is 'MS'", "'Q' is 'QS-OCT'", "--freq"]),
        ("p.csv", TWO_KINDS, {"freq": "MS"}, ["'Q'", "no row for 2020-02-01"]),
        ("p.csv", GOOD_A, {"freq": "QS"}, ["'A'", "less than one step", "--freq"]),
        ("p.csv", GOOD_A, {"freq": "ME"}, ["'A'", "starts at 2020-01-01", "'ME'", "--freq"]),
        ("p.csv", GOOD_A, {"freq": "fortnightly"}, ["'fortnightly'", "--freq", "MS"]),
        ("p.csv", table_text({"A": [(t, 1) for t in (1, 2, 3, 5, 6, 7, 8)]}), {}, ["'A'", "no row for 4"]),
        ("p.csv", table_text({"A": [(t, 1) for t in range(1, 9)]}), {"freq": "D"}, ["integer steps", "--freq"]),
        ("p.csv", GOOD_A, {"min_length": 2}, ["min_length 2", "at least 3"]),
        ("p.csv", GOOD_A, {"horizon": 0}, ["horizon must be at least 1"]),
    ],
)
def test_each_bad_table_is_one_line_naming_the_place(tmp_path, name, text, options, expected):
    path = write(tmp_path, text, name)
    options = {"horizon": 2, **options}
    message = raises_naming(lambda: read_panel(path, **options), *expected)
    assert len(message) < 400, message  # a 5,000-character cell is quoted short


def test_a_bad_parquet_file_is_one_line(tmp_path):
    pytest.importorskip("pyarrow")
    raises_naming(lambda: read_panel(write(tmp_path, "not parquet at all", "t.parquet"), 2), "t.parquet", "parquet")


@pytest.mark.parametrize(
    "freq, period",
    [("MS", 12), ("ME", 12), ("QS", 4), ("QS-OCT", 4), ("QE-DEC", 4), ("W", 52), ("W-MON", 52), ("D", 7)]
    + [("B", 5), ("h", 24), ("YS", 1), ("YE-DEC", 1), ("2D", 1), ("15min", 1), (None, 1)],
)
def test_period_of_a_frequency(freq, period):
    assert period_of(freq) == period


def test_period_of_an_unknown_frequency_is_one_line():
    raises_naming(lambda: period_of("monthly"), "'monthly'", "--freq")


def test_rows_of_series_may_interleave(tmp_path):
    a, b = monthly("2020-01-01", 5), monthly("2021-01-01", 5)
    text = "unique_id,ds,y\n" + "".join(f"b,{b[k]},{k}\na,{a[k]},{10 + k}\n" for k in range(5))
    collection = read_panel(write(tmp_path, text), horizon=2)
    assert collection.ids == ["b", "a"]
    assert collection.history[1].tolist() == [10, 11, 12, 13, 14]
    assert str(collection.dates[1][-1])[:10] == a[-1]


def test_a_csv_not_in_utf8_is_one_line(tmp_path):
    path = tmp_path / "latin.csv"
    path.write_bytes(GOOD_A.replace("A,", "\xc4,").encode("latin-1"))
    raises_naming(lambda: read_panel(path, 2), "latin.csv", "UTF-8")
