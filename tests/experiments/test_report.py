"""HTML reports, checked in a real headless Chromium where Debian's chromium is installed."""

import json
import shutil
import subprocess

import pytest

from fpt.cli import main

TINY = [
    "--task",
    "bit-xor",
    "--steps",
    "4",
    "--eval-every",
    "2",
    "--batch-size",
    "4",
    "--eval-size",
    "16",
    "--no-progress",
]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
HEADLESS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def run_dir(tiny_gpt2, tmp_path):
    run = tmp_path / "run"
    assert main(["train", "--backbone", tiny_gpt2, *TINY, "--out", str(run)]) == 0
    assert main(["attention", str(run)]) == 0
    return run


def test_run_report_holds_config_results_and_figures_inline(run_dir):
    assert main(["report", str(run_dir)]) == 0
    page = (run_dir / "report.html").read_text()
    assert '<table id="config">' in page and '<table id="results">' in page
    assert page.count("data:image/png;base64,") == 2  # learning curve + attention map, inline
    assert 'src="http' not in page and 'href="http' not in page  # self-contained
    accuracy = json.loads((run_dir / "summary.json").read_text())["final"]["accuracy"]
    assert f"{100 * accuracy:.2f}%" in page
    assert "None" not in page and "{&#x27;" not in page  # config values as a reader writes them, no reprs


@pytest.mark.slow
def test_sweep_report(tiny_gpt2, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"grid:\n  task: [bit-xor]\n  variant: [fpt, random]\noptions:\n  steps: 2\n"
        f"  eval_every: 1\n  eval_size: 8\n  backbone: {tiny_gpt2}\n"
    )
    assert main(["sweep", str(spec), "--out", str(tmp_path / "sweep"), "--no-progress"]) == 0
    assert main(["report", str(tmp_path / "sweep")]) == 0
    page = (tmp_path / "sweep" / "report.html").read_text()
    assert '<table id="results">' in page and "variant=random" in page and '<table id="runs">' in page


def test_report_of_something_else_is_a_clear_error(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert "neither a run directory" in capsys.readouterr().err


@pytest.mark.parametrize("spec", ["{", '{"grid": 5, "options": {}}'])
def test_a_sweep_report_with_a_damaged_spec_is_one_line(tmp_path, capsys, spec):
    (tmp_path / "results.csv").write_text("task,status\nbit-xor,done\n")
    (tmp_path / "spec.json").write_text(spec)
    assert main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert (
        "spec.json" in err and "fpt sweep" in err and err.count("\n") == 1 and not (tmp_path / "report.html").exists()
    )


@pytest.mark.skipif(CHROMIUM is None, reason="Debian's chromium is not installed (make test installs it where apt can)")
def test_report_renders_in_a_real_browser(run_dir, tmp_path):
    assert main(["report", str(run_dir)]) == 0
    url = (run_dir / "report.html").as_uri()
    profile = ["--user-data-dir=" + str(tmp_path / "profile")]
    dom = subprocess.run(
        [CHROMIUM, *HEADLESS, *profile, "--dump-dom", url], capture_output=True, text=True, timeout=120
    ).stdout
    assert '<table id="results">' in dom and "heldout" in dom
    shot = tmp_path / "shot.png"
    subprocess.run(
        [CHROMIUM, *HEADLESS, *profile, "--window-size=1200,1600", f"--screenshot={shot}", url],
        capture_output=True,
        timeout=120,
    )
    from matplotlib.image import imread

    pixels = imread(shot)
    assert pixels.shape[0] >= 1000 and pixels.std() > 0.05  # a page with content, not a blank canvas


@pytest.mark.slow
def test_a_sweep_report_shows_its_configuration_as_a_table_not_json(tiny_gpt2, tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"grid:\n  task: [bit-xor]\n  seed: [0, 1]\noptions:\n  steps: 2\n  eval_size: 8\n  backbone: {tiny_gpt2}\n"
    )
    sweep = tmp_path / "sweep"
    assert main(["sweep", str(spec), "--out", str(sweep), "--no-progress"]) == 0
    assert main(["report", str(sweep)]) == 0
    page = (sweep / "report.html").read_text()
    assert "<td>grid: seed</td><td>0, 1</td>" in page and "<td>steps</td><td>2</td>" in page
    assert '{"task"' not in page and "{&quot;" not in page
