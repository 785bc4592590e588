"""Every speed lever keeps its promise: exact ones give the same numbers, opt-in ones stay close,
bucketing keeps each example's result in the original order. Speed itself lives in benchmarks/."""

import contextlib
import json

import numpy as np
import pytest
import torch

from fpt.backbones.surgery import is_norm
from fpt.core.devices import PLAIN_ATTENTION_MAX_TOKENS, attention_kernel
from fpt.core.errors import FptError
from fpt.tasks import create_task
from fpt.tasks.bucketing import LengthBucketedTask
from fpt.training.build import build
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate, predict
from fpt.training.lifecycle import train
from fpt.training.loop import Trainer

FAMILIES = ("gpt2", "bert", "llama")


def _config(backbone, **overrides):
    base = dict(
        task="bit-memory",
        task_options=dict(n_bits=8, n_strings=2, patch_size=4, eval_size=20),
        backbone=backbone,
        steps=6,
        batch_size=4,
        eval_every=100,
        seed=3,
    )
    return TrainConfig(**{**base, **overrides})


def _losses(config, steps=6):
    task, model = build(config)
    trainer = Trainer(model, task, config, progress=False)
    model.train()
    return [trainer.train_step()[0] for _ in range(steps)], model  # each step draws its own batch


@pytest.mark.parametrize("family", FAMILIES)
def test_checkpointing_gives_the_same_losses_and_weights(tiny_backbones, family):
    plain, plain_model = _losses(_config(tiny_backbones[family]))
    recomputed, model = _losses(_config(tiny_backbones[family], checkpointing=True))
    assert recomputed == pytest.approx(plain, abs=1e-6)  # dropout masks are replayed exactly
    for (name, a), b in zip(plain_model.trainable_state().items(), model.trainable_state().values()):
        assert torch.allclose(a, b, atol=1e-6), name


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_keeps_frozen_weights_16_bit_trains_fp32_and_stays_close(tiny_backbones, family):
    plain, _ = _losses(_config(tiny_backbones[family], dropout=0.0))
    half, model = _losses(_config(tiny_backbones[family], dropout=0.0, precision="bf16"))
    assert half == pytest.approx(plain, abs=2e-2)  # bf16 matmuls: a stated, loose tolerance
    for name, p in model.named_parameters():
        assert p.dtype == (torch.float32 if p.requires_grad else torch.bfloat16), name


@pytest.mark.parametrize("family", FAMILIES)
def test_bf16_trains_with_frozen_layer_norms_which_stay_fp32(tiny_backbones, family):
    # output-only freezes the norms; autocast runs norms in fp32 and refuses 16-bit parameters
    plain, _ = _losses(_config(tiny_backbones[family], dropout=0.0, policy="output-only"))
    half, model = _losses(_config(tiny_backbones[family], dropout=0.0, policy="output-only", precision="bf16"))
    assert half == pytest.approx(plain, abs=2e-2)
    norms = [n for m_name, m in model.named_modules() if is_norm(m) for n, _ in m.named_parameters(m_name)]
    assert norms and all(model.get_parameter(n).dtype == torch.float32 for n in norms)
    assert any(p.dtype == torch.bfloat16 for p in model.parameters())


@pytest.mark.slow
@pytest.mark.parametrize("family", FAMILIES)
def test_compile_gives_the_same_outputs_as_eager(tiny_backbones, family):
    torch._dynamo.reset()
    config = _config(tiny_backbones[family], dropout=0.0)
    _, eager = build(config)
    _, compiled = build(_config(tiny_backbones[family], dropout=0.0, compile=True))
    compiled.load_state_dict(eager.state_dict())
    x = torch.randn(3, eager.spec.seq_len, eager.spec.input_dim)
    eager.eval(), compiled.eval()
    with torch.no_grad():
        assert torch.allclose(compiled(x), eager(x), atol=1e-4)


def test_compile_falls_back_to_eager_when_compiling_fails(tiny_gpt2, monkeypatch):
    from torch._dynamo.exc import TorchDynamoException

    _, model = build(_config(tiny_gpt2, compile=True, dropout=0.0))

    def broken(*args, **kwargs):
        raise TorchDynamoException("backend 'inductor' failed: no C++ compiler")

    monkeypatch.setattr(model.backbone, "_compiled_call_impl", broken)
    x = torch.randn(2, model.spec.seq_len, model.spec.input_dim)
    with pytest.warns(RuntimeWarning, match="eager"):
        out = model(x)
    assert out.shape == (2, model.spec.num_outputs, 2) and model.backbone_info.run.active is False


def _variable_npz(tmp_path, n=40, length=12):
    rng = np.random.default_rng(0)
    lengths = rng.integers(2, length + 1, n)
    x = rng.integers(1, 9, (n, length))
    mask = np.arange(length)[None] < lengths[:, None]
    x = np.where(mask, x, 0)
    path = tmp_path / "seq.npz"
    np.savez(path, x=x, y=rng.integers(0, 3, n), mask=mask)
    return f"npz:{path}"


def test_bucketed_training_batches_are_deterministic_short_and_cover_each_window(tmp_path):
    task = create_task(_variable_npz(tmp_path))
    bucketed = LengthBucketedTask(task, window=4)
    plain_width = sum(task.train_batch(s, 4, 0).x.shape[1] for s in range(8))
    widths = []
    for window in range(2):
        steps = range(window * 4, window * 4 + 4)
        plain = sorted(torch.cat([task.train_batch(s, 4, 0).y[:, 0] for s in steps]).tolist())
        batches = [bucketed.train_batch(s, 4, 0) for s in steps]
        assert sorted(torch.cat([b.y[:, 0] for b in batches]).tolist()) == plain  # same examples per window
        widths += [b.x.shape[1] for b in batches]
        for b in batches:
            assert torch.equal(b.mask.sum(1) > 0, torch.ones(len(b), dtype=torch.bool))
    assert sum(widths) < plain_width
    again = LengthBucketedTask(create_task(_variable_npz(tmp_path)), window=4)
    for step in (5, 0, 7):  # any order of asking: the batch depends on (seed, step) only
        a, b = again.train_batch(step, 4, 0), bucketed.train_batch(step, 4, 0)
        assert torch.equal(a.x, b.x) and torch.equal(a.y, b.y)


def test_bucketed_prediction_is_per_example_in_the_original_order(tmp_path, tiny_backbones):
    config = TrainConfig(task=_variable_npz(tmp_path), backbone=tiny_backbones["bert"], seed=1)
    task, model = build(config)
    bucketed = LengthBucketedTask(task, window=4)
    plain_logits = predict(model, task, batch_size=7)
    bucketed_logits = predict(model, bucketed, batch_size=7)
    assert torch.allclose(bucketed_logits, plain_logits, atol=1e-5)
    assert torch.equal(bucketed_logits.argmax(-1), plain_logits.argmax(-1))
    order = bucketed.eval_order()
    assert not torch.equal(order, torch.arange(len(order)))  # the bucketed pass really reordered
    plain_eval, bucketed_eval = evaluate(model, task, 7), evaluate(model, bucketed, 7)
    assert bucketed_eval["accuracy"] == plain_eval["accuracy"]
    assert bucketed_eval["loss"] == pytest.approx(plain_eval["loss"], abs=1e-5)


def test_speed_options_fail_in_one_line(tiny_gpt2):
    for bad, words in (
        ({"precision": "fp8"}, "--precision"),
        ({"bucket_window": 0}, "--bucket-window"),
        ({"threads": 0}, "--threads"),
    ):
        with pytest.raises(FptError, match=words):
            _config(tiny_gpt2, **bad).validate()
    with pytest.raises(FptError, match="variable-length"):
        build(_config(tiny_gpt2, bucket_window=8))


@pytest.mark.parametrize("family", FAMILIES)
def test_loading_skips_the_token_table_and_keeps_every_other_weight(tiny_backbones, family):
    from transformers import AutoModel

    from fpt.backbones import load_backbone

    plain = AutoModel.from_pretrained(tiny_backbones[family]).state_dict()
    loaded = load_backbone(tiny_backbones[family]).model
    state = loaded.state_dict()
    assert set(plain) - set(state) == {
        k for k in plain if any(w in k for w in ("wte", "word_embeddings", "embed_tokens", "pooler"))
    }
    for key, tensor in state.items():
        assert torch.equal(tensor, plain[key]), key
    assert loaded.config.vocab_size == 64


def test_variable_length_tasks_fix_the_heap_threshold_and_fixed_length_ones_leave_it(tmp_path, tiny_gpt2, monkeypatch):
    import fpt.core.runtime

    calls = []
    monkeypatch.setattr(fpt.core.runtime, "limit_heap_fragmentation", lambda: calls.append(True) or True)
    build(TrainConfig(task=_variable_npz(tmp_path), backbone=tiny_gpt2))
    assert calls == []  # building is pure: the process is configured by entry points only
    train(_config(tiny_gpt2, steps=1), out=tmp_path / "fixed", progress=False)
    assert calls == []
    train(TrainConfig(task=_variable_npz(tmp_path), backbone=tiny_gpt2, steps=1), out=tmp_path / "var", progress=False)
    assert calls == [True]


def test_training_flushes_subnormal_floats_whose_slow_path_stalled_the_lstm_baseline(tmp_path):
    torch.set_flush_denormal(False)
    try:
        assert torch.tensor([1e-40]).item() != 0.0  # subnormal float32 kept by default
        config = TrainConfig(task="bit-xor", model="lstm", threads=1, steps=1, task_options={"eval_size": 4})
        build(config)
        assert torch.tensor([1e-40]).item() != 0.0  # building alone changes no process setting
        train(config, out=tmp_path / "run", progress=False)
        assert torch.tensor([1e-40]).item() == 0.0
    finally:
        torch.set_flush_denormal(False)


def test_long_inputs_with_attention_dropout_get_checkpointing_and_micro_batches_by_default(tmp_path, tiny_backbones):
    from fpt.tasks import TaskSpec
    from fpt.training.build import plan_memory

    listops_like = TaskSpec(seq_len=2000, num_classes=10, vocab_size=20)
    planned = plan_memory(TrainConfig(task="listops"), listops_like, heads=12)
    assert planned == {"checkpointing": True, "micro_batch_size": 4}  # 12 x 2000^2 x 12 B x 4 < 2.5 GB
    assert plan_memory(TrainConfig(task="listops", checkpointing=False), listops_like, heads=12) == {}  # chosen
    no_dropout = TrainConfig(task="listops", attention_dropout=0.0)
    assert plan_memory(no_dropout, listops_like, heads=12) == {"checkpointing": False}
    short = TaskSpec(seq_len=49, num_classes=10, input_dim=16)
    assert plan_memory(TrainConfig(), short, heads=12) == {"checkpointing": False}
    # what was chosen is recorded in config.json, so a resumed run makes the same choice
    rng = np.random.default_rng(0)
    np.savez(tmp_path / "long.npz", x=rng.integers(0, 5, (8, 600)), y=np.arange(8) % 2)
    _, run_dir = train(
        TrainConfig(
            task=f"npz:{tmp_path / 'long.npz'}",
            backbone=tiny_backbones["bert"],
            steps=1,
            batch_size=2,
            task_options={"heldout_fraction": 0.25},
        ),
        out=tmp_path / "run",
        progress=False,
    )
    assert json.loads((run_dir / "config.json").read_text())["checkpointing"] is True


def test_a_body_that_cannot_recompute_gets_micro_batches_for_all_its_layers_and_cuda_gets_neither():
    from fpt.tasks import TaskSpec
    from fpt.training.build import plan_memory

    spec = TaskSpec(seq_len=1024, num_classes=10, vocab_size=256)
    vit_like = plan_memory(TrainConfig(task="cifar10-lra"), spec, heads=12, layers=12, can_checkpoint=False)
    assert vit_like == {"checkpointing": False, "micro_batch_size": 1}  # 12 x 1024^2 x 12 B x 12 layers
    on_gpu = plan_memory(TrainConfig(task="cifar10-lra"), spec, heads=12, layers=12, device_type="cuda")
    assert on_gpu == {"checkpointing": False}  # fused kernels drop out themselves


def _allowed_fused_kernel(monkeypatch) -> list[bool]:
    """Whether torch's fused attention kernel was allowed, at each attention call from now on."""
    seen, real = [], torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        seen.append(torch.backends.cuda.flash_sdp_enabled())
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return seen


def test_short_bf16_training_takes_the_plain_attention_kernel_and_everything_else_torchs_choice(
    tiny_backbones, monkeypatch
):
    # torch's fused CPU kernel is several times slower in bf16 backward on short inputs (fpt.core.devices)
    allowed_fused = _allowed_fused_kernel(monkeypatch)
    for precision, grad, policy, expected in (
        ("bf16", True, "fpt", False),
        ("bf16", False, "fpt", True),
        ("fp32", True, "fpt", True),
        ("bf16", True, "output-only", True),
    ):
        task, model = build(_config(tiny_backbones["bert"], dropout=0.0, precision=precision, policy=policy))
        x = task.train_batch(0, 4, 0).x
        allowed_fused.clear()
        with torch.set_grad_enabled(grad):
            model(x)  # output-only: nothing before the head trains, so no backward through attention
        assert allowed_fused and set(allowed_fused) == {expected}, (precision, grad, policy)
    assert torch.backends.cuda.flash_sdp_enabled()  # the choice ends with the forward pass
    cpu = torch.device("cpu")
    with attention_kernel(cpu, torch.bfloat16, PLAIN_ATTENTION_MAX_TOKENS, backward=True):
        assert not torch.backends.cuda.flash_sdp_enabled()
    for device, tokens in ((cpu, PLAIN_ATTENTION_MAX_TOKENS + 1), (torch.device("cuda"), 8)):
        with attention_kernel(device, torch.bfloat16, tokens, backward=True):
            assert torch.backends.cuda.flash_sdp_enabled()  # long inputs (fused wins) and GPUs: torch's choice


@pytest.mark.parametrize("option", ["checkpointing", "compile"])
def test_a_body_that_recomputes_or_is_compiled_keeps_torchs_attention_kernel(tiny_backbones, option):
    # a block recomputed in backward, outside the forward's context, would take the other kernel
    # (and checkpointing fails on the mismatch); torch.compile does not notice a change of kernel
    config = _config(tiny_backbones["bert"], dropout=0.0, precision="bf16", **{option: True})
    _, model = build(config)
    embeds = torch.zeros(4, 8, model.backbone_info.hidden_size, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert isinstance(model.backbone_info._attention_kernel(embeds), contextlib.nullcontext)
    if option == "checkpointing":
        losses, _ = _losses(config, steps=2)
        assert all(torch.isfinite(torch.tensor(losses)))
