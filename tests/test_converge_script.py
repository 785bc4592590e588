"""benchmarks/converge.py refuses bad arguments and says, by its exit status, when cells failed."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).parent.parent / "benchmarks" / "converge.py"


@pytest.mark.parametrize(
    "argv, words", [(["--threads", "0"], "--threads must be 1"), (["--minutes", "-1"], "--minutes must be a positive")]
)
def test_bad_arguments_are_refused_with_status_2(argv, words):
    proc = subprocess.run([sys.executable, str(SCRIPT), *argv], capture_output=True, text=True)
    assert proc.returncode == 2 and words in proc.stderr.strip().splitlines()[-1], proc.stderr


def test_a_failing_cell_makes_the_exit_status_1(tmp_path, monkeypatch, capsys):
    spec = importlib.util.spec_from_file_location("converge", SCRIPT)
    converge = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "converge", converge)  # its dataclasses look their module up
    spec.loader.exec_module(converge)
    bad = converge.Cell("bit-xor", "fpt", "paper", ("--seed", "0", "--lr", "-1"), None)
    monkeypatch.setattr(converge, "ROOT", tmp_path)
    monkeypatch.setattr(converge, "CELLS", {"bad": bad})
    monkeypatch.setattr(sys, "argv", ["converge.py", "--cells", "bad", "--threads", "1"])
    assert converge.main() == 1
    assert "1 cell(s) failed: bad" in capsys.readouterr().err
