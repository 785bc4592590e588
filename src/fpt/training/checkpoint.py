"""Checkpoints: only the trained tensors, Adam's moments, the step and every rank's RNG state, in
one safetensors file written atomically (temp file + rename), bound to the backbone's weight hash.

Nothing is ever unpickled: safetensors holds tensors and a string-to-string metadata map.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file

from fpt.core.errors import FptError
from fpt.core.paths import save_safetensors

FORMAT = "fpt-checkpoint-1"


@dataclass
class RngState:
    """One process's random state: the CPU generator and, where dropout ran on a GPU, its generator."""

    cpu: torch.Tensor
    cuda: torch.Tensor | None = None

    @classmethod
    def here(cls, device: torch.device) -> "RngState":
        """This process's random state now: the CPU generator's, and `device`'s generator if it is a GPU."""
        return cls(torch.get_rng_state(), torch.cuda.get_rng_state(device) if device.type == "cuda" else None)

    def restore(self, device: torch.device) -> None:
        """Set this process's generators back to this state (the GPU one only if saved and `device` is a GPU),
        so a resumed run draws the same random numbers (dropout) as an unbroken one."""
        torch.set_rng_state(self.cpu)
        if self.cuda is not None and device.type == "cuda":
            torch.cuda.set_rng_state(self.cuda, device)


@dataclass
class BestState:
    """--keep-best: the trained tensors of the run's best whole-split validation evaluation, the step
    it was made at, and the whole-split evaluations since (for --patience)."""

    step: int
    params: dict[str, torch.Tensor]
    result: dict  # the evaluation that made it the best (split, loss and scores)
    evaluations_since: int = 0


@dataclass
class Checkpoint:
    """A checkpoint read back: the step it was saved at, the trained tensors by parameter name, Adam's state,
    each rank's RNG state, the backbone (name and weight hash) it is bound to, the fp16 loss scaler's state,
    and the training seconds up to `step`."""

    step: int
    params: dict[str, torch.Tensor]
    optimizer_state: dict  # torch.optim state_dict, keyed by parameter index
    rng_states: list[RngState]  # one per rank of the run that saved it
    backbone: str
    backbone_hash: str
    grad_scaler: dict | None = None  # --precision fp16: the loss scale and its growth tracker
    elapsed_s: float | None = None  # training seconds from step 0 to `step` (None: saved before fpt kept it)
    best: BestState | None = None  # --keep-best: the trained tensors of the best validation score so far
    pending_evaluation: float | None = None  # the train loss of `step`, whose evaluation a signal interrupted

    @property
    def world_size(self) -> int:
        """How many processes (ranks) trained the run that saved it: one RNG state each."""
        return len(self.rng_states)

    def check_world_size(self, size: int, path: Path) -> None:
        """Training on needs as many processes as saved it: each rank restores its own RNG state."""
        if self.world_size != size:
            raise FptError(
                f"{path} was saved by a run on {self.world_size} process(es); resume it with as many "
                f"(`fpt train --nproc {self.world_size} --resume ...`), not {size}"
            )


def _rng_key(kind: str, rank: int) -> str:
    """rng.torch for rank 0 (the name single-process checkpoints always had), rng.torch.rankN after."""
    return f"rng.{kind}" if rank == 0 else f"rng.{kind}.rank{rank}"


def save_checkpoint(
    path: Path,
    model,
    optimizer: torch.optim.Optimizer,
    step: int,
    rng_states: list[RngState] | None = None,
    grad_scaler: dict | None = None,
    elapsed_s: float | None = None,
    best: BestState | None = None,
    pending_evaluation: float | None = None,
) -> None:
    """`model` is a TrainableModel: its trained tensors are saved, bound to its weights' hash.
    `rng_states`: every rank's, in rank order (default: this process's own); `elapsed_s`: the
    training time so far, which a resume goes on counting from; `best`: --keep-best's weights;
    `pending_evaluation`: the train loss of `step`, whose evaluation a signal interrupted (a resume
    makes it first)."""
    names = [n for n, p in model.named_parameters() if p.requires_grad]
    tensors = {f"param.{n}": t.contiguous() for n, t in model.trainable_state().items()}
    state = optimizer.state_dict()
    for index, moments in state["state"].items():
        for key, value in moments.items():
            tensors[f"optim.{names[index]}.{key}"] = (
                value.detach().reshape(-1).clone() if key == "step" else value.contiguous()
            )
    rng_states = rng_states or [RngState.here(next(model.parameters()).device)]
    for rank, rng in enumerate(rng_states):
        tensors[_rng_key("torch", rank)] = rng.cpu
        if rng.cuda is not None:  # dropout on a GPU draws from its own generator
            tensors[_rng_key("cuda", rank)] = rng.cuda
    if best is not None:
        tensors.update({f"best.{n}": t.contiguous() for n, t in best.params.items()})
    tensors = {key: value.detach().cpu() for key, value in tensors.items()}  # loads onto any device
    metadata = {
        "format": FORMAT,
        "step": str(step),
        "backbone": model.weights_name,
        "backbone_hash": model.weights_hash,
        "param_names": json.dumps(names),
        "optimizer_param_groups": json.dumps(state["param_groups"]),
        "world_size": str(len(rng_states)),
    }
    if grad_scaler is not None:
        metadata["grad_scaler"] = json.dumps(grad_scaler)
    if elapsed_s is not None:
        metadata["elapsed_s"] = repr(float(elapsed_s))
    if pending_evaluation is not None:
        metadata["pending_evaluation"] = repr(float(pending_evaluation))
    if best is not None:
        metadata["best"] = json.dumps(
            {"step": best.step, "result": best.result, "evaluations_since": best.evaluations_since}, allow_nan=False
        )
    save_safetensors(path, tensors, metadata)


def _read_header(path: Path) -> dict[str, str]:
    """A checkpoint's metadata, refusing a missing, unreadable or foreign file with a clear error."""
    if not path.is_file():
        raise FptError(
            f"no checkpoint at {path}; the run has not saved one yet (it saves at each evaluation "
            "and when stopped with Ctrl-C or SIGTERM)"
        )
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata() or {}
    except (SafetensorError, OSError, ValueError) as exc:
        raise FptError(f"checkpoint {path} is corrupt or truncated ({exc}); delete it and train again") from None
    if metadata.get("format") != FORMAT:
        raise FptError(f"{path} is not an fpt checkpoint (format {metadata.get('format')!r}, expected {FORMAT!r})")
    return metadata


def checkpoint_step(path: Path) -> int:
    """The step a checkpoint was saved at, read from its header alone (a full-backbone checkpoint
    with Adam's moments runs to hundreds of MB; this reads a few KB)."""
    metadata = _read_header(path)
    try:
        return _saved_step(metadata)
    except (KeyError, ValueError):
        raise FptError(
            f"checkpoint {path} is damaged (step {metadata.get('step')!r}); "
            "resume from a good copy, or delete it and train again"
        ) from None


def _saved_step(metadata: dict[str, str]) -> int:
    step = int(metadata["step"])
    if step < 0:
        raise ValueError(f"step {step}")
    return step


def load_checkpoint(path: Path) -> Checkpoint:
    """Read a checkpoint, refusing a missing, truncated or foreign file with a clear error."""
    metadata = _read_header(path)
    try:
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise FptError(f"checkpoint {path} is corrupt or truncated ({exc}); delete it and train again") from None
    try:
        return _parse(tensors, metadata)
    except (KeyError, ValueError, TypeError, AttributeError, RuntimeError) as exc:
        raise FptError(
            f"checkpoint {path} is damaged ({type(exc).__name__}: {str(exc)[:80]}); "
            "resume from a good copy, or delete it and train again"
        ) from None


def _parse(tensors: dict[str, torch.Tensor], metadata: dict[str, str]) -> Checkpoint:
    """The checkpoint's parts, each checked for its type and shape (a damaged file raises here)."""
    names = json.loads(metadata["param_names"])
    groups = json.loads(metadata["optimizer_param_groups"])
    if not (
        isinstance(names, list)
        and all(isinstance(n, str) for n in names)
        and isinstance(groups, list)
        and all(isinstance(g, dict) for g in groups)
    ):
        raise ValueError("parameter names or optimizer groups are not lists (of names, of mappings)")
    step = _saved_step(metadata)
    params = {k[len("param.") :]: v for k, v in tensors.items() if k.startswith("param.")}
    for name, value in params.items():  # trained weights are floating: int32 ones would load as whole numbers
        if not value.is_floating_point():
            raise ValueError(f"{name} holds {value.dtype}, not floating-point weights")
    index_of = {n: i for i, n in enumerate(names)}
    optim_state: dict[int, dict] = {}
    for key, value in tensors.items():
        if key.startswith("optim."):
            name, _, moment = key[len("optim.") :].rpartition(".")
            if moment == "step":
                value = value.reshape(())
            elif value.shape != params[name].shape or value.dtype != params[name].dtype:
                raise ValueError(
                    f"Adam {moment} of {name} is {value.dtype} {tuple(value.shape)}, "
                    f"the parameter {params[name].dtype} {tuple(params[name].shape)}"
                )
            optim_state.setdefault(index_of[name], {})[moment] = value
    world_size = int(metadata.get("world_size", "1"))  # written before torch.distributed: one process
    if world_size < 1:
        raise ValueError(f"world size {world_size}")
    rng_states = []
    for rank in range(world_size):
        rng = tensors[_rng_key("torch", rank)]
        if rng.dtype != torch.uint8 or rng.shape != torch.get_rng_state().shape:
            raise ValueError(f"RNG state of {rng.dtype} {tuple(rng.shape)}")
        rng_states.append(RngState(rng, tensors.get(_rng_key("cuda", rank))))
    grad_scaler = json.loads(metadata["grad_scaler"]) if "grad_scaler" in metadata else None
    if grad_scaler is not None and not isinstance(grad_scaler, dict):
        raise ValueError("grad scaler state is not a mapping")
    elapsed_s = float(metadata["elapsed_s"]) if "elapsed_s" in metadata else None
    if elapsed_s is not None and not (math.isfinite(elapsed_s) and elapsed_s >= 0):
        raise ValueError(f"elapsed time {elapsed_s}")
    pending = float(metadata["pending_evaluation"]) if "pending_evaluation" in metadata else None
    return Checkpoint(
        best=_parse_best(tensors, metadata, params),
        step=step,
        params=params,
        optimizer_state={"state": optim_state, "param_groups": groups},
        rng_states=rng_states,
        backbone=metadata["backbone"],
        backbone_hash=metadata["backbone_hash"],
        grad_scaler=grad_scaler,
        elapsed_s=elapsed_s,
        pending_evaluation=pending,
    )


def _parse_best(tensors: dict[str, torch.Tensor], metadata: dict[str, str], params: dict) -> BestState | None:
    """--keep-best's part of a checkpoint (None in a run without it, and in older files)."""
    if "best" not in metadata:
        return None
    facts = json.loads(metadata["best"])
    step, since, result = facts["step"], facts["evaluations_since"], facts["result"]
    counts = all(type(n) is int and n >= 0 for n in (step, since))  # type(): True is an int too
    scored = isinstance(result, dict) and any(isinstance(result.get(k), (int, float)) for k in ("mse", "accuracy"))
    if not (counts and scored and step <= _saved_step(metadata)):
        raise ValueError(f"best-evaluation record {facts}")
    best = {k[len("best.") :]: v for k, v in tensors.items() if k.startswith("best.")}
    if set(best) != set(params) or any(
        v.shape != params[n].shape or v.dtype != params[n].dtype for n, v in best.items()
    ):
        raise ValueError("the best weights do not match the trained ones")
    return BestState(step, best, result, since)


def restore(model, checkpoint: Checkpoint, path: Path) -> None:
    """Load trained tensors into a TrainableModel after checking they belong to its exact weights."""
    backbone_hash = model.weights_hash
    if checkpoint.backbone_hash != backbone_hash:
        raise FptError(
            f"checkpoint {path} was trained on backbone {checkpoint.backbone!r} with other weights "
            f"(hash {checkpoint.backbone_hash}, this one {backbone_hash}); load it with the same --backbone and --init"
        )
    expected = {n for n, p in model.named_parameters() if p.requires_grad}
    if set(checkpoint.params) != expected:
        raise FptError(f"checkpoint {path} holds other parameters than this model trains; was the run's config edited?")
    params = dict(model.named_parameters())
    with torch.no_grad():
        for name, value in checkpoint.params.items():
            if params[name].shape != value.shape or params[name].dtype != value.dtype:
                raise FptError(
                    f"checkpoint {path}: {name} is {value.dtype} {tuple(value.shape)}, the model's "
                    f"{params[name].dtype} {tuple(params[name].shape)}; resume from a good copy, or train again"
                )
            params[name].copy_(value)
