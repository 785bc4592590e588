"""The trackers' backends (`Sink`s): MLflow, TensorBoard and Weights & Biases, each an optional
extra imported when its sink is made; fpt.tracking.Tracker feeds them and keeps their state."""

from __future__ import annotations

import logging
import os
import socket
import struct
import sys
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

from fpt.core.errors import FptError, require

SUBSET_PREFIX = "subset_"  # the names of scores of a subset of a split (--eval-subset)
DEFAULT_PROJECT = "fpt"  # the MLflow experiment and W&B project when neither flag nor variable names one


def flatten(data: dict, prefix: str = "") -> dict:
    """{"task_options": {"n_bits": 5}} -> {"task_options.n_bits": 5}"""
    flat = {}
    for key, value in data.items():
        if isinstance(value, dict):
            flat.update(flatten(value, f"{prefix}{key}."))
        else:
            flat[f"{prefix}{key}"] = value
    return flat


def numbers(data: dict) -> dict[str, float]:
    """The numeric leaves of a record or summary, flattened (text, lists and None left out)."""
    return {k: v for k, v in flatten(data).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


class Sink:
    """One tracking backend. `open` starts a tracked run, or continues the one `state` describes (the
    `self.state` it kept last time, read back from tracking.json), and returns the last step that run
    holds, or None for a new run (which then gets the parameters). `role`: "run", or "sweep" for a
    sweep's parent; `parent`: the parent's `child()`, for a sweep cell's run."""

    name = ""
    state: dict

    def open(self, directory: Path, role: str, state: dict | None, parent: dict | None) -> int | None:
        """Start the tracked run of `directory`, or continue the one `state` names; set `self.state`. Returns
        the last step the tracked run already holds, or None for a new run (Tracker then sends the params)."""
        raise NotImplementedError

    def log_params(self, params: dict) -> None:
        """Send a new run's flattened config (fpt.tracking.flatten), once."""
        raise NotImplementedError

    def log_evaluation(self, step: int, metrics: dict[str, float]) -> None:
        """Send one evaluation's numeric scores at training step `step`."""
        raise NotImplementedError

    def finish(self, summary: dict, files: list[Path]) -> None:
        """Send the run's summary and upload `files` (existing files only), then end the run as finished."""
        raise NotImplementedError

    def close(self, status: str) -> None:
        """The run ended without `finish`: status "failed" or "killed"."""

    def child(self) -> dict:
        """What a sweep cell's run needs to nest under this one."""
        return {}


class MLflowSink(Sink):
    """An MLflow run in the store `tracking_uri` names (else a resumed run's store, else MLflow's own default,
    MLFLOW_TRACKING_URI), under the experiment `experiment` (else MLFLOW_EXPERIMENT_NAME, else "fpt"). Raises
    FptError, if `mlflow` is not installed, with the pip command that adds it. Shortens MLflow's HTTP retries
    (MLFLOW_RETRIES) unless the environment sets them: a dead server fails in seconds, not minutes."""

    name = "mlflow"

    def __init__(self, tracking_uri: str | None = None, experiment: str | None = None):
        self.mlflow = require("mlflow", "pip install 'fpt[mlflow]'")
        self.tracking_uri, self.experiment = tracking_uri, experiment
        for name, value in MLFLOW_RETRIES.items():  # the user's own settings win (and reach a sweep's cells)
            os.environ.setdefault(name, value)
        # fpt reports a failed call in one line (Tracker._call); MLflow's log lines about it (a retry
        # with its traceback, per call) only repeat it. MLFLOW_LOGGING_LEVEL=... shows them again.
        logging.getLogger("mlflow").setLevel(os.environ.get("MLFLOW_LOGGING_LEVEL", "CRITICAL").upper())

    def open(self, directory, role, state, parent):
        """Continue the run `state` names if its store is the one in use and the run is still active (else warn
        and start a new one), tagged with the directory, role and parent run. Returns the last evaluation step
        the store holds for a continued run (read from the store, not tracking.json), None for a new one.
        Raises FptError for a store that cannot answer (check_store)."""
        from mlflow.exceptions import MlflowException

        state, parent = state or {}, parent or {}
        # a resumed run stays in the store it started in unless --tracking-uri names another
        uri = _absolute(
            self.tracking_uri
            or state.get("tracking_uri")
            or parent.get("tracking_uri")
            or self.mlflow.get_tracking_uri()
        )
        check_store(uri)
        self.client = self.mlflow.MlflowClient(uri)
        if state.get("tracking_uri") == uri:
            try:
                run = self.client.get_run(state["run_id"])
            except MlflowException:  # deleted from the store: start a new one
                run = None
            if run is not None and run.info.lifecycle_stage != "active":  # deleted in the UI, restorable
                warn(f"the MLflow run {run.info.run_id} of {directory} was deleted; tracking it in a new run")
                run = None
            elif run is None:
                warn(f"the MLflow run {state['run_id']} of {directory} is gone from {uri}; tracking it in a new run")
            if run is not None:
                self.run_id, self.state = run.info.run_id, state
                self.client.update_run(self.run_id, status="RUNNING")
                # the store itself says which evaluations it holds: exact even if tracking.json lags
                return max(
                    (
                        m.step
                        for key in run.data.metrics
                        if not key.startswith(("summary/", SUBSET_PREFIX))
                        for m in self.client.get_metric_history(self.run_id, key)
                    ),
                    default=0,
                )
        experiment_id = parent.get("experiment_id") or self._experiment_id(uri)
        tags = {"fpt.directory": str(directory.resolve()), "fpt.role": role}
        if parent.get("run_id"):
            tags["mlflow.parentRunId"] = parent["run_id"]
        self.run_id = self.client.create_run(experiment_id, run_name=directory.name, tags=tags).info.run_id
        self.state = {"tracking_uri": uri, "experiment_id": experiment_id, "run_id": self.run_id}
        return None

    def _experiment_id(self, uri: str) -> str:
        from mlflow.exceptions import MlflowException

        name = self.experiment or os.environ.get("MLFLOW_EXPERIMENT_NAME") or DEFAULT_PROJECT
        found = self.client.get_experiment_by_name(name)
        if found is not None:
            return found.experiment_id
        location = None
        if uri.startswith("sqlite:///"):  # MLflow would put files in ./mlruns of wherever fpt runs: beside the database
            location = (Path(uri.removeprefix("sqlite:///")).parent / "mlruns").as_uri()
        try:
            return self.client.create_experiment(name, artifact_location=location)
        except MlflowException:  # made meanwhile by a run beside this one
            return self.client.get_experiment_by_name(name).experiment_id

    def log_params(self, params):
        """The flattened config as MLflow params, values as text, in one batch."""
        from mlflow.entities import Param

        self.client.log_batch(self.run_id, params=[Param(k, str(v)) for k, v in params.items()])

    def log_evaluation(self, step, metrics):
        """The scores as MLflow metrics at `step`, in one batch."""
        self.client.log_batch(self.run_id, metrics=self._metrics(metrics, step))

    def _metrics(self, values: dict, step: int) -> list:
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        return [Metric(k, float(v), now, step) for k, v in values.items()]

    def finish(self, summary, files):
        """The summary's numbers as "summary/..." metrics at its last step, `files` as artifacts, then the run
        marked FINISHED."""
        step = summary.get("step") if isinstance(summary.get("step"), int) else 0
        self.client.log_batch(
            self.run_id, metrics=self._metrics({f"summary/{k}": v for k, v in numbers(summary).items()}, step)
        )
        for path in files:
            self.client.log_artifact(self.run_id, str(path))
        self.client.set_terminated(self.run_id, "FINISHED")

    def close(self, status):
        """Mark the run FAILED or KILLED (`status` upper-cased)."""
        self.client.set_terminated(self.run_id, status.upper())

    def child(self):
        """The store, experiment and run id: a cell's run goes in the same store and experiment, nested
        under this run (mlflow.parentRunId)."""
        return dict(self.state)


# MLflow retries a failed HTTP request 7 times, backing off up to 4 minutes: a few tries, briefly.
MLFLOW_RETRIES = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "2",
    "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "20",
}
SQLITE_HEADER = b"SQLite format 3\0"


def check_sink_options(names: list[str], tracking_uri: str | None, experiment: str | None) -> None:
    """--tracking-uri and --experiment beside the trackers --report-to names (--tracking-uri's store is checked
    once MLflow starts: check_store)."""
    if tracking_uri and "mlflow" not in names:
        raise FptError("--tracking-uri is the MLflow store; add --report-to mlflow")
    if experiment and not {"mlflow", "wandb"} & set(names):
        raise FptError("--experiment names the MLflow experiment or W&B project; add --report-to mlflow or wandb")


def check_store(uri: str, timeout_s: float = 5.0) -> None:
    """Refuse in seconds, in one line, a store MLflow would retry for minutes: an HTTP server that
    does not answer, a sqlite path that is a folder, not a database, or not writable (MLflow makes
    missing folders itself)."""
    if uri.startswith(("http://", "https://")):
        parts = urlsplit(uri)
        try:
            port = parts.port or (443 if parts.scheme == "https" else 80)
        except ValueError:
            raise FptError(f"--tracking-uri {uri}: not a valid port; give http(s)://HOST:PORT") from None
        if not parts.hostname:
            raise FptError(f"--tracking-uri {uri}: no host; give http(s)://HOST:PORT")
        try:
            socket.create_connection((parts.hostname, port), timeout=timeout_s).close()
        except OSError as exc:
            raise FptError(
                f"no MLflow server answers at --tracking-uri {uri} ({exc.strerror or exc}); "
                "start one (mlflow server) or check the address"
            ) from None
    elif uri.startswith("sqlite:///"):
        path = Path(uri.removeprefix("sqlite:///").split("?")[0])
        if path.is_dir():
            raise FptError(f"--tracking-uri {uri}: {path} is a folder; name a database file in it (e.g. mlflow.db)")
        existed = path.exists()
        try:
            if existed:
                with open(path, "rb") as handle:
                    head = handle.read(len(SQLITE_HEADER))
                if head and head != SQLITE_HEADER:
                    raise FptError(f"--tracking-uri {uri}: {path} is not a SQLite database; name another file")
            # tried, not asked (os.access says yes to root anywhere): the file, and sqlite's journal beside it
            path.parent.mkdir(parents=True, exist_ok=True)
            open(path, "ab").close()
            tempfile.TemporaryFile(dir=path.parent).close()
        except OSError as exc:
            raise FptError(
                f"--tracking-uri {uri}: cannot write {path} ({exc.strerror or exc}); name a database you can write"
            ) from None
        finally:
            if not existed and path.is_file() and path.stat().st_size == 0:
                path.unlink()  # MLflow makes it; a store that fails leaves nothing


def _absolute(uri: str) -> str:
    """sqlite:///mlflow.db names a file relative to where fpt runs: keep it absolute, so resuming
    from another folder finds the same store."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + str(Path(uri.removeprefix("sqlite:///")).resolve())
    return uri


class TensorBoardSink(Sink):
    """Event files in RUN_DIR/tb (a sweep cell's in SWEEP_DIR/tb/<cell>): `tensorboard --logdir` them."""

    name = "tensorboard"

    def __init__(self):
        require("tensorboard", "pip install 'fpt[tensorboard]'")
        from torch.utils.tensorboard import SummaryWriter

        self.SummaryWriter = SummaryWriter

    def open(self, directory, role, state, parent):
        """A writer on the run's event folder: the one `state` names, else `parent`'s folder / the directory's
        name, else DIR/tb. Returns the last step tracking.json recorded for a continued run (events written
        after it are purged), None for a new one."""
        if state:
            log_dir, logged = Path(state["log_dir"]), state.get("logged_step", 0)
        else:
            log_dir, logged = (Path(parent["log_dir"]) / directory.name if parent else directory / "tb"), None
        # events past the last step tracking.json records (written just before a kill) are purged
        self.writer = self.SummaryWriter(str(log_dir), purge_step=None if logged is None else logged + 1)
        self.state = {"log_dir": str(log_dir.resolve())}
        return logged

    def log_params(self, params):
        """The flattened config as one "params" text entry."""
        self.writer.add_text("params", _code_block(params))

    def log_evaluation(self, step, metrics):
        """One scalar per score at `step`, flushed to disk at once."""
        for key, value in metrics.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()  # tracking.json says this step is here: make it so

    def finish(self, summary, files):
        """The summary as a "summary" text entry at its last step; closes the writer. `files` are not copied:
        the event folder sits beside them."""
        self.writer.add_text("summary", _code_block(summary), summary.get("step") or 0)
        self.writer.close()

    def close(self, status):
        """Close the writer (event files have no run status to set)."""
        self.writer.close()

    def child(self):
        """The event folder: a cell's events go in a subfolder of it named after the cell."""
        return dict(self.state)


def _code_block(data: dict) -> str:
    return "\n".join(f"    {k}: {v}" for k, v in flatten(data).items())  # indented: markdown shows it as code


class WandbSink(Sink):
    """WANDB_MODE=offline keeps the run on disk (under WANDB_DIR) for a later `wandb sync`."""

    name = "wandb"

    def __init__(self, project: str | None = None):
        self.wandb = require("wandb", "pip install 'fpt[wandb]'")
        self.project = project

    def open(self, directory, role, state, parent):
        """wandb.init of the run `state` names (resume="allow") or a new one, in the project chosen by the
        flag, the state, the parent, WANDB_PROJECT or "fpt"; a sweep and its cells share one group. Returns
        the last step the run holds (offline: read from the run's files; online: W&B's starting step), None
        for a new run."""
        state, parent = state or {}, parent or {}
        project = (
            self.project
            or state.get("project")
            or parent.get("project")
            or os.environ.get("WANDB_PROJECT")
            or DEFAULT_PROJECT
        )
        group = parent.get("group") or state.get("group")
        if group is None and role == "sweep":  # the parent and its cells: one group, whatever the sweep's name
            group = f"{directory.name}-{uuid.uuid4().hex[:8]}"
        self.run = self.wandb.init(
            project=project, name=directory.name, id=state.get("run_id"), resume="allow", group=group, job_type=role
        )
        self.state = {"project": project, "run_id": self.run.id, "group": group}
        if not state:
            return None
        if self.run.settings.mode in ("offline", "disabled"):
            # tracking.json may say more than the files hold: wandb's service still buffered the last
            # steps when the process was killed. The files say, so resuming re-sends what they lack.
            return offline_steps_held(Path(self.run.dir).parent.parent, self.run.id, exclude=Path(self.run.dir).parent)
        # online, W&B knows where the run stands (and drops a step at or below one it holds)
        return max(state.get("logged_step", 0), self.run.starting_step - 1)

    def log_params(self, params):
        """The flattened config into the run's config (changed values allowed: a resumed run may differ)."""
        self.run.config.update(params, allow_val_change=True)

    def log_evaluation(self, step, metrics):
        """The scores as one history row at `step`."""
        self.run.log(metrics, step=step)

    def finish(self, summary, files):
        """The summary's numbers into the run summary as "summary/...", `files` uploaded now, then the run
        finished."""
        self.run.summary.update({f"summary/{k}": v for k, v in numbers(summary).items()})
        for path in files:
            self.run.save(str(path), base_path=str(path.parent), policy="now")
        self.run.finish()

    def close(self, status):
        """Finish the run with exit code 1, so W&B shows it failed (W&B has no "killed")."""
        self.run.finish(exit_code=1)

    def child(self):
        """The project and group: a cell's run joins this sweep's group."""
        return {"project": self.state["project"], "group": self.state["group"]}


def offline_steps_held(wandb_dir: Path, run_id: str, exclude: Path | None = None) -> int:
    """The last history step W&B's offline files hold for `run_id` (one folder per process that
    wrote the run), 0 for none. A .wandb file is a 7-byte header, then LevelDB log records in 32 KiB
    blocks, each a protobuf Record; a killed writer's torn tail ends the reading there."""
    from wandb.proto import wandb_internal_pb2

    held = 0
    for path in wandb_dir.glob(f"offline-run-*-{run_id}*/run-{run_id}.wandb"):
        if exclude is not None and path.parent == exclude:
            continue
        data, pos, pending = path.read_bytes(), 7, b""
        while pos + 7 <= len(data):
            room = 32768 - pos % 32768
            _, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
            if room < 7 or (kind == 0 and length == 0):  # a block's padding
                pos += room
                continue
            if pos + 7 + length > len(data):  # torn
                break
            pending, pos = pending + data[pos + 7 : pos + 7 + length], pos + 7 + length
            if kind in (1, 4):  # a whole record, or the last piece of one
                record = wandb_internal_pb2.Record()
                try:
                    record.ParseFromString(pending)
                except Exception:  # protobuf's DecodeError: a damaged record ends what can be trusted
                    break
                pending = b""
                if record.WhichOneof("record_type") == "history":
                    steps = [item.value_json for item in record.history.item if item.key == "_step"]
                    if record.history.HasField("step"):
                        steps.append(str(record.history.step.num))
                    held = max([held, *(int(float(step)) for step in steps)])
    return held


SINKS = {"mlflow": MLflowSink, "tensorboard": TensorBoardSink, "wandb": WandbSink}


def warn(message: str) -> None:
    """Print "fpt: warning: MESSAGE" to stderr (a tracker's trouble never stops training)."""
    print(f"fpt: warning: {message}", file=sys.stderr)
