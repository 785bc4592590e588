"""Reliability, round three (issue 35): what fpt writes and reads back. Predictions never replace a
run's own files and never hold NaN; an evaluation never outlives the run it scored; weights of the
wrong dtype and configs asking for gigabytes are refused in one line before anything is built; a
killed export's temporary folder does not stay behind."""

import json
import math
import os
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import one_line_error, raises_naming, write_idx
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from fpt.cli import main
from fpt.core.paths import write_json
from fpt.data.idx import read_idx
from fpt.experiments.report import write_report
from fpt.serve.export import export_run
from fpt.serve.predict import check_output
from fpt.training.run_dir import RunDir


def _bits(tmp_path):
    np.savez(tmp_path / "bits.npz", x=np.random.default_rng(0).integers(0, 2, (5, 8)))
    return tmp_path / "bits.npz"


def _predict(run, inputs, out) -> int:
    return main(["predict", str(run), "--input", str(inputs), "--out", str(out)])


def _rewrite_safetensors(path, change):
    """Rewrite a safetensors file with change(name, tensor) applied, its metadata kept."""
    with safe_open(str(path), framework="pt") as handle:
        metadata = handle.metadata()
    tensors = {name: change(name, tensor) for name, tensor in load_file(str(path)).items()}
    save_file(tensors, str(path), metadata=metadata)


# --- 1. an output path onto a run's own files ---------------------------------------------------


def test_predictions_never_replace_the_files_of_a_run(finished_run, tmp_path, capsys):
    inputs = _bits(tmp_path)
    record = (finished_run / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert _predict(finished_run, inputs, finished_run / "metrics.jsonl") == 2
    assert "metrics.jsonl, a file fpt keeps" in one_line_error(capsys)
    link = tmp_path / "predictions.jsonl"  # a link elsewhere onto the record is the record
    link.symlink_to(finished_run / "metrics.jsonl")
    assert _predict(finished_run, inputs, link) == 2
    assert (finished_run / "metrics.jsonl").read_bytes() == record
    for name in vars(RunDir).values():  # and every other file of a run, whatever its name becomes
        if isinstance(name, str) and "." in name and Path(name).suffix in (".csv", ".jsonl", ".npy"):
            raises_naming(lambda: check_output(finished_run / name), name, "a file fpt keeps")
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "spec.json").write_text("{}")
    raises_naming(lambda: check_output(sweep / "results.csv"), "results.csv", "a file fpt keeps")
    assert main(["predict", str(finished_run), "--input", str(inputs)]) == 0  # beside the run's files: fine
    assert _predict(finished_run, inputs, finished_run / "mine.jsonl") == 0
    assert len((finished_run / "mine.jsonl").read_text().splitlines()) == 5
    assert (finished_run / "predictions-bits.npz.jsonl").read_text() == (finished_run / "mine.jsonl").read_text()
    assert (finished_run / "metrics.jsonl").read_bytes() == record


# --- 2. an evaluation of a run another process holds, and a stale one ------------------------------


def test_a_run_another_process_holds_is_not_evaluated(finished_run, capsys, monkeypatch):
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time; from fpt.training.run_dir import RunDir; run = RunDir(sys.argv[1]); run.lock(); "
            "print('held', flush=True); time.sleep(120)",
            str(finished_run),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        capsys.readouterr()
        with monkeypatch.context() as patch:  # refused before the run is loaded and scored, not at the write
            patch.setattr("fpt.training.lifecycle.load_run", lambda *a, **k: pytest.fail("a held run was loaded"))
            assert main(["evaluate", str(finished_run)]) == 2
        assert "in use by another fpt process" in one_line_error(capsys)
        assert not (finished_run / "evaluation.json").exists()
        raises_naming(lambda: RunDir(finished_run).check_not_in_use(), "in use by another fpt process")
    finally:
        holder.kill()
        holder.wait()
    assert main(["evaluate", str(finished_run)]) == 0  # once it is gone
    assert json.loads((finished_run / "evaluation.json").read_text())["step"] == 2


def test_an_evaluation_older_than_the_summary_is_never_shown_nor_written(finished_run, tmp_path):
    run = RunDir(finished_run)
    assert main(["evaluate", str(finished_run)]) == 0
    evaluation = run.read_evaluation()
    assert evaluation["step"] == 2
    stale = {**evaluation, "step": 1, "splits": {k: {**r, "examples": 7777} for k, r in evaluation["splits"].items()}}
    write_json(finished_run / "evaluation.json", stale)  # as `fpt evaluate` left it at step 1, mid-training
    report = write_report(finished_run, tmp_path / "stale.html").read_text()
    assert "7,777" not in report
    assert "scored step 1, before the run ended at step 2" in report
    raises_naming(lambda: run.write_evaluation(stale), "finished at step 2", "fpt evaluate")
    assert json.loads((finished_run / "evaluation.json").read_text())["step"] == 1  # untouched


# --- 3. NaN: inputs beyond float32, NaN weights, JSON ----------------------------------------------


@pytest.fixture
def vector_run(tiny_gpt2, tmp_path):
    """A run on float feature vectors (npz:PATH, x (N, 5, 3))."""
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "train.npz", x=rng.normal(size=(24, 5, 3)).astype(np.float32), y=np.arange(24) % 2)
    out = tmp_path / "vectors"
    argv = ["train", "--task", f"npz:{tmp_path / 'train.npz'}", "--backbone", tiny_gpt2, "--steps", "1"]
    assert main([*argv, "--batch-size", "4", "--no-progress", "--out", str(out)]) == 0
    return out


@pytest.mark.parametrize(
    "x, words",
    [
        (np.full((2, 5, 3), 1e300), "beyond float32"),  # fine as float64, infinite as float32
        (np.full((2, 5, 3), 3e38, dtype=np.float32), "outputs are NaN or infinite"),  # overflows inside
        (np.where(np.eye(5, 3, dtype=bool), np.nan, 0.5)[None].repeat(2, 0), "NaN"),
    ],
)
def test_inputs_whose_arithmetic_overflows_are_refused_and_nothing_is_written(vector_run, tmp_path, capsys, x, words):
    np.savez(tmp_path / "new.npz", x=x)
    for out in ("p.jsonl", "p.csv", "p.npy"):
        capsys.readouterr()
        assert _predict(vector_run, tmp_path / "new.npz", tmp_path / out) == 2
        assert words in one_line_error(capsys)
        assert not (tmp_path / out).exists()


def test_nan_weights_are_refused_not_written_as_class_0(finished_run, tmp_path, capsys):
    inputs = _bits(tmp_path)
    assert _predict(finished_run, inputs, tmp_path / "good.jsonl") == 0
    for line in (tmp_path / "good.jsonl").read_text().splitlines():
        json.loads(line, parse_constant=lambda name: pytest.fail(f"bare {name} in the predictions"))
    _rewrite_safetensors(
        finished_run / "checkpoint.safetensors",
        lambda name, t: torch.full_like(t, math.nan) if name == "param.head.linear.weight" else t,
    )
    capsys.readouterr()
    assert _predict(finished_run, inputs, tmp_path / "p.jsonl") == 2
    assert "weights that are not finite" in one_line_error(capsys)
    assert not (tmp_path / "p.jsonl").exists()


def test_fpt_never_writes_bare_nan_as_json(tmp_path):
    with pytest.raises(ValueError):
        write_json(tmp_path / "x.json", {"loss": math.nan})
    assert list(tmp_path.iterdir()) == []


# --- 4. weights of the right shapes but another dtype -------------------------------------------------


def test_int32_weights_of_the_right_shapes_are_refused(finished_run, tmp_path, capsys):
    inputs = _bits(tmp_path)
    hf = export_run(finished_run, "hf", tmp_path / "hf")
    to_int = lambda name, t: t.to(torch.int32) if "head" in name and t.is_floating_point() else t  # noqa: E731
    _rewrite_safetensors(hf / "model.safetensors", to_int)
    _rewrite_safetensors(finished_run / "checkpoint.safetensors", to_int)
    for model in (hf, finished_run):
        capsys.readouterr()
        assert _predict(model, inputs, tmp_path / "p.npy") == 2
        assert "int32" in one_line_error(capsys)
        assert not (tmp_path / "p.npy").exists()


# --- 5. a saved config asking for gigabytes ----------------------------------------------------------


def test_a_saved_config_asking_for_gigabytes_is_refused_before_building(finished_run, tmp_path, capsys, monkeypatch):
    inputs = _bits(tmp_path)
    hf = export_run(finished_run, "hf", tmp_path / "hf")
    good = json.loads((hf / "config.json").read_text())
    spec = good["fpt"]["task_spec"]
    for damage, words in (
        ({"fpt": {**good["fpt"], "task_spec": {**spec, "num_classes": 10**9}}}, "1,000,000,000 classes"),
        ({"fpt": {**good["fpt"], "task_spec": {**spec, "vocab_size": 10**8}}}, "262,144"),
        ({"n_embd": 200_000, "n_head": 2}, "describes another model than model.safetensors holds"),  # 480 GB
        ({"n_layer": 5_000}, "5,000 blocks in the config"),  # refused before building 5,000 blocks
        ({"num_hidden_layers": 5_000}, "5,000 blocks in the config"),  # GPT-2 reads it as n_layer
    ):
        (hf / "config.json").write_text(json.dumps({**good, **damage}))
        capsys.readouterr()
        assert _predict(hf, inputs, tmp_path / "p.npy") == 2
        assert words in one_line_error(capsys)
    (hf / "config.json").write_text(json.dumps(good))

    def cannot_allocate(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:117] DefaultCPUAllocator: can't allocate memory")

    monkeypatch.setattr("fpt.backbones.backbone_from_config", cannot_allocate)  # transformer imports it when used
    capsys.readouterr()
    assert _predict(hf, inputs, tmp_path / "p.npy") == 2
    assert "not enough memory" in one_line_error(capsys)
    assert not (tmp_path / "p.npy").exists()


# --- 6. sizes and shapes a data file declares -------------------------------------------------------


@pytest.mark.parametrize(
    "arrays, words",
    [
        (dict(x=np.ones((8, 4), int), y=np.array([0, 1] * 3 + [0, 10**9])), ["1,000,000,001 classes", "100,000"]),
        (dict(x=np.array([[1, 2, 3, 10**8]] * 8), y=np.arange(8) % 2), ["100,000,001 token ids", "262,144"]),
    ],
)
def test_npz_labels_or_token_ids_asking_for_gigabytes_are_refused(tiny_gpt2, tmp_path, capsys, arrays, words):
    np.savez(tmp_path / "big.npz", **arrays)
    argv = ["train", "--task", f"npz:{tmp_path / 'big.npz'}", "--backbone", tiny_gpt2, "--steps", "1"]
    assert main([*argv, "--batch-size", "4", "--no-progress", "--out", str(tmp_path / "run")]) == 2
    error = one_line_error(capsys)
    assert all(w in error for w in words), error
    assert not (tmp_path / "run").exists()


def test_an_npz_test_split_longer_than_the_training_rows_is_refused_before_the_run_is_made(tiny_gpt2, tmp_path, capsys):
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "train.npz", x=rng.integers(0, 9, (16, 5)), y=np.arange(16) % 2)
    np.savez(tmp_path / "test.npz", x=rng.integers(0, 9, (6, 9)), y=np.arange(6) % 2)
    argv = ["train", "--task", f"npz:{tmp_path / 'train.npz'}", "--test-path", str(tmp_path / "test.npz")]
    more = ["--backbone", tiny_gpt2, "--steps", "1", "--batch-size", "4", "--no-progress", "--extra-positions"]
    assert main([*argv, *more, "--out", str(tmp_path / "run")]) == 2
    assert "rows of 9 tokens, longer than the 5" in one_line_error(capsys)
    assert not (tmp_path / "run").exists()
    mask = np.arange(9) < 5  # the same rows, padded past 5 but marked as 5 tokens long, are read
    np.savez(tmp_path / "test.npz", x=rng.integers(0, 9, (6, 9)), y=np.arange(6) % 2, mask=np.tile(mask, (6, 1)))
    assert main([*argv, *more, "--out", str(tmp_path / "run")]) == 0


def test_an_idx_header_with_more_dimensions_than_numpy_allows_is_one_line(tmp_path):
    path = write_idx(tmp_path / "x-images-idx3-ubyte", np.zeros((2, 2), np.uint8))
    data = bytearray(path.read_bytes())
    data[3] = 40  # dimensions
    path.write_bytes(bytes(data[:4]) + b"\0\0\0\1" * 40)
    raises_naming(lambda: read_idx(path), "40 dimensions", "32")


# --- 7. a killed export's temporary folder -----------------------------------------------------------


def test_an_export_killed_outright_leaves_nothing_once_exported_again(finished_run, tmp_path):
    dead = subprocess.Popen(["sleep", "60"])
    dead.send_signal(signal.SIGKILL)
    dead.wait()
    stale = tmp_path / f".hf.{dead.pid}.0123abcd.tmp"  # what `fpt export --out hf` had written when killed
    (stale / "sub").mkdir(parents=True)
    (stale / "model.safetensors").write_bytes(b"\0" * 1000)
    alive = tmp_path / f".other.{os.getpid()}.0123abcd.tmp"  # a live writer's is kept
    alive.mkdir()
    assert main(["export", str(finished_run), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    assert not stale.exists() and alive.exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == [alive.name]


def test_a_damaged_run_file_is_one_line_naming_it(finished_run):
    (finished_run / "summary.json").write_text("{")
    raises_naming(lambda: RunDir(finished_run).read_summary(), "summary.json", "not valid JSON", "damaged")
    (finished_run / "config.json").unlink()
    raises_naming(lambda: RunDir(finished_run).read_config(), "config.json is missing", "fpt run directory")
