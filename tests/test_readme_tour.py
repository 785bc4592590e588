"""README.md's "A five-minute tour" runs as written: every command of its bash block, in order, in an
empty folder, so a file the tour uses but never makes, an option that is gone or a command that
errors fails here. Only the cost is shrunk: the tiny random BERT (tests/conftest.py) stands in for
the packaged MiniLM, and training stops after a few steps (`--steps`, `--budget`, given after the
tour's own, win). benchmarks/tour.py runs the same block unshrunk and times it."""

from __future__ import annotations

import importlib.util
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from fpt import FptError
from fpt.cli import main
from fpt.cli.parser import build_parser

ROOT = Path(__file__).resolve().parent.parent
TRAIN_STEPS = "110"  # past the fast recipe's 100 warm-up steps (a shorter run is refused); npz: 1.9 s with loading
REPRODUCE_BUDGET = "10"


@pytest.fixture(scope="module")
def tour():
    spec = importlib.util.spec_from_file_location("tour", ROOT / "benchmarks" / "tour.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclass looks its module up there
    spec.loader.exec_module(module)
    return module


def shrunk(argv: list[str], backbone: str) -> list[str]:
    """An `fpt` command's arguments as the tour writes them, with the tiny backbone for MiniLM and a
    few steps of training added at the end."""
    argv = [backbone if i and argv[i - 1] == "--backbone" and a == "minilm" else a for i, a in enumerate(argv)]
    more = [] if "--backbone" in argv or argv[0] not in ("train", "info", "reproduce") else ["--backbone", backbone]
    more += {"train": ["--steps", TRAIN_STEPS], "reproduce": ["--budget", REPRODUCE_BUDGET]}.get(argv[0], [])
    return [*argv, *more]


def test_a_tour_block_is_read_command_by_command(tour):
    readme = """# x

## A five-minute tour

```bash
# 1. one
fpt train --task bit-xor \\
    --out runs/a   # a comment

# 2. two: a comment
#    over two lines
python -c "print('#')"
fpt info
```

```bash
fpt not-the-tour
```
"""
    assert [(c.step, c.text) for c in tour.tour_commands(readme)] == [
        ("1", "fpt train --task bit-xor --out runs/a   # a comment"),
        ("2", "python -c \"print('#')\""),
        ("2", "fpt info"),
    ]
    with pytest.raises(ValueError, match="no heading"):
        tour.tour_commands(readme.replace("five-minute", "ten-minute"))


def test_the_readme_tour_parses(tour):
    """Without training: every command of the tour is `fpt` or `python`, and each `fpt` command's
    options are ones fpt has (a removed or renamed option fails here, in `make test-fast` too)."""
    commands = tour.tour_commands((ROOT / "README.md").read_text())
    assert [c.step for c in commands][0] == "1" and len(commands) >= 5
    for command in commands:
        argv = shlex.split(command.text, comments=True)
        assert argv[0] in ("fpt", "python"), command.text
        if argv[0] == "fpt":
            try:
                build_parser().parse_args(argv[1:])
            except (SystemExit, FptError):  # fpt's parser says an unknown option as an FptError
                pytest.fail(f"fpt does not take the tour's {command.text!r}")


@pytest.mark.slow
def test_the_tour_runs_as_written(tour, tiny_backbones, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for command in tour.tour_commands((ROOT / "README.md").read_text()):
        argv = shlex.split(command.text, comments=True)
        if argv[0] == "python":
            done = subprocess.run([sys.executable, *argv[1:]], capture_output=True, text=True)
            assert done.returncode == 0, (command.text, done.stderr[-2000:])
            continue
        assert argv[0] == "fpt", f"the tour runs {argv[0]!r}, which this test does not know: {command.text}"
        args = shrunk(argv[1:], tiny_backbones["bert"])
        try:
            code = main(args)
        except SystemExit as e:  # argparse: an option the command no longer has
            code = e.code
        assert code == 0, (command.text, capsys.readouterr().err[-2000:])
        if "--out" in args:
            assert (tmp_path / args[args.index("--out") + 1]).exists(), command.text
