"""The controls (issue 32): --body none | attention | block train only what `fpt info` says, on
every backbone family and task family, and resume exactly; --train-fraction takes exactly its
share; `fpt evaluate --shuffle tokens` changes each input's order and nothing else."""

from __future__ import annotations

import importlib.util
import json
import re

import numpy as np
import pytest
import torch
from helpers import one_line_error, train_argv, write_mnist

from fpt.backbones import load_backbone
from fpt.backbones.control_bodies import ControlBody
from fpt.backbones.families import position_table_path
from fpt.cli import main
from fpt.core.errors import FptError
from fpt.data.lra_tsv import write_listops_tsv
from fpt.experiments.sweep_spec import train_args
from fpt.tasks import create_task
from fpt.tasks.base import training_share
from fpt.tasks.shuffle import ShuffledTask, shuffle_rows
from fpt.training.build import build
from fpt.training.checkpoint import load_checkpoint
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import resume, train
from fpt.training.loop import Trainer
from fpt.training.run_dir import RunDir

CONTROLS = ("none", "attention", "block")
FAMILIES = ("gpt2", "bert", "llama")
FORECAST = dict(lookback=16, horizon=4, patch_size=4, patch_stride=4)
needs_sktime = pytest.mark.skipif(
    importlib.util.find_spec("sktime") is None, reason="the ucr task reads .ts files with sktime (pip install sktime)"
)


def _bits(backbone: str, body: str, **more) -> TrainConfig:
    return TrainConfig(
        task="bit-xor", task_options={"n_bits": 4, "eval_size": 8}, backbone=backbone, body=body, batch_size=4, **more
    )


# ---- what each control trains ---------------------------------------------------------------------


def _info_table(capsys, argv: list[str]) -> tuple[str, dict[str, tuple[int, bool]], int]:
    """`fpt info`: its header lines, {group: (params, trained)} and the trained total."""
    assert main(["info", *argv]) == 0
    out = capsys.readouterr().out
    rows, trained = {}, None
    for line in out.splitlines():
        match = re.match(r"^(\S+)\s+([\d,]+)\s+(trained|frozen)\s", line)
        if match:
            rows[match[1]] = (int(match[2].replace(",", "")), match[3] == "trained")
        elif line.startswith("trained "):
            trained = int(line.split()[1].replace(",", ""))
    return out, rows, trained


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("body", CONTROLS)
def test_a_control_trains_what_fpt_info_says_and_nothing_else(tiny_backbones, family, body, capsys):
    backbone = tiny_backbones[family]
    task_args = ["--task", "bit-xor", "--n-bits", "4", "--backbone", backbone]
    out, rows, trained = _info_table(capsys, [*task_args, "--body", body])
    assert f"body {body}:" in out and "every parameter trained" in out and "policy full" in out
    _, model = build(_bits(backbone, body))
    counted = {}
    for name, param in model.named_parameters():
        assert param.requires_grad, name  # a control's layers are fresh: every parameter trains
        group = model.param_groups[name]
        counted[group] = counted.get(group, 0) + param.numel()
    assert {g: n for g, (n, _) in rows.items() if n} == counted
    assert all(state for n, state in rows.values() if n)
    assert trained == sum(p.numel() for p in model.parameters())
    body_groups = {g for name, g in model.param_groups.items() if name.startswith("backbone.")}
    hidden = model.backbone_info.hidden_size
    # the backbone's norm outside its blocks (BERT's before, GPT-2's and Llama's after): weight and
    # bias, or an RMS norm's weight alone
    outer = hidden if family == "llama" else 2 * hidden
    if body == "none":  # positions and that norm: nothing that attends or mixes tokens
        assert body_groups == {"position", "layernorm"} and counted["layernorm"] == outer
    elif body == "attention":  # q, k, v, out (weights and biases), its own layer norm and the outer one
        assert body_groups == {"position", "attention", "layernorm"}
        assert counted["attention"] == 4 * (hidden * hidden + hidden) and counted["layernorm"] == 2 * hidden + outer
    else:  # one block of the family's own architecture
        assert body_groups >= {"last-attention", "feedforward", "layernorm"}
        assert model.backbone.config.num_hidden_layers == 1
    # fpt on the same backbone freezes its blocks; the control has none of them
    _, fpt_model = build(_bits(backbone, "backbone"))
    assert sum(p.numel() for p in model.backbone.parameters()) < sum(p.numel() for p in fpt_model.backbone.parameters())


@pytest.mark.parametrize("family", ("gpt2", "bert"))
@pytest.mark.parametrize("body", CONTROLS)
def test_a_control_keeps_the_backbones_own_position_table(tiny_backbones, family, body):
    loaded = load_backbone(tiny_backbones[family], seq_len=8)
    table = loaded.model.get_submodule(position_table_path(loaded.model, family)).weight
    control = load_backbone(tiny_backbones[family], seq_len=8, body=body)
    rows = (
        control.model.positions.weight
        if isinstance(control.model, ControlBody)
        else control.model.get_submodule(position_table_path(control.model, family)).weight
    )
    assert torch.equal(rows, table)
    # and the fresh layers are seeded: the same seed builds the same control, another seed another
    again = load_backbone(tiny_backbones[family], seq_len=8, body=body)
    other = load_backbone(tiny_backbones[family], seq_len=8, body=body, seed=1)
    assert again.weights_hash == control.weights_hash
    assert (other.weights_hash != control.weights_hash) == (body != "none")


@pytest.fixture(scope="module")
def norms_drawn(tiny_backbones, tmp_path_factory):
    """The tiny backbones saved again with every weight outside their blocks drawn at random: their
    norms are at their init (weight 1, bias 0) as built, which a fresh norm would match."""
    from transformers import AutoModel

    from fpt.backbones.families import blocks_path

    folders = {}
    for family in ("bert", "gpt2", "llama"):
        model = AutoModel.from_pretrained(tiny_backbones[family])
        blocks = blocks_path(model, family) + "."
        generator = torch.Generator().manual_seed(0)
        with torch.no_grad():
            for name, param in model.named_parameters():
                if not name.startswith(blocks):
                    param.copy_(torch.randn(param.shape, generator=generator))
        folders[family] = tmp_path_factory.mktemp(family)
        model.save_pretrained(folders[family])
    return folders


@pytest.mark.parametrize(
    "family, entry, exit", [("bert", "embeddings.LayerNorm", None), ("gpt2", None, "ln_f"), ("llama", None, "norm")]
)
@pytest.mark.parametrize("body", ("none", "attention"))
def test_a_small_control_keeps_the_backbones_norms_outside_its_blocks(norms_drawn, family, entry, exit, body):
    loaded = load_backbone(str(norms_drawn[family]), seq_len=8)
    control = load_backbone(str(norms_drawn[family]), seq_len=8, body=body).model
    for kept, path in ((control.entry_norm, entry), (control.exit_norm, exit)):
        assert (kept is None) == (path is None)
        if path is not None:  # the loaded (drawn) weights, in a copy of their own
            original = loaded.model.get_submodule(path)
            assert type(kept) is type(original) and kept is not original
            assert all(torch.equal(a, b) for a, b in zip(kept.state_dict().values(), original.state_dict().values()))
            assert not torch.equal(kept.weight, torch.ones_like(kept.weight))
    # the forward applies them where the backbone does: before its blocks (BERT), after them (GPT-2, Llama)
    control.eval()
    x = torch.randn(2, 8, control.config.hidden_size) * 5 + 3
    h = x + control.positions.weight[:8]
    if control.entry_norm is not None:
        h = control.entry_norm(h)
    for layer in control.layers:
        h = layer(h)[0]
    if control.exit_norm is not None:
        h = control.exit_norm(h)
    assert torch.allclose(control(inputs_embeds=x).last_hidden_state, h)


@pytest.mark.parametrize(
    "family, norm", [("bert", "embeddings.LayerNorm.weight"), ("gpt2", "ln_f.weight"), ("llama", "norm.weight")]
)
def test_the_block_control_keeps_every_tensor_outside_the_blocks(norms_drawn, family, norm):
    from fpt.backbones.families import blocks_path

    loaded = load_backbone(str(norms_drawn[family]), seq_len=8).model.state_dict()
    block = load_backbone(str(norms_drawn[family]), seq_len=8, body="block").model
    blocks = blocks_path(block, family) + "."
    outside = {name: t for name, t in block.state_dict().items() if not name.startswith(blocks)}
    shared = [name for name in outside if name in loaded and loaded[name].shape == outside[name].shape]
    assert norm in shared
    for name in shared:
        assert torch.equal(outside[name], loaded[name]), name


def test_a_family_fpt_has_no_table_for_keeps_its_final_norm_in_the_none_control(tmp_path):
    from transformers import OPTConfig, OPTModel

    config = OPTConfig(
        hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=4, vocab_size=100, word_embed_proj_dim=32
    )
    OPTModel(config).save_pretrained(tmp_path)  # its blocks are found by fpt.backbones.families.blocks_path's search
    control = load_backbone(str(tmp_path), seq_len=8, body="none").model
    assert control.entry_norm is None and type(control.exit_norm).__name__ == "LayerNorm"


def test_a_rotary_backbone_gets_a_learned_table_where_nothing_else_gives_order(tiny_backbones):
    for body in ("none", "attention"):
        control = load_backbone(tiny_backbones["llama"], seq_len=8, body=body)
        assert control.model.positions.num_embeddings == 8 and "fresh learned table" in control.positions
    block = load_backbone(tiny_backbones["llama"], seq_len=8, body="block")
    assert block.max_positions is None and "rotary" in block.positions


def test_the_attention_control_attends_the_way_the_backbone_does(tiny_backbones):
    def causal(family, attention=None):
        return (
            load_backbone(tiny_backbones[family], seq_len=8, body="attention", attention=attention)
            .model.layers[0]
            .causal
        )

    assert causal("gpt2") and causal("llama") and not causal("bert") and causal("bert", "causal")
    # causal: changing a later token leaves the earlier tokens' states as they were
    body = load_backbone(tiny_backbones["gpt2"], seq_len=8, body="attention", dropout=0.0).model.eval()
    x = torch.randn(1, 6, 32)
    y = x.clone()
    y[0, 4:] += 1.0
    a, b = body(inputs_embeds=x).last_hidden_state, body(inputs_embeds=y).last_hidden_state
    assert torch.allclose(a[0, :4], b[0, :4]) and not torch.allclose(a[0, 4:], b[0, 4:])
    # padding keys are masked: what sits in the padding does not reach the real tokens
    mask = torch.tensor([[1, 1, 1, 1, 0, 0]])
    bidirectional = load_backbone(tiny_backbones["bert"], seq_len=8, body="attention", dropout=0.0).model.eval()
    a = bidirectional(inputs_embeds=x, attention_mask=mask).last_hidden_state
    b = bidirectional(inputs_embeds=y, attention_mask=mask).last_hidden_state
    assert torch.allclose(a[0, :4], b[0, :4])
    # the weights `fpt attention` reads are those of the fused path
    maps = bidirectional(inputs_embeds=x, attention_mask=mask, output_attentions=True)
    assert torch.allclose(maps.last_hidden_state, a, atol=1e-6) and maps.attentions[0].shape == (1, 2, 6, 6)


# ---- every control on every task family ---------------------------------------------------------


def _listops(folder):
    sources = ["[MAX 2 9 ]", "[MIN 4 [SM 3 5 ] 1 ]", "[MED 1 [MAX 2 [MIN 3 4 ] 5 ] 7 ]", "[SM 1 2 ]"]
    for split in ("train", "val", "test"):
        write_listops_tsv(folder / f"basic_{split}.tsv", sources, [9, 1, 5, 3])
    return {"data_dir": str(folder), "max_len": 32}


def _series_csv(path, rows: int = 200, seed: int = 0):
    values = np.random.default_rng(seed).normal(size=(rows, 2)).cumsum(0)
    dates = np.datetime64("2020-01-01T00:00") + np.arange(rows) * np.timedelta64(1, "h")
    lines = ["date,a,b"] + [f"{d},{a!r},{b!r}" for d, (a, b) in zip(dates, values.tolist())]
    path.write_text("\n".join(lines) + "\n")
    return path


def _ts(path, cases: list[tuple[list[float], str]]):
    """A univariate equal-length .ts file as timeseriesclassification.com writes it."""
    labels = " ".join(sorted({label for _, label in cases}))
    header = [
        "@problemName Tiny",
        "@timeStamps false",
        "@missing false",
        "@univariate true",
        "@equalLength true",
        f"@seriesLength {len(cases[0][0])}",
        f"@classLabel true {labels}",
        "@data",
    ]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(header + [",".join(map(repr, v)) + f":{label}" for v, label in cases]) + "\n")


def _ucr(folder):
    rng = np.random.default_rng(0)
    for split in ("TRAIN", "TEST"):
        _ts(folder / "Tiny" / f"Tiny_{split}.ts", [(rng.normal(size=8).tolist(), str(i % 2)) for i in range(6)])
    return {"dataset": "Tiny", "data_dir": str(folder), "patch_size": 2}


def _task(kind: str, folder) -> tuple[str, dict]:
    if kind == "bits":
        return "bit-memory", {"n_bits": 8, "n_strings": 2, "patch_size": 4, "eval_size": 4}
    if kind == "images":
        for split in ("train", "test"):
            write_mnist(folder, split, 6)
        return "mnist", {"data_dir": str(folder), "patch_size": 7}
    if kind == "listops":
        return "listops", _listops(folder)
    if kind == "ucr":
        return "ucr", _ucr(folder)
    return f"forecast:{_series_csv(folder / 'series.csv')}", FORECAST


TASK_KINDS = ("bits", "images", "listops", pytest.param("ucr", marks=needs_sktime), "forecast")


@pytest.mark.parametrize("kind", TASK_KINDS)
@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("body", CONTROLS)
def test_every_control_trains_on_every_task_family_and_backbone_family(tiny_backbones, tmp_path, kind, family, body):
    name, options = _task(kind, tmp_path)
    config = TrainConfig(task=name, task_options=options, backbone=tiny_backbones[family], body=body, batch_size=2)
    task, model = build(config)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    loss, _ = Trainer(model, task, config, progress=False).train_step()
    assert np.isfinite(loss)
    moved = {n for n, p in model.named_parameters() if not torch.equal(p, before[n])}
    assert any(n.startswith("backbone.") for n in moved) or body == "none"  # the fresh layer learns
    result = evaluate(model, task, 4, split=task.eval_split)
    assert np.isfinite(result["loss"])


# ---- resume ------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", CONTROLS)
def test_a_killed_and_resumed_control_equals_an_uninterrupted_one(tiny_gpt2, tmp_path, body):
    def config():  # dropout stays on: the resumed run must also restore the RNG state
        return _bits(tiny_gpt2, body, steps=10, eval_every=5)

    uninterrupted, _ = train(config(), out=tmp_path / "straight", progress=False)

    def crash(step, loss):
        if step == 7:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        train(config(), out=tmp_path / "killed", progress=False, on_step=crash)
    resumed, _ = resume(tmp_path / "killed", progress=False)
    assert resumed["resumed_from_step"] == 5
    a = load_checkpoint(tmp_path / "straight" / RunDir.CHECKPOINT)
    b = load_checkpoint(tmp_path / "killed" / RunDir.CHECKPOINT)
    assert set(a.params) == set(b.params) and any(k.startswith("backbone.") for k in a.params)
    for name in a.params:
        assert torch.equal(a.params[name], b.params[name]), name
    assert resumed["final"] == uninterrupted["final"]
    saved = RunDir(tmp_path / "killed").read_config()
    assert saved["body"] == body and saved["policy"] == "full"


# ---- --train-fraction ----------------------------------------------------------------------------


def test_the_share_is_floor_of_the_fraction_as_written():
    assert training_share(0.1, 50, "examples") == 5
    assert training_share(0.29, 100, "examples") == 29  # 0.29 * 100 is 28.999... in binary
    assert training_share(0.7, 10, "examples") == 7
    assert training_share(0.15, 10, "examples") == 1  # 1.5: floor
    assert training_share(1, 7, "examples") == 7
    with pytest.raises(FptError, match="keeps none of the 9 training examples; use at least 0.111"):
        training_share(0.1, 9, "examples")


def test_train_fraction_takes_the_first_examples_and_leaves_evaluation_whole(tmp_path):
    images, labels = write_mnist(tmp_path, "train", 30)
    write_mnist(tmp_path, "test", 10, seed=1)
    whole = create_task("mnist", data_dir=str(tmp_path))
    config = TrainConfig(task="mnist", task_options={"data_dir": str(tmp_path)}, train_fraction=0.1)
    task, _ = build(config)
    assert len(task.train) == 3 and torch.equal(task.train.x[..., 0], torch.from_numpy(images[:3]))
    assert task.train.y.tolist() == labels[:3].tolist()
    assert torch.equal(task.evals["test"].x, whole.evals["test"].x)
    assert task.notes["train_fraction"] == {"fraction": 0.1, "kept": 3, "of": 30, "unit": "examples"}
    drawn = torch.cat([task.stream(step * 4, 4, seed=0) for step in range(5)])  # several epochs
    assert set(drawn.tolist()) == {0, 1, 2}


def test_train_fraction_on_token_sequences_keeps_their_lengths(tmp_path):
    options = _listops(tmp_path)
    whole = create_task("listops", **options)
    config = TrainConfig(task="listops", task_options=options, train_fraction=0.5, bucket_window=2)
    task, _ = build(config)
    inner = task.inner  # bucketing cuts after the share
    assert len(inner.train) == 2 and torch.equal(inner.train.lengths, whole.train.lengths[:2])
    assert torch.equal(inner.evals["val"].x, whole.evals["val"].x)


@needs_sktime
def test_train_fraction_on_a_ucr_set(tmp_path):
    options = _ucr(tmp_path)
    task, _ = build(TrainConfig(task="ucr", task_options=options, train_fraction=0.5))
    assert len(task.train) == 3 and len(task.evals["test"]) == 6


def test_train_fraction_of_a_forecast_keeps_the_earliest_windows_and_the_scaler(tmp_path):
    path = _series_csv(tmp_path / "series.csv")
    whole = create_task(f"forecast:{path}", **FORECAST)
    config = TrainConfig(task=f"forecast:{path}", task_options=FORECAST, train_fraction=0.1)
    task, _ = build(config)
    windows = whole.train.windows  # 140 training rows: 121 windows of 16 + 4 steps
    kept = windows // 10
    assert task.train.windows == kept and len(task.train) == 2 * kept
    x, y = task.train.examples(torch.arange(len(task.train)))
    wx, wy = whole.train.examples(torch.arange(2 * kept))
    assert torch.equal(x, wx) and torch.equal(y, wy)
    assert task.notes["scaler_mean"] == whole.notes["scaler_mean"]
    for split in ("val", "test"):
        assert torch.equal(task.evals[split].series, whole.evals[split].series)
    assert task.notes["train_fraction"]["unit"] == "windows"


def test_train_fraction_is_refused_for_a_generated_task_and_out_of_range(tiny_gpt2, tmp_path, capsys):
    assert main(train_argv(tiny_gpt2, tmp_path / "a", "--train-fraction", "0.1")) == 2
    assert "draws fresh training examples every step" in one_line_error(capsys)
    assert not (tmp_path / "a").exists()
    for bad in ("0", "1.5", "-0.1", "nan"):
        assert main(train_argv(tiny_gpt2, tmp_path / "b", "--train-fraction", bad)) == 2
        assert "--train-fraction is a fraction in (0, 1]" in one_line_error(capsys)


# ---- --shuffle tokens ----------------------------------------------------------------------------


def test_shuffling_permutes_each_inputs_real_tokens_and_nothing_else():
    x = torch.arange(4 * 6).reshape(4, 6)
    mask = torch.tensor([[1] * 6, [1] * 4 + [0] * 2, [1] * 3 + [0] * 3, [1] + [0] * 5]).bool()
    shuffled = shuffle_rows(x, mask, seed=0)
    for row in range(4):
        n = int(mask[row].sum())
        assert sorted(shuffled[row, :n].tolist()) == x[row, :n].tolist()  # the same tokens
        assert torch.equal(shuffled[row, n:], x[row, n:])  # padding untouched
    assert not torch.equal(shuffled[:2], x[:2])  # the order did change
    vectors = torch.randn(3, 5, 2)  # continuous tokens move whole
    moved = shuffle_rows(vectors, None, seed=1)
    for row in range(3):
        assert sorted(map(tuple, moved[row].tolist())) == sorted(map(tuple, vectors[row].tolist()))
    assert torch.equal(shuffle_rows(x, mask, seed=0), shuffled) and not torch.equal(
        shuffle_rows(x, mask, seed=1), shuffled
    )


def test_a_shuffled_split_does_not_depend_on_the_batching(tmp_path):
    task = create_task("listops", **_listops(tmp_path))
    shuffled = ShuffledTask(task, seed=3)

    def rows(batch_size):
        batches = list(shuffled.eval_batches(batch_size, "test"))
        width = max(b.x.shape[1] for b in batches)
        pad = [torch.nn.functional.pad(b.x, (0, width - b.x.shape[1])) for b in batches]
        masks = [torch.nn.functional.pad(b.mask, (0, width - b.mask.shape[1])) for b in batches]
        return torch.cat(pad), torch.cat(masks), torch.cat([b.y for b in batches])

    (x1, m1, y1), (x3, m3, y3) = rows(1), rows(3)
    assert torch.equal(x1, x3) and torch.equal(m1, m3) and torch.equal(y1, y3)
    plain = next(task.eval_batches(4, "test"))
    assert torch.equal(m1[:, : plain.mask.shape[1]], plain.mask) and torch.equal(y1, plain.y)


def test_a_forecasts_window_is_shuffled_in_time_before_patching(tmp_path):
    path = _series_csv(tmp_path / "series.csv")
    task = create_task(f"forecast:{path}", **FORECAST)
    plain, mixed = next(task.eval_batches(5, "test")), next(ShuffledTask(task, 0).eval_batches(5, "test"))
    assert mixed.x.shape == plain.x.shape == (5, FORECAST["lookback"]) and torch.equal(mixed.y, plain.y)
    assert torch.equal(mixed.x.sort(1).values, plain.x.sort(1).values) and not torch.equal(mixed.x, plain.x)


def test_fpt_evaluate_reports_the_shuffled_score_beside_the_ordered_one(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "2", "--eval-every", "1", "--body", "attention")) == 0
    capsys.readouterr()
    assert main(["evaluate", str(out), "--splits", "test", "--shuffle", "tokens", "--shuffle-seed", "4"]) == 0
    printed = capsys.readouterr().out
    assert "shuffled: each input's tokens" in printed and "test, shuffled tokens: accuracy" in printed
    assert "from the ordered inputs" in printed
    saved = json.loads((out / RunDir.EVALUATION).read_text())
    assert saved["shuffled"]["seed"] == 4 and saved["shuffled"]["order"] == "tokens"
    assert saved["shuffled"]["splits"]["test"]["examples"] == saved["splits"]["test"]["examples"]
    assert RunDir(out).read_evaluation()["splits"]["test"]["accuracy"] == saved["splits"]["test"]["accuracy"]


# ---- refused in one line -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "more, words",
    [
        (["--body", "lstm"], "unknown --body 'lstm'; choose one of backbone, none, attention, block"),
        (["--body", "attention", "--policy", "output-only"], "leave --policy unset"),
        (["--body", "block", "--layers", "1"], "leave --layers unset"),
        (["--body", "none", "--model", "lstm"], "apply to transformer models"),
    ],
)
def test_bad_control_options_are_one_line_and_exit_2(tiny_gpt2, tmp_path, capsys, more, words):
    assert main(train_argv(tiny_gpt2, tmp_path / "run", *more)) == 2
    assert words in one_line_error(capsys)
    assert not (tmp_path / "run").exists()


def test_bad_shuffle_options_and_commands_a_control_cannot_serve_are_one_line(tiny_gpt2, tmp_path, capsys):
    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "1", "--body", "none")) == 0
    capsys.readouterr()
    for argv, words in [
        (["evaluate", str(out), "--shuffle", "rows"], "unknown --shuffle 'rows'; choose tokens"),
        (["evaluate", str(out), "--shuffle-seed", "1"], "--shuffle-seed goes with --shuffle tokens"),
        (["evaluate", str(out), "--shuffle", "tokens", "--shuffle-seed", "-1"], "--shuffle-seed must be"),
        (["attention", str(out)], "no attention layer to plot"),
        (["export", str(out), "--format", "hf", "--out", str(tmp_path / "x")], "no pretrained backbone"),
        (["export-backbone", str(out), "--out", str(tmp_path / "b.safetensors")], "control"),
    ]:
        assert main(argv) == 2, argv
        assert words in one_line_error(capsys), argv


def test_body_and_train_fraction_are_sweep_axes_and_reach_fpt_train():
    assert train_args({}, {"body": "attention", "train_fraction": 0.1}) == [
        "--body",
        "attention",
        "--train-fraction",
        "0.1",
    ]
