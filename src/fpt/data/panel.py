"""A user's collection of series as one long-format table (Nixtla's convention): a series id column,
a time column and a value column, one row per observation, series of different lengths.

Owns reading that table (CSV or parquet) into a `SeriesCollection` and refusing every malformed one
with one FptError line that names the file, the place (series id, date or row) and the fix. Holding
out a horizon, windows and scaling belong to the forecasting task, not here.

Read with pandas (and pyarrow for parquet), optional packages imported where they are used. Every
check runs on whole columns at once, the rows sorted by series (a stable sort keeps each series'
own order, which is checked, never repaired): a table of 100,000 series needs no loop over them.
"""

from __future__ import annotations

import math
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np

from fpt.core.errors import FptError, check_type, quoted_text, require
from fpt.core.paths import user_path
from fpt.data import check_readable_file

from .collection import SeriesCollection

PIP = 'pip install "fpt[forecasting]"'
OPTIONS = {"id": "--id-column", "time": "--time-column", "value": "--value-column"}
# Cells that spreadsheets and pandas write for "no measurement" (compared lower-cased), as series_csv.
MISSING = frozenset({"", "nan", "na", "n/a", "nat", "null", "none", "?", "-", "<na>"})
FLOAT32_MAX = float(np.finfo(np.float32).max)  # the model computes in float32: past it a value is inf
FORMAT_HINT = "a header line (unique_id,ds,y) and one row per observation"
DATE_HINT = "write dates as ISO 8601 (2020-01-31) or time steps as integers"


def period_of(freq: str | None) -> int:
    """The seasonal period of a pandas frequency alias: 12 monthly, 4 quarterly, 52 weekly, 7 daily,
    5 business-daily, 24 hourly, 1 yearly, a multiple of a step ("2D") or anything else, or None."""
    if freq is None:
        return 1
    pd = require("pandas", PIP)
    offset = _offset(pd, freq)
    if offset.n != 1:  # "15min", "2D": no calendar cycle of a whole number of steps to name
        return 1
    o = pd.offsets
    for kinds, period in (
        ((o.MonthBegin, o.MonthEnd, o.BusinessMonthBegin, o.BusinessMonthEnd), 12),
        ((o.QuarterBegin, o.QuarterEnd, o.BQuarterBegin, o.BQuarterEnd), 4),
        ((o.Week,), 52),
        ((o.Day,), 7),
        ((o.BusinessDay,), 5),  # a working week
        ((o.Hour,), 24),
    ):
        if isinstance(offset, kinds):
            return period
    return 1


def read_panel(
    path: str | Path,
    horizon: int,
    id_column: str = "unique_id",
    time_column: str = "ds",
    value_column: str = "y",
    freq: str | None = None,
    period: int | None = None,
    min_length: int | None = None,
) -> SeriesCollection:
    """Read a long-format table (.csv or .parquet) of series into a SeriesCollection.

    One row per observation: `id_column` names the series, `time_column` holds dates (or plain
    integer steps: then the collection has no dates and no freq) and `value_column` the number.
    Each series' rows must be in time order, without repeats or gaps at `freq`; `freq` None infers
    it (pandas, from series of 3 or more dates) and requires every series to agree. `period` None
    takes it from freq (`period_of`). Series shorter than `min_length` (default 2 * horizon + 1: a
    validation and a test horizon after at least one observation) are left out and listed in
    notes["skipped"]. `future` is None: the task holds out the last `horizon` values itself.
    """
    pd = require("pandas", PIP)
    path = user_path(path)
    check_type(horizon, (int,), "horizon")
    if horizon < 1:
        raise FptError(f"horizon must be at least 1, got {horizon}")
    given_min, min_length = min_length is not None, _min_length(horizon, min_length)
    if period is not None:
        check_type(period, (int,), "period")
        if period < 1:
            raise FptError(f"period must be at least 1, got {period}")
    offset = None if freq is None else _offset(pd, freq)
    frame = _read_table(pd, path)
    names = {"id": id_column, "time": time_column, "value": value_column}
    for role, name in names.items():
        if name not in frame.columns:
            found = ", ".join(quoted_text(str(c)) for c in frame.columns[:10])
            found += ", ..." if frame.shape[1] > 10 else ""
            raise FptError(f"{path} has no column {name!r} (its columns: {found}); set it with {OPTIONS[role]}")
    table = _Table.of(pd, path, frame, names)
    if offset is not None and not table.dated:
        raise FptError(f"{path}: column {time_column!r} holds integer steps, not dates; leave out --freq")
    table.check_order()
    table = table.long_enough(min_length, given=given_min)
    if table.dated:
        freq = table.check_freq(pd, offset)
    else:
        table.check_integer_steps()
    collection = SeriesCollection(
        name=f"panel:{path.stem}",
        ids=[str(i) for i in table.ids],
        history=np.split(table.values, table.bounds[:-1]),
        horizon=horizon,
        period=period if period is not None else period_of(freq),
        dates=np.split(table.times.view("datetime64[ns]"), table.bounds[:-1]) if table.dated else None,
        freq=freq,
        notes={"source": str(path), "series": len(table.ids), "freq": freq},
    )
    if table.skipped:
        collection.notes["skipped"] = table.skipped
    return collection


def _min_length(horizon: int, min_length: int | None) -> int:
    if min_length is None:
        return 2 * horizon + 1
    check_type(min_length, (int,), "min_length")
    if min_length <= horizon:  # the task holds out the last horizon: something must come before it
        raise FptError(
            f"min_length {min_length} leaves no history before a held-out horizon of {horizon}; "
            f"give at least {horizon + 1}"
        )
    return min_length


def _offset(pd, freq: str):
    """pandas' offset for a frequency alias, or one line naming --freq."""
    check_type(freq, (str,), "freq")
    try:
        with warnings.catch_warnings():  # "M" -> "ME": pandas 2.2 warns, the offset is the same
            warnings.simplefilter("ignore", FutureWarning)
            return pd.tseries.frequencies.to_offset(freq)
    except ValueError:
        raise FptError(
            f"--freq {quoted_text(freq)} is not a pandas frequency; use e.g. MS, QS, YS, W, D or h"
        ) from None


# ---------------------------------------------------------------- the file


def _read_table(pd, path: Path):
    """The table as a DataFrame (a CSV's cells as text, to be quoted as written), or one line."""
    check_readable_file(path, "a .csv or .parquet file", "the table", FORMAT_HINT)
    suffix = path.suffix.lower()
    if suffix not in (".csv", ".parquet"):
        raise FptError(f"{path}: expected a .csv or .parquet file, not {quoted_text(path.suffix or 'no suffix')}")
    try:
        if suffix == ".parquet":
            require("pyarrow", f"pip install pyarrow (or {PIP})")
            frame = pd.read_parquet(path)
        else:  # every cell as written: "" stays "", not NaN, so a message can quote it
            frame = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True, encoding="utf-8-sig")
    except pd.errors.EmptyDataError:
        raise FptError(f"{path} is empty; expected {FORMAT_HINT}") from None
    except UnicodeDecodeError:
        raise FptError(f"{path} is not UTF-8 text; save it as a UTF-8 CSV") from None
    except pd.errors.ParserError as e:
        first = (str(e).strip().splitlines() or ["?"])[0][:120]
        raise FptError(f"{path} is not valid CSV ({first}); fix the row it names") from None
    except (OSError, ValueError) as e:  # pyarrow's ArrowInvalid is a ValueError
        first = (str(e).strip().splitlines() or ["?"])[0][:120]
        raise FptError(f"{path}: cannot read it as {suffix[1:]} ({first}); write it again") from None
    if frame.empty:
        raise FptError(f"{path} has no rows; expected {FORMAT_HINT}")
    return frame


# ---------------------------------------------------------------- the rows, sorted by series


@dataclass
class _Table:
    """The table's rows sorted by series (ids in order of first appearance), each series' rows in file
    order; `rows` maps a sorted row back to the file's (0 = the first row after the header)."""

    path: Path
    names: dict  # role -> column name
    ids: np.ndarray  # str, one per series
    codes: np.ndarray  # series index per sorted row
    rows: np.ndarray
    times: np.ndarray  # int64: ns since 1970 when dated, else the integer steps
    dated: bool
    values: np.ndarray  # float64
    skipped: dict | None = None

    @classmethod
    def of(cls, pd, path: Path, frame, names: dict) -> _Table:
        raw_ids = frame[names["id"]]
        blank = (raw_ids.isna() | (raw_ids.astype(str).str.strip() == "")).to_numpy()
        if blank.any():
            row = int(np.flatnonzero(blank)[0]) + 1
            raise FptError(f"{path}: row {row} (after the header) has no series id in {names['id']!r}; fill it")
        codes, ids = pd.factorize(raw_ids.astype(str).str.strip())  # order of first appearance
        rows = np.argsort(codes, kind="stable")  # stable: each series keeps the file's order
        table = cls(path, names, np.asarray(ids, dtype=str), codes[rows], rows, None, False, None)
        raw_times = frame[names["time"]].iloc[rows].reset_index(drop=True)
        table.times, table.dated = table._parse_times(pd, raw_times)
        table.values = table._parse_values(pd, frame[names["value"]].iloc[rows].reset_index(drop=True))
        return table

    @property
    def bounds(self) -> np.ndarray:
        """Where each series ends in the sorted rows."""
        return np.cumsum(np.bincount(self.codes, minlength=len(self.ids)))

    def _where(self, k: int) -> str:
        return f"series {quoted_text(str(self.ids[self.codes[k]]))}"

    def _stamp(self, k: int) -> str:
        return _stamp(self.times[k], self.dated)

    def _parse_times(self, pd, raw) -> tuple[np.ndarray, bool]:
        name = self.names["time"]
        if pd.api.types.is_integer_dtype(raw.dtype) and not raw.isna().any():
            return raw.to_numpy(np.int64), False
        if pd.api.types.is_datetime64_any_dtype(raw.dtype):
            moments = raw
        else:
            text = raw.astype(str).str.strip()
            if text.str.fullmatch(r"[+-]?\d{1,18}").all():  # steps 1, 2, 3 (18 digits: within int64)
                return text.astype(np.int64).to_numpy(), False
            with warnings.catch_warnings():  # "could not infer format": each cell is parsed on its own
                warnings.simplefilter("ignore", UserWarning)
                moments = pd.to_datetime(text, errors="coerce", utc=True)
        if getattr(moments.dt, "tz", None) is not None:  # datetime64 has no zones: every instant in UTC
            moments = moments.dt.tz_convert("UTC").dt.tz_localize(None)
        bad = moments.isna().to_numpy()
        if bad.any():
            k = int(np.flatnonzero(bad)[0])
            cell = raw.iloc[k]
            if pd.isna(cell) or str(cell).strip().lower() in MISSING:
                raise FptError(f"{self.path}: {self._where(k)} has a row with no time in {name!r}; fill or drop it")
            raise FptError(
                f"{self.path}: {self._where(k)}: time {quoted_text(str(cell))} in {name!r} does not parse as a date; "
                f"{DATE_HINT}"
            )
        return moments.to_numpy(dtype="datetime64[ns]").view(np.int64), True

    def _parse_values(self, pd, raw) -> np.ndarray:
        name = self.names["value"]
        numbers = pd.to_numeric(raw, errors="coerce")  # text in a CSV, numbers in a parquet
        values = numbers.to_numpy(dtype=np.float64, na_value=np.nan)
        with np.errstate(invalid="ignore"):
            bad = ~np.isfinite(values) | (np.abs(values) > FLOAT32_MAX)
        if not bad.any():
            return values
        k = int(np.flatnonzero(bad)[0])
        cell, place = raw.iloc[k], f"{self.path}: {self._where(k)} at {self._stamp(k)}"
        text = "" if pd.isna(cell) else str(cell).strip()
        if text.lower() in MISSING:
            shown = "NaN" if pd.isna(cell) else "an empty cell" if not text else quoted_text(text)
            raise FptError(f"{place} has no value in {name!r} ({shown}); fill or drop the gap first")
        number = _float(text)  # pandas gives NaN for "9" * 400, Python inf: a number, too large
        if number is not None and math.isinf(number) and "inf" in text.lower():
            raise FptError(
                f"{place}: {name!r} holds {quoted_text(text)}, not a finite number; replace it or drop the row"
            )
        if number is not None and not math.isnan(number):  # beyond float32, where the model computes: inf there
            raise FptError(
                f"{place}: {name!r} holds {quoted_text(text, 20)}, beyond float32's range (|v| > 3.4e38) the model "
                "computes in; rescale the column (e.g. to other units) or drop the row"
            )
        raise FptError(f"{place}: {name!r} holds {quoted_text(text)}, not a number; fix the cell or drop the row")

    def check_order(self) -> None:
        """Refuse a time repeated inside a series, or one before its predecessor (never re-sorted: a
        shuffled table is more often a mistake than a convenience)."""
        same = self.codes[1:] == self.codes[:-1]
        step = self.times[1:] - self.times[:-1]
        wrong = np.flatnonzero(same & (step <= 0))
        if not wrong.size:
            return
        k = int(wrong[np.argmin(self.rows[wrong + 1])]) + 1  # the first such row in the file
        if self.times[k] == self.times[k - 1]:
            raise FptError(
                f"{self.path}: {self._where(k)} has two rows at {self._stamp(k)}; keep one of them (each time once)"
            )
        raise FptError(
            f"{self.path}: {self._where(k)} is not in time order: {self._stamp(k)} comes after "
            f"{self._stamp(k - 1)}; sort the rows of each series by {self.names['time']!r}"
        )

    def long_enough(self, min_length: int, given: bool) -> _Table:
        """The table without the series shorter than min_length, recorded in `skipped`; all of them
        too short is one line saying what horizon would fit."""
        lengths = np.bincount(self.codes, minlength=len(self.ids))
        keep = lengths >= min_length
        if keep.all():
            return self
        if not keep.any():
            shortest, longest = int(lengths.min()), int(lengths.max())
            fix = "lower min_length" if given else f"a horizon of at most {(longest - 1) // 2} fits the longest"
            if not given and longest < 3:
                fix = "a series needs at least 3 observations (one before a validation and a test step)"
            raise FptError(
                f"{self.path}: every series is shorter than {min_length} observations (they have "
                f"{shortest} to {longest}); {fix}"
            )
        short = np.flatnonzero(~keep)
        self.skipped = {
            "count": int(short.size),
            "ids": [str(i) for i in self.ids[short[:5]]],
            "min_length": min_length,
        }
        kept_rows = keep[self.codes]
        renumber = np.cumsum(keep) - 1
        self.codes, self.ids = renumber[self.codes[kept_rows]], self.ids[keep]
        self.rows, self.times, self.values = self.rows[kept_rows], self.times[kept_rows], self.values[kept_rows]
        return self

    def check_freq(self, pd, offset) -> str:
        """The frequency (given, or inferred and agreed on by every series), each series refused where
        it starts off that frequency's grid or skips a step."""
        given = offset is not None
        if not given:
            offset, source = self._infer_freq(pd)
        freq = offset.freqstr
        stamps = pd.DatetimeIndex(self.times.view("datetime64[ns]"))
        with warnings.catch_warnings():  # offsets without a vectorized path warn and loop: still right
            warnings.simplefilter("ignore", pd.errors.PerformanceWarning)
            following = (stamps[:-1] + offset).asi8
            starts = np.concatenate([[0], self.bounds[:-1]])
            on_grid = ((stamps[starts] + offset) - offset).asi8 == self.times[starts]
        same = self.codes[1:] == self.codes[:-1]
        off = np.flatnonzero(same & (self.times[1:] != following))
        bad = ~on_grid
        bad[self.codes[off + 1]] = True
        if not bad.any():
            return freq
        i = int(np.argmax(bad))  # the first series (in order of first appearance) that does not fit
        if not given:
            self._agree(pd, i, source, freq)
        self._off_grid(i, starts, on_grid, off, following, freq)

    def _infer_freq(self, pd):
        """pandas' frequency of the first series it can infer one for, and that series' index. Whole
        series first; then a series' first or last 3 dates, so that a gap in every series (or in the
        only one) is named by the grid check rather than refused as "no frequency"."""
        spans = list(enumerate(zip(np.concatenate([[0], self.bounds[:-1]]), self.bounds)))
        for part in (slice(None), slice(None, 3), slice(-3, None)):
            for i, (start, end) in spans:
                if end - start >= 3:  # pandas infers from 3 dates at least
                    dates = self.times[start:end][part].view("datetime64[ns]")
                    found = pd.infer_freq(pd.DatetimeIndex(dates))
                    if found:
                        return _offset(pd, found), i
        raise FptError(
            f"{self.path}: cannot infer the frequency: no series has 3 or more evenly spaced dates; "
            "pass --freq (e.g. MS, QS, YS, W, D, h)"
        )

    def _agree(self, pd, i: int, source: int, freq: str) -> None:
        """Refuse series i when pandas infers a frequency for it other than series `source`'s."""
        start, end = (self.bounds[i - 1] if i else 0), self.bounds[i]
        own = (
            pd.infer_freq(pd.DatetimeIndex(self.times[start:end].view("datetime64[ns]"))) if end - start >= 3 else None
        )
        if own and _offset(pd, own).freqstr != freq:
            raise FptError(
                f"{self.path}: series {quoted_text(str(self.ids[source]))} is {freq!r} but series "
                f"{quoted_text(str(self.ids[i]))} is {own!r}; give one frequency with --freq or keep one kind of series"
            )

    def _off_grid(self, i: int, starts, on_grid, off, following, freq: str) -> NoReturn:
        """Refuse series i, which starts off the frequency's grid or does not step by it."""
        where = f"{self.path}: series {quoted_text(str(self.ids[i]))}"
        if not on_grid[i]:
            raise FptError(
                f"{where} starts at {self._stamp(starts[i])}, not a date of frequency {freq!r}; "
                "pass the --freq its dates follow"
            )
        k = int(off[np.argmax(self.codes[off + 1] == i)])
        before, after, missing = self._stamp(k), self._stamp(k + 1), _stamp(following[k], True)
        if self.times[k + 1] > following[k]:
            raise FptError(
                f"{where} has no row for {missing} ({before} is followed by {after} at frequency {freq!r}); "
                "fill the gap (e.g. with an interpolated value) or pass the --freq it follows"
            )
        raise FptError(
            f"{where}: {after} comes less than one step of {freq!r} after {before}; "
            "drop the extra row or pass the --freq it follows"
        )

    def check_integer_steps(self) -> None:
        """Refuse a series whose integer steps skip one: the table's step is its smallest one."""
        same = self.codes[1:] == self.codes[:-1]
        step = (self.times[1:] - self.times[:-1])[same]
        if not step.size:
            return
        unit = int(step.min())
        jumps = np.flatnonzero(same & (self.times[1:] - self.times[:-1] != unit))
        if jumps.size:
            k = int(jumps[0])
            raise FptError(
                f"{self.path}: {self._where(k)} jumps from {self.times[k]} to {self.times[k + 1]} where the "
                f"table steps by {unit}; fill the gap (no row for {self.times[k] + unit})"
            )


def _stamp(value, dated: bool) -> str:
    """A time as a message names it: a date alone at midnight, else date and time; a step as it is."""
    if not dated:
        return str(int(value))
    moment = np.datetime64(int(value), "ns")
    text = str(moment.astype("datetime64[s]")).replace("T", " ")
    return text[:10] if text.endswith("00:00:00") else text


def _float(text: str) -> float | None:
    """Python's reading of a cell as a number (series_csv's rules), None where it is none."""
    try:
        return float(text)
    except ValueError:
        return None
