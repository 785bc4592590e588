"""Shared fixtures: tiny random backbones of each family, saved offline as local directories."""

import os

os.environ["HF_HUB_OFFLINE"] = "1"  # no test may reach the network
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(scope="session", autouse=True)
def _auto_precision_is_fp32():
    """--precision auto (the default) picks bf16 on a CPU with native bf16: the suite would train
    in bf16 on such a machine and in fp32 elsewhere. Pin it to this machine-independent answer for
    the whole session (in-process runs), module-scoped fixtures' runs included (a fixture's run
    trained in bf16 would warn in every test that reads it); tests of the detection itself are
    marked `real_cpu` and see the real answer (`_real_cpu`)."""
    import fpt.core.runtime

    patch = pytest.MonkeyPatch()
    patch.setattr(fpt.core.runtime, "native_bf16", lambda: False)
    yield
    patch.undo()


@pytest.fixture(autouse=True)
def _real_cpu(request, monkeypatch):
    if request.node.get_closest_marker("real_cpu") is not None:
        import fpt.core.runtime

        monkeypatch.setattr(fpt.core.runtime, "native_bf16", _REAL_NATIVE_BF16)


def _unpatched_native_bf16():
    import fpt.core.runtime

    return fpt.core.runtime.native_bf16


_REAL_NATIVE_BF16 = _unpatched_native_bf16()  # read at collection, before the session's pin


def tiny_config(family: str):
    from transformers import BertConfig, GPT2Config, LlamaConfig

    if family == "gpt2":
        return GPT2Config(
            n_embd=32, n_layer=2, n_head=2, n_positions=128, vocab_size=64, bos_token_id=0, eos_token_id=0
        )
    if family == "bert":
        return BertConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            intermediate_size=64,
            max_position_embeddings=128,
            vocab_size=64,
        )
    if family == "llama":
        return LlamaConfig(
            hidden_size=32,
            num_hidden_layers=2,
            num_attention_heads=2,
            num_key_value_heads=1,
            intermediate_size=64,
            vocab_size=64,
            max_position_embeddings=128,
        )
    raise ValueError(family)


def save_tiny(family: str, path, seed: int = 1234):
    from transformers import AutoModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # as fpt does: its bar on stderr is not a test's error line
    torch.manual_seed(seed)
    AutoModel.from_config(tiny_config(family)).save_pretrained(path)
    return str(path)


@pytest.fixture(scope="session")
def tiny_backbones(tmp_path_factory):
    """{family: directory} for tiny random GPT-2, BERT and Llama checkpoints."""
    root = tmp_path_factory.mktemp("backbones")
    return {family: save_tiny(family, root / family) for family in ("gpt2", "bert", "llama")}


@pytest.fixture
def tiny_gpt2(tiny_backbones):
    return tiny_backbones["gpt2"]


@pytest.fixture
def finished_run(tiny_gpt2, tmp_path):
    """A finished 2-step `fpt train` run of the tiny GPT-2 on Bit XOR (helpers.train_argv)."""
    from helpers import train_argv

    from fpt.cli import main

    out = tmp_path / "run"
    assert main(train_argv(tiny_gpt2, out, "--steps", "2", "--eval-every", "1")) == 0
    return out


@pytest.fixture
def wandb_offline(tmp_path, monkeypatch):
    """W&B in offline mode writing under this test's tmp_path; the folder its runs land in."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_CONSOLE", "off")
    yield tmp_path / "wandb"
    # wandb keeps one service and its settings per process: without this, the next test's runs
    # went on landing in this test's folder (seen when two test files using W&B ran in one pytest)
    import wandb

    wandb.teardown()
