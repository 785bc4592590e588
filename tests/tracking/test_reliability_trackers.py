"""The trackers under hostile or unlucky stores (issue 35), against their real local stores: a store
MLflow would retry for minutes is refused in seconds in one line, a locked database mid-run is one
warning and the tracked run still ends FAILED or KILLED, a run deleted in the UI is tracked anew, and
W&B offline files that lack what tracking.json claims are caught up on resume."""

import json
import os
import socket
import sqlite3
import time
from pathlib import Path

import pytest

from fpt.core.errors import FptError
from fpt.tracking import TRACKING_FILE, build_tracker
from fpt.tracking.sinks import MLFLOW_RETRIES, offline_steps_held


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _record(step: int) -> dict:
    return {"step": step, "split": "validation", "accuracy": step / 100, "loss": 1.0 / step}


@pytest.fixture(scope="module")
def mlflow_uri(tmp_path_factory):
    return f"sqlite:///{tmp_path_factory.mktemp('mlflow') / 'mlflow.db'}"  # the schema is made once (seconds)


def test_an_http_store_nothing_answers_is_refused_in_seconds(tmp_path, monkeypatch):
    for name in MLFLOW_RETRIES:
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", "7")  # the user's own setting wins over fpt's
    tracker = build_tracker("mlflow", f"http://127.0.0.1:{_free_port()}")
    started = time.monotonic()
    with pytest.raises(FptError, match="no MLflow server answers at --tracking-uri http://127.0.0.1"):
        tracker.open(tmp_path / "run", {"steps": 2})
    assert time.monotonic() - started < 10  # MLflow alone: 4 min 15 s of retries
    assert os.environ["MLFLOW_HTTP_REQUEST_TIMEOUT"] == "7"
    assert os.environ["MLFLOW_HTTP_REQUEST_MAX_RETRIES"] == MLFLOW_RETRIES["MLFLOW_HTTP_REQUEST_MAX_RETRIES"]


@pytest.mark.parametrize("where", ["folder", "not-sqlite", "under-a-file", "proc"])
def test_a_sqlite_store_mlflow_cannot_use_is_refused_in_seconds_in_one_line(tmp_path, capsys, where):
    (tmp_path / "notes.txt").write_text("not a database, and not a folder\n")
    path = {
        "folder": tmp_path,
        "not-sqlite": tmp_path / "notes.txt",
        "under-a-file": tmp_path / "notes.txt" / "mlflow.db",
        "proc": Path("/proc/fpt-mlflow.db"),  # not writable, even by root
    }[where]
    if where == "proc" and not Path("/proc").is_dir():
        pytest.skip("no /proc here")
    before = sorted(tmp_path.rglob("*"))
    tracker = build_tracker("mlflow", f"sqlite:///{path}")
    started = time.monotonic()
    with pytest.raises(FptError, match="--tracking-uri sqlite:///") as raised:
        tracker.open(tmp_path / "run", {"steps": 2})
    assert time.monotonic() - started < 10  # MLflow alone: about 110 s of retries, 36 warning lines
    assert "\n" not in str(raised.value) and "mlflow" not in capsys.readouterr().err.lower()
    assert sorted(tmp_path.rglob("*")) == before  # nothing made


def _status(uri: str, run_id: str) -> str:
    import mlflow

    return mlflow.MlflowClient(uri).get_run(run_id).info.status


@pytest.fixture
def short_sqlite_waits():
    """MLflow sets `PRAGMA busy_timeout = 20000` in every session it opens, so each write to a locked
    store waits 20 s before it fails; a `?timeout=` on the URI does not change that. Rewrite the
    statement to wait 0.5 s while the test runs: the failure is the same, 40 s sooner."""
    from sqlalchemy import event
    from sqlalchemy.engine import Engine

    rewritten = []

    def shorter(conn, cursor, statement, parameters, context, executemany):
        if "busy_timeout = 20000" in statement:
            rewritten.append(statement)
            statement = statement.replace("busy_timeout = 20000", "busy_timeout = 500")
        return statement, parameters

    event.listen(Engine, "before_cursor_execute", shorter, retval=True)
    yield
    event.remove(Engine, "before_cursor_execute", shorter)
    assert rewritten, "MLflow no longer sets busy_timeout = 20000: update this fixture"


def test_a_locked_store_mid_run_is_one_warning_and_the_run_ends_failed(
    tmp_path, mlflow_uri, capsys, short_sqlite_waits
):
    tracker = build_tracker("mlflow", mlflow_uri).open(tmp_path / "run", {"steps": 3})
    tracker.log_evaluation(1, _record(1))
    run_id = tracker.state["mlflow"]["run_id"]
    lock = sqlite3.connect(mlflow_uri.removeprefix("sqlite:///"), timeout=0)
    lock.execute("BEGIN EXCLUSIVE")  # another writer holds the database
    try:
        tracker.log_evaluation(2, _record(2))
        tracker.log_evaluation(3, _record(3))  # dropped after the failure: no second warning
    finally:
        lock.rollback()
        lock.close()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "mlflow tracking failed at step 2" in err, err
    assert _status(mlflow_uri, run_id) == "RUNNING"  # could not be marked while locked
    try:
        raise RuntimeError("the run fails later")
    except RuntimeError:
        tracker.close()
    assert _status(mlflow_uri, run_id) == "FAILED"  # not left RUNNING
    assert json.loads((tmp_path / "run" / TRACKING_FILE).read_text())["mlflow"]["logged_step"] == 1


def test_a_run_stopped_on_request_ends_killed(tmp_path, mlflow_uri):
    tracker = build_tracker("mlflow", mlflow_uri).open(tmp_path / "run", {"steps": 3})
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt:
        tracker.close()
    assert _status(mlflow_uri, tracker.state["mlflow"]["run_id"]) == "KILLED"


def test_a_tracked_run_deleted_in_the_ui_is_tracked_anew_on_resume(tmp_path, mlflow_uri, capsys):
    import mlflow

    run_dir = tmp_path / "run"
    tracker = build_tracker("mlflow", mlflow_uri).open(run_dir, {"steps": 4})
    tracker.log_evaluation(2, _record(2))
    tracker.close()
    old = tracker.state["mlflow"]["run_id"]
    client = mlflow.MlflowClient(mlflow_uri)
    client.delete_run(old)  # the UI's delete: the run is kept, marked deleted
    capsys.readouterr()
    resumed = build_tracker("mlflow", mlflow_uri).open(run_dir, {"steps": 4}, [_record(2), _record(4)])
    new = resumed.state["mlflow"]["run_id"]
    assert new != old and f"the MLflow run {old} of {run_dir} was deleted" in capsys.readouterr().err
    assert sorted(m.step for m in client.get_metric_history(new, "accuracy")) == [2, 4]  # caught up
    resumed.close()


@pytest.mark.slow  # two W&B processes start and stop: about 10 s on one core
def test_wandb_offline_resume_re_sends_what_its_files_lack(tmp_path, wandb_offline):
    run_dir = tmp_path / "run"
    tracker = build_tracker("wandb").open(run_dir, {"steps": 15})
    tracker.log_evaluation(5, _record(5))
    tracker.finish({"step": 5})
    run_id = tracker.state["wandb"]["run_id"]
    deadline = time.monotonic() + 30  # wandb's service writes the file after finish() returns
    while offline_steps_held(wandb_offline, run_id) < 5 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert offline_steps_held(wandb_offline, run_id) == 5
    # killed -9 while wandb still buffered steps 10 and 15: tracking.json already said 15
    state = json.loads((run_dir / TRACKING_FILE).read_text())
    state["wandb"]["logged_step"] = 15
    (run_dir / TRACKING_FILE).write_text(json.dumps(state))
    resumed = build_tracker("wandb").open(run_dir, {"steps": 15}, [_record(5), _record(10), _record(15)])
    resumed.finish({"step": 15})
    assert resumed.state["wandb"]["run_id"] == run_id
    while offline_steps_held(wandb_offline, run_id) < 15 and time.monotonic() < deadline + 30:
        time.sleep(0.2)
    assert offline_steps_held(wandb_offline, run_id) == 15
    # and the second process's own file holds exactly what the first lacked
    folders = sorted(wandb_offline.glob(f"offline-run-*-{run_id}*"))
    assert len(folders) == 2
    assert offline_steps_held(wandb_offline, run_id, exclude=folders[0]) == 15
