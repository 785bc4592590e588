"""`fpt export RUN_DIR --format peft|hf --out DIR`: a trained run, for other tools.

- hf: the whole model as a Hugging Face-style directory (`FrozenPretrainedTransformer.save_pretrained`:
  config.json, model.safetensors), rebuilt offline by `FrozenPretrainedTransformer.from_pretrained(DIR)`
  and read by `fpt predict DIR` (the task is rebuilt from the name and options recorded with it).
- peft: the trained body as a PEFT layer-norm-tuning adapter (`peft.LNTuningConfig`: every norm layer a
  target; position and token-type tables, and any other module the policy trained, in
  `modules_to_save`), written by PEFT's own `save_pretrained`; beside it fpt's input layer and head
  (fpt_input_head.safetensors) and fpt_task.json (task spec, head settings, how to rebuild).
  `compose_peft(PeftModel.from_pretrained(base, DIR), DIR)` gives the run's logits again. What an
  adapter on the published base model cannot express is refused: other than published weights
  (--init random/stats/bit), blocks cut (--layers), a position table grown past the base model's, an
  encoder made causal (--attention), a ViT (fpt rebuilds its embeddings).

Dropout rates are not carried by the peft format (they act only in training). Either format is
written into a temporary folder beside DIR and renamed into place: nothing half-written (and the
temporary folder of an export killed outright is removed by the next export beside it).
"""

from __future__ import annotations

import os
import shutil
import warnings
from pathlib import Path

import torch
from torch import nn

from fpt.backbones.surgery import attention_switch, compute_dtype, is_norm
from fpt.backbones.vit import ViTBody
from fpt.core.errors import FptError, require
from fpt.core.jsonfile import read_json_object
from fpt.core.paths import remove_stale_temporaries, save_safetensors, temporary_name, write_json
from fpt.core.scores import reported
from fpt.models.ends import InputEmbedder, OutputHead
from fpt.models.transformer import (
    FrozenPretrainedTransformer,
    head_settings,
    load_weights,
    task_spec,
    transformer_forward,
)
from fpt.training.lifecycle import load_run
from fpt.training.run_dir import RunDir

FORMATS = ("peft", "hf")
PEFT_FORMAT = "fpt-peft-1"
PEFT_SETTINGS, PEFT_LAYERS = "fpt_task.json", "fpt_input_head.safetensors"
PEFT_PIP = "pip install 'fpt[peft]'"


def export_run(run_dir: str | Path, format: str, out: str | Path) -> Path:
    """Write run `run_dir` in `format` (peft | hf) into the new (or empty) directory `out`."""
    if format not in FORMATS:
        raise FptError(f"unknown --format {format!r}; choose one of {', '.join(FORMATS)}")
    out = Path(out)
    if out.exists() and not (out.is_dir() and not any(out.iterdir())):
        raise FptError(f"--out {out} exists and is not an empty folder; pick a new one")
    if format == "peft":
        require("peft", PEFT_PIP)  # before the run is loaded
    config, _, model, trainer = load_run(run_dir, device="cpu")
    if config.model != "fpt":
        raise FptError(f"{run_dir} trained a {config.model} baseline, which has no pretrained backbone to export")
    if config.body != "backbone":
        raise FptError(
            f"{run_dir} trained a --body {config.body} control, which has no pretrained backbone to export; "
            "its run directory holds every weight it trained"
        )
    if format == "peft":
        _check_expressible_in_peft(model, config.init, config.layers)
    summary = RunDir(run_dir).read_summary() or {}
    final = summary.get("final")
    scores = reported(final) if final else {"accuracy": None}  # a forecast's: mse and mae
    extra = {
        "task": config.task,
        "task_options": config.task_options,
        "run": {"dir": str(run_dir), "step": trainer.weights_step, **scores},
    }
    if "intervals" in summary:  # a forecast's, so that `fpt predict` of the export writes them as the run's does
        extra["intervals"] = summary["intervals"]

    def write(directory: Path) -> None:
        if format == "peft":
            _write_peft(model, directory, extra)
        else:
            model.save_pretrained(directory, extra)

    return _into_new_directory(out, write)


def _into_new_directory(out: Path, write) -> Path:
    """write(temporary folder beside `out`), then rename it to `out`; on any failure nothing is left."""
    out.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temporaries(out.parent)  # of exports killed before their rename
    tmp = temporary_name(out)
    try:
        tmp.mkdir()
        write(tmp)
        if out.is_dir():  # the empty folder the user gave
            out.rmdir()
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out


def _check_expressible_in_peft(model: FrozenPretrainedTransformer, init: str, layers: int | None) -> None:
    why = None
    if init != "pretrained":
        why = f"its frozen weights are --init {init}, not published ones a base model is loaded from"
    elif isinstance(model.backbone, ViTBody):
        why = "fpt rebuilds a ViT's embeddings (no patch projection, no CLS token), and an adapter keeps ViTModel's"
    elif attention_switch(model.backbone_info.family, model.backbone_info.attention) is not None:
        why = (
            f"it made the attention {model.backbone_info.attention} (--attention), "
            "and the base model attends as pretrained"
        )
    elif layers is not None:
        why = f"it keeps only the first {layers} blocks (--layers), and an adapter runs every block of the base model"
    elif model.extended_positions is not None:
        published, used = model.extended_positions
        why = f"it grew the position table from {published} to {used} rows, past the base model's"
    if why:
        raise FptError(f"a PEFT adapter cannot express this run: {why}; use --format hf")


def _write_peft(model: FrozenPretrainedTransformer, directory: Path, extra: dict) -> None:
    """The adapter (PEFT's own files), fpt's input layer and head, and fpt_task.json.

    Wraps the model's body in place: the model is not used afterwards."""
    peft = require("peft", PEFT_PIP)

    body = model.backbone
    norms = [name for name, module in body.named_modules() if is_norm(module)]
    trained = {
        name.removeprefix("backbone.").rpartition(".")[0]
        for name, param in model.named_parameters()
        if param.requires_grad and name.startswith("backbone.")
    }
    others = sorted(trained - set(norms))  # positions, BERT's token-type table, whatever else the policy trained
    adapter = peft.LNTuningConfig(target_modules=norms, modules_to_save=others or None)
    with warnings.catch_warnings():  # two of peft's own: it asks transformers 5 about checkpointing by an old
        # name, and it warns of every norm layer LN tuning wraps (its own method) as an unknown layer type
        warnings.filterwarnings("ignore", "`is_gradient_checkpointing` is deprecated", FutureWarning)
        warnings.filterwarnings("ignore", "Unsupported layer type", UserWarning)
        peft.get_peft_model(body, adapter).save_pretrained(str(directory))
    layers = {
        k: v.detach().cpu().contiguous() for k, v in model.state_dict().items() if k.startswith(("embedder.", "head."))
    }
    save_safetensors(directory / PEFT_LAYERS, layers, {"format": PEFT_FORMAT})
    base = body.config.name_or_path or model.weights_name
    write_json(
        directory / PEFT_SETTINGS,
        {
            **model.settings(),
            **extra,
            "format": PEFT_FORMAT,
            "base_model": base,
            "rebuild": [
                "from transformers import AutoModel",
                "from peft import PeftModel",
                "from fpt.serve.export import compose_peft",
                f"body = PeftModel.from_pretrained(AutoModel.from_pretrained({base!r}), DIR)",
                "model = compose_peft(body, DIR)  # model(x, mask) -> logits (N, outputs, classes)",
            ],
        },
    )


class PeftTransformer(nn.Module):
    """fpt's input layer and head around a body that takes inputs_embeds (a PEFT model):
    `model(x, mask)` gives logits (N, outputs, classes) as the run's own model did."""

    def __init__(self, body: nn.Module, settings: dict, where: Path):
        super().__init__()
        self.spec = task_spec(settings, where)
        try:
            kwargs, self.compute_dtype = head_settings(settings, where), compute_dtype(settings["precision"])
        except (KeyError, TypeError, ValueError) as exc:
            raise FptError(
                f"{where}: fpt settings damaged ({type(exc).__name__}: {exc}); export the run again"
            ) from None
        hidden = body.config.hidden_size
        self.embedder = InputEmbedder(self.spec, hidden, kwargs["dropout"], kwargs["extra_positions"])
        self.head = OutputHead(self.spec, hidden, kwargs["pooling"])
        self.body = body

    def forward(self, x: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Task inputs x as the run's task gives them, and its (N, L) padding mask -> logits
        (N, outputs, classes), or a forecast's values; the body runs in the run's precision."""
        return transformer_forward(self.embedder, self.body, self.head, x, mask, self.compute_dtype)


def compose_peft(body: nn.Module, directory: str | Path) -> PeftTransformer:
    """`PeftModel.from_pretrained(base_model, DIR)` joined with the input layer and head that
    `fpt export --format peft` wrote into DIR; in eval mode."""
    directory = Path(directory)
    where = directory / PEFT_SETTINGS
    settings = read_json_object(where, "fpt export RUN_DIR --format peft --out DIR")
    if settings.get("format") != PEFT_FORMAT:
        raise FptError(f"{where} was not written by `fpt export --format peft`")
    with torch.random.fork_rng():  # the new layers' initial draws must not move the caller's RNG
        model = PeftTransformer(body, settings, where)
    load_weights(nn.ModuleDict({"embedder": model.embedder, "head": model.head}), directory / PEFT_LAYERS)
    return model.eval()
