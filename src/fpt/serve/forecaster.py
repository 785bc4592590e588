"""An sktime forecaster: a frozen pretrained transformer behind `fit(y, fh=...)`, `predict`,
`predict_interval` and `predict_quantiles`, usable wherever sktime takes a forecaster (`evaluate`
with an `ExpandingWindowSplitter`, pipelines, tuning).

    from fpt import FPTForecaster
    forecaster = FPTForecaster(steps=300).fit(y_train, fh=[1, 2, 3, 4, 5, 6])
    forecaster.predict(), forecaster.predict_interval(coverage=[0.8, 0.95])

Underneath is fpt's forecasting of a collection of series (fpt.tasks.collections), not new model code:
every column of y (and every instance of a panel or hierarchy) is one series of a collection, and one
global model is trained across them on windows sampled from every series, each window scaled on its
own look-back, the look-back and patches chosen from the data where not given. The last 2 x horizon
observations of each series are held out of training (the task's validation and test horizons); every
window whose target lies there is a residual the model never trained on, and the prediction intervals
are split conformal on those residuals (fpt.training.intervals): per step ahead, in each window's scale,
so they widen with the coverage asked for and with the series' own scale. Forecasts read each series up
to its end, held-out part included.

The horizon is set in fit: the furthest step of fit's fh, or `horizon` where that is further; predict
may ask for any steps up to it, and refuses further ones. Needs the timeseries extra (sktime).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import torch

from fpt.backbones import INITS
from fpt.backbones.catalog import TINY_RANDOM
from fpt.core.errors import FptError, require
from fpt.data.collection import SeriesCollection
from fpt.serve.estimators import (
    FPTInputError,
    check_choice,
    check_parameters,
    check_whole,
    in_parameter_names,
    plain,
    train_in_memory,
    training_config,
)
from fpt.tasks.base import Batch
from fpt.tasks.collections import CollectionWindows, build_collection_task, padded_lookback, window_scale
from fpt.training.inference import predict_values
from fpt.training.intervals import conformal_halfwidths

BaseForecaster = require("sktime.forecasting.base", "pip install 'fpt[timeseries]'").BaseForecaster

PIP = "pip install 'fpt[timeseries]'"
FLOAT32_MAX = float(np.finfo(np.float32).max)  # the model computes in float32: past it a value is inf
PREDICT_BATCH = 256  # windows per forward pass: the forecasts do not depend on it
IMPUTE_HINT = (
    "fill or drop them first, e.g. sktime's Imputer before the forecaster: "
    "TransformedTargetForecaster([('impute', Imputer()), ('fpt', FPTForecaster())])"
)


class NonNumericSeries(FPTInputError, TypeError):
    """A y that is not numbers: an FPTInputError (a ValueError) as fpt's estimators raise, and a TypeError as
    sktime's checks expect of a categorical y."""


def check_series_values(y) -> None:
    """Refuse, in one line naming the fix, a y (a pandas Series or DataFrame, or a numpy array) whose values
    are not numbers, are missing or infinite, or are beyond float32's range; other types are left to sktime."""
    if isinstance(y, np.ndarray) and y.ndim in (1, 2):
        y = pd.DataFrame(y.reshape(len(y), -1))
    if not isinstance(y, (pd.Series, pd.DataFrame)):
        return
    frame = y.to_frame() if isinstance(y, pd.Series) else y
    if frame.size and isinstance(frame.iat[0, 0], pd.Series):
        return  # a nested panel: sktime converts it, and its series are checked as fit reads them
    for position, column in enumerate(frame.columns):
        values = frame.iloc[:, position]
        what = "y" if isinstance(y, pd.Series) else f"y column {plain(column)!r}"
        if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
            raise NonNumericSeries(
                f"{what} holds {values.dtype} values, categorical or text, not numbers: FPTForecaster forecasts "
                "numbers; convert it (pd.to_numeric) or leave it out"
            )
        numbers = values.to_numpy(dtype=np.float64, na_value=np.nan)
        bad = ~np.isfinite(numbers)
        if bad.any():
            where = str(values.index[int(bad.argmax())])[:40]
            raise FPTInputError(
                f"{what} has {int(bad.sum())} missing or infinite values (the first at {where}); {IMPUTE_HINT}"
            )
        if np.abs(numbers).max(initial=0.0) > FLOAT32_MAX:
            where = str(values.index[int(np.abs(numbers).argmax())])[:40]
            raise FPTInputError(
                f"{what} has a value beyond float32's range (at {where}), which the model computes in; "
                "rescale the series (e.g. divide it by a power of ten) first"
            )


def _groups(y: pd.DataFrame) -> list[tuple[tuple, pd.DataFrame]]:
    """(instance key, its rows) of a panel or hierarchy, in order; one group keyed () for a plain frame."""
    if not isinstance(y.index, pd.MultiIndex):
        return [((), y)]
    levels = list(range(y.index.nlevels - 1))
    levels = levels[0] if len(levels) == 1 else levels  # pandas warns of a list of one: its keys become tuples
    return [(key if isinstance(key, tuple) else (key,), rows) for key, rows in y.groupby(level=levels, sort=False)]


def _series(y: pd.DataFrame) -> tuple[list[str], list[np.ndarray]]:
    """(ids, values) of every series in y: each column of each instance, instance-major."""
    ids, values = [], []
    for key, rows in _groups(y):
        for position, column in enumerate(y.columns):
            ids.append("/".join(str(part) for part in (*key, column)))
            values.append(rows.iloc[:, position].to_numpy(dtype=np.float64))
    return ids, values


def _check_lengths(ids: list[str], values: list[np.ndarray], horizon: int) -> None:
    """Every series holds its two held-out horizons and one more value; one series at least a training window."""
    needed = 3 * horizon + 1
    lengths = [len(v) for v in values]
    short = [i for i, n in enumerate(lengths) if n < 2 * horizon + 1]
    if short or max(lengths) < needed:
        i = short[0] if short else int(np.argmax(lengths))
        name = "y" if len(ids) == 1 else f"series {ids[i]!r} of y"
        raise FPTInputError(
            f"{name} has {lengths[i]} observations, too few for a horizon of {horizon}: FPTForecaster holds out "
            f"the last {2 * horizon} (2 x the horizon) for its conformal intervals and trains on windows before "
            f"them; give at least {needed} observations or a shorter fh"
        )


def _calibration_residuals(model, task) -> np.ndarray:
    """|forecast - truth|, (windows, horizon), in each window's scale, of every window whose target lies in
    a series' held-out part (its validation and test horizons): none of them was a training target."""
    horizon = task.collection.horizon
    series, cut = [], []
    for i, (first, last) in enumerate(zip(task.cuts["val"], task.cuts["test"])):
        series.append(np.full(last - first + 1, i))
        cut.append(np.arange(first, last + 1))
    observed = [torch.from_numpy(v) for v in task.observed]
    windows = CollectionWindows(
        observed,
        torch.from_numpy(np.concatenate(series)).long(),
        torch.from_numpy(np.concatenate(cut)).long(),
        task.notes["lookback"],
        horizon,
    )
    batches = [task.make_batch(windows, index, None) for index in torch.arange(len(windows)).split(PREDICT_BATCH)]
    predicted = predict_values(model, [Batch(b.x, torch.zeros(0)) for b in batches]).double()
    truth = torch.cat([b.y for b in batches]).double()
    return (predicted.reshape(truth.shape) - truth).abs().numpy()


class FPTForecaster(BaseForecaster):
    """A frozen pretrained transformer (default: the packaged MiniLM) trained as one global forecaster
    over every series of y: a pd.Series, a DataFrame (each column a series) or sktime's panel and
    hierarchical frames (each instance's columns), of different lengths too.

    Parameters: horizon (the steps ahead the model is trained for when fit's fh asks fewer; None: fit's
    fh decides), lookback, patch_size, patch_stride (None: chosen from the data, as `--task panel`
    chooses them: a look-back of up to 5 horizons the median series affords, patches cutting it into
    about ten tokens), init ("pretrained", or "random" for the control and for the `tiny-random`
    test backbone), and as FPTClassifier's: backbone, steps, batch_size, lr, policy, pooling, recipe,
    precision, seed, device, threads, eval_every, out, progress.

    Intervals and quantiles are split conformal on the residuals of the windows held out of training
    (the last 2 x horizon observations of every series), per step ahead, symmetric about the forecast.

    Fitted attributes: horizon_, lookback_, patch_size_, patch_stride_ (what was used), model_ (the
    trained fpt model), summary_ (the run's summary), residuals_ (the absolute conformal residuals,
    (windows, horizon), in window scale).

    Examples
    --------
    >>> from sktime.datasets import load_airline
    >>> from fpt import FPTForecaster
    >>> y = load_airline()
    >>> forecaster = FPTForecaster(backbone="tiny-random", init="random", steps=20)  # the default: MiniLM
    >>> forecaster = forecaster.fit(y, fh=[1, 2, 3])
    >>> forecaster.predict().shape
    (3,)
    >>> forecaster.predict_interval(coverage=[0.8, 0.95]).shape
    (3, 4)
    """

    _tags = {
        "authors": ["fpt"],
        "y_inner_mtype": ["pd.DataFrame", "pd-multiindex", "pd_multiindex_hier"],
        "X_inner_mtype": ["pd.DataFrame", "pd-multiindex", "pd_multiindex_hier"],
        "capability:multivariate": True,  # each column a series of one global model
        "capability:exogenous": False,
        "requires-fh-in-fit": False,  # fit without fh trains for `horizon`
        "capability:insample": False,
        "capability:pred_int": True,
        "capability:pred_int:insample": False,
        "capability:missing_values": False,
        "capability:unequal_length": True,
        "X-y-must-have-same-index": False,
    }
    # the forecaster keeps the data its look-backs read itself (_cur_y); sktime's own store would duplicate it
    # (and its default warns that it changes in sktime 1.3), so it is off unless asked for with set_config
    _config = {"remember_data": False}
    _y = _X = None  # that store, where set_config(remember_data=True) asks for it

    def __init__(
        self,
        horizon: int | None = None,
        lookback: int | None = None,
        patch_size: int | None = None,
        patch_stride: int | None = None,
        backbone: str = "minilm",
        init: str = "pretrained",
        steps: int = 500,
        batch_size: int = 32,
        lr: float | None = None,
        policy: str = "fpt",
        pooling: str | None = None,
        recipe: str = "fast",
        precision: str | None = None,
        seed: int = 0,
        device: str = "auto",
        threads: int | None = None,
        eval_every: int | None = None,
        out: str | None = None,
        progress: bool = False,
    ):
        self.horizon = horizon
        self.lookback = lookback
        self.patch_size = patch_size
        self.patch_stride = patch_stride
        self.backbone = backbone
        self.init = init
        self.steps = steps
        self.batch_size = batch_size
        self.lr = lr
        self.policy = policy
        self.pooling = pooling
        self.recipe = recipe
        self.precision = precision
        self.seed = seed
        self.device = device
        self.threads = threads
        self.eval_every = eval_every
        self.out = out
        self.progress = progress
        super().__init__()

    def fit(self, y, X=None, fh=None):
        """Train on y (X is ignored) for the steps of fh (or `horizon`); returns self. Raises FPTInputError
        (a ValueError) for a bad parameter, for a y that is not numbers, has missing, infinite or
        beyond-float32 values, or is too short for the horizon, each naming the fix."""
        check_parameters(self)
        for name in ("horizon", "lookback", "patch_stride"):
            check_whole(name, getattr(self, name), 1, optional=True)
        check_choice("init", self.init, INITS)
        check_series_values(y)
        return super().fit(y, X=X, fh=fh)

    def _horizon_for(self, fh) -> int:
        furthest = 0 if fh is None else int(np.max(np.asarray(fh.to_relative(self.cutoff), dtype=np.int64)))
        horizon = max(furthest, 0 if self.horizon is None else int(self.horizon))
        if horizon < 1:
            raise FPTInputError("FPTForecaster needs to know how far to forecast: give fit an fh, or horizon=N")
        return horizon

    def _fit(self, y, X=None, fh=None):
        return self._train(y, self._horizon_for(fh))

    def _train(self, y: pd.DataFrame, horizon: int):
        """One global model over every series of y (sktime's inner frame), `horizon` steps ahead."""
        check_series_values(y)  # as sktime converted it: a nested panel's series are numbers only now
        ids, values = _series(y)
        _check_lengths(ids, values, horizon)
        collection = SeriesCollection("sktime", ids, values, horizon, period=1)
        try:
            task = build_collection_task(collection, self.lookback, self.patch_size, self.patch_stride)
        except FptError as exc:  # a look-back or patch that does not fit: said in the forecaster's words
            raise in_parameter_names(exc, self.get_params()) from None
        config = training_config(self, "sktime:FPTForecaster", init=str(self.init))
        self.model_, self.summary_ = train_in_memory(self, config, task)
        self.horizon_ = horizon
        self.lookback_, self.patch_size_, self.patch_stride_ = (
            task.notes[k] for k in ("lookback", "patch_size", "patch_stride")
        )
        self.residuals_ = _calibration_residuals(self.model_, task)
        self._cur_y = y
        return self

    def _update(self, y, X=None, update_params=True):
        """New observations: read by the next look-backs; with update_params, trained on again (a new fit
        on everything seen, at the horizon fitted)."""
        check_series_values(y)
        seen = pd.concat([self._cur_y, y])
        self._cur_y = seen[~seen.index.duplicated(keep="last")].sort_index()
        if update_params:
            self._train(self._cur_y, self.horizon_)
        return self

    # --- forecasts ---------------------------------------------------------------------------

    def _steps(self, fh) -> np.ndarray:
        """fh as steps ahead of the cutoff (1 = the next), refused past the fitted horizon."""
        steps = np.asarray(fh.to_relative(self.cutoff), dtype=np.int64)
        if steps.max() > self.horizon_:
            raise FPTInputError(
                f"fh reaches {int(steps.max())} steps ahead, but this FPTForecaster was fitted to forecast "
                f"{self.horizon_}: fit it again with that fh (or horizon={int(steps.max())})"
            )
        return steps

    def _forecasts(self, fh) -> tuple[np.ndarray, np.ndarray, pd.Index, np.ndarray]:
        """(forecasts (series, steps asked), each series' look-back scale, the rows' index, the steps)."""
        steps = self._steps(fh)
        _, values = _series(self._cur_y)
        x = torch.stack([padded_lookback(torch.from_numpy(v), self.lookback_) for v in values])
        mean, scale = window_scale(x)
        batches = [
            Batch(((x - mean) / scale)[i : i + PREDICT_BATCH].float(), torch.zeros(0))
            for i in range(0, len(x), PREDICT_BATCH)
        ]
        scaled = predict_values(self.model_, batches).double().reshape(len(x), -1)
        forecasts = (scaled * scale + mean).numpy()[:, steps - 1]
        return forecasts, scale[:, 0].numpy(), self._index(fh), steps

    def _index(self, fh) -> pd.Index:
        """The forecasts' rows: fh's stamps after the cutoff, or after each instance's own last stamp."""
        if not isinstance(self._cur_y.index, pd.MultiIndex):
            return fh.to_absolute_index(self.cutoff)
        rows = []
        for key, frame in _groups(self._cur_y):
            last = frame.index.get_level_values(-1)[-1:]
            if isinstance(self.cutoff, (pd.DatetimeIndex, pd.PeriodIndex)):
                last = type(self.cutoff)(last, freq=self.cutoff.freq)
            rows += [(*key, stamp) for stamp in fh.to_absolute_index(last)]
        return pd.MultiIndex.from_tuples(rows, names=self._cur_y.index.names)

    def _frame(self, values: np.ndarray, index: pd.Index, columns) -> pd.DataFrame:
        """(series, steps) values as rows of `index`, each instance's steps in turn, one column per variable."""
        variables = len(self._cur_y.columns)
        instances = values.shape[0] // variables
        rows = values.reshape(instances, variables, -1).transpose(0, 2, 1).reshape(-1, variables)
        return pd.DataFrame(rows, index=index, columns=columns)

    def _predict(self, fh, X=None):
        forecasts, _, index, _ = self._forecasts(fh)
        return self._frame(forecasts, index, self._cur_y.columns)

    def _predict_quantiles(self, fh, X, alpha):
        """The alpha quantiles: the forecast -+ the split conformal half-width at coverage |2 alpha - 1|."""
        forecasts, scale, index, steps = self._forecasts(fh)
        coverages = sorted({abs(2 * a - 1) for a in alpha if a != 0.5})
        widths = conformal_halfwidths(torch.from_numpy(self.residuals_), [100 * c for c in coverages])
        columns, shown = self._cur_y.columns, {}
        for a in alpha:
            c = abs(2 * a - 1)
            reach = 0.0 if a == 0.5 else np.asarray(widths[100 * c])[steps - 1][None, :] * scale[:, None]
            frame = self._frame(forecasts + math.copysign(1.0, a - 0.5) * reach, index, columns)
            shown.update({(variable, a): frame.iloc[:, p].to_numpy() for p, variable in enumerate(columns)})
        order = [(variable, a) for variable in columns for a in alpha]
        return pd.DataFrame(
            np.column_stack([shown[k] for k in order]), index=index, columns=pd.MultiIndex.from_tuples(order)
        )

    @classmethod
    def get_test_params(cls, parameter_set="default"):
        """Parameters of quick offline instances for sktime's checks: the `tiny-random` backbone (a 2-block,
        32-wide GPT-2 architecture built at random init without any download), one step (the checks test the
        interface, not what is learned: they fit about 650 times); the second trains every weight with chosen
        windows."""
        fast = {"backbone": TINY_RANDOM, "init": "random", "steps": 1, "batch_size": 8, "precision": "fp32"}
        return [
            {**fast, "horizon": 2},
            {**fast, "horizon": 1, "lookback": 3, "patch_size": 1, "patch_stride": 1, "policy": "full"},
        ]
