"""`fpt predict RUN --level 50 90 99`: a forecast's prediction intervals at the levels asked for (percents,
statsforecast's `level`), split conformal on the run's validation split; the default (80 and 95, as the run
recorded them) is what it was; a level outside (0, 100) is one line, exit 2, before any work."""

from __future__ import annotations

import csv

import numpy as np
import pytest
from helpers import one_line_error, write_panel_csv, write_seasonal_csv

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.training.intervals import check_levels, conformal_intervals, intervals_at
from fpt.training.lifecycle import load_run
from fpt.training.run_dir import RunDir

TRAIN = ["--steps", "4", "--batch-size", "8", "--eval-every", "2", "--no-progress", "--no-baselines"]


@pytest.fixture(scope="module")
def panel_run(tiny_backbones, tmp_path_factory):
    """A run over a table of 20 monthly series, horizon 6: its table and its directory. 20, so that split
    conformal's finite-sample ranks (the ceil(21 x level / 100)-th of 20 residuals) tell 50, 90 and 99 apart."""
    folder = tmp_path_factory.mktemp("panel")
    write_panel_csv(folder / "sales.csv", lengths=range(30, 70, 2))
    argv = ["train", "--task", f"panel:{folder / 'sales.csv'}", "--horizon", "6", *TRAIN]
    assert main([*argv, "--backbone", tiny_backbones["gpt2"], "--out", str(folder / "run")]) == 0
    return folder / "sales.csv", folder / "run"


@pytest.fixture(scope="module")
def series_run(tiny_backbones, tmp_path_factory):
    """A run over the windows of one CSV of two columns (load, temp), horizon 12: its CSV and its directory."""
    folder = tmp_path_factory.mktemp("series")
    write_seasonal_csv(folder / "series.csv", 300)
    argv = ["train", "--task", f"forecast:{folder / 'series.csv'}", "--lookback", "48", "--horizon", "12"]
    argv += ["--patch-size", "8", "--patch-stride", "4", *TRAIN]
    assert main([*argv, "--backbone", tiny_backbones["gpt2"], "--out", str(folder / "run")]) == 0
    return folder / "series.csv", folder / "run"


def _predict(run, source, out, *levels) -> list[list[str]]:
    argv = ["predict", str(run), "--input", str(source), "--out", str(out), "--force"]
    assert main([*argv, *(["--level", *levels] if levels else [])]) == 0
    with open(out, newline="") as handle:
        return list(csv.reader(handle))


def _columns(rows: list[list[str]]) -> dict[str, np.ndarray]:
    return {name: np.array([float(row[i]) for row in rows[1:]]) for i, name in enumerate(rows[0]) if i >= 2}


def test_a_table_of_series_gets_the_levels_asked_for_nested_around_the_forecast(panel_run, tmp_path, capsys):
    table, run = panel_run
    rows = _predict(run, table, tmp_path / "future.csv", "99", "50", "90")  # in any order: written from the lowest
    assert rows[0] == ["unique_id", "ds", "fpt", *(f"fpt-{side}-{lv}" for lv in (50, 90, 99) for side in ("lo", "hi"))]
    assert "with 50%, 90% and 99% intervals (split conformal on validation)" in capsys.readouterr().out
    b = _columns(rows)
    assert np.all(b["fpt-lo-99"] <= b["fpt-lo-90"]) and np.all(b["fpt-lo-90"] <= b["fpt-lo-50"])
    assert np.all(b["fpt-lo-50"] <= b["fpt"]) and np.all(b["fpt"] <= b["fpt-hi-50"])
    assert np.all(b["fpt-hi-50"] <= b["fpt-hi-90"]) and np.all(b["fpt-hi-90"] <= b["fpt-hi-99"])
    widths = {lv: b[f"fpt-hi-{lv}"] - b[f"fpt-lo-{lv}"] for lv in (50, 90, 99)}
    assert widths[99].sum() > widths[90].sum() > widths[50].sum()  # a wider level, a wider interval
    default = _predict(run, table, tmp_path / "default.csv")
    np.testing.assert_array_equal(_columns(default)["fpt"], b["fpt"])  # the forecast does not move


def test_the_default_is_the_runs_recorded_80_and_95_and_levels_it_recorded_are_read_not_computed(
    panel_run, tmp_path, capsys
):
    table, run = panel_run
    default = _predict(run, table, tmp_path / "default.csv")
    assert default[0] == ["unique_id", "ds", "fpt", "fpt-lo-80", "fpt-hi-80", "fpt-lo-95", "fpt-hi-95"]
    assert "with 80% and 95% intervals" in capsys.readouterr().out
    _predict(run, table, tmp_path / "asked.csv", "95", "80")
    assert (tmp_path / "asked.csv").read_bytes() == (tmp_path / "default.csv").read_bytes()
    # a level the run did not record brings every level asked for from validation again: 80 as recorded
    again = _columns(_predict(run, table, tmp_path / "again.csv", "80", "60"))
    recorded = _columns(default)
    np.testing.assert_allclose(again["fpt-lo-80"], recorded["fpt-lo-80"], rtol=1e-6)
    np.testing.assert_allclose(again["fpt-hi-80"], recorded["fpt-hi-80"], rtol=1e-6)
    assert np.all(again["fpt-hi-60"] - again["fpt-lo-60"] <= again["fpt-hi-80"] - again["fpt-lo-80"])


def test_a_csv_series_gets_each_columns_bounds_at_the_levels_asked_for(series_run, tmp_path, capsys):
    source, run = series_run
    rows = _predict(run, source, tmp_path / "forecast.csv", "50", "97.5")
    expected = [f"{c}-{side}-{lv}" for lv in ("50", "97.5") for c in ("load", "temp") for side in ("lo", "hi")]
    assert rows[0] == ["date", "load", "temp", *expected] and len(rows) == 13
    assert "with 50% and 97.5% intervals" in capsys.readouterr().out
    b = {name: np.array([float(row[i]) for row in rows[1:]]) for i, name in enumerate(rows[0]) if i}
    for c in ("load", "temp"):
        assert np.all(b[f"{c}-lo-97.5"] <= b[f"{c}-lo-50"]) and np.all(b[f"{c}-lo-50"] <= b[c])
        assert np.all(b[c] <= b[f"{c}-hi-50"]) and np.all(b[f"{c}-hi-50"] <= b[f"{c}-hi-97.5"])
        assert (b[f"{c}-hi-97.5"] - b[f"{c}-lo-97.5"]).sum() > (b[f"{c}-hi-50"] - b[f"{c}-lo-50"]).sum()
    default = _predict(run, source, tmp_path / "default.csv")
    bounds = [f"{c}-{side}-{lv}" for lv in (80, 95) for c in ("load", "temp") for side in ("lo", "hi")]
    assert default[0] == ["date", "load", "temp", *bounds]


def test_an_hf_export_writes_the_levels_asked_for_as_the_run_does(series_run, tmp_path):
    source, run = series_run
    export = tmp_path / "export"
    assert main(["export", str(run), "--format", "hf", "--out", str(export)]) == 0
    for directory, name in ((run, "run.csv"), (export, "export.csv")):
        _predict(directory, source, tmp_path / name, "60", "90")  # from validation again: the export rebuilds it
    assert "load-lo-60" in (tmp_path / "run.csv").read_text().splitlines()[0]
    assert (tmp_path / "run.csv").read_text() == (tmp_path / "export.csv").read_text()


@pytest.mark.parametrize(
    "levels, words",
    [
        (["0"], ["--level 0: not an interval's level", "between 0 and 100"]),
        (["80", "100"], ["--level 100: not", "between 0 and 100, exclusive"]),
        (["-5"], ["--level -5: not"]),
        (["nan"], ["--level nan: not"]),
        (["0.9"], None),  # inside (0, 100): a level of 0.9%, allowed (the message for 0 says 0.9 coverage is 90)
        (["80,95"], ["'80,95' is not a number", "separated by spaces, e.g. --level 80 95"]),
    ],
)
def test_a_bad_level_is_one_line_before_any_work(tmp_path, capsys, levels, words):
    # the run does not exist: the level is refused before the run is read
    status = main(["predict", str(tmp_path / "no-run"), "--input", "x.csv", "--level", *levels])
    assert status == 2
    message = one_line_error(capsys)
    if words is None:
        assert "no-run" in message  # the level passed; the missing run is what is refused
    else:
        assert all(word in message for word in words), message


def test_level_is_refused_where_no_interval_is_written(series_run, tmp_path, capsys):
    source, run = series_run
    np.savez(tmp_path / "windows.npz", x=np.zeros((2, 48)))
    argv = ["predict", str(run), "--level", "90", "--out"]
    assert main([*argv, str(tmp_path / "f.csv"), "--input", str(tmp_path / "windows.npz")]) == 2
    assert "not for windows (windows.npz); leave --level out" in one_line_error(capsys)
    assert main([*argv, str(tmp_path / "f.npy"), "--input", str(source)]) == 2
    assert "holds the forecast alone; write .csv or .jsonl" in one_line_error(capsys)
    assert not (tmp_path / "f.csv").exists() and not (tmp_path / "f.npy").exists()


def test_the_python_api_takes_levels_as_the_command_does(panel_run):
    _, run = panel_run
    _, task, model, _ = load_run(run)
    recorded = RunDir(run).read_summary()["intervals"]
    fresh = conformal_intervals(model, task, levels=[90, 50], scored=False)
    assert list(fresh["halfwidths"]) == ["50", "90"] and "test_coverage" not in fresh
    assert all(a <= b for a, b in zip(fresh["halfwidths"]["50"], fresh["halfwidths"]["90"]))
    scored = conformal_intervals(model, task)  # the default: what the run recorded, its coverage included
    for level in ("80", "95"):
        assert scored["halfwidths"][level] == pytest.approx(recorded["halfwidths"][level])
    assert set(scored["test_coverage"]) == {"80", "95"}
    assert intervals_at(model, task, [95], recorded)["halfwidths"] == {"95": recorded["halfwidths"]["95"]}
    with pytest.raises(FptError, match=r"^--level 150: not an interval's level; give percents between 0 and 100"):
        check_levels([150])
    assert check_levels(80) == (80.0,) and check_levels([np.float64(95), 80, 95]) == (80.0, 95.0)
