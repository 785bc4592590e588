"""The reference classifiers beside fpt's accuracy (fpt.reference.classification,
fpt.training.reference_scores): trained on exactly fpt's training split, scored on the same split,
and the plain sentence `fpt train` prints about which wins."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from fpt.cli import main
from fpt.reference.classification import _features, _series, majority, reference_accuracies
from fpt.tasks.arrays import Split
from fpt.tasks.ucr import to_tokens
from fpt.training.reference_scores import comparison_lines


def test_majority_is_the_training_splits_most_frequent_label_scored_on_test():
    assert majority(np.array([0, 1, 1, 2]), np.array([1, 1, 0, 2])) == 0.5


def test_series_come_back_from_their_tokens_and_token_ids_become_counts():
    rng = np.random.default_rng(0)
    series = [rng.normal(size=(10, 2)).astype(np.float32), rng.normal(size=(7, 2)).astype(np.float32)]
    tokens, _ = to_tokens(series, patch_size=3, steps=10)
    task = type("Ucr", (), {"notes": {"channels": 2}})()
    back = _series(task, Split.from_numpy(tokens, np.array([0, 1])))
    assert back.shape == (2, 2, 12)  # (N, channels, steps padded to whole tokens)
    np.testing.assert_allclose(back[0, :, :10], series[0].T, rtol=1e-6)
    np.testing.assert_allclose(back[1, :, :7], series[1].T, rtol=1e-6)
    assert not back[1, :, 7:].any()
    spec = type("Spec", (), {"vocab_size": 5})()
    ids = Split(torch.tensor([[1, 1, 4, 0], [2, 3, 3, 3]]), torch.tensor([0, 1]), torch.tensor([3, 4]))
    counts = _features(type("Tokens", (), {"spec": spec})(), ids)
    np.testing.assert_array_equal(counts, [[0, 2, 0, 0, 1], [0, 0, 1, 3, 0]])  # padding after a row's length left out


def _summary(ours: float, **theirs) -> dict:
    return {
        "test": {"test": {"accuracy": ours}},
        "baselines": {
            "split": "test",
            "metric": "accuracy",
            "seconds": 1.0,
            "scores": {name: {"accuracy": value} for name, value in theirs.items()},
            "missing": [],
        },
    }


def test_the_sentence_says_plainly_who_wins_or_that_they_tie():
    assert comparison_lines(_summary(0.72, MiniRocket=0.993, majority=0.5))[-1] == (
        "MiniRocket beats fpt on this split (accuracy 99.30% against fpt's 72.00%)"
    )
    assert comparison_lines(_summary(0.95, probe=0.9))[-1].startswith("fpt beats every baseline on this split")
    assert "scores as fpt does" in comparison_lines(_summary(0.5, majority=0.5))[-1]
    assert comparison_lines({"test": {"test": {"accuracy": 0.5}}}) == []  # --no-baselines, or no reference


def _npz(path, n=400, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, 4, 3)).astype(np.float32)
    y = (x[:, :, 0].sum(1) > 0).astype(np.int64)  # linearly separable on the raw features
    np.savez(path, x=x, y=y)


def test_an_npz_run_ends_beside_the_majority_label_and_a_linear_probe(tiny_gpt2, tmp_path, capsys):
    pytest.importorskip("sklearn")
    _npz(tmp_path / "train.npz")
    _npz(tmp_path / "test.npz", n=60, seed=1)
    argv = ["train", "--task", f"npz:{tmp_path / 'train.npz'}", "--test-path", str(tmp_path / "test.npz")]
    argv += ["--backbone", tiny_gpt2, "--steps", "2", "--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "baselines on the same test split" in out and "linear probe: accuracy" in out
    beside = json.loads((tmp_path / "run" / "summary.json").read_text())["baselines"]
    assert beside["metric"] == "accuracy"
    assert set(beside["scores"]) == {"majority label", "linear probe", "gradient boosting"}  # rows of features
    assert beside["scores"]["linear probe"]["accuracy"] > 0.9  # the data is linearly separable
    assert beside["scores"]["gradient boosting"]["accuracy"] > 0.75


def test_an_npz_without_a_test_file_is_compared_on_the_held_out_rows_it_reports(tiny_gpt2, tmp_path, capsys):
    # no --test-path: the held-out tenth is the only score the run reports, so the baselines sit beside it
    pytest.importorskip("sklearn")
    _npz(tmp_path / "train.npz")
    argv = ["train", "--task", f"npz:{tmp_path / 'train.npz'}", "--backbone", tiny_gpt2, "--steps", "2"]
    argv += ["--no-progress", "--out", str(tmp_path / "run")]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "baselines on the same heldout split" in out and "linear probe: accuracy" in out
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert not summary.get("test") and summary["baselines"]["split"] == "heldout"
    assert summary["baselines"]["scores"]["linear probe"]["accuracy"] > 0.9  # 40 held-out rows, separable
    assert main(["evaluate", str(tmp_path / "run")]) == 0  # `fpt evaluate` shows them beside the same split
    out = capsys.readouterr().out
    assert "recorded when the run ended, baselines on the same heldout split" in out
    evaluation = json.loads((tmp_path / "run" / "evaluation.json").read_text())["splits"]["heldout"]
    first, second = evaluation["per_class_accuracy"]
    assert f"  per class: 0 {first:.3f}, 1 {second:.3f}; confusion matrix: {tmp_path / 'run'}" in out


@pytest.mark.slow  # MiniRocket's numba kernels compile on first use (about 30 s)
def test_a_series_task_is_compared_with_minirocket_and_1nn_dtw_where_cheap(tmp_path, monkeypatch):
    pytest.importorskip("sktime")
    pytest.importorskip("numba")
    import fpt.reference.classification as reference
    from fpt.tasks import create_task

    task = create_task("ucr:GunPoint")  # bundled with sktime
    scores, missing = reference_accuracies(task, "test")
    assert not missing
    assert set(scores) == {"majority label", "linear probe", "gradient boosting", "MiniRocket", "1-NN DTW"}
    assert scores["MiniRocket"] > 0.95 and scores["majority label"] < 0.6  # GunPoint: two balanced classes
    assert 0.85 < scores["1-NN DTW"] < 0.95  # the UCR archive's 1-NN DTW (full window) on GunPoint: 0.907
    monkeypatch.setattr(reference, "DTW_CELLS", 1e6)  # as if the series were long: left out, and named
    scores, missing = reference_accuracies(task, "test")
    assert "1-NN DTW" not in scores and missing == ["1-NN DTW: too costly here (1.7e+08 DTW cells, above 1e+06)"]


def test_the_report_shows_each_method_and_what_was_left_out_as_rows():
    from fpt.experiments.report import _baselines_section

    summary = _summary(0.72, MiniRocket=0.993)
    summary["baselines"]["missing"] = ['linear probe: pip install "fpt[sklearn]"']
    page = _baselines_section(summary)
    assert "<td>MiniRocket</td><td>accuracy 99.3%</td>" in page
    assert "<td>left out</td><td>linear probe: pip install &quot;fpt[sklearn]&quot;</td>" in page
    assert "MiniRocket beats fpt on this split" in page
