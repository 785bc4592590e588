"""The results tables of README.md and the benchmarks pages are what the committed result files give
(benchmarks/readme_tables.py): a number edited by hand, or a result file changed without rerunning the
script, fails here."""

import builtins
import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
CONTROLS_CHART = "benchmarks/results/controls/controls.png"  # tablegen.controls.CONTROLS_CHART


@pytest.fixture(scope="module")
def readme_tables():
    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "benchmarks" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def tablegen(readme_tables):
    """The table families (benchmarks/tablegen/), importable once readme_tables.py has put its folder on sys.path."""
    names = ("common", "controls", "headline", "homes", "precision", "results_index", "time_series")
    return SimpleNamespace(**{name: importlib.import_module(f"tablegen.{name}") for name in names})


@pytest.fixture(scope="module")
def rendered(readme_tables):
    return readme_tables.render()


def test_every_table_is_what_the_committed_files_give_in_the_file_it_lives_in(readme_tables, rendered):
    wrong = readme_tables.strays(ROOT)
    for home, tables in readme_tables.by_home(rendered).items():
        wrong += [f"{home}: {line}" for line in readme_tables.differences((ROOT / home).read_text(), tables)]
    assert not wrong, "the tables and benchmarks/results/ disagree (rerun benchmarks/readme_tables.py):\n" + "\n".join(
        wrong
    )


def _git_files(*options: str) -> set[str]:
    listing = subprocess.run(
        ["git", "ls-files", *options, "--", "benchmarks/results"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    return set(listing.stdout.splitlines())


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_every_file_a_committed_run_wrote_for_the_tables_is_committed_too():
    # CI renders the tables from a clean clone: a run's shuffled.json left out by .gitignore's runs/ rule
    # passed here and failed there. A guard for a checkout before a push (a clean clone has nothing
    # untracked). Checkpoints stay local by design, and a sweep cell's sittings.jsonl (the tables read
    # the sittings of converge/ runs only).
    tracked = _git_files()
    left_out = [
        name
        for name in _git_files("--others")  # untracked, ignored or not
        if str(Path(name).parent / "summary.json") in tracked
        and (name.endswith((".json", "metrics.jsonl")) or name.startswith("benchmarks/results/converge/"))
        and not name.endswith("checkpoint.safetensors")
    ]
    assert not left_out, "committed runs miss files the tables may read (git add -f them):\n" + "\n".join(left_out)


def test_writing_refuses_while_a_run_it_may_quote_is_untracked(readme_tables, tmp_path, monkeypatch, capsys):
    results = tmp_path / "benchmarks" / "results"
    names = ("done/summary.json", "done/metrics.jsonl", "sweep/cell/metrics.jsonl", "sweep/curves.png")
    ignored = ("swept/runs/cell/metrics.jsonl", "swept/runs/cell/checkpoint.safetensors")  # a sweep's runs/
    for name in names + ignored:
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text("{}")
    (tmp_path / ".gitignore").write_text("runs/\n")
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", ".gitignore", "benchmarks/results/done"], cwd=tmp_path, check=True)
    assert readme_tables.untracked_runs(results) == [
        str(results / "sweep/cell/metrics.jsonl"),
        str(results / "swept/runs/cell/metrics.jsonl"),
    ]

    monkeypatch.setattr(readme_tables, "RESULTS", results)
    (tmp_path / "README.md").write_text("unchanged")
    assert readme_tables.main(["--root", str(tmp_path), "headline"]) == 2
    assert "sweep/cell/metrics.jsonl (and 1 more) is not tracked by git" in capsys.readouterr().err
    assert (tmp_path / "README.md").read_text() == "unchanged"


def test_a_probe_shuffled_score_counts_only_at_the_run_last_step(tablegen, tmp_path):
    run = SimpleNamespace(path=tmp_path, split="test", steps=1000)
    assert tablegen.controls._shuffled_evaluation(run) is None  # never scored on shuffled tokens
    scored = {"shuffled": {"splits": {"test": {"accuracy": 0.25}}}}
    (tmp_path / "evaluation.json").write_text(json.dumps({**scored, "step": 1000}))
    assert tablegen.controls._shuffled_evaluation(run) == 25.0
    (tmp_path / "evaluation.json").write_text(json.dumps({**scored, "step": 500}))  # an earlier checkpoint's
    assert tablegen.controls._shuffled_evaluation(run) is None


def test_a_head_probe_that_differs_from_its_none_run_beyond_the_head_is_refused(tablegen, tmp_path):
    config = {"task": "mnist", "seed": 0, "steps": 13000, "pooling": "last", "threads": 1}
    runs = {}
    for name, changes in {"none": {}, "probe": {"pooling": "flatten", "threads": None}, "longer": {"steps": 9}}.items():
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({**config, **changes}))
        runs[name] = SimpleNamespace(path=tmp_path / name, seed=0)
    tablegen.controls._check_probe(runs["probe"], [runs["none"]])  # the head and threads alone: accepted
    with pytest.raises(SystemExit, match="differs from .*none in steps"):
        tablegen.controls._check_probe(runs["longer"], [runs["none"]])


def test_the_front_page_carries_the_headline_and_each_benchmarks_page_its_topic(tablegen):
    front = (ROOT / "README.md").read_text()
    markers = re.compile(r"^<!-- table:([\w-]+) -->$", re.M)
    assert markers.findall(front) == ["headline"]
    assert len(front.splitlines()) <= 250  # the front door stays one short page
    pages = {p.relative_to(ROOT).as_posix(): p.read_text() for p in (ROOT / "benchmarks").glob("*.md")}
    found = {name: home for home, text in pages.items() for name in markers.findall(text)}
    assert found == {name: home for name, home in tablegen.homes.HOMES.items() if home != "README.md"}
    # the summary is one screen and quotes the tables without holding one; no page outgrows a read
    assert markers.findall(pages["benchmarks/README.md"]) == []
    assert len(pages["benchmarks/README.md"].splitlines()) <= 60
    assert {home: len(text.splitlines()) for home, text in pages.items() if len(text.splitlines()) > 500} == {}


def test_the_headline_reads_each_seed_from_its_run(rendered):
    # the three earlier MNIST runs of the headline recipe (test watched), as their summary.json files give them
    row = next(line for line in rendered["headline"].splitlines() if line.startswith("| MNIST | earlier runs"))
    assert "98.16 ± 0.05 (98.15, 98.12, 98.21; three seeds)" in row
    assert "`converge/mnist-fpt-fast16k-dropout0-seed{0,1,2}`" in row


def _copy_tree(tmp_path: Path, charts: bool = True) -> Path:
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "README.md", tmp_path / "README.md")
    for page in (ROOT / "benchmarks").glob("*.md"):
        shutil.copy(page, tmp_path / "benchmarks" / page.name)
    if charts:
        chart = tmp_path / CONTROLS_CHART
        chart.parent.mkdir(parents=True)
        shutil.copy(ROOT / CONTROLS_CHART, chart)
    return tmp_path


def test_the_controls_chart_is_drawn_with_its_table_and_the_check_names_it_missing(
    readme_tables, tablegen, tmp_path, capsys
):
    assert tablegen.controls.CONTROLS_CHART == CONTROLS_CHART
    root = _copy_tree(tmp_path, charts=False)
    assert readme_tables.main(["--check", "--root", str(root)]) == 1  # the table links a picture not there
    assert f"{CONTROLS_CHART}: missing; the controls table shows it" in capsys.readouterr().err
    assert readme_tables.main(["--root", str(root), "controls", "--allow-untracked"]) == 0
    assert (root / CONTROLS_CHART).read_bytes().startswith(b"\x89PNG")
    assert readme_tables.main(["--check", "--root", str(root)]) == 0
    # a picture drawn from other runs (here: none of the XOR runs) is named stale
    from fpt.experiments.controls import read_arm_runs
    from fpt.experiments.plots import controls_chart

    runs = read_arm_runs(ROOT / "benchmarks" / "results" / "controls")
    controls_chart([r for r in runs if r.task != "bit-xor"], root / CONTROLS_CHART)
    capsys.readouterr()
    assert readme_tables.main(["--check", "--root", str(root)]) == 1
    assert f"{CONTROLS_CHART}: drawn from other runs than the controls table's, or by older" in capsys.readouterr().err


def test_the_check_names_a_table_edited_by_hand_and_one_without_markers(readme_tables, rendered, tmp_path):
    tables = readme_tables.by_home(rendered)["benchmarks/speed.md"]
    text = readme_tables.update((ROOT / "benchmarks" / "speed.md").read_text(), tables)
    assert readme_tables.differences(text, tables) == []
    # a hand edit inside the memory table: one figure changed
    start = text.index("<!-- table:memory -->")
    edited = text[:start] + text[start:].replace("| listops | 1999 |", "| listops | 2000 |", 1)
    assert edited != text
    assert readme_tables.differences(edited, tables) == ["memory: differs from what the files give"]
    # markers removed: the table is reported missing, and update refuses rather than guess a place
    unmarked = text.replace("<!-- table:speed -->\n", "")
    assert readme_tables.differences(unmarked, tables)[0].startswith("speed: no <!-- table:speed -->")
    with pytest.raises(SystemExit, match="no markers for table 'speed'"):
        readme_tables.update(unmarked, tables)
    # the command line: --check exits 1 on the edited file and changes nothing; a plain run repairs it
    root = _copy_tree(tmp_path)
    (root / "benchmarks" / "speed.md").write_text(edited)
    assert readme_tables.main(["--check", "--root", str(root)]) == 1
    assert (root / "benchmarks" / "speed.md").read_text() == edited
    # (a run in progress under benchmarks/results would stop a plain run here: test_writing_refuses_...)
    assert readme_tables.main(["--root", str(root), "memory", "--allow-untracked"]) == 0
    assert readme_tables.main(["--check", "--root", str(root)]) == 0


def test_a_table_moved_to_the_wrong_file_is_named(readme_tables, tmp_path):
    # the memory table's markers copied onto the front page: the script would never rewrite them there
    root = _copy_tree(tmp_path)
    front = root / "README.md"
    front.write_text(front.read_text() + "\n<!-- table:memory -->\n<!-- /table:memory -->\n")
    assert readme_tables.strays(root) == ["memory: markers in README.md, but the table lives in benchmarks/speed.md"]
    assert readme_tables.main(["--check", "--root", str(root)]) == 1


def test_the_speed_table_divides_the_medians_it_shows(rendered):
    # the example: Bit Memory at 806 / 757 ms is 1.06x (the mean throughputs gave 1.14x)
    row = next(
        line for line in rendered["speed"].splitlines() if line.startswith("| MiniLM, Bit Memory") and "| fpt |" in line
    )
    assert "| 757 ms | 1.06x |" in row


def test_time_to_accuracy_is_the_first_held_out_step_at_the_threshold_times_the_idle_median(tablegen, rendered):
    # Bit Memory fp32, seed 0: held-out 98.71% at step 600, 99.40% at 700, so 700 steps to 99%
    record = tablegen.common._json(tablegen.common.RESULTS / "int8" / "fast_recipe_steps_zen4.json")
    step_ms = next(r["wall_ms"] for r in record["rows"] if (r["task"], r["variant"]) == ("bit-memory-fast", "fp32"))
    rows = [line for line in rendered["time-to-accuracy"].splitlines() if line.endswith("VNNI), 2 threads |")]
    row = next(line for line in rows if line.startswith("| Bit Memory (99%) | `fp32`"))
    assert f"| 700: {700 * step_ms / 60e3:.1f} min |" in row
    assert f"| 1,000: {1000 * step_ms / 60e3:.1f} min |" in row
    assert "| not in 5,000 |" in next(line for line in rows if "| `bf16` | 0 |" in line and "4x4" in line)


def test_time_to_accuracy_counts_a_tie_and_never_a_test_record(tablegen):
    records = [
        {"step": 100, "split": "val[:2000]", "accuracy": 0.97},
        {"step": 150, "split": "test", "accuracy": 0.99},
        {"step": 200, "split": "val[:2000]", "loss": 0.1},  # a record without accuracy (a forecast's)
        {"step": 300, "split": "val[:2000]", "accuracy": 0.98},
        {"step": 400, "split": "val", "accuracy": 0.985},
    ]
    assert tablegen.precision.first_step_at(records, 0.98) == 300
    assert tablegen.precision.first_step_at(records, 0.985) == 400
    assert tablegen.precision.first_step_at(records, 0.99) is None
    assert tablegen.precision.first_step_at(records[:1], 0.97) == 100


def test_a_forecast_average_weighs_each_horizon_once_and_waits_for_all_four(tablegen):
    def runs(*mses: float) -> list[dict]:
        return [{"test": {"test": {"mse": mse, "mae": mse / 2}}} for mse in mses]

    # H=96's three seeds average to 0.3 first, so it counts once beside the other horizons' one seed
    assert tablegen.time_series._average_cell([runs(0.2, 0.3, 0.4), runs(0.5), runs(0.6), runs(0.8)]) == "0.550 / 0.275"
    assert tablegen.time_series._average_cell([runs(0.2), runs(0.5), runs(0.6), []]) == "-"
    assert tablegen.time_series._average_cell([runs(0.2), runs(0.5), runs(0.6), [{"test": None}]]) == "-"


def test_a_headline_average_reads_every_seed_of_every_horizon_and_names_them(tablegen, tmp_path, monkeypatch):
    monkeypatch.setattr(tablegen.time_series, "RESULTS", tmp_path)  # where the horizons' run folders are looked up

    def run(h: int, seed: int, mse: float | None) -> None:
        folder = tmp_path / f"fc/ETTh1-h{h}-seed{seed}"
        folder.mkdir(parents=True)
        (folder / "config.json").write_text('{"task": "ett:ETTh1", "model": "linear"}')
        if mse is not None:  # None: a run not finished, no summary.json
            (folder / "summary.json").write_text(json.dumps({"test": {"test": {"mse": mse, "mae": mse}}}))

    row = tablegen.headline.Headline("ETTh1", "DLinear", (), average_of="fc/ETTh1-h{h}")
    for h, seed, mse in ((96, 0, 0.2), (96, 1, 0.4), (192, 0, 0.5), (336, 0, 0.6), (720, 0, None)):
        run(h, seed, mse)
    cells = tablegen.headline._average_headline(row)
    assert cells[2] == "0.423 / 0.437 (One Fits All DLinear)"
    assert cells[3] == "- (seeds per horizon: 2, 1, 1, 0)"  # no average until H=720 has a finished run
    assert cells[5] == "`fc/ETTh1-h{96,192,336,720}-seed*`"
    (tmp_path / "fc/ETTh1-h720-seed0/summary.json").write_text('{"test": {"test": {"mse": 0.9, "mae": 0.9}}}')
    # each horizon's seeds first: (0.3 + 0.5 + 0.6 + 0.9) / 4 (the five runs pooled would give 0.52)
    assert tablegen.headline._average_headline(row)[3] == "0.575 / 0.575 (seeds per horizon: 2, 1, 1, 1)"


def test_the_results_index_counts_what_git_tracks_and_names_the_tables_that_open_it(tablegen, tmp_path, monkeypatch):
    results = tmp_path / "benchmarks" / "results"
    files = {"a/run/summary.json": "{}", "a/run/checkpoint.safetensors": "x" * 3000, "b.json": "[]", "c/new.json": "{}"}
    for name, text in files.items():
        (results / name).parent.mkdir(parents=True, exist_ok=True)
        (results / name).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    subprocess.run(["git", "add", "benchmarks/results/a", "benchmarks/results/b.json"], cwd=tmp_path, check=True)
    monkeypatch.setattr(tablegen.common, "RESULTS", results)

    def through_path():
        return (results / "a/run/summary.json").read_text()

    def through_open():
        with open(results / "b.json") as handle:  # builtins.open, as csv readers do
            return handle.read()

    def looking_only():
        return str((results / "a/run/summary.json").exists()) + str(sorted(results.glob("*")))

    tables = {"one": through_path, "two": through_open, "three": looking_only}
    homes = {"one": "benchmarks/p.md", "two": "README.md", "three": "benchmarks/p.md"}
    index = tablegen.results_index.results_index_table(tables, homes).splitlines()
    assert index[2] == "| `a/` | 2 | 3.0 kB | 1 (3.0 kB) | 1 of 2 | [p.md](p.md): `one` |"
    assert index[3] == "| `b.json` | 1 | 0.0 kB | - | 1 of 1 | README.md: `two` |"
    assert index[4] == "| **all** | 3 | 3.0 kB | 1 (3.0 kB) | 2 of 3 | 3 tables |"  # c/ is not tracked
    assert index[-1] == "Tables that opened no file under benchmarks/results/: `three`."
    assert builtins.open is __import__("io").open and builtins.open.__module__ != tablegen.results_index.__name__


def test_every_table_opens_a_committed_file_and_the_index_says_which(rendered):
    index = rendered["results-index"]
    assert "opened no file" not in index and "git does not track" not in index
    converge = next(line for line in index.splitlines() if line.startswith("| `converge/` |"))
    assert "| 31 (" in converge  # the checkpoints, none of which a table opens
    assert "README.md: `headline`" in converge and "[converged.md](converged.md): `converged`" in converge


@pytest.mark.skipif(not (ROOT / ".git").exists(), reason="needs a git checkout")
def test_benchmarks_results_stays_within_its_budget_and_commits_no_new_checkpoint(tablegen):
    index = tablegen.results_index
    tracked = index.tracked_files(tablegen.common.RESULTS)
    assert index.budget_problems(tracked) == []
    assert len(index.CHECKPOINTS) == 31  # the allow-list only shrinks by itself: a new entry is a decision


def test_the_budget_names_the_largest_entries_and_refuses_an_unlisted_checkpoint(tablegen, monkeypatch):
    index = tablegen.results_index
    monkeypatch.setattr(index, "BUDGET_BYTES", 1000)
    monkeypatch.setattr(index, "BUDGET_FILES", 4)
    allowed = index.CHECKPOINTS[0]
    files = {allowed: 600, "new/run/checkpoint.safetensors": 300, "a/x.json": 50, "a/y.json": 60, "b.json": 5}
    assert index.budget_problems(files) == [
        "benchmarks/results tracks 1,015 bytes, over its budget of 1,000 (CONTRIBUTING.md); the largest entries: "
        "converge/ 0.6 kB, new/ 0.3 kB, a/ 0.1 kB, b.json 0.0 kB",
        "benchmarks/results tracks 5 files, over its budget of 4 (CONTRIBUTING.md); the most in: "
        "a/ 2 files, converge/ 1 file, new/ 1 file, b.json 1 file",
        "benchmarks/results/new/run/checkpoint.safetensors: a checkpoint not in CHECKPOINTS "
        "(benchmarks/tablegen/results_index.py): commit one only when a figure the pages quote is re-scored "
        "from it, and list it there; else git rm --cached it",
    ]
    del files["new/run/checkpoint.safetensors"]
    assert index.budget_problems(files) == []


def test_contributing_states_the_budget_the_test_checks(tablegen):
    index, text = tablegen.results_index, " ".join((ROOT / "CONTRIBUTING.md").read_text().split())
    assert f"at most {index.BUDGET_BYTES:,} bytes in {index.BUDGET_FILES:,} files" in text
    assert f"the {len(index.CHECKPOINTS)} checkpoints" in text
