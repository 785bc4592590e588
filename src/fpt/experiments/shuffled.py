"""Each finished controls run scored again on its test inputs shuffled (issue 32): how much a model
uses the order of its input.

`shuffle_evaluation` writes a run's shuffled.json (as `fpt evaluate --shuffle tokens` scores it).
`fpt reproduce controls` calls it at its end through `score_shuffled`, each run in a process of its
own (`fpt shuffled RUN`): building a run's task and model imports data readers
and backbone code that the long command has not loaded, and a fresh process takes all of it from the
code installed now, never half from the code the command started with. A run that cannot be scored
(no checkpoint here: checkpoints are never committed; its data missing) is left out with the reason.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from fpt.core.errors import FptError
from fpt.training.run_dir import RunDir

SHUFFLE_FILE = "shuffled.json"  # a run's scores on ordered and shuffled test inputs
SHUFFLE_SEED = 0


def shuffle_evaluation(run_dir: Path, seed: int = SHUFFLE_SEED) -> dict:
    """Score a finished run on its test split(s) (its watched split where it has none), ordered and
    with every input's order shuffled (fpt.tasks.shuffle); write and return the run's shuffled.json.
    A file already made at the run's last step and seed is returned as it is."""
    from fpt.core.paths import write_json
    from fpt.tasks.shuffle import ShuffledTask, what_is_shuffled
    from fpt.training.evaluation import evaluate
    from fpt.training.lifecycle import load_run

    summary = RunDir(run_dir).read_summary()
    if summary is None:
        raise FptError(f"{run_dir} has not finished; train it to the end before scoring shuffled inputs")
    done = current_shuffle_file(run_dir, summary, seed)
    if done is not None:
        return done
    config, task, model, trainer = load_run(run_dir)
    shuffled = ShuffledTask(task, seed)
    # the ordered score the run made as it ended, where it made one (the same model on the same split)
    scored = {**(summary.get("test") or {}), summary["final"]["split"]: summary["final"]}
    splits = {}
    for split in task.test_splits or (task.eval_split,):
        ordered = scored.get(split) or evaluate(model, task, config.eval_batch_size, split)
        splits[split] = {"ordered": ordered, "shuffled": evaluate(model, shuffled, config.eval_batch_size, split)}
    result = {"step": trainer.step, "seed": seed, "what": what_is_shuffled(task.spec), "splits": splits}
    write_json(Path(run_dir) / SHUFFLE_FILE, result)
    return result


def current_shuffle_file(run_dir: Path, summary: dict, seed: int = SHUFFLE_SEED) -> dict | None:
    """The run's shuffled.json where it was made at the run's last step with this seed, else None
    (none, another step or seed, or a file that does not read as JSON)."""
    try:
        done = json.loads((Path(run_dir) / SHUFFLE_FILE).read_text())
    except (OSError, ValueError):
        return None
    current = isinstance(done, dict) and done.get("step") == summary["step"] and done.get("seed") == seed
    return done if current else None


def score_shuffled(run_dirs: list[Path], seed: int = SHUFFLE_SEED) -> dict[Path, str]:
    """Each finished run scored on shuffled inputs, in a process of its own where its shuffled.json is
    not current; returns the runs left unscored, each with why (its scores are left out, not guessed)."""
    unscored = {}
    for run_dir in map(Path, run_dirs):
        run = RunDir(run_dir)
        summary = run.read_summary()
        if summary is not None and current_shuffle_file(run_dir, summary, seed) is not None:
            continue
        if not run.has_checkpoint:
            unscored[run_dir] = "no checkpoint here, and no shuffled.json made at its last step"
            continue
        error = _score_in_child(run_dir, seed)
        if error is not None:
            unscored[run_dir] = error
    return unscored


def _score_in_child(run_dir: Path, seed: int) -> str | None:
    """`fpt shuffled RUN` in a process of its own; None once it wrote the file, else its last error line."""
    argv = [sys.executable, "-m", "fpt", "shuffled", str(run_dir), "--seed", str(seed)]
    done = subprocess.run(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    if done.returncode == 0:
        return None
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    ended = f"its scoring process ended with status {done.returncode}"
    return lines[-1].removeprefix("fpt: error: ") if lines else ended
