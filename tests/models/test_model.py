import pytest
import torch

from fpt.backbones import load_backbone
from fpt.core.errors import FptError
from fpt.models.ends import OutputHead
from fpt.models.transformer import FrozenPretrainedTransformer
from fpt.tasks import TaskSpec, create_task


def test_output_head_reads_the_last_real_tokens_under_a_padding_mask():
    spec = TaskSpec(seq_len=6, num_classes=3, input_dim=1, last_k=2)
    head = OutputHead(spec, hidden_size=4)
    hidden = torch.arange(2 * 6 * 4, dtype=torch.float32).reshape(2, 6, 4)
    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 1, 1, 0, 0, 0]], dtype=torch.bool)
    with torch.no_grad():
        logits = head(hidden, mask)
        expected = head.linear(torch.stack([hidden[0, 4:6], hidden[1, 1:3]]))
    assert logits.shape == (2, 2, 3)
    assert torch.allclose(logits, expected)


def test_mean_pooling_ignores_padding():
    spec = TaskSpec(seq_len=4, num_classes=2, input_dim=1)
    head = OutputHead(spec, hidden_size=3, pooling="mean")
    hidden = torch.randn(1, 4, 3)
    mask = torch.tensor([[1, 1, 0, 0]], dtype=torch.bool)
    with torch.no_grad():
        assert torch.allclose(head(hidden, mask), head.linear(hidden[:, :2].mean(1, keepdim=True)))


def test_forward_shapes_for_each_family(tiny_backbones):
    task = create_task("bit-memory", n_bits=8, n_strings=2, patch_size=4, eval_size=4)
    for family, path in tiny_backbones.items():
        model = FrozenPretrainedTransformer(load_backbone(path), task.spec, extra_positions=family == "llama")
        batch = task.train_batch(0, 3, 0)
        assert model(batch.x).shape == (3, 8, 2)


def test_input_layer_is_orthogonal_with_gain(tiny_backbones):
    task = create_task("bit-memory", n_bits=8, n_strings=2, patch_size=4)
    model = FrozenPretrainedTransformer(load_backbone(tiny_backbones["gpt2"]), task.spec)
    w = model.embedder.linear.weight  # (32, 4): columns orthogonal with norm 1.41
    assert torch.allclose(w.T @ w, torch.eye(4) * 1.41**2, atol=1e-4)
    assert torch.count_nonzero(model.embedder.linear.bias) == 0


@pytest.mark.parametrize("family", ["gpt2", "bert"])
def test_a_longer_task_grows_the_position_table_by_interpolation(tiny_backbones, family):
    name = "wpe.weight" if family == "gpt2" else "embeddings.position_embeddings.weight"
    old = dict(load_backbone(tiny_backbones[family]).model.named_parameters())[name].detach().clone()
    task = create_task("bit-memory", n_bits=100, n_strings=5, patch_size=2)  # 300 tokens > 128
    with pytest.raises(FptError, match=r"seq_len=300"):  # a body too short for the task is refused
        FrozenPretrainedTransformer(load_backbone(tiny_backbones[family]), task.spec)
    backbone = load_backbone(tiny_backbones[family], seq_len=task.spec.seq_len)  # grown at load time
    model = FrozenPretrainedTransformer(backbone, task.spec)
    new = dict(model.backbone.named_parameters())[name]
    assert new.shape == (300, 32) and model.extended_positions == (128, 300)
    assert torch.equal(new[0], old[0]) and torch.allclose(new[-1], old[-1])  # the ends are kept
    assert new.requires_grad  # positions train under the fpt policy
    assert model(task.train_batch(0, 2, 0).x).shape == (2, 100, 2)


@pytest.mark.parametrize("family", ["gpt2", "bert", "llama"])
def test_attention_dropout_reaches_the_attention_of_each_family(tiny_backbones, family):
    spec = TaskSpec(seq_len=12, num_classes=3, input_dim=4)
    x = torch.randn(2, 12, 4)

    def train_mode_matches_eval(attention_dropout):
        backbone = load_backbone(tiny_backbones[family], dropout=0.0, attention_dropout=attention_dropout)
        model = FrozenPretrainedTransformer(backbone, spec, dropout=0.0)
        model.eval()
        with torch.no_grad():
            reference = model(x)
            model.train()
            torch.manual_seed(0)
            return torch.allclose(model(x), reference, atol=1e-6)

    assert train_mode_matches_eval(0.0)  # hidden and attention dropout both off
    assert not train_mode_matches_eval(0.5)  # only attention dropout on: it must change the output


def test_attention_dropout_out_of_range_is_one_clear_error(tiny_gpt2):
    with pytest.raises(FptError, match="--attention-dropout must be in"):
        load_backbone(tiny_gpt2, dropout=0.1, attention_dropout=1.5)


def test_load_backbone_applies_the_papers_dropout_by_default_and_keeps_published_rates_on_request(tiny_backbones):
    llama = load_backbone(tiny_backbones["llama"])  # published attention dropout 0.0
    rates = [
        m.attention_dropout for m in llama.model.modules() if isinstance(getattr(m, "attention_dropout", None), float)
    ]
    assert rates and all(rate == 0.1 for rate in rates)
    kept = load_backbone(tiny_backbones["llama"], dropout=None)
    assert all(
        m.attention_dropout == 0.0
        for m in kept.model.modules()
        if isinstance(getattr(m, "attention_dropout", None), float)
    )
    only_attention = load_backbone(tiny_backbones["bert"], dropout=None, attention_dropout=0.3)
    ps = {
        type(m).__name__: m.dropout.p
        for m in only_attention.model.modules()
        if type(m).__name__.endswith("SelfAttention")
    }
    assert ps and set(ps.values()) == {0.3}
