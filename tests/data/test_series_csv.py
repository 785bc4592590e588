"""read_series_csv: a date column and numeric columns in, a SeriesTable out, or one FptError
line naming the file, the place and the fix. Synthetic files in ETT's layout; the real ETTh1
only where ../shared/data/ett holds it."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest
from helpers import ETT_COLUMNS, raises_naming, write_ett_csv

from fpt.core.errors import FptError
from fpt.data.series_csv import SeriesTable, read_series_csv

SHARED_ETT = Path(__file__).parents[3] / "shared" / "data" / "ett"


def csv_file(tmp_path: Path, text: str, name: str = "series.csv") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_ett_layout_round_trips(tmp_path):
    path = tmp_path / "ETTh1.csv"
    dates, values = write_ett_csv(path, hours=50, seed=3)
    table = read_series_csv(path)
    assert isinstance(table, SeriesTable) and table.path == path
    assert table.columns == ETT_COLUMNS
    assert table.dates.dtype == np.dtype("datetime64[s]") and np.array_equal(table.dates, dates)
    assert table.values.dtype == np.float64 and table.values.shape == (50, 7)
    assert np.array_equal(table.values, values)  # exact: written with repr


def test_spreadsheet_export_quirks_are_read(tmp_path):
    # Excel's byte-order mark, CRLF, quoted cells, padded names, trailing blank lines, slashes in dates
    text = '\ufeffDate , "load"\r\n2021/01/01 00:00,"1.5"\r\n2021/01/01 00:30, -2e3\r\n\r\n\r\n'
    table = read_series_csv(csv_file(tmp_path, text))
    assert table.columns == ["load"]
    assert table.dates.tolist() == [
        np.datetime64("2021-01-01T00:00:00").item(),
        np.datetime64("2021-01-01T00:30:00").item(),
    ]
    assert table.values[:, 0].tolist() == [1.5, -2000.0]


def test_time_zones_become_utc(tmp_path):
    text = "date,x\n2021-01-01T01:00:00+01:00,1\n2021-01-01T00:30:00Z,2\n"
    table = read_series_csv(csv_file(tmp_path, text))
    assert table.dates.astype(str).tolist() == ["2021-01-01T00:00:00", "2021-01-01T00:30:00"]


@pytest.mark.parametrize(
    "header, date_column, expected",
    [
        ("x,DATE,y", None, ["x", "y"]),  # a column named date, any case, anywhere
        ("timestamp,x,y", None, ["x", "y"]),  # else the first column, all of it dates
        ("x,when,y", "when", ["x", "y"]),  # or named
    ],
)
def test_the_date_column_is_found(tmp_path, header, date_column, expected):
    names = header.split(",")
    rows = []
    for hour in range(3):
        cells = {name: str(hour + 10 * i) for i, name in enumerate(names)}
        date_name = date_column or next((n for n in names if n.lower() == "date"), names[0])
        cells[date_name] = f"2020-02-29 {hour:02d}:00"
        rows.append(",".join(cells[n] for n in names))
    table = read_series_csv(csv_file(tmp_path, "\n".join([header, *rows])), date_column=date_column)
    assert table.columns == expected
    assert table.dates[-1] == np.datetime64("2020-02-29T02:00:00")
    assert table.values[:, 0].tolist() == [float(h + 10 * names.index(expected[0])) for h in range(3)]


def test_column_selection_keeps_file_order_and_skips_other_columns(tmp_path):
    path = tmp_path / "ETTh1.csv"
    _, values = write_ett_csv(path, hours=5)
    table = read_series_csv(path, columns=["OT", "HUFL"])
    assert table.columns == ["HUFL", "OT"]
    assert np.array_equal(table.values, values[:, [0, 6]])
    text = "date,site,load\n2020-01-01,north,1\n2020-01-02,north,2\n"  # a text column left out is fine
    assert read_series_csv(csv_file(tmp_path, text), columns=["load"]).values[:, 0].tolist() == [1.0, 2.0]


GOOD_HEAD = "date,a,b\n2020-01-01 00:00,1,2\n"


@pytest.mark.parametrize(
    "text, names",
    [
        ("", ["is empty", "header line"]),
        ("date,a,b\n", ["header but no rows", "at least 2"]),
        ("date,a,b\n2020-01-01,1,2\n", ["only 1 row", "at least 2"]),
        ("a,b\n1,2\n3,4\n", ["no date column", "'a'", "'1' on line 2", "name the date column 'date'", "--date-column"]),
        (
            GOOD_HEAD + "2020-01-01 01:00,1,2\n2020-13-01 02:00,3,4\n",
            ["line 4", "'2020-13-01 02:00'", "does not parse", "ISO 8601"],
        ),
        (GOOD_HEAD + ",1,2\n", ["line 3 has no date", "fill or drop the gap first"]),
        (
            GOOD_HEAD + "2020-01-01 02:00,1,2\n2020-01-01 01:00,3,4\n",
            ["line 4", "'2020-01-01 01:00'", "not after '2020-01-01 02:00' on line 3", "sort the rows by date"],
        ),
        (GOOD_HEAD + "2020-01-01 00:00,1,2\n", ["line 3", "not after", "drop repeated times"]),
        (
            GOOD_HEAD + "2020-01-01 01:00,1,x7\n",
            ["column 'b' is not numeric", "line 3 holds 'x7'", "leave the column out"],
        ),
        (
            GOOD_HEAD + "2020-01-01 01:00,,2\n",
            ["column 'a'", "missing value on line 3", "empty cell", "fill or drop the gap first"],
        ),
        (GOOD_HEAD + "2020-01-01 01:00,NaN,2\n", ["column 'a'", "line 3", "'NaN'", "fill or drop the gap first"]),
        (
            GOOD_HEAD + "2020-01-01 01:00,1,NA\n2020-01-01 02:00,1,oops\n",
            ["column 'b'", "line 3", "'NA'", "fill or drop the gap first"],
        ),
        (GOOD_HEAD + "2020-01-01 01:00,1,inf\n", ["column 'b'", "'inf'", "not a finite number"]),
        (GOOD_HEAD + "2020-01-01 01:00,1e39,2\n", ["column 'a'", "'1e39' on line 3", "float32", "rescale"]),
        (GOOD_HEAD + "2020-01-01 01:00,1,-1e300\n", ["column 'b'", "'-1e300' on line 3", "float32"]),
        ("date,a,a\n2020-01-01,1,2\n2020-01-02,3,4\n", ["'a' appears twice", "rename one"]),
        ("date,,b\n2020-01-01,1,2\n2020-01-02,3,4\n", ["column 2 of the header has no name"]),
        ("date;a;b\n2020-01-01;1;2\n", ["separated by ';'", "commas"]),
        (GOOD_HEAD + "2020-01-01 01:00,1\n", ["line 3 has 2 cells, the header 3"]),
    ],
)
def test_bad_files_are_refused_in_one_line(tmp_path, text, names):
    path = csv_file(tmp_path, text)
    raises_naming(lambda: read_series_csv(path), path, *names)


def test_bad_arguments_are_refused_in_one_line(tmp_path):
    missing = tmp_path / "nowhere.csv"
    raises_naming(lambda: read_series_csv(missing), missing, "no such file", "give the path of a CSV file")
    raises_naming(lambda: read_series_csv(tmp_path), tmp_path, "is a folder")
    path = tmp_path / "ETTh1.csv"
    write_ett_csv(path, hours=4)
    raises_naming(
        lambda: read_series_csv(path, columns=["OT", "oil"]), path, "no column 'oil'", "HUFL, HULL", "--columns"
    )
    raises_naming(lambda: read_series_csv(path, date_column="time"), "no column 'time'", "--date-column")
    raises_naming(lambda: read_series_csv(path, columns=["OT", "OT"]), "named twice")
    raises_naming(lambda: read_series_csv(path, columns=["date", "OT"]), "'date' is the date column")
    raises_naming(lambda: read_series_csv(path, columns=[]), "at least one")
    raises_naming(lambda: read_series_csv(path, date_column="OT", columns=["HUFL"]), "'OT'", "does not parse")


def test_a_bad_cell_is_quoted_in_at_most_a_line_and_the_fix_fits_the_file(tmp_path):
    path = csv_file(tmp_path, GOOD_HEAD + "2020-01-01 01:00,1," + "x" * 100_000 + "\n")
    with pytest.raises(FptError) as caught:
        read_series_csv(path, bad_value_fix="delete the file and fetch it again")
    message = str(caught.value)
    assert len(message) < 300 and "100,000 characters" in message and message.endswith("fetch it again")
    assert "--columns" not in message


def test_a_pipe_is_refused_without_reading_it(tmp_path):
    fifo = tmp_path / "series.csv"
    os.mkfifo(fifo)  # opening it to read would block until a writer came
    raises_naming(lambda: read_series_csv(fifo), fifo, "not a regular file")


def test_not_utf8_is_refused(tmp_path):
    path = tmp_path / "latin1.csv"
    path.write_bytes("date,température\n2020-01-01,1\n2020-01-02,2\n".encode("latin-1"))
    raises_naming(lambda: read_series_csv(path), path, "not UTF-8", "save it as a UTF-8 CSV")


@pytest.mark.skipif(not (SHARED_ETT / "ETTh1.csv").is_file(), reason="no ../shared/data/ett here")
def test_the_real_etth1():
    table = read_series_csv(SHARED_ETT / "ETTh1.csv")
    assert table.values.shape == (17_420, 7) and table.columns == ETT_COLUMNS
    assert table.dates[0] == np.datetime64("2016-07-01T00:00:00")
    assert set(np.diff(table.dates).astype(int).tolist()) == {3600}  # hourly, no gaps
    assert np.isfinite(table.values).all()
