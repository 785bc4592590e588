"""int8 frozen weights (fpt.backbones.int8): rounding, the input-only backward, refusals, and a
tiny model that trains and checkpoints with them."""

import json

import pytest
import torch
from torch import nn
from transformers.pytorch_utils import Conv1D

from fpt.backbones import load_backbone
from fpt.backbones.int8 import Int8Linear, fbgemm_available, quantize_frozen_linears, quantize_weight
from fpt.core.errors import FptError
from fpt.models.transformer import FrozenPretrainedTransformer
from fpt.tasks import create_task
from fpt.training.checkpoint import load_checkpoint, restore, save_checkpoint

COMPUTES = ["fp32", pytest.param("fbgemm", marks=pytest.mark.skipif(not fbgemm_available(), reason="no fbgemm"))]


def frozen_linear(fan_in=48, fan_out=80, seed=0) -> nn.Linear:
    torch.manual_seed(seed)
    return nn.Linear(fan_in, fan_out).requires_grad_(False)


def test_weights_round_to_int8_per_output_channel_within_half_a_step():
    weight = torch.randn(16, 40) * torch.logspace(-3, 1, 16)[:, None]  # rows of very different sizes
    weight[3] = 0.0
    values, scale = quantize_weight(weight, group_size=None)
    assert values.dtype == torch.int8 and scale.shape == (16, 1)
    assert values.abs().max() == 127
    error = (values.float() * scale - weight).abs()
    assert torch.all(error <= scale / 2 + 1e-7)  # each row to half of its own step
    assert torch.all(values[3] == 0)
    again, again_scale = quantize_weight(values.float() * scale, group_size=None)  # rounding is idempotent
    assert torch.equal(again, values) and torch.allclose(again_scale, scale)


def test_a_large_weight_coarsens_only_its_own_group():
    weight = torch.randn(4, 256) * 0.01
    weight[0, 5] = 8.0  # an outlier, as MiniLM's first feed-forward output has
    per_channel, _ = quantize_weight(weight, group_size=None)
    grouped, scale = quantize_weight(weight, group_size=128)
    assert scale.shape == (4, 2)
    assert torch.count_nonzero(per_channel[0, 128:]) < 5  # the row's other weights round to 0
    assert torch.count_nonzero(grouped[0, 128:]) > 120  # in its own group they keep their precision
    layer = Int8Linear.from_float(nn.Linear(256, 4).requires_grad_(False))
    assert layer.weight_scale.shape == (4, 2)  # groups of 128 by default
    odd = Int8Linear.from_float(nn.Linear(200, 4).requires_grad_(False))
    assert odd.weight_scale.shape == (4, 1)  # 128 does not divide 200: one scale per channel


@pytest.mark.parametrize("compute", COMPUTES)
def test_int8_layer_matches_fp32_and_gives_only_the_input_a_gradient(compute):
    layer = frozen_linear()
    x = torch.randn(5, 7, 48, requires_grad=True)
    grad = torch.randn(5, 7, 80)
    layer(x).backward(grad)
    expected = x.grad.clone()
    x.grad = None
    quantized = Int8Linear.from_float(layer, compute, group_size=None if compute == "fbgemm" else 16)
    y = quantized(x)
    y.backward(grad)
    tolerance = 0.01 if compute == "fp32" else 0.05  # weight rounding; int8 activations add their own
    reference = layer(x)
    assert (y - reference).norm() / reference.norm() < tolerance
    assert (x.grad - expected).norm() / expected.norm() < tolerance
    assert quantized.weight_int8.grad is None and quantized.weight_scale.grad is None
    assert quantized.bias.grad is None and not quantized.bias.requires_grad
    assert [n for n, p in quantized.named_parameters() if p.requires_grad] == []


def test_fp32_compute_is_exactly_the_dequantised_weight():
    layer = frozen_linear()
    quantized = Int8Linear.from_float(layer)
    x = torch.randn(3, 48)
    expected = torch.nn.functional.linear(x, quantized.dequantized(), layer.bias)
    assert torch.allclose(quantized(x), expected, atol=1e-6)


def test_under_bf16_autocast_the_product_and_the_input_gradient_run_in_bf16():
    layer = frozen_linear()
    quantized = Int8Linear.from_float(layer)
    x = torch.randn(3, 48, requires_grad=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):  # --precision int8-bf16
        y = quantized(x)
    weight = quantized.dequantized().bfloat16()
    assert y.dtype == torch.bfloat16
    assert torch.equal(y, torch.nn.functional.linear(x.detach().bfloat16(), weight, layer.bias.bfloat16()))
    grad = torch.randn(3, 80, dtype=torch.bfloat16)
    y.backward(grad)
    assert torch.equal(x.grad, grad.matmul(weight).float())  # a bf16 product, in the input's dtype


@pytest.mark.parametrize(
    "flags, seven_bits",
    [(None, True), ({"avx2", "fma"}, True), ({"avx2", "avx_vnni"}, True), ({"avx512f", "avx512_vnni"}, False)],
)
def test_fbgemm_activations_take_8_bits_only_where_its_kernels_sum_in_32(monkeypatch, flags, seven_bits):
    from fpt.backbones.int8 import seven_bit_activations

    monkeypatch.setattr("fpt.core.runtime.cpu_flags", lambda: None if flags is None else frozenset(flags))
    assert seven_bit_activations() is seven_bits


@pytest.mark.parametrize("precision, dtype", [("int8", torch.float32), ("int8-bf16", torch.bfloat16)])
def test_a_model_built_int8_bf16_runs_its_int8_products_in_bf16(tiny_backbones, precision, dtype):
    task = create_task("bit-xor", n_bits=8)
    model = FrozenPretrainedTransformer(load_backbone(tiny_backbones["gpt2"]), task.spec, precision=precision)
    layers = [m for m in model.modules() if isinstance(m, Int8Linear)]
    seen = []
    for layer in layers:
        layer.register_forward_hook(lambda module, args, out: seen.append(out.dtype))
    model(task.train_batch(0, 4, 0).x).float().sum().backward()
    assert layers and len(seen) == len(layers) and set(seen) == {dtype}


def test_gpt2_conv1d_is_quantised_in_its_own_layout():
    torch.manual_seed(0)
    conv = Conv1D(80, 48).requires_grad_(False)  # weight (in, out): y = x W + b
    torch.nn.init.normal_(conv.weight, std=0.1)
    quantized = Int8Linear.from_float(conv)
    x = torch.randn(4, 48)
    assert (quantized(x) - conv(x)).norm() / conv(x).norm() < 0.01
    state = quantized.state_dict()
    assert set(state) == {"weight", "bias"} and state["weight"].shape == (48, 80)


def test_a_trained_layer_a_second_quantisation_and_an_unknown_compute_are_refused():
    trained = nn.Linear(4, 4)
    with pytest.raises(FptError, match="frozen"):
        Int8Linear.from_float(trained)
    body = nn.Sequential(frozen_linear(4, 4), nn.Linear(4, 4))
    with pytest.raises(FptError, match=r"1 linear layers .*\(1\)"):
        quantize_frozen_linears(body)
    assert isinstance(body[0], nn.Linear)  # nothing was half-done
    body[1].requires_grad_(False)
    assert quantize_frozen_linears(body) > 0
    with pytest.raises(FptError, match="already int8"):
        quantize_frozen_linears(body)
    with pytest.raises(FptError, match="already int8"):
        Int8Linear.from_float(body[0])
    with pytest.raises(FptError, match="unknown int8 compute"):
        quantize_frozen_linears(nn.Sequential(frozen_linear(4, 4)), compute="int4")
    if fbgemm_available():
        with pytest.raises(FptError, match="group_size=None"):
            quantize_frozen_linears(nn.Sequential(frozen_linear(256, 4)), compute="fbgemm")


def test_state_dict_keeps_the_layer_names_and_loads_into_fp32_and_back():
    layer = frozen_linear()
    quantized = Int8Linear.from_float(layer, group_size=16)
    state = quantized.state_dict()
    assert {k: v.shape for k, v in state.items()} == {k: v.shape for k, v in layer.state_dict().items()}
    plain = nn.Linear(48, 80)
    plain.load_state_dict(state)
    x = torch.randn(3, 48)
    assert torch.allclose(plain(x), quantized(x), atol=1e-6)
    other = Int8Linear.from_float(frozen_linear(seed=1), group_size=16)
    other.load_state_dict(state)
    assert torch.equal(other.weight_int8, quantized.weight_int8)
    assert torch.equal(other.weight_scale, quantized.weight_scale)
    with pytest.raises(RuntimeError, match="weight"):
        other.load_state_dict({"bias": state["bias"]})


def _model(path, task, compute):
    torch.manual_seed(0)
    model = FrozenPretrainedTransformer(load_backbone(path, dropout=0.0), task.spec, dropout=0.0)
    if compute is not None:
        quantize_frozen_linears(model.backbone, compute)
    return model


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_a_tiny_model_with_int8_frozen_layers_trains_and_its_checkpoint_is_unchanged(tiny_backbones, tmp_path, family):
    task = create_task("bit-memory", n_bits=8, n_strings=2, patch_size=4, eval_size=4)
    path = tiny_backbones[family]
    plain = _model(path, task, None)
    model = _model(path, task, "fp32")
    layers = [m for m in model.backbone.modules() if isinstance(m, Int8Linear)]
    assert len(layers) >= 8  # every attention and feed-forward projection of the two blocks
    assert {n for n, p in model.named_parameters() if p.requires_grad} == set(plain.trainable_state())
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in plain.state_dict().items()}

    optimizer = torch.optim.Adam([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    batch = task.train_batch(0, 16, 0)
    losses = []
    for _ in range(30):
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(batch.x).flatten(0, 1), batch.y.flatten())
        loss.backward()
        losses.append(loss.item())
        assert all((p.grad is not None) == p.requires_grad for p in model.parameters())
        optimizer.step()
    assert losses[-1] < 0.5 * losses[0]
    assert all(b.grad is None for b in model.buffers())

    save_checkpoint(tmp_path / "ckpt.safetensors", model, optimizer, step=30)
    checkpoint = load_checkpoint(tmp_path / "ckpt.safetensors")
    assert set(checkpoint.params) == set(plain.trainable_state())  # only trained tensors: no int8 buffer
    resumed = _model(path, task, "fp32")
    restore(resumed, checkpoint, tmp_path / "ckpt.safetensors")
    with torch.no_grad():
        assert torch.equal(resumed(batch.x), model(batch.x))


def test_a_block_recomputed_in_backward_gets_the_same_input_gradient():
    from torch.utils.checkpoint import checkpoint

    block = nn.Sequential(frozen_linear(48, 80), nn.GELU(), frozen_linear(80, 48, seed=1))
    quantize_frozen_linears(block)
    x = torch.randn(6, 48, requires_grad=True)
    block(x).square().sum().backward()
    expected, x.grad = x.grad.clone(), None
    checkpoint(block, x, use_reentrant=False).square().sum().backward()
    assert torch.equal(x.grad, expected)


@pytest.mark.parametrize("precision", ["int8", "int8-bf16"])
def test_fpt_train_precision_int8_trains_resumes_exactly_and_keeps_the_checkpoint_format(
    tiny_gpt2, tmp_path, precision
):
    from helpers import train_argv

    from fpt.cli import main
    from fpt.training.lifecycle import resume

    def run(out, steps):
        return main(train_argv(tiny_gpt2, out, "--steps", steps, "--eval-every", "3", "--precision", precision))

    assert run(tmp_path / "whole", "6") == 0 and run(tmp_path / "cut", "3") == 0
    resumed, _ = resume(tmp_path / "cut", steps=6, progress=False)
    whole = json.loads((tmp_path / "whole" / "summary.json").read_text())
    assert resumed["final"] == whole["final"]  # the int8 run resumed equals the uninterrupted one
    assert json.loads((tmp_path / "whole" / "config.json").read_text())["precision"] == precision
    fp32_dir = tmp_path / "fp32"
    assert main(train_argv(tiny_gpt2, fp32_dir, "--steps", "1", "--eval-every", "1")) == 0
    int8_names = set(load_checkpoint(tmp_path / "whole" / "checkpoint.safetensors").params)
    assert int8_names == set(load_checkpoint(fp32_dir / "checkpoint.safetensors").params)


@pytest.mark.parametrize(
    "options, words",
    [
        (["--policy", "full"], "linear layers of this body train"),
        (["--body", "attention"], "--body attention trains all it has"),
        (["--compile"], "--compile is untested"),
    ],
)
def test_int8_with_a_policy_or_control_that_trains_its_layers_is_one_line(tiny_gpt2, tmp_path, capsys, options, words):
    from helpers import one_line_error, train_argv

    from fpt.cli import main

    assert main(train_argv(tiny_gpt2, tmp_path / "run", "--steps", "1", "--precision", "int8", *options)) == 2
    assert words in one_line_error(capsys)
    assert not (tmp_path / "run").exists()
