"""The README's results tables are what the committed result files give (benchmarks/readme_tables.py):
a number edited by hand, or a result file changed without rerunning the script, fails here."""

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def readme_tables():
    spec = importlib.util.spec_from_file_location("readme_tables", ROOT / "benchmarks" / "readme_tables.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def rendered(readme_tables):
    return readme_tables.render()


def test_every_readme_table_is_what_the_committed_files_give(readme_tables, rendered):
    wrong = readme_tables.differences((ROOT / "README.md").read_text(), rendered)
    assert not wrong, "README.md and benchmarks/results/ disagree (rerun benchmarks/readme_tables.py):\n" + "\n".join(
        wrong
    )


def test_the_check_names_a_table_edited_by_hand_and_one_without_markers(readme_tables, rendered, tmp_path):
    text = readme_tables.update((ROOT / "README.md").read_text(), rendered)
    assert readme_tables.differences(text, rendered) == []
    # a hand edit inside the memory table: one figure changed
    start = text.index("<!-- table:memory -->")
    edited = text[:start] + text[start:].replace("| listops | 1999 |", "| listops | 2000 |", 1)
    assert edited != text
    assert readme_tables.differences(edited, rendered) == ["memory: differs from what the files give"]
    # markers removed: the table is reported missing, and update refuses rather than guess a place
    unmarked = text.replace("<!-- table:speed -->\n", "")
    assert readme_tables.differences(unmarked, rendered)[0].startswith("speed: no <!-- table:speed -->")
    with pytest.raises(SystemExit, match="no markers for table 'speed'"):
        readme_tables.update(unmarked, rendered)
    # the command line: --check exits 1 on the edited file and changes nothing; a plain run repairs it
    readme = tmp_path / "README.md"
    readme.write_text(edited)
    assert readme_tables.main(["--check", "--readme", str(readme)]) == 1
    assert readme.read_text() == edited
    assert readme_tables.main(["--readme", str(readme), "memory"]) == 0
    assert readme_tables.main(["--check", "--readme", str(readme)]) == 0


def test_the_speed_table_divides_the_medians_it_shows(rendered):
    # the example: Bit Memory at 806 / 757 ms is 1.06x (the mean throughputs gave 1.14x)
    row = next(
        line for line in rendered["speed"].splitlines() if line.startswith("| MiniLM, Bit Memory") and "| fpt |" in line
    )
    assert "| 757 ms | 1.06x |" in row
