"""What a user gives fpt to read: npz files that cannot train, a missing optional package, corrupt
backbone files. Each ends in one line naming the fix, exit status 2."""

from __future__ import annotations

import sys

import numpy as np
import pytest
from helpers import one_line_error

from fpt.cli import main
from fpt.core.errors import FptError


@pytest.mark.parametrize(
    "arrays, words",
    [
        (dict(x=np.zeros((4, 3), dtype=np.int64), y=np.zeros(4, dtype=np.int64)), "at least two classes"),
        (dict(x=np.zeros((4, 0), dtype=np.int64), y=np.arange(4) % 2), "length 0"),
        (dict(x=np.zeros((4, 3, 0), dtype=np.float32), y=np.arange(4) % 2), "tokens hold 0 values each"),
        (
            dict(x=np.zeros((4, 3), dtype=np.int64), y=np.arange(4) % 2, mask=np.array([[1, 1, 0]] * 3 + [[0, 0, 0]])),
            "no true token",
        ),
    ],
)
def test_npz_files_that_cannot_train_are_refused_before_the_run_directory(tmp_path, capsys, arrays, words):
    np.savez(tmp_path / "d.npz", **arrays)
    out = tmp_path / "run"
    assert main(["train", "--task", f"npz:{tmp_path / 'd.npz'}", "--heldout-fraction", "0.5", "--out", str(out)]) == 2
    assert words in one_line_error(capsys) and not out.exists()


def test_the_npz_task_without_its_file_is_one_line(tmp_path, capsys):
    assert main(["train", "--task", "npz", "--out", str(tmp_path / "run")]) == 2
    assert "npz:PATH" in one_line_error(capsys) and not (tmp_path / "run").exists()


def test_a_missing_optional_package_names_its_pip_command(tmp_path, monkeypatch):
    from fpt.data.tape import read_tape_lmdb
    from fpt.experiments.sweep_spec import load_spec

    monkeypatch.setitem(sys.modules, "lmdb", None)
    monkeypatch.setitem(sys.modules, "yaml", None)
    with pytest.raises(FptError, match="pip install lmdb"):
        read_tape_lmdb(tmp_path / "x.lmdb")
    (tmp_path / "spec.yaml").write_text("grid:\n  task: [bit-xor]\n")
    with pytest.raises(FptError, match="pip install pyyaml"):
        load_spec(tmp_path / "spec.yaml")


def test_a_broken_optional_package_is_one_line_naming_it_and_its_pip_command(tmp_path, monkeypatch, capsys):
    from fpt.experiments.sweep_spec import load_spec

    (tmp_path / "site" / "yaml").mkdir(parents=True)  # a yaml that raises as it is imported
    (tmp_path / "site" / "yaml" / "__init__.py").write_text("raise RuntimeError('half an upgrade\\nand more')\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.delitem(sys.modules, "yaml", raising=False)
    (tmp_path / "spec.yaml").write_text("grid:\n  task: [bit-xor]\n")
    with pytest.raises(FptError) as caught:
        load_spec(tmp_path / "spec.yaml")
    message = str(caught.value)
    assert "'yaml' fails to import (RuntimeError: half an upgrade)" in message and "pip install pyyaml" in message
    assert "\n" not in message


def test_corrupt_backbone_files_are_named_in_one_line(tmp_path, capsys):
    from conftest import save_tiny

    folder = tmp_path / "bert"
    save_tiny("bert", folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert main(["info", "--backbone", str(folder)]) == 2
    assert "may be damaged or truncated" in one_line_error(capsys)
    (folder / "config.json").write_text("{not json")
    assert main(["info", "--backbone", str(folder)]) == 2
    assert "cannot read the config" in one_line_error(capsys)
