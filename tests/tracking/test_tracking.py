"""Experiment tracking: what MLflow, TensorBoard and W&B hold, read back through their own readers,
equals metrics.jsonl, across kills and resumes; a failing tracker never stops training."""

import json
import struct
import sys
from pathlib import Path

import pytest
from helpers import raises_naming

from fpt.cli import main
from fpt.core.errors import FptError
from fpt.tracking import TRACKING_FILE, Tracker, build_tracker
from fpt.tracking.sinks import TensorBoardSink
from fpt.training.config import TrainConfig
from fpt.training.lifecycle import resume, train
from fpt.training.loop import Trainer

KEYS = ("train_loss", "loss", "accuracy", "exact_match", "examples", "elapsed_s")


def _config(backbone, **overrides):
    base = dict(
        task="bit-memory",
        task_options=dict(n_bits=8, n_strings=2, patch_size=4, eval_size=20),
        backbone=backbone,
        steps=15,
        batch_size=4,
        eval_every=5,
        seed=3,
    )
    return TrainConfig(**{**base, **overrides})


def _metrics(run_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def _expected(run_dir: Path, key: str) -> list[tuple[int, float]]:
    return [(r["step"], r[key]) for r in _metrics(run_dir)]


def _float32_equal(actual: list[tuple[int, float]], expected: list[tuple[int, float]]) -> bool:
    """TensorBoard keeps scalars as float32: the same steps, the same values to float32 precision."""
    return [s for s, _ in actual] == [s for s, _ in expected] and [v for _, v in actual] == pytest.approx(
        [v for _, v in expected], rel=1e-6
    )


def _state(run_dir: Path) -> dict:
    return json.loads((run_dir / TRACKING_FILE).read_text())


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"  # the schema is made once (seconds)


def _mlflow_history(uri: str, run_id: str, key: str) -> list[tuple[int, float]]:
    import mlflow

    return sorted((m.step, m.value) for m in mlflow.MlflowClient(uri).get_metric_history(run_id, key))


def _tensorboard_history(log_dir: Path, key: str) -> list[tuple[int, float]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    events = EventAccumulator(str(log_dir))
    events.Reload()  # drops events a resumed writer purged
    return [(e.step, e.value) for e in events.Scalars(key)]


def _wandb_records(wandb_dir: Path, run_id: str):
    """Every record of a run's offline files (one folder per process that wrote it), in order.
    A .wandb file: a 7-byte header, then LevelDB log records (32 KiB blocks) of protobuf Records."""
    from wandb.proto import wandb_internal_pb2

    for path in sorted(
        wandb_dir.glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb")
    ):  # *: -1 for a second in the same second
        data, pos, pending = path.read_bytes(), 7, b""
        while pos + 7 <= len(data):
            room = 32768 - pos % 32768
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            if room < 7 or (kind == 0 and length == 0):  # block padding
                pos += room
                continue
            pending, pos = pending + data[pos + 7 : pos + 7 + length], pos + 7 + length
            if kind in (1, 4):  # a whole record, or the last piece of one
                record = wandb_internal_pb2.Record()
                record.ParseFromString(pending)
                pending = b""
                yield record


def _wandb_history(wandb_dir: Path, run_id: str, key: str) -> list[tuple[int, float]]:
    rows = [
        {item.key or ".".join(item.nested_key): json.loads(item.value_json) for item in r.history.item}
        for r in _wandb_records(wandb_dir, run_id)
        if r.WhichOneof("record_type") == "history"
    ]
    return [(row["_step"], row[key]) for row in rows if key in row]


@pytest.mark.slow
def test_trackers_hold_exactly_metrics_jsonl_after_kills_and_resumes(
    tiny_gpt2, tmp_path, mlflow_uri, wandb_offline, monkeypatch
):
    import mlflow

    run_dir = tmp_path / "run"
    tracker = lambda: build_tracker("mlflow,tensorboard,wandb", mlflow_uri, "kills")  # noqa: E731
    checkpoint = Trainer._checkpoint

    def killed_after_checkpoint_5(self):  # before the trackers got step 5: resuming must catch them up
        checkpoint(self)
        if self.step == 5:
            raise KeyboardInterrupt

    monkeypatch.setattr(Trainer, "_checkpoint", killed_after_checkpoint_5)
    with pytest.raises(KeyboardInterrupt):
        train(_config(tiny_gpt2), out=run_dir, progress=False, tracker=tracker())
    monkeypatch.setattr(Trainer, "_checkpoint", checkpoint)
    assert [s["logged_step"] for s in _state(run_dir).values()] == [0, 0, 0]

    def killed_at_12(step, loss):  # after evaluation 10 reached the trackers; 15 is made after resuming
        if step == 12:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        resume(run_dir, progress=False, on_step=killed_at_12, tracker=tracker())
    resume(run_dir, progress=False, tracker=tracker())

    assert [r["step"] for r in _metrics(run_dir)] == [5, 10, 15]
    state = _state(run_dir)
    assert {s["logged_step"] for s in state.values()} == {15}
    run_id = state["mlflow"]["run_id"]
    for key in KEYS:
        assert _mlflow_history(mlflow_uri, run_id, key) == _expected(run_dir, key), key
        assert _float32_equal(_tensorboard_history(run_dir / "tb", key), _expected(run_dir, key)), key
        assert _wandb_history(wandb_offline, state["wandb"]["run_id"], key) == _expected(run_dir, key), key

    client = mlflow.MlflowClient(mlflow_uri)
    run = client.get_run(run_id)  # one run throughout, ended, with the config and the run's files
    assert run.info.status == "FINISHED" and run.info.run_name == "run"
    assert run.data.params["task_options.n_bits"] == "8" and run.data.params["steps"] == "15"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.data.metrics["summary/final.accuracy"] == summary["final"]["accuracy"]
    assert "summary.json" in {a.path for a in client.list_artifacts(run_id)}
    assert len(client.search_runs([run.info.experiment_id])) == 1

    records = list(_wandb_records(wandb_offline, state["wandb"]["run_id"]))
    saved = [r.summary for r in records if r.WhichOneof("record_type") == "summary"]
    assert any(
        json.loads(u.value_json) == summary["final"]["accuracy"]
        for s in saved
        for u in s.update
        if (u.key or ".".join(u.nested_key)) == "summary/final.accuracy"
    )
    config = {
        u.key or ".".join(u.nested_key): u.value_json
        for r in records
        if r.WhichOneof("record_type") == "config"
        for u in r.config.update
    }
    assert config["task_options.n_bits"] == "8"
    assert list(wandb_offline.glob(f"offline-run-*-{state['wandb']['run_id']}*/files/summary.json"))


def test_a_tracker_behind_tracking_json_is_never_given_an_evaluation_twice(tiny_gpt2, tmp_path, mlflow_uri):
    """Killed after a tracker took an evaluation but before tracking.json said so: MLflow is asked
    what it holds, TensorBoard purges what follows the recorded step."""
    run_dir = tmp_path / "run"
    train(
        _config(tiny_gpt2, steps=10),
        out=run_dir,
        progress=False,
        tracker=build_tracker("mlflow,tensorboard", mlflow_uri, "lagging"),
    )
    state = _state(run_dir)
    for entry in state.values():
        entry["logged_step"] = 5
    (run_dir / TRACKING_FILE).write_text(json.dumps(state))
    resume(run_dir, steps=15, progress=False, tracker=build_tracker("mlflow,tensorboard", mlflow_uri, "lagging"))
    assert [r["step"] for r in _metrics(run_dir)] == [5, 10, 15]
    for key in ("accuracy", "train_loss"):
        assert _mlflow_history(mlflow_uri, state["mlflow"]["run_id"], key) == _expected(run_dir, key)
        assert _float32_equal(_tensorboard_history(run_dir / "tb", key), _expected(run_dir, key))


class _LockedAtStep10(TensorBoardSink):
    def log_evaluation(self, step, metrics):
        if step == 10:
            raise OSError("database is locked")
        super().log_evaluation(step, metrics)


def test_a_tracker_failing_mid_run_warns_once_and_training_goes_on(tiny_gpt2, tmp_path, mlflow_uri, capsys):
    run_dir = tmp_path / "run"
    good = build_tracker("mlflow", mlflow_uri, "failing").sinks
    summary, _ = train(_config(tiny_gpt2), out=run_dir, progress=False, tracker=Tracker([_LockedAtStep10(), *good]))
    assert summary["step"] == 15 and [r["step"] for r in _metrics(run_dir)] == [5, 10, 15]
    warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("fpt: warning:")]
    assert len(warnings) == 1 and "tensorboard" in warnings[0] and "database is locked" in warnings[0]
    state = _state(run_dir)
    assert state["tensorboard"]["logged_step"] == 5 and state["mlflow"]["logged_step"] == 15
    assert _float32_equal(_tensorboard_history(run_dir / "tb", "accuracy"), _expected(run_dir, "accuracy")[:1])
    assert _mlflow_history(mlflow_uri, state["mlflow"]["run_id"], "accuracy") == _expected(run_dir, "accuracy")

    resume(run_dir, progress=False, tracker=build_tracker("tensorboard"))  # catches TensorBoard up
    assert _float32_equal(_tensorboard_history(run_dir / "tb", "accuracy"), _expected(run_dir, "accuracy"))


@pytest.mark.parametrize("tracker", ["mlflow", "tensorboard", "wandb"])
def test_a_missing_tracker_package_is_one_line_before_anything_runs(tracker, tiny_gpt2, tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, tracker, None)  # import fails as if not installed
    spec = tmp_path / "spec.yaml"
    spec.write_text("grid:\n  task: [bit-xor]\n")
    for command in (
        ["train", "--backbone", tiny_gpt2, "--steps", "2", "--out", str(tmp_path / "run")],
        ["sweep", str(spec), "--out", str(tmp_path / "sweep")],
        ["reproduce", "table1", "--out", str(tmp_path / "reproduce")],
    ):
        assert main([*command, "--report-to", f"{tracker}", "--no-progress"]) == 2
        err = capsys.readouterr().err.strip()
        assert "\n" not in err and f"pip install 'fpt[{tracker}]'" in err
    assert not any(tmp_path.glob("run*")) and not (tmp_path / "sweep").exists()


def test_report_to_and_its_options_are_checked(tmp_path):
    raises_naming(lambda: build_tracker("mlflow,comet"), "comet", "mlflow, tensorboard, wandb")
    raises_naming(lambda: build_tracker("tensorboard", tracking_uri="sqlite:///x.db"), "--report-to mlflow")
    raises_naming(lambda: build_tracker("none", experiment="x"), "--report-to mlflow or wandb")
    assert build_tracker("none").sinks == [] and build_tracker(None).cell_args == []
    tracker = build_tracker("tensorboard,tensorboard")
    assert [s.name for s in tracker.sinks] == ["tensorboard"] and tracker.cell_args == ["--report-to", "tensorboard"]


def test_without_report_to_a_run_writes_no_tracking_file(tiny_gpt2, tmp_path):
    assert (
        main(
            [
                "train",
                "--backbone",
                tiny_gpt2,
                "--task",
                "bit-xor",
                "--n-bits",
                "4",
                "--eval-size",
                "8",
                "--steps",
                "2",
                "--eval-every",
                "1",
                "--out",
                str(tmp_path / "run"),
                "--no-progress",
            ]
        )
        == 0
    )
    assert {p.name for p in (tmp_path / "run").iterdir()} == {
        "config.json",
        "metrics.jsonl",
        "summary.json",
        "checkpoint.safetensors",
        ".lock",
    }


def test_a_tracker_that_cannot_start_stops_the_run_before_it_trains(tiny_gpt2, tmp_path):
    blocked = tmp_path / "file"
    blocked.write_text("")
    uri = f"sqlite:///{blocked / 'mlflow.db'}"  # under a file: no database can be made there
    raises_naming(
        lambda: train(_config(tiny_gpt2), out=tmp_path / "run", progress=False, tracker=build_tracker("mlflow", uri)),
        "mlflow",
        "--tracking-uri",
    )
    assert not (tmp_path / "run").exists()


@pytest.mark.slow
def test_a_sweep_is_a_parent_run_with_a_nested_run_per_cell(tiny_gpt2, tmp_path, mlflow_uri, wandb_offline):
    import mlflow

    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"name: tracked\ngrid:\n  task: [bit-xor]\n  seed: [0, 1]\n"
        f"options:\n  steps: 2\n  eval_every: 1\n  backbone: {tiny_gpt2}\n  eval_size: 8\n"
    )
    sweep_dir = tmp_path / "sweep"
    assert (
        main(
            [
                "sweep",
                str(spec),
                "--out",
                str(sweep_dir),
                "--no-progress",
                "--report-to",
                "mlflow,tensorboard,wandb",
                "--tracking-uri",
                mlflow_uri,
                "--experiment",
                "sweeps",
            ]
        )
        == 0
    )
    parent = _state(sweep_dir)
    client = mlflow.MlflowClient(mlflow_uri)
    assert client.get_run(parent["mlflow"]["run_id"]).info.status == "FINISHED"
    assert {"results.csv", "results.md", "curves.png"} <= {
        a.path for a in client.list_artifacts(parent["mlflow"]["run_id"])
    }
    cells = sorted((sweep_dir / "runs").iterdir())
    assert len(cells) == 2
    for cell in cells:
        state = _state(cell)
        run = client.get_run(state["mlflow"]["run_id"])
        assert run.data.tags["mlflow.parentRunId"] == parent["mlflow"]["run_id"] and run.info.run_name == cell.name
        assert _mlflow_history(mlflow_uri, run.info.run_id, "accuracy") == _expected(cell, "accuracy")
        assert Path(state["tensorboard"]["log_dir"]) == (sweep_dir / "tb" / cell.name).resolve()
        assert _float32_equal(
            _tensorboard_history(sweep_dir / "tb" / cell.name, "accuracy"), _expected(cell, "accuracy")
        )
        runs = [
            r.run
            for r in _wandb_records(wandb_offline, state["wandb"]["run_id"])
            if r.WhichOneof("record_type") == "run"
        ]
        assert runs[0].run_group == parent["wandb"]["group"] == state["wandb"]["group"]


def test_a_damaged_tracking_json_is_one_line_naming_the_fix(tmp_path):
    from fpt.tracking.sinks import Sink

    class Resumed(Sink):  # keeps the record Tracker.open reads back for it
        name = "tensorboard"

        def open(self, directory, role, state, parent):
            self.state = state
            return state["logged_step"]

    path = tmp_path / TRACKING_FILE
    path.write_text(json.dumps({"tensorboard": {"log_dir": "tb", "logged_step": 3, "logged_subset_step": 2}}))
    assert Tracker([Resumed()]).open(tmp_path, {}).state["tensorboard"]["logged_step"] == 3
    for damaged in (
        '{"mlflow": {"logged_subset_step": "x"}}',
        "[1]",
        '{"mlflow": 5}',
        '{"wandb": {"logged_step": 1.5}}',
    ):
        path.write_text(damaged)
        with pytest.raises(FptError, match="delete it to start new tracked runs"):
            Tracker([Resumed()]).open(tmp_path, {})
