"""What a user reads while training: ms per step, examples/s, MFU and the ETA, on the bar, on each
evaluation line, in metrics.jsonl and in summary.json; the model FLOPs they rest on (fpt.training.speed)."""

from __future__ import annotations

import json

import pytest
import torch
from helpers import train_argv
from torch.utils.flop_counter import FlopCounterMode

from fpt.cli import main
from fpt.tracking.sinks import numbers
from fpt.training import speed as flops
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.lifecycle import train
from fpt.training.loop import task_loss
from fpt.training.speed import (
    CONVENTION,
    SPEED_KEYS,
    ModelFlops,
    SpeedMeter,
    describe_speed,
    flops_per_token,
    measured_peak,
)

SPEED = ("ms_per_step", "examples_per_s", "mfu")  # the names metrics.jsonl's readers see


def _tiny_body(trained: str | None = None):
    """A GPT-2 body 8 wide with one layer, every weight matrix frozen (but `trained`'s)."""
    from transformers import GPT2Config, GPT2Model

    body = GPT2Model(GPT2Config(n_embd=8, n_layer=1, n_head=2, n_positions=16, vocab_size=10))
    for name, module in body.named_modules():
        if type(module).__name__ == "Conv1D":
            module.weight.requires_grad_(name == trained)
    return body


def test_flops_per_token_of_a_tiny_body_equal_a_hand_count():
    # weight matrices of the layer: c_attn 8x24, attn.c_proj 8x8, c_fc 8x32, mlp.c_proj 32x8 = 768 entries
    # attention: scores and mixing, 2 products of T x d per token = 4*T*d forward, at T = 5, d = 8: 160
    assert flops_per_token(_tiny_body(), 5, train=False) == (2 * 768 + 160, 768)
    # a frozen matrix's backward is its input gradient alone (2W), so a frozen body trains at 4W, not 6W
    assert flops_per_token(_tiny_body(), 5, train=True) == (4 * 768 + 3 * 160, 768)
    # c_fc trained: its weight gradient (2 x 256) on top
    assert flops_per_token(_tiny_body("h.0.mlp.c_fc"), 5, train=True)[0] == 4 * 768 + 2 * 256 + 3 * 160


@pytest.mark.parametrize("policy", ["default", "output"])
def test_step_flops_are_the_products_autograd_runs(tiny_gpt2, policy):
    """The linear layers' share of ModelFlops.step equals what torch's FLOP counter sees in a real
    forward and backward: no weight gradient for a frozen weight, no backward through a body with
    nothing trained below the head (policy output), the head on its last k tokens only."""
    options = {} if policy == "default" else {"policy": policy}
    config = TrainConfig(
        task="bit-memory",
        task_options=dict(n_bits=8, n_strings=2, patch_size=4, eval_size=20),
        backbone=tiny_gpt2,
        batch_size=4,
        precision="fp32",
        **options,
    )
    task, model = build(config)
    batch = task.train_batch(0, 4, 0)
    with FlopCounterMode(display=False) as counter:
        task_loss(model(batch.x, batch.mask), batch.y).backward()
    counted = {str(op): n for op, n in counter.get_flop_counts()["Global"].items()}
    linear = counted.get("aten.mm", 0) + counted.get("aten.addmm", 0)  # attention's products are not these
    model_flops = ModelFlops.of(model)
    length, tokens = batch.x.shape[1], batch.x.shape[0] * batch.x.shape[1]
    attention = (12 if policy == "default" else 4) * model_flops.layers * length * model_flops.width * tokens
    assert model_flops.step(len(batch), length) - attention == linear > 0


def test_speed_meter_reads_recent_steps_and_mfu_against_a_peak():
    meter = SpeedMeter(peak=1e12, devices=2, window=5)
    meter.add_step(9.0, 8, 2e9)  # a slow first step (start-up) leaves the window
    for _ in range(5):
        meter.add_step(0.01, 8, 2e9)
    recent = meter.recent_rates()
    assert recent["ms_per_step"] == pytest.approx(10.0) and recent["examples_per_s"] == pytest.approx(800)
    assert 0 < recent["mfu"] <= 1 and recent["mfu"] == pytest.approx(2e9 / 0.01 / 2e12)
    assert meter.sitting_rates()["examples_per_s"] == pytest.approx(48 / 9.05, abs=1e-3)  # the summary: every step
    # 10 steps left at 10 ms, and evaluations at steps 10 and 15 (the last one), 2 s each
    meter.eval_s = 2.0
    assert meter.eta_s(step=5, steps=15, eval_every=5 * 2) == pytest.approx(10 * 0.01 + 2 * 2.0)
    assert meter.eta_s(step=15, steps=15, eval_every=10) == 0  # the last evaluation is the one under way
    line = describe_speed(recent, 65)
    assert "10 ms/step" in line and "800 ex/s" in line and "MFU 10%" in line and "ETA 1:05" in line
    assert "10 ms/step (100 step/s)" in describe_speed(recent, steps_per_s=True)  # the bar's
    unknown = SpeedMeter(peak=None)
    unknown.add_step(0.01, 8, 2e9)
    assert unknown.recent_rates()["mfu"] is None and "MFU ?" in describe_speed(unknown.recent_rates())
    assert SpeedMeter(1e12).recent_rates() == dict.fromkeys(SPEED) and SPEED_KEYS == SPEED


def test_the_peak_is_measured_once_per_machine_and_kept_in_the_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("FPT_CACHE_DIR", str(tmp_path))
    calls = []
    real = flops.matmul_peak
    monkeypatch.setattr(flops, "matmul_peak", lambda *a, **k: calls.append(a) or real(*a, **k))
    budget = 0.0123  # a budget no other caller uses: a fresh measurement
    first = measured_peak(torch.float32, "cpu", budget_s=budget)
    made = len(calls)
    assert first > 0 and made >= 1
    flops._peak.cache_clear()  # another process: only the file remembers
    assert measured_peak(torch.float32, "cpu", budget_s=budget) == first and len(calls) == made
    (key,) = json.loads((tmp_path / flops.PEAKS_FILE).read_text())
    assert "| cpu | float32 |" in key and f"{torch.get_num_threads()} threads" in key
    (tmp_path / flops.PEAKS_FILE).write_text("not json")  # a damaged file is measured again, not a failure
    assert measured_peak(torch.float32, "cpu", budget_s=budget) > 0
    from fpt.backbones.surgery import compute_dtype  # the dtype the trainer measures a run's peak in

    assert compute_dtype("int8") is torch.float32 and compute_dtype("int8-bf16") is torch.bfloat16


def _bit_memory(backbone, **overrides) -> TrainConfig:
    base = dict(
        task="bit-memory",
        task_options=dict(n_bits=8, n_strings=2, patch_size=4, eval_size=20),
        backbone=backbone,
        steps=4,
        batch_size=4,
        eval_every=2,
        seed=3,
    )
    return TrainConfig(**{**base, **overrides})


def test_eval_rows_and_summary_carry_the_speed(tiny_gpt2, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("fpt.training.loop.measured_peak", lambda dtype, device: 1e15)  # far above any step
    summary, run_dir = train(_bit_memory(tiny_gpt2), out=tmp_path / "run", progress=True)
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [2, 4]
    for record in [*rows, summary]:
        assert record["ms_per_step"] > 0 and record["examples_per_s"] > 0 and 0 < record["mfu"] <= 1
        assert set(SPEED) <= set(numbers(record))  # plain numbers: the trackers take them as they are
    assert summary["peak_flops_per_s"] == 1e15 and summary["flops_convention"] == CONVENTION
    captured = capsys.readouterr()
    evaluation_lines = [line for line in captured.out.splitlines() if line.startswith("step ")]
    assert len(evaluation_lines) == 2 and all(
        "ms/step" in ln and "ex/s" in ln and "MFU" in ln for ln in evaluation_lines
    )
    assert "ETA" in captured.err and "ms/step" in captured.err  # the bar


def test_no_progress_prints_no_bar_and_still_records_the_speed(tiny_gpt2, tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("fpt.training.loop.measured_peak", lambda dtype, device: 1e15)  # the cached peak
    assert main(train_argv(tiny_gpt2, tmp_path / "run", "--steps", "2", "--eval-every", "1")) == 0
    captured = capsys.readouterr()
    assert captured.err == "" and "ms/step" not in captured.out and "%|" not in captured.out
    rows = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert all(0 < r["mfu"] <= 1 and r["ms_per_step"] > 0 for r in rows)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert 0 < summary["mfu"] <= 1 and summary["peak_flops_per_s"] == 1e15 and summary["examples_per_s"] > 0


def test_models_without_a_transformer_body_have_no_model_flops():
    assert ModelFlops.of(torch.nn.Linear(3, 4)) is None


def test_showing_progress_changes_nothing_a_run_trains(tiny_gpt2, tmp_path):
    """The peak measured for the bar draws from a generator of its own: with dropout on, a run with
    progress ends with the weights of one without (the global generator feeds the masks)."""
    config = dict(task="bit-xor", backbone=tiny_gpt2, steps=3, eval_every=3, batch_size=4, dropout=0.3)
    config["task_options"] = {"eval_size": 8}
    flops._peak.cache_clear()  # the peak is measured in this test, not taken from the cache
    _, quiet = train(TrainConfig(**config), tmp_path / "quiet", progress=False)
    _, shown = train(TrainConfig(**config), tmp_path / "shown", progress=True)
    from fpt.training.lifecycle import load_run

    a, b = load_run(quiet).model.trainable_state(), load_run(shown).model.trainable_state()
    assert all(torch.equal(a[name], b[name]) for name in a)


@pytest.mark.parametrize("family", ["bert", "llama"])
def test_a_body_of_no_layers_is_counted_not_refused(tiny_backbones, family, tmp_path):
    """--body none leaves num_hidden_layers at 0, which is a count (BERT and Llama configs have no n_layer)."""
    config = TrainConfig(task="bit-xor", backbone=tiny_backbones[family], body="none", steps=2, eval_every=2)
    config.task_options = {"eval_size": 8}
    summary, _ = train(config, tmp_path / "run", progress=False)
    assert summary["step"] == 2
