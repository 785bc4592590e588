"""FrozenPretrainedTransformer = input embedder + backbone body + output head (the ends and the
TrainableModel protocol live in fpt.models.ends and are importable here too).

A model saves itself whole as Hugging Face does (`save_pretrained`: config.json with the
backbone's own config and fpt's settings under "fpt", model.safetensors with every weight) and
`FrozenPretrainedTransformer.from_pretrained(DIR)` rebuilds it offline, without its run.
"""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import torch
from torch import nn

from fpt.backbones.control_bodies import BACKBONE, ControlBody, control_groups
from fpt.backbones.surgery import check_dropout_rates, compute_dtype, store_frozen_weights
from fpt.core.errors import FptError
from fpt.core.jsonfile import read_json_object
from fpt.core.paths import save_safetensors, write_json
from fpt.models.ends import (
    POOLINGS,
    InputEmbedder,
    OutputHead,
    WindowScale,
)
from fpt.models.policy import GroupRow, apply_policy, classify_backbone, classify_names, count_groups, parse_policy
from fpt.tasks.spec import TaskSpec

if TYPE_CHECKING:  # the body's module imports transformers' modelling code: 2 s that `fpt info` need not spend
    from fpt.backbones.body import Backbone
    from fpt.backbones.shapes import BodyShapes

PRETRAINED_FORMAT = "fpt-pretrained-1"
CONFIG_NAME, WEIGHTS_NAME = "config.json", "model.safetensors"  # Hugging Face's names


class FrozenPretrainedTransformer(nn.Module):
    """A backbone body between a new input embedder and a new output head, frozen by a policy.

    The body comes from `load_backbone`, which makes every change a run asks of it (positions
    long enough for the task, dropout rates, checkpointing, compile). `dropout` here is the input
    embedder's. precision "bf16" (or "fp16", GPUs) keeps the frozen weights in 16 bits and runs
    the body under autocast (changes numerics); it is applied here because which weights are
    frozen depends on the policy. A control body (`load_backbone(body=...)`) trains every parameter
    it has, whatever `policy` says: its layers are fresh.
    """

    def __init__(
        self,
        backbone: Backbone,
        spec: TaskSpec,
        policy: str = "fpt",
        pooling: str = "last",
        dropout: float = 0.1,
        extra_positions: bool = False,
        precision: str = "fp32",
    ):
        super().__init__()
        if backbone.max_positions is not None and spec.seq_len > backbone.max_positions:
            raise FptError(
                f"the task is {spec.seq_len} tokens long and backbone {backbone.name!r} has "
                f"{backbone.max_positions} positions; load it with load_backbone(..., seq_len={spec.seq_len})"
            )
        check_dropout_rates(dropout, None)
        policy = policy if backbone.body == BACKBONE else "full"
        self.spec, self.policy, self.precision = spec, policy, precision
        self.backbone_info = backbone
        self.weights_name, self.weights_hash = backbone.name, backbone.weights_hash
        self.extended_positions = backbone.extended_positions
        self.embedder = InputEmbedder(spec, backbone.hidden_size, dropout, extra_positions)
        self.backbone = backbone.model
        self.head = OutputHead(spec, backbone.hidden_size, pooling)
        self.param_groups = self._classify()
        self.group_rows = apply_policy(self.param_groups, self, parse_policy(policy))
        self.compute_dtype = compute_dtype(precision)
        if precision.startswith("int8"):  # after the policy: it refuses a linear layer that trains
            from fpt.backbones.int8 import quantize_frozen_linears

            quantize_frozen_linears(self.backbone)
        elif self.compute_dtype != torch.float32:
            store_frozen_weights(self.backbone, self.compute_dtype)

    def _classify(self) -> dict[str, str]:
        body = (
            control_groups(self.backbone)
            if isinstance(self.backbone, ControlBody)
            else classify_backbone(self.backbone, self.backbone_info.family)
        )
        return model_groups(body, self.embedder, self.head)

    def trainable_state(self) -> dict[str, torch.Tensor]:
        """Only what training changes: the parameters that require gradients."""
        return {n: p.detach() for n, p in self.named_parameters() if p.requires_grad}

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None, output_attentions: bool = False):
        """Inputs (B, L) tokens or (B, L, input_dim) vectors (a series task: (B, lookback) windows) -> logits (B,
        num_outputs, num_classes); with output_attentions, (logits, attentions)."""
        return transformer_forward(
            self.embedder, self.backbone_info, self.head, x, mask, self.compute_dtype, output_attentions
        )

    def settings(self) -> dict:
        """What rebuilds this model around its weights, as JSON: the task's shapes, the policy, the
        input layer and head, and the backbone weights it was trained on."""
        info = self.backbone_info
        return {
            "format": PRETRAINED_FORMAT,
            "task_spec": dataclasses.asdict(self.spec),
            "policy": self.policy,
            "pooling": self.head.pooling,
            "dropout": self.embedder.dropout.p,
            "extra_positions": self.embedder.positions is not None,
            "precision": self.precision,
            "backbone": info.name,
            "init": info.init,
            "weights_hash": info.weights_hash,
            "extended_positions": info.extended_positions,
            "backbone_dropout": info.dropout,
            "backbone_attention_dropout": info.attention_dropout,
            "backbone_attention": info.attention,
        }

    def save_pretrained(self, directory: str | Path, extra: dict | None = None) -> Path:
        """Write the whole model into `directory`: config.json (the backbone's Hugging Face config,
        `settings()` and `extra` under "fpt") and model.safetensors (every weight), each atomically."""

        directory = Path(directory)
        if self.backbone_info.body != BACKBONE:
            raise FptError(
                f"a --body {self.backbone_info.body} control has no pretrained backbone to save around; "
                "its run directory holds every weight it trained"
            )
        config = json.loads(self.backbone.config.to_json_string(use_diff=False))
        config["fpt"] = {**self.settings(), **(extra or {})}
        tensors = {k: v.detach().cpu().contiguous() for k, v in self.state_dict().items()}
        save_safetensors(directory / WEIGHTS_NAME, tensors, {"format": PRETRAINED_FORMAT})
        write_json(directory / CONFIG_NAME, config)
        return directory

    @classmethod
    def from_pretrained(cls, directory: str | Path) -> "FrozenPretrainedTransformer":
        """Rebuild a model written by `save_pretrained` (`fpt export --format hf`) offline: no run
        directory, no hub, no remote code; JSON and safetensors only. Returned in eval mode."""
        directory = Path(directory)
        config = read_pretrained_config(directory)
        settings = config.pop("fpt")
        spec = task_spec(settings, directory / CONFIG_NAME)  # sizes bounded (TaskSpec) before building
        saved = _saved_layouts(directory / WEIGHTS_NAME)
        _check_block_count(config, saved, directory)
        try:  # first without memory: a config that asks for more (or other) tensors than the file holds
            with torch.device("meta"):  # (10^9 classes: a 1.5 TB head) is refused before anything is allocated
                described = {
                    k: _layout(v) for k, v in cls._build(config, settings, spec, directory).state_dict().items()
                }
        except FptError:
            raise
        except Exception:  # an architecture that cannot be built on the meta device: the real build checks
            described = None
        if described is not None and described != saved:
            differ = sorted(described.keys() ^ saved.keys()) or sorted(k for k in described if described[k] != saved[k])
            raise FptError(
                f"{directory / CONFIG_NAME} describes another model than {WEIGHTS_NAME} holds ({differ[0]}: "
                f"{described.get(differ[0], 'absent')} in the config, {saved.get(differ[0], 'absent')} in the file); "
                "export the run again"
            )
        try:
            model = cls._build(config, settings, spec, directory)
        except (MemoryError, RuntimeError) as exc:  # torch's "can't allocate memory" is a RuntimeError
            if not isinstance(exc, MemoryError) and "allocate" not in str(exc):
                raise
            raise FptError(
                f"{directory}: not enough memory to build the model its config describes "
                f"({str(exc).splitlines()[0][:120]}); export the run again, or use a machine with more memory"
            ) from None
        load_weights(model, directory / WEIGHTS_NAME)
        return model.eval()

    @classmethod
    def _build(cls, config: dict, settings: dict, spec: TaskSpec, directory: Path) -> "FrozenPretrainedTransformer":
        """The model a saved config describes, its weights as initialised (on torch's default device)."""
        from fpt.backbones import backbone_from_config

        try:
            with torch.random.fork_rng():  # building draws initial weights: the caller's RNG stays as it was
                backbone = backbone_from_config(
                    dict(config),
                    name=settings["backbone"],
                    init=settings["init"],
                    weights_hash=settings["weights_hash"],
                    seq_len=spec.seq_len,
                    dropout=settings["backbone_dropout"],
                    attention_dropout=settings["backbone_attention_dropout"],
                    attention=settings.get("backbone_attention"),
                )  # absent: exported before --attention
                grown = settings["extended_positions"]
                backbone.extended_positions = None if grown is None else (int(grown[0]), int(grown[1]))
                return cls(
                    backbone,
                    spec,
                    **head_settings(settings, directory / CONFIG_NAME),
                    policy=settings["policy"],
                    precision=settings["precision"],
                )
        except (KeyError, TypeError, ValueError, IndexError, AttributeError) as exc:
            raise FptError(
                f"{directory / CONFIG_NAME}: fpt settings damaged ({type(exc).__name__}: {exc}); export the run again"
            ) from None


def model_groups(body: dict[str, str], embedder: InputEmbedder, head: OutputHead) -> dict[str, str]:
    """Every parameter of the model by its name in the model, to its group: the body's (`body`, by
    their names in the body) and the new input layer's and head's."""
    groups = {f"backbone.{k}": g for k, g in body.items()}
    for name, _ in embedder.named_parameters():
        groups[f"embedder.{name}"] = "position" if name.startswith("positions.") else "input"
    for name, _ in head.named_parameters():
        groups[f"head.{name}"] = "output"
    return groups


def group_rows_from_shapes(
    body: BodyShapes,
    spec: TaskSpec,
    policy: str = "fpt",
    pooling: str = "last",
    dropout: float = 0.1,
    extra_positions: bool = False,
) -> list[GroupRow] | None:
    """The `group_rows` of FrozenPretrainedTransformer(backbone, spec, policy, pooling, dropout,
    extra_positions) for the body `body` describes (fpt.backbones.shapes), without building it: the
    body's parameters placed by their family's rules, the new layers (small) built to be counted.
    None where a body parameter fits no rule: only the built body's module types can place it.
    Mistakes are refused in the same words, in the same order."""
    check_dropout_rates(dropout, None)
    # built on the CPU, not the meta device: meta's initialisers import torch._dynamo (2 s on two cores);
    # the caller's random numbers are left as they were
    with torch.random.fork_rng(devices=[]):
        embedder = InputEmbedder(spec, body.hidden_size, dropout, extra_positions)
        head = OutputHead(spec, body.hidden_size, pooling)
    try:
        body_groups = classify_names(body.shapes, body.family)
    except FptError:  # a name the module-type fallback may still place (classify_backbone)
        return None
    sizes = {f"backbone.{name}": math.prod(shape) for name, shape in body.shapes.items()}
    for prefix, module in (("embedder", embedder), ("head", head)):
        sizes |= {f"{prefix}.{name}": param.numel() for name, param in module.named_parameters()}
    return count_groups(model_groups(body_groups, embedder, head), sizes, parse_policy(policy))


def transformer_forward(
    embedder: InputEmbedder,
    body: Callable,
    head: OutputHead,
    x: torch.Tensor,
    mask: torch.Tensor | None,
    compute_dtype: torch.dtype,
    output_attentions: bool = False,
):
    """Input layer, body (under autocast where frozen weights are 16-bit), head: logits (or values),
    and the attention maps if asked. `body` takes inputs_embeds: fpt's own backbone or a PEFT model."""
    scale = WindowScale(x) if head.spec.window_norm else None
    embeds = embedder(x if scale is None else scale.normalize(x))
    attention_mask = None if mask is None else mask.long()
    with torch.autocast(embeds.device.type, dtype=compute_dtype, enabled=compute_dtype != torch.float32):
        out = body(inputs_embeds=embeds, attention_mask=attention_mask, output_attentions=output_attentions)
    logits = head(out.last_hidden_state.float(), mask)
    if scale is not None:
        logits = scale.restore(logits)
    return (logits, out.attentions) if output_attentions else logits


def read_pretrained_config(directory: Path) -> dict:
    """config.json of a saved model, with fpt's settings under "fpt"; anything else is refused."""
    path = directory / CONFIG_NAME
    if not (path.is_file() and (directory / WEIGHTS_NAME).is_file()):
        raise FptError(
            f"{directory} holds no saved fpt model ({CONFIG_NAME} and {WEIGHTS_NAME}); "
            "write one with `fpt export RUN_DIR --format hf --out DIR`"
        )
    config = read_json_object(path, "fpt export RUN_DIR --format hf --out DIR")
    if not isinstance(config.get("fpt"), dict):
        raise FptError(f"{path} has no fpt settings; it was not written by fpt (`fpt export --format hf`)")
    if config["fpt"].get("format") != PRETRAINED_FORMAT:
        raise FptError(
            f"{path}: format {config['fpt'].get('format')!r}, this fpt reads {PRETRAINED_FORMAT!r}; "
            "export the run again"
        )
    return config


def task_spec(settings: dict, where) -> TaskSpec:
    """The TaskSpec saved in `settings()` form, checked field by field."""
    fields = settings.get("task_spec")
    names = {f.name for f in dataclasses.fields(TaskSpec)}

    def valid(name, value) -> bool:
        if name == "target":
            return value in ("classes", "values")
        if name == "window_norm":
            return isinstance(value, bool)
        return value is None or (isinstance(value, int) and not isinstance(value, bool) and value > 0)

    if not (isinstance(fields, dict) and set(fields) <= names and all(valid(k, v) for k, v in fields.items())):
        raise FptError(f"{where}: the task spec is missing or damaged; export the run again")
    try:
        return TaskSpec(**fields)
    except TypeError as exc:
        raise FptError(f"{where}: the task spec is damaged ({exc}); export the run again") from None
    except FptError as exc:  # sizes past TaskSpec's bounds
        raise FptError(f"{where}: {exc}") from None


def head_settings(settings: dict, where) -> dict:
    """The input layer's and head's keyword arguments, from `settings()` form, as read from the
    file `where`: a damaged value is one line naming it."""
    dropout, pooling = settings["dropout"], settings["pooling"]
    rate = not isinstance(dropout, bool) and isinstance(dropout, (int, float)) and 0 <= dropout < 1
    if not rate or pooling not in POOLINGS:
        raise FptError(
            f"{where}: fpt settings damaged (dropout {dropout!r}, pooling {pooling!r}); export the run again"
        )
    return {"pooling": pooling, "dropout": dropout, "extra_positions": bool(settings["extra_positions"])}


def _layout(tensor: torch.Tensor) -> str:
    return f"{str(tensor.dtype).removeprefix('torch.')} {tuple(tensor.shape)}"


# safetensors' names of the dtypes a model holds
_SAFETENSORS_DTYPES = {
    "F64": "float64",
    "F32": "float32",
    "F16": "float16",
    "BF16": "bfloat16",
    "I64": "int64",
    "I32": "int32",
    "I16": "int16",
    "I8": "int8",
    "U8": "uint8",
    "BOOL": "bool",
}


# where Hugging Face configs keep the number of blocks (GPT-2, BERT/Llama/ViT, T5-style)
BLOCK_COUNT_FIELDS = ("n_layer", "num_hidden_layers", "num_layers")


def _check_block_count(config: dict, saved: dict[str, str], directory: Path) -> None:
    """Refuse a config declaring more blocks than the file can hold, before the meta-device build,
    which spends about 8 ms of Python per block (a damaged n_layer of 5,000: 40 s to a refusal).
    Blocks live in a ModuleList, so a file holding N of them has tensor names numbered up to N - 1."""
    # the largest: transformers reads a second field as the first (GPT-2's num_hidden_layers is n_layer)
    declared = max((config[k] for k in BLOCK_COUNT_FIELDS if type(config.get(k)) is int), default=None)
    numbers = [int(part) for key in saved for part in key.split(".") if part.isdigit()]
    if declared is not None and numbers and declared > max(numbers) + 1:
        raise FptError(
            f"{directory / CONFIG_NAME} describes another model than {WEIGHTS_NAME} holds ({declared:,} blocks in "
            f"the config, at most {max(numbers) + 1:,} in the file); export the run again"
        )


def _saved_layouts(path: Path) -> dict[str, str]:
    """Each tensor's dtype and shape in a safetensors file (`_layout`'s form), from its header alone."""
    from safetensors import SafetensorError, safe_open

    try:
        with safe_open(str(path), framework="pt") as handle:
            slices = {key: handle.get_slice(key) for key in handle.keys()}
            return {
                key: f"{_SAFETENSORS_DTYPES.get(s.get_dtype(), s.get_dtype())} {tuple(s.get_shape())}"
                for key, s in slices.items()
            }
    except (SafetensorError, OSError) as exc:
        raise FptError(f"cannot read {path} ({exc}); it may be truncated: export the run again") from None


@torch.no_grad()
def load_weights(module: nn.Module, path: Path) -> None:
    """Copy a safetensors file into `module`: every tensor name and shape must match its state_dict."""
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError) as exc:
        raise FptError(f"cannot read {path} ({exc}); it may be truncated: export the run again") from None
    state = module.state_dict()
    missing, unexpected = sorted(state.keys() - tensors.keys()), sorted(tensors.keys() - state.keys())
    # dtypes as well as shapes: int32 weights of the right shapes would load as whole numbers
    wrong = sorted(k for k in state.keys() & tensors.keys() if _layout(state[k]) != _layout(tensors[k]))
    if missing or unexpected or wrong:
        problem = (
            f"no {missing[0]}"
            if missing
            else f"an unknown {unexpected[0]}"
            if unexpected
            else f"{wrong[0]} is {_layout(tensors[wrong[0]])}, the model's {_layout(state[wrong[0]])}"
        )
        raise FptError(f"{path} does not fit the model it describes ({problem}); export the run again")
    module.load_state_dict(tensors)
