"""Output paths and the disk: paths that cannot be made, a read-only parent, a directory where a file
goes, a full disk while checkpointing, a closed stdout. Each ends in one line, exit status 2,
nothing half-written."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest
from helpers import one_line_error, train_argv

import fpt.training.lifecycle as training
from fpt.cli import main
from fpt.core.errors import FptError
from fpt.training.run_dir import RunDir


def test_output_paths_that_cannot_be_made_are_refused_before_loading(tiny_gpt2, tmp_path, capsys):
    a_file = tmp_path / "file"
    a_file.write_text("x")
    for out, words in ((a_file, "is a file"), (a_file / "run", "which is a file"), (tmp_path / ("n" * 300), "255")):
        assert main(train_argv("no-such-backbone", out, "--steps", "1")) == 2  # refused before the backbone
        assert words in one_line_error(capsys)
    assert a_file.read_text() == "x"


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write anywhere")
def test_a_read_only_parent_is_refused(tmp_path, capsys):
    parent = tmp_path / "ro"
    parent.mkdir(mode=0o500)
    assert main(train_argv("no-such-backbone", parent / "run", "--steps", "1")) == 2
    assert "not writable" in one_line_error(capsys)


def test_export_onto_a_directory_is_refused(finished_run, tmp_path, capsys):
    assert main(["export-backbone", str(finished_run), "--out", str(tmp_path)]) == 2
    assert "is a directory" in one_line_error(capsys)


def test_a_full_disk_while_checkpointing_keeps_the_last_good_checkpoint(tiny_gpt2, tmp_path, monkeypatch):
    out = tmp_path / "run"
    main(train_argv(tiny_gpt2, out, "--steps", "2", "--eval-every", "1"))
    before = (out / RunDir.CHECKPOINT).read_bytes()

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("safetensors.torch.save_file", full)
    with pytest.raises(FptError, match="No space left on device.*step 2 is kept"):
        training.resume(out, steps=4, progress=False)
    assert (out / RunDir.CHECKPOINT).read_bytes() == before
    assert not [p for p in out.iterdir() if p.name.endswith(".tmp")]


def test_a_closed_stdout_is_not_a_traceback():
    code = f"{sys.executable} -m fpt backbones | head -1"
    result = subprocess.run(code, shell=True, capture_output=True, text=True, env={**os.environ, "HF_HUB_OFFLINE": "1"})
    assert result.stdout.startswith("name") and "Traceback" not in result.stderr, result.stderr


def test_a_refused_write_names_the_file_asked_for_and_leaves_nothing(tmp_path, monkeypatch):
    import safetensors.torch
    import torch
    from safetensors import SafetensorError

    from fpt.core.paths import atomic_write, save_safetensors

    def refused(tmp):
        raise OSError(28, "No space left on device", str(tmp))

    with pytest.raises(OSError) as caught:
        atomic_write(tmp_path / "out.csv", refused)
    assert caught.value.filename == str(tmp_path / "out.csv") and "No space" in caught.value.strerror
    assert not list(tmp_path.iterdir())  # no temporary file left behind

    def too_large(tensors, filename, metadata=None):  # what safetensors raises under a file-size limit
        open(filename, "wb").close()
        raise SafetensorError("Error while serializing: I/O error: File too large (os error 27)")

    monkeypatch.setattr(safetensors.torch, "save_file", too_large)
    (tmp_path / "checkpoint.safetensors").write_bytes(b"the last good one")
    with pytest.raises(OSError) as caught:
        save_safetensors(tmp_path / "checkpoint.safetensors", {"w": torch.zeros(2)}, {"format": "pt"})
    assert caught.value.filename == str(tmp_path / "checkpoint.safetensors")
    assert caught.value.strerror == "File too large (os error 27)"
    assert (tmp_path / "checkpoint.safetensors").read_bytes() == b"the last good one"
    assert [p.name for p in tmp_path.iterdir()] == ["checkpoint.safetensors"]
