"""scikit-learn estimators: a frozen pretrained transformer behind `fit(X, y)` and `predict(X)`.

    from fpt.serve.estimators import FPTClassifier
    clf = FPTClassifier(steps=300).fit(X_train, y_train)   # X: (n, features) or (n, channels, time)
    clf.predict(X_test), clf.predict_proba(X_test), clf.score(X_test, y_test)

They drop into `Pipeline`, `GridSearchCV` and `cross_val_score`, and take the panels sktime and aeon
use for time series. Underneath is fpt's own trainer on an in-memory task (fpt.Trainer):
the same model, policy, schedule and evaluation as `fpt train`. Rows become tokens as `--task ucr`
makes them: a 2-D X is one series per row (its features in order), a 3-D X is (n, channels, time);
each token is `patch_size` consecutive steps of every channel (default: one step per token up to 64
steps, then the fewest steps per token that keep 64 tokens).

Scale X as for any neural network (a StandardScaler in front); the regressor scales y itself.
Nothing is written to disk unless `out` names a folder for the training record.

Beside its own score, every fit answers "is this any good?": a `validation_fraction` of the rows
(default 0.2) is held out of training, fpt's evaluations score it, and the field's simple baselines
(fpt.serve.held_out) are fitted on the same training rows and scored on the same validation rows:
the majority label, LogisticRegression ("linear probe") and HistGradientBoostingClassifier ("gradient
boosting") for a classifier; the training mean, Ridge and HistGradientBoostingRegressor for a
regressor. `reference_scores_` holds them, `validation_score_` fpt's, and `reference_comparison_` the
sentence logged (logger "fpt", INFO; printed where `progress`): "gradient boosting beats fpt on the
24 validation rows (accuracy 100.00% against fpt's 95.83%)". `baselines=False` leaves them out.
No test rows are involved: the estimator never sees them.
"""

from __future__ import annotations

import dataclasses
import math
import os
import re

import numpy as np
import torch
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import check_is_fitted, validate_data

from fpt.backbones.surgery import PRECISION_CHOICES
from fpt.core.devices import DEVICE_CHOICES, check_device_name
from fpt.core.errors import FptError, require
from fpt.core.runtime import set_threads
from fpt.models.ends import POOLINGS
from fpt.models.policy import GROUPS, POLICIES, parse_policy
from fpt.serve.held_out import VALIDATION_FRACTION, compare_on_validation, evaluation_splits, held_out_rows
from fpt.tasks.arrays import ArrayTask, Split
from fpt.tasks.base import Batch, TaskSpec
from fpt.tasks.sequences import SequenceTask
from fpt.tasks.ucr import MAX_DEFAULT_TOKENS, to_tokens
from fpt.training.build import plan_and_build
from fpt.training.config import DEFAULT_STEPS, MAX_THREADS, RECIPES, TrainConfig
from fpt.training.inference import predict_probabilities, predict_values
from fpt.training.loop import Trainer
from fpt.training.run_dir import RunDir

# Training rows evaluated at the end of fit (and every eval_every steps): the Trainer always scores
# a held-out split, and fit(X, y) has none, so it scores (at most) this many of the training rows.
EVAL_ROWS = 1024
# steps=None: ESTIMATOR_EPOCHS passes over the rows trained on (the validation rows held out), at most
# DEFAULT_STEPS, as `fpt train` caps its own default (fpt.training.config). benchmarks/small_data.py chose ten
# passes of the fast recipe on validation over load_diabetes, load_wine, load_breast_cancer and load_iris
# (results/small_data/): they scored at least the former fixed 500 steps on every set (diabetes R² 0.37
# against 0.32, breast cancer 98.9% against 97.8%, wine and iris equal) in a sixteenth to a fifth of the
# time; 5 epochs was within a row, 30 lower
ESTIMATOR_EPOCHS = 10
PREDICT_BATCH = 256  # rows per forward pass in predict: the results do not depend on it


class FPTInputError(FptError, ValueError):
    """Input an estimator cannot take: fpt's one error type, and a ValueError as scikit-learn's
    conventions (and its estimator checks) expect from an estimator given bad data."""


def plain(value):
    """A value as a message shows it: a numpy scalar as the Python value it holds (0.5, not np.float64(0.5))."""
    return value.item() if isinstance(value, np.generic) else value


def check_whole(name: str, value, low: int, high: int | None = None, optional: bool = False) -> None:
    """Refuse parameter `name` unless it is a whole number from `low` (to `high`), or None where `optional`."""
    if optional and value is None:
        return
    whole = isinstance(value, (int, np.integer)) and not isinstance(value, (bool, np.bool_))
    if not whole or value < low or (high is not None and value > high):
        bounds = f"from {low} to {high}" if high is not None else f"of at least {low}"
        raise FPTInputError(
            f"{name} must be a whole number {bounds}{' or None' if optional else ''}, got {plain(value)!r}"
        )


def check_choice(name: str, value, choices, optional: bool = False) -> None:
    """Refuse parameter `name` unless it is one of `choices`, or None where `optional`."""
    if (optional and value is None) or (isinstance(value, str) and value in choices):
        return
    raise FPTInputError(
        f"{name} must be one of {', '.join(choices)}{' or None' if optional else ''}, got {plain(value)!r}"
    )


def _check_names(estimator) -> None:
    """The parameters that name something: a backbone, a policy, a device, a folder."""
    backbone, policy, device, out = estimator.backbone, estimator.policy, estimator.device, estimator.out
    if not isinstance(backbone, (str, os.PathLike)) or not os.fspath(backbone):
        raise FPTInputError(
            f"backbone must be a registered name, a local directory or a hub id, got {plain(backbone)!r}"
        )
    try:
        parse_policy(policy)
    except (FptError, AttributeError):  # AttributeError: not a string
        raise FPTInputError(
            f"policy must be one of {', '.join(POLICIES)} or a comma list of groups ({', '.join(GROUPS)}), "
            f"got {plain(policy)!r}"
        ) from None
    try:
        check_device_name(device)
    except (FptError, AttributeError, TypeError):
        raise FPTInputError(f"device must be {DEVICE_CHOICES.replace(' | ', ', ')}, got {plain(device)!r}") from None
    if out is not None and not isinstance(out, (str, os.PathLike)):
        raise FPTInputError(f"out must be a folder's path or None, got {plain(out)!r}")


def check_parameters(estimator, steps_optional: bool = False) -> None:
    """Every training parameter of an fpt estimator, as scikit-learn checks its own at fit: a bad one is an
    FPTInputError (a ValueError) naming the parameter as the estimator spells it (`batch_size`, not
    `--batch-size`), its value shown as a plain number."""
    check_whole("steps", estimator.steps, 1, optional=steps_optional)
    check_whole("batch_size", estimator.batch_size, 1)
    check_whole("seed", estimator.seed, 0, 2**63 - 1)
    check_whole("threads", estimator.threads, 1, MAX_THREADS, optional=True)
    check_whole("eval_every", estimator.eval_every, 1, optional=True)
    check_whole("patch_size", estimator.patch_size, 1, optional=True)
    lr = estimator.lr
    if lr is not None and (
        isinstance(lr, (bool, np.bool_)) or not isinstance(lr, (int, float, np.number)) or not 0 < lr < math.inf
    ):
        raise FPTInputError(f"lr must be a positive number or None (the recipe's), got {plain(lr)!r}")
    check_choice("recipe", estimator.recipe, tuple(RECIPES))
    check_choice("precision", estimator.precision, PRECISION_CHOICES, optional=True)
    check_choice("pooling", estimator.pooling, POOLINGS, optional=True)
    if not isinstance(estimator.progress, (bool, np.bool_)):
        raise FPTInputError(f"progress must be True or False, got {plain(estimator.progress)!r}")
    _check_names(estimator)


def check_held_out(estimator) -> None:
    """The classifier's and the regressor's validation_fraction and baselines, checked as check_parameters checks."""
    if not isinstance(estimator.baselines, (bool, np.bool_)):
        raise FPTInputError(f"baselines must be True or False, got {plain(estimator.baselines)!r}")
    fraction = estimator.validation_fraction
    number = isinstance(fraction, (int, float, np.number)) and not isinstance(fraction, (bool, np.bool_))
    if not number or not 0 <= fraction < 1:
        raise FPTInputError(f"validation_fraction must be a number from 0 to below 1, got {plain(fraction)!r}")


def in_parameter_names(error: FptError, names) -> FPTInputError:
    """An FptError of fpt's training code as an FPTInputError, its option names (--batch-size) spelt as the
    estimator's parameters (batch_size) where it has one of that name."""

    def spelt(match: re.Match) -> str:
        name = match[1].replace("-", "_")
        return name if name in names else match[0]

    return FPTInputError(re.sub(r"--([a-z][a-z0-9-]*)", spelt, str(error)), kind=error.kind)


def training_config(estimator, task: str, steps: int | None = None, **more) -> TrainConfig:
    """The TrainConfig of an estimator's parameters (checked by check_parameters) and `more` options, on the
    estimator's recipe (`steps`: the budget where the estimator's own is None); what TrainConfig refuses is an
    FPTInputError in the estimator's words."""
    # plain Python values (check_parameters admits numpy's, as a grid search hands them over): config.json
    # is written by json, and the messages print plain numbers
    steps = int(estimator.steps if estimator.steps is not None else steps)
    given = {"backbone": os.fspath(estimator.backbone), "steps": steps, "batch_size": int(estimator.batch_size)}
    given.update(seed=int(estimator.seed), policy=str(estimator.policy), device=str(estimator.device))
    given.update(pooling=estimator.pooling, threads=None if estimator.threads is None else int(estimator.threads))
    given["eval_every"] = int(estimator.eval_every) if estimator.eval_every is not None else steps
    if estimator.lr is not None:
        given["lr"] = float(estimator.lr)
    if estimator.precision is not None:
        given["precision"] = str(estimator.precision)
    if RECIPES.get(estimator.recipe, {}).get("warmup_steps", 0) >= steps:
        # the fast recipe warms up over 100 steps, which TrainConfig refuses for a run that short:
        # a short fit warms up over its first tenth instead
        given["warmup_steps"] = steps // 10
    try:
        config = TrainConfig.from_recipe(estimator.recipe, task=task, **given, **more)
        config.validate()
    except TypeError as exc:  # a parameter of the wrong type deep inside a comparison
        raise FPTInputError(f"{type(estimator).__name__}: a parameter has the wrong type ({exc})") from None
    except FptError as exc:  # what check_parameters leaves to TrainConfig: said in the estimator's words
        raise in_parameter_names(exc, estimator.get_params()) from None
    return config


def train_in_memory(estimator, config: TrainConfig, task) -> tuple[torch.nn.Module, dict]:
    """(the trained model, in eval mode; the run's summary): fpt's Trainer on an in-memory task, writing a
    training record only where the estimator's `out` names a folder; the caller's torch RNG left as it was."""
    if estimator.threads is not None:
        set_threads(int(estimator.threads))
    if estimator.out is not None:
        RunDir.check_creatable(estimator.out)
    with torch.random.fork_rng():  # the seeded initial weights leave the caller's RNG as it was
        try:
            config, model = plan_and_build(config, task)  # the plan the Trainer runs and records
        except FptError as exc:  # a backbone or device this machine lacks: a bad parameter too
            raise in_parameter_names(exc, estimator.get_params()) from None
        run_dir = RunDir.create(estimator.out) if estimator.out is not None else None
        trainer = None
        try:
            if run_dir is not None:
                run_dir.write_config(dataclasses.asdict(config))
            trainer = Trainer(model, task, config, run_dir, progress=estimator.progress)
            summary = trainer.fit()
        except Exception:
            if run_dir is not None and (trainer is None or trainer.last_checkpoint_step is None):
                run_dir.remove()  # as `fpt train`: a fit that failed before saving anything leaves nothing
            raise
        finally:
            if run_dir is not None:
                run_dir.unlock()
    return model.eval(), summary


def _from_nested(X):
    """A sktime nested DataFrame (a pandas Series in every cell) as a 3-D (n, channels, time) array;
    anything else as it came."""
    try:
        import pandas as pd
    except ImportError:  # pragma: no cover - without pandas no DataFrame can have come
        return X
    if isinstance(X, pd.DataFrame) and X.size and isinstance(X.iat[0, 0], pd.Series):
        lengths = np.unique([len(cell) for cell in X.to_numpy().ravel()])
        if len(lengths) > 1:  # sktime's converter would fail in np.stack with a bare shape error
            raise FPTInputError(
                f"X holds series of unequal lengths ({lengths[0]} to {lengths[-1]} time steps); fpt's estimators take "
                "series of one length: pad or resample them first, e.g. sktime's PaddingTransformer "
                "(sktime.transformations.panel.padder) or TSInterpolator (sktime.transformations.panel.interpolate) "
                "in a Pipeline before the estimator"
            )
        convert = require("sktime.datatypes", "pip install -e '.[timeseries]'").convert_to
        return convert(X, to_type="numpy3D")
    return X


class _FPTEstimator(BaseEstimator):
    """What the classifier and the regressor share: parameters, tokens, the training run."""

    def __init__(
        self,
        backbone: str = "minilm",
        steps: int | None = None,
        batch_size: int = 32,
        lr: float | None = None,
        policy: str = "fpt",
        patch_size: int | None = None,
        pooling: str | None = None,
        recipe: str = "fast",
        precision: str | None = None,
        seed: int = 0,
        device: str = "auto",
        threads: int | None = None,
        eval_every: int | None = None,
        out: str | None = None,
        progress: bool = False,
        validation_fraction: float = VALIDATION_FRACTION,
        baselines: bool = True,
    ):
        self.backbone = backbone
        self.steps = steps
        self.batch_size = batch_size
        self.lr = lr
        self.policy = policy
        self.patch_size = patch_size
        self.pooling = pooling
        self.recipe = recipe
        self.precision = precision
        self.seed = seed
        self.device = device
        self.threads = threads
        self.eval_every = eval_every
        self.out = out
        self.progress = progress
        self.validation_fraction = validation_fraction
        self.baselines = baselines

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.three_d_array = True  # (n, channels, time) panels, as sktime and aeon pass them
        return tags

    # --- rows -> tokens ----------------------------------------------------------------------

    def _tokens(self, X: np.ndarray, fitting: bool) -> torch.Tensor:
        """X (n, features) or (n, channels, time), already validated -> float tokens (n, L, D)."""
        if X.ndim > 3:
            raise FPTInputError(f"X must be (n, features) or (n, channels, time), found {X.ndim} dimensions {X.shape}")
        panel = X if X.ndim == 3 else X[:, None, :]
        if fitting:
            steps = panel.shape[2]
            patch = self.patch_size if self.patch_size is not None else math.ceil(steps / MAX_DEFAULT_TOKENS)
            if isinstance(patch, bool) or not isinstance(patch, (int, np.integer)) or not 1 <= patch <= steps:
                raise FPTInputError(
                    f"patch_size must be a whole number from 1 to {steps} (the time steps), got {patch}"
                )
            self.input_shape_ = tuple(X.shape[1:])
            self.patch_size_ = int(patch)
        elif tuple(X.shape[1:]) != self.input_shape_:
            raise FPTInputError(
                f"X rows are {tuple(X.shape[1:])}, but this estimator was fitted on {self.input_shape_}"
            )
        # time-major: (n, channels, time) -> series (time, channels), cut as --task ucr cuts them
        tokens, _ = to_tokens(list(panel.transpose(0, 2, 1)), self.patch_size_, panel.shape[2])
        return torch.from_numpy(tokens)

    # --- training ----------------------------------------------------------------------------

    def _train(self, task: ArrayTask) -> None:
        rows = len(task.train.y)  # steps=None: ESTIMATOR_EPOCHS passes over the rows trained on, at most DEFAULT_STEPS
        passes = min(DEFAULT_STEPS, ESTIMATOR_EPOCHS * math.ceil(rows / self.batch_size))
        self.steps_ = int(self.steps) if self.steps is not None else passes
        config = training_config(self, f"sklearn:{type(self).__name__}", steps=self.steps_)
        self.model_, self.summary_ = train_in_memory(self, config, task)

    def _batches(self, X) -> list[Batch]:
        check_is_fitted(self, "model_")
        X = validate_data(self, _from_nested(X), reset=False, allow_nd=True, dtype=(np.float64, np.float32))
        tokens = self._tokens(X, fitting=False)
        size = PREDICT_BATCH
        return [Batch(tokens[start : start + size], torch.zeros(0)) for start in range(0, len(tokens), size)]


class FPTClassifier(ClassifierMixin, _FPTEstimator):
    """A frozen pretrained transformer (default: the packaged MiniLM) trained as a classifier.

    Parameters (each as `fpt train`'s option of the same name; None: the recipe's or fpt's default):
    backbone, steps (None: 10 passes over the training rows, at most 2,000 steps, chosen on validation across
    scikit-learn's small sets: benchmarks/recipes.md), batch_size, lr, policy (which parameter groups
    train), patch_size (time steps or features per token), pooling, recipe ("fast" or "paper"),
    precision, seed, device, threads, eval_every (None: evaluate once, at the end), out (a folder for
    the training record: config.json, metrics.jsonl, summary.json and the checkpoint; None: nothing is
    written), progress (a bar), validation_fraction (the rows held out of training, which evaluations
    and the baselines score; 0: train on every row, evaluate on training rows, no baseline), baselines
    (False: no baseline).

    Fitted attributes: classes_, n_features_in_ (features, or channels of a 3-D X), input_shape_,
    patch_size_, steps_ (the steps trained), model_ (the trained fpt model), summary_ (the run's summary),
    reference_scores_ ({baseline: its accuracy on the validation rows}; {} where none ran),
    validation_score_ (fpt's accuracy on them, or None), reference_comparison_ (the sentence).
    """

    def fit(self, X, y):
        """Train on X, (n, features) or (n, channels, time) or an sktime nested DataFrame, and labels y of any
        type; returns self. Evaluations score the held-out validation rows (stratified by label), or without
        them the first 1,024 training rows (EVAL_ROWS). Raises FPTInputError for a bad parameter, a y of one
        class or an X of another shape."""
        check_parameters(self, steps_optional=True)
        check_held_out(self)
        X, y = validate_data(self, _from_nested(X), y, allow_nd=True, dtype=(np.float64, np.float32))
        check_classification_targets(y)
        self.classes_, labels = np.unique(y, return_inverse=True)
        if len(self.classes_) < 2:
            raise FPTInputError(
                f"y holds 1 class ({plain(self.classes_[0])!r}); a classifier needs examples of at least two classes"
            )
        tokens = self._tokens(X, fitting=True)
        rows = held_out_rows(len(labels), self.validation_fraction, self.seed, labels)
        targets = torch.from_numpy(labels.astype(np.int64))
        train, evals, watched = evaluation_splits(tokens, targets, rows, EVAL_ROWS)
        task = SequenceTask(
            f"sklearn:{type(self).__name__}",
            train,
            evals,
            watched,
            num_classes=len(self.classes_),
            seq_len=tokens.shape[1],
            input_dim=tokens.shape[2],
        )
        self._train(task)
        self.reference_scores_, self.validation_score_, self.reference_comparison_ = compare_on_validation(
            self, task, X, y, rows[1]
        )
        return self

    def predict_proba(self, X) -> np.ndarray:
        """Class probabilities (n, classes), columns in the order of classes_."""
        batches = self._batches(X)  # first: an unfitted estimator fails there, with NotFittedError
        probabilities = predict_probabilities(self.model_, batches)
        return probabilities[:, 0].double().numpy()

    def predict(self, X) -> np.ndarray:
        """The most probable class of each row of X, (n,), as labels from classes_."""
        best = self.predict_proba(X).argmax(1)  # first: an unfitted estimator fails there, with NotFittedError
        return self.classes_[best]


class _ValuesTask(ArrayTask):
    """Regression on in-memory rows: float targets (N, outputs), scored by MSE and MAE."""

    def __init__(self, name: str, train: Split, evals: dict[str, Split], watched: str, spec: TaskSpec):
        self.name, self.spec = name, spec
        super().__init__(train, evals, watched)

    def make_batch(self, split: Split, index: torch.Tensor, gen: torch.Generator | None) -> Batch:
        return Batch(split.x[index], split.y[index])


class FPTRegressor(RegressorMixin, _FPTEstimator):
    """A frozen pretrained transformer trained as a regressor of one or several targets.

    Parameters as FPTClassifier's. y is standardised for training (mean 0, std 1 per target, from the
    training rows) and predictions are put back in y's units. Fitted attributes: n_outputs_,
    n_features_in_, input_shape_, patch_size_, steps_, model_, summary_ (its MSE and MAE are on the
    standardised y), reference_scores_ ({baseline: its R² on the validation rows}), validation_score_
    (fpt's R² there), reference_comparison_.
    """

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.target_tags.multi_output = True
        return tags

    def fit(self, X, y):
        """Train on X, shaped as FPTClassifier.fit takes it, and numeric targets y, (n,) or (n, outputs);
        returns self. y is standardised per target for training; validation_fraction of the rows are held out
        as FPTClassifier.fit holds them (a plain shuffle). Raises FPTInputError for a bad parameter or an X
        of another shape."""
        check_parameters(self, steps_optional=True)
        check_held_out(self)
        X, y = validate_data(
            self, _from_nested(X), y, allow_nd=True, dtype=(np.float64, np.float32), y_numeric=True, multi_output=True
        )
        self._single_output = y.ndim == 1
        targets = y.reshape(len(y), -1).astype(np.float64)
        self.n_outputs_ = targets.shape[1]
        rows = held_out_rows(len(targets), self.validation_fraction, self.seed)
        self._y_mean = targets[rows[0]].mean(0)
        scale = targets[rows[0]].std(0)
        self._y_scale = np.where(scale > 0, scale, 1.0)  # a constant target scales by 1, as StandardScaler's
        tokens = self._tokens(X, fitting=True)
        values = torch.from_numpy(((targets - self._y_mean) / self._y_scale).astype(np.float32))
        train, evals, watched = evaluation_splits(tokens, values, rows, EVAL_ROWS)
        spec = TaskSpec(
            seq_len=tokens.shape[1],
            num_classes=1,
            input_dim=tokens.shape[2],
            outputs_per_token=self.n_outputs_,
            target="values",
        )
        task = _ValuesTask(f"sklearn:{type(self).__name__}", train, evals, watched, spec)
        self._train(task)
        self.reference_scores_, self.validation_score_, self.reference_comparison_ = compare_on_validation(
            self, task, X, y, rows[1]
        )
        return self

    def predict(self, X) -> np.ndarray:
        """Predicted targets in y's units: (n,) if fit had one-dimensional y, else (n, outputs)."""
        batches = self._batches(X)  # first: an unfitted estimator fails there, with NotFittedError
        values = predict_values(self.model_, batches).double().numpy()
        values = values * self._y_scale + self._y_mean
        return values[:, 0] if self._single_output else values
