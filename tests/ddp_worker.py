"""Scenarios test_distributed.py runs on several ranks under torchrun (not a test module itself):
`python -m torch.distributed.run ... tests/ddp_worker.py SCENARIO OUT ARGS...`."""

import json
import os
import signal
import sys
from pathlib import Path

from fpt import cli
from fpt.core.errors import StopRequested
from fpt.training import distributed
from fpt.training.config import TrainConfig
from fpt.training.evaluation import evaluate
from fpt.training.lifecycle import load_run, train


def main() -> int:
    scenario, out, rest = sys.argv[1], Path(sys.argv[2]), sys.argv[3:]
    rank = int(os.environ["RANK"])
    if scenario == "evaluate":  # rest: a run directory; rank 0 writes the split-wise evaluation
        world = distributed.start()
        _, task, model, _ = load_run(Path(rest[0]), world=world)
        result = evaluate(model, task, batch_size=64, confusion=True, world=world)
        if world.is_main:
            out.write_text(json.dumps(result))
        distributed.stop(world)  # after a barrier: no rank leaves while another still evaluates
        return 0
    if scenario == "backbones":  # rest: one backbone directory per rank, then fpt train options
        size = int(os.environ["WORLD_SIZE"])
        return cli.main(["train", "--backbone", rest[rank], *rest[size:], "--out", str(out)])
    if scenario == "crash":  # rest: a backbone; rank 1 dies at step 2, rank 0 would wait for it

        def on_step(step: int, loss: float) -> None:
            if rank == 1 and step == 2:
                os._exit(3)

        train(
            TrainConfig(
                task="bit-xor", task_options={"n_bits": 8}, backbone=rest[0], steps=50, batch_size=4, eval_every=25
            ),
            out=out,
            progress=False,
            on_step=on_step,
        )
        return 0
    if scenario == "sigterm":  # rest: a backbone and the rank that gets SIGTERM after step 3 (-1: none)

        def on_step(step: int, loss: float) -> None:
            if rank == int(rest[1]) and step == 3:
                os.kill(os.getpid(), signal.SIGTERM)

        config = TrainConfig(
            task="bit-xor",
            task_options={"n_bits": 8, "eval_size": 100},
            backbone=rest[0],
            steps=8,
            batch_size=8,
            eval_every=6,
        )
        try:
            train(config, out=out, progress=False, on_step=on_step)
        except StopRequested as stopped:
            return 128 + stopped.signum
        return 0
    raise SystemExit(f"unknown scenario {scenario}")


if __name__ == "__main__":
    distributed.exit_rank(main())  # as `fpt` itself leaves a rank: see exit_rank
