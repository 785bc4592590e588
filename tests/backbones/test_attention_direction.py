"""--attention causal|bidirectional: an encoder (BERT, MiniLM) masked causally as GPT-2 is; each
backbone attends as pretrained by default; what cannot be done is refused in one line."""

import json

import pytest
import torch
from helpers import raises_naming

from fpt.backbones import load_backbone
from fpt.cli import main
from fpt.core.errors import FptError
from fpt.experiments.paper import PAPER_VARIANTS
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.lifecycle import load_run

CUT = 4  # inputs after this position are changed; outputs up to it must not move under causal attention
BIT_XOR = [
    "--task",
    "bit-xor",
    "--n-bits",
    "4",
    "--eval-size",
    "8",
    "--steps",
    "2",
    "--eval-every",
    "2",
    "--no-progress",
]


def _embeds(length=9, batch=2):
    x = torch.randn(batch, length, 32, generator=torch.Generator().manual_seed(0))
    later = x.clone()
    later[:, CUT + 1 :] += torch.randn(later[:, CUT + 1 :].shape, generator=torch.Generator().manual_seed(1))
    return x, later


@torch.no_grad()
def _body_outputs(backbone, implementation, mask=None):
    """Body outputs for inputs that differ only after CUT, under an attention implementation."""
    backbone.model.eval().set_attn_implementation(implementation)
    x, later = _embeds()
    return [backbone(inputs_embeds=e, attention_mask=mask).last_hidden_state for e in (x, later)]


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])  # fpt loads sdpa; `fpt attention` draws with eager
@pytest.mark.parametrize("padded", [False, True])
def test_a_causal_encoder_never_looks_at_later_inputs(tiny_backbones, implementation, padded):
    assert load_backbone(tiny_backbones["bert"]).model.config._attn_implementation == "sdpa"  # what fpt runs
    mask = torch.ones(2, 9, dtype=torch.long)
    if padded:
        mask[1, 7:] = 0  # right padding, as variable-length tasks batch
    before, after = _body_outputs(
        load_backbone(tiny_backbones["bert"], attention="causal"), implementation, mask if padded else None
    )
    torch.testing.assert_close(after[:, : CUT + 1], before[:, : CUT + 1], rtol=0, atol=1e-6)
    assert (after[:, CUT + 1 :] - before[:, CUT + 1 :]).abs().min() > 0  # the changed inputs do count where seen

    for attention in (None, "bidirectional"):  # as pretrained: every position sees the later inputs
        before, after = _body_outputs(load_backbone(tiny_backbones["bert"], attention=attention), implementation)
        assert (after[:, : CUT + 1] - before[:, : CUT + 1]).abs().amax(-1).min() > 1e-4


def test_causal_changes_no_weight_and_a_causal_family_is_left_as_it_is(tiny_backbones):
    bert = tiny_backbones["bert"]
    causal = load_backbone(bert, attention="causal")
    assert causal.weights_hash == load_backbone(bert).weights_hash and causal.attention == "causal"
    assert causal.model.config.is_decoder and not causal.model.config.use_cache
    for family in ("gpt2", "llama"):  # causal already: the same outputs as unset
        same = [
            torch.cat(_body_outputs(load_backbone(tiny_backbones[family], attention=a), "sdpa"))
            for a in (None, "causal")
        ]
        assert torch.equal(*same)


@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_the_fpt_models_tokens_before_the_head_see_only_earlier_inputs(tiny_backbones, implementation):
    def token_outputs(attention):
        task, model = build(
            TrainConfig(
                backbone=tiny_backbones["bert"],
                task="bit-xor",
                attention=attention,
                task_options={"n_bits": 5, "eval_size": 4},
            )
        )
        model.eval().backbone.set_attn_implementation(implementation)
        seen = []
        model.head.register_forward_hook(lambda module, args, out: seen.append(args[0]))
        x = next(task.eval_batches(4)).x
        later = x.clone()
        later[:, CUT + 1 :] = 1 - later[:, CUT + 1 :]  # flip the later bits
        with torch.no_grad():
            model(x), model(later)
        return seen

    before, after = token_outputs("causal")
    torch.testing.assert_close(after[:, : CUT + 1], before[:, : CUT + 1], rtol=0, atol=1e-6)
    before, after = token_outputs(None)
    assert (after[:, : CUT + 1] - before[:, : CUT + 1]).abs().amax(-1).min() > 1e-4


def test_what_cannot_be_done_is_refused_in_one_line(tiny_backbones, tmp_path):
    from transformers import ViTConfig, ViTModel

    for family in ("gpt2", "llama"):
        raises_naming(
            lambda: load_backbone(tiny_backbones[family], attention="bidirectional"),
            "--attention bidirectional",
            family,
            "pretrained causal",
        )
    ViTModel(
        ViTConfig(
            hidden_size=32,
            num_hidden_layers=1,
            num_attention_heads=2,
            intermediate_size=64,
            image_size=16,
            patch_size=4,
        )
    ).save_pretrained(tmp_path / "vit")
    raises_naming(lambda: load_backbone(str(tmp_path / "vit"), attention="causal"), "--attention causal", "vit")
    assert load_backbone(str(tmp_path / "vit"), attention="bidirectional").attention == "bidirectional"
    raises_naming(
        lambda: load_backbone(tiny_backbones["bert"], attention="sideways"),
        "unknown --attention 'sideways'",
        "causal, bidirectional",
    )
    raises_naming(lambda: TrainConfig(model="lstm", attention="causal").validate(), "--attention", "lstm")


@pytest.mark.parametrize(
    "backbone, value, words",
    [
        ("gpt2", "bidirectional", ["pretrained causal"]),
        ("bert", "Causal", ["unknown --attention 'Causal'"]),
    ],
)
def test_the_cli_refuses_with_exit_2_and_writes_no_run(tiny_backbones, tmp_path, capsys, backbone, value, words):
    out = tmp_path / "run"
    assert (
        main(["train", *BIT_XOR, "--backbone", tiny_backbones[backbone], "--attention", value, "--out", str(out)]) == 2
    )
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and all(w in error for w in words)
    assert not out.exists()


def test_the_setting_is_recorded_in_config_json_and_a_reloaded_run_is_causal(tiny_backbones, tmp_path):
    run = tmp_path / "run"
    assert (
        main(["train", *BIT_XOR, "--backbone", tiny_backbones["bert"], "--attention", "causal", "--out", str(run)]) == 0
    )
    saved = json.loads((run / "config.json").read_text())
    assert saved["attention"] == "causal"
    config, _, model, _ = load_run(run, device="cpu")
    assert config.attention == "causal" and model.backbone.config.is_decoder
    assert main(["evaluate", str(run)]) == 0

    del saved["attention"]  # a run written before --attention: as pretrained
    assert TrainConfig.from_dict(saved).attention is None


def test_an_hf_export_of_a_causal_run_stays_causal_and_peft_refuses_it(tiny_backbones, tmp_path, capsys):
    from fpt.models.transformer import FrozenPretrainedTransformer

    run = tmp_path / "run"
    assert (
        main(["train", *BIT_XOR, "--backbone", tiny_backbones["bert"], "--attention", "causal", "--out", str(run)]) == 0
    )
    assert main(["export", str(run), "--format", "hf", "--out", str(tmp_path / "hf")]) == 0
    _, task, model, _ = load_run(run, device="cpu")
    batch = next(task.eval_batches(8))
    rebuilt = FrozenPretrainedTransformer.from_pretrained(tmp_path / "hf")
    assert rebuilt.backbone_info.attention == "causal"
    with torch.no_grad():
        assert torch.equal(rebuilt(batch.x, batch.mask), model.eval()(batch.x, batch.mask))
    capsys.readouterr()
    assert main(["export", str(run), "--format", "peft", "--out", str(tmp_path / "peft")]) == 2
    assert "--attention" in capsys.readouterr().err


def test_sweeps_take_attention_in_the_grid_and_leave_it_out_of_baseline_cells(tmp_path):
    from fpt.experiments.sweep_spec import load_spec, train_args

    path = tmp_path / "spec.yaml"
    path.write_text("grid:\n  task: [bit-xor]\n  attention: [null, causal]\n")
    assert [c.values["attention"] for c in load_spec(path, PAPER_VARIANTS).cells()] == [None, "causal"]
    args = train_args({"attention": "causal"}, {"variant": "fpt"}, PAPER_VARIANTS)
    assert args[args.index("--attention") + 1] == "causal"
    assert "--attention" not in train_args({"attention": "causal"}, {"variant": "lstm"}, PAPER_VARIANTS)
    with pytest.raises(FptError):
        TrainConfig(attention="both").validate()
