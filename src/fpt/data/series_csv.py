"""A time series as a CSV file: one date column and numeric columns, one row per time step.

Owns reading that format (ETT's ETTh1.csv / ETTh2.csv, and a user's own CSV) into a
`SeriesTable` of plain numpy arrays, and refusing every malformed file with one FptError line
that names the file, the place (column, line) and the fix. Windows, splits and scaling belong
to the forecasting task, not here.

Read with the stdlib csv module (quoting, BOMs) and numpy (numbers); not pandas, which is not
one of fpt's dependencies. Line numbers in messages are the file's own lines (the header is 1).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path

import numpy as np

from fpt.core.errors import FptError, quoted_text
from fpt.core.paths import user_path
from fpt.data import check_readable_file

# Cells that spreadsheets and pandas write for "no measurement" (compared lower-cased).
MISSING = frozenset({"", "nan", "na", "n/a", "nat", "null", "none", "?", "-"})
DATE_HINT = "write dates as ISO 8601, e.g. 2016-07-01 00:00:00"
FORMAT_HINT = "a header line (date,COL1,COL2,...) and one row per time step"
EPOCH, SECOND = datetime(1970, 1, 1), timedelta(seconds=1)


@dataclass(frozen=True)
class SeriesTable:
    """A CSV read by `read_series_csv`: its dates, its numeric columns as a (T, C) array, their names and the file
    read."""

    dates: np.ndarray  # datetime64[s], strictly increasing
    values: np.ndarray  # float64 (T, C), finite
    columns: list[str]  # the C numeric column names, in file order
    path: Path


def read_series_csv(
    path: str | Path,
    date_column: str | None = None,
    columns: list[str] | None = None,
    bad_value_fix: str = "fix the value or leave the column out (--columns)",
) -> SeriesTable:
    """Read a CSV of a date column and numeric columns.

    date_column None: the column named "date" (any case), else the first column if all of it
    parses as dates. columns: keep only these (in file order); None keeps every other column.
    bad_value_fix: what a message about a cell that is not a number tells the user to do (a file
    fpt downloaded is fetched again, not edited).
    """
    path = user_path(path)
    header, rows, lines = _read_rows(path)
    date_index, dates = _date_column(path, header, rows, lines, date_column)
    keep = _selected(path, header, date_index, columns)
    if len(rows) < 2:
        raise FptError(f"{path}: only 1 row of data; a series needs at least 2 time steps")
    if dates is None:
        dates = _parse_dates(path, header[date_index], [row[date_index] for row in rows], lines)
    values = np.empty((len(rows), len(keep)), dtype=np.float64)
    for j, i in enumerate(keep):
        values[:, j] = _parse_numbers(path, header[i], [row[i] for row in rows], lines, bad_value_fix)
    return SeriesTable(dates, values, [header[i] for i in keep], path)


# ---------------------------------------------------------------- the file's rows


def _read_rows(path: Path) -> tuple[list[str], list[list[str]], list[int]]:
    """The header (names stripped), the non-blank rows and each row's line number."""
    check_readable_file(path, "a CSV file", "the series", FORMAT_HINT)
    rows, lines = [], []
    try:
        with open(path, newline="", encoding="utf-8-sig") as f:  # -sig: Excel's byte-order mark
            reader = csv.reader(f, skipinitialspace=True)  # `a, "b"` quotes b as a spreadsheet would
            header = next(reader, None)
            for row in reader:
                if row and (len(row) > 1 or row[0].strip()):  # blank lines (a trailing one above all) are no rows
                    rows.append(row)
                    lines.append(reader.line_num)
    except UnicodeDecodeError:
        raise FptError(f"{path} is not UTF-8 text; save it as a UTF-8 CSV") from None
    except csv.Error as e:
        raise FptError(f"{path}: line {reader.line_num} is not valid CSV ({e}); fix the quoting there") from None
    except OSError as e:
        raise FptError(f"{path}: cannot read ({e.strerror or e})") from None
    header = [name.strip() for name in header or []]
    _check_header(path, header)
    if not rows:
        raise FptError(f"{path} has a header but no rows; a series needs at least 2 time steps")
    _check_widths(path, len(header), rows, lines)
    return header, rows, lines


def _check_header(path: Path, header: list[str]) -> None:
    if not any(header):
        raise FptError(f"{path} is empty; expected {FORMAT_HINT}")
    if len(header) == 1:
        separator = next((s for s in (";", "\t", "|") if s in header[0]), None)
        if separator:
            raise FptError(f"{path}: columns are separated by {separator!r}; save it with commas")
        raise FptError(f"{path} has a single column ({header[0]!r}); expected {FORMAT_HINT}")
    if "" in header:
        raise FptError(f"{path}: column {header.index('') + 1} of the header has no name; name it")
    seen = set()
    for name in header:
        if name in seen:
            raise FptError(f"{path}: column {name!r} appears twice in the header; rename one of them")
        seen.add(name)


def _check_widths(path: Path, width: int, rows: list[list[str]], lines: list[int]) -> None:
    for row, line in zip(rows, lines):
        if len(row) != width:
            raise FptError(
                f"{path}: line {line} has {len(row)} cells, the header {width}; "
                "give every row one cell per column (an empty cell is still a comma)"
            )


# ---------------------------------------------------------------- columns


def _date_column(
    path: Path, header: list[str], rows: list[list[str]], lines: list[int], name: str | None
) -> tuple[int, np.ndarray | None]:
    """The date column's index, and its dates when finding it meant parsing them already."""
    if name is not None:
        return _index_of(path, header, name, "--date-column"), None
    lowered = [h.lower() for h in header]
    if "date" in lowered:
        return lowered.index("date"), None
    texts = [row[0] for row in rows]
    moments = [_to_datetime(text) for text in texts]
    if None in moments:
        k = moments.index(None)
        raise FptError(
            f"{path}: no date column (none is named 'date', and the first, {header[0]!r}, holds "
            f"{quoted_text(texts[k])} on line {lines[k]}); name the date column 'date' in the header "
            "or pass --date-column NAME"
        )
    return 0, _increasing(path, header[0], moments, texts, lines)


def _index_of(path: Path, header: list[str], name: str, option: str) -> int:
    if name not in header:
        raise FptError(f"{path} has no column {name!r} (its columns: {', '.join(header)}); correct {option}")
    return header.index(name)


def _selected(path: Path, header: list[str], date_index: int, columns: list[str] | None) -> list[int]:
    """Indices of the value columns to keep, in file order."""
    if columns is None:
        keep = [i for i in range(len(header)) if i != date_index]
    else:
        keep = sorted({_index_of(path, header, name, "--columns") for name in columns})
        if len(keep) < len(columns):
            raise FptError(f"{path}: a column is named twice in --columns ({', '.join(columns)}); name each once")
        if date_index in keep:
            raise FptError(f"{path}: {header[date_index]!r} is the date column; leave it out of --columns")
    if not keep:
        raise FptError(f"{path}: no value columns besides the date; name at least one in --columns")
    return keep


# ---------------------------------------------------------------- cells


def _to_datetime(text: str) -> datetime | None:
    try:
        moment = datetime.fromisoformat(text.strip().replace("/", "-"))  # 2016/07/01 is ISO with slashes
    except ValueError:
        return None
    if moment.tzinfo is not None:  # datetime64 has no zones: keep every instant in UTC
        moment = moment.astimezone(timezone.utc).replace(tzinfo=None)
    return moment


def _parse_dates(path: Path, name: str, texts: list[str], lines: list[int]) -> np.ndarray:
    moments = [_to_datetime(text) for text in texts]
    if None in moments:
        k = moments.index(None)
        if texts[k].strip().lower() in MISSING:
            raise FptError(f"{path}: line {lines[k]} has no date in column {name!r}; fill or drop the gap first")
        raise FptError(
            f"{path}: line {lines[k]}: date {quoted_text(texts[k])} in column {name!r} does not parse; {DATE_HINT}"
        )
    return _increasing(path, name, moments, texts, lines)


def _increasing(path: Path, name: str, moments: list[datetime], texts: list[str], lines: list[int]) -> np.ndarray:
    # whole seconds since 1970 as int64: 5x faster than numpy converting 17k datetime objects itself
    dates = np.array([(moment - EPOCH) // SECOND for moment in moments], dtype=np.int64).view("datetime64[s]")
    back = np.flatnonzero(dates[1:] <= dates[:-1])
    if back.size:
        k = int(back[0]) + 1
        raise FptError(
            f"{path}: line {lines[k]}: date {quoted_text(texts[k])} in column {name!r} is not after "
            f"{quoted_text(texts[k - 1])} on line {lines[k - 1]}; sort the rows by date and drop repeated times"
        )
    return dates


def _parse_numbers(path: Path, name: str, texts: list[str], lines: list[int], fix: str) -> np.ndarray:
    try:  # Python's float() for every cell: the same rules here as in the search for a bad cell below
        column = np.fromiter(map(float, texts), dtype=np.float64, count=len(texts))
    except ValueError:
        column = None
    if column is not None:
        bad = np.flatnonzero(~np.isfinite(column))
        if not bad.size:
            return _within_float32(path, name, column, texts, lines)
        k = int(bad[0])
    else:
        k = next(k for k, text in enumerate(texts) if not _is_finite_number(text))
    text, line = texts[k], lines[k]
    if text.strip().lower() in MISSING:
        cell = "an empty cell" if not text.strip() else quoted_text(text)
        raise FptError(
            f"{path}: column {name!r} has a missing value on line {line} ({cell}); fill or drop the gap first"
        )
    if _is_number(text):  # inf, -inf
        raise FptError(
            f"{path}: column {name!r} holds {quoted_text(text)} on line {line}, not a finite number; "
            "replace it or drop the row"
        )
    raise FptError(f"{path}: column {name!r} is not numeric: line {line} holds {quoted_text(text)}; {fix}")


FLOAT32_MAX = float(np.finfo(np.float32).max)


def _within_float32(path: Path, name: str, column: np.ndarray, texts: list[str], lines: list[int]) -> np.ndarray:
    """The column, refused where a value is finite here but not in float32, where the model computes
    (past 3.4e38 it becomes infinite; its square, in the scaler, overflows long before)."""
    big = np.flatnonzero(np.abs(column) > FLOAT32_MAX)
    if big.size:
        k = int(big[0])
        raise FptError(
            f"{path}: column {name!r} holds {texts[k].strip()[:20]!r} on line {lines[k]}, beyond float32's range "
            "(|v| > 3.4e38) the model computes in; rescale the column (e.g. to other units) or drop the row"
        )
    return column


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _is_finite_number(text: str) -> bool:
    try:
        return math.isfinite(float(text))
    except ValueError:
        return False
