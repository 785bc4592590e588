"""The field's reference regressors on a task's own splits, beside fpt's R²: the training split's mean
(R² about 0 on new rows: what "better than nothing" means), Ridge on the standardised raw features
(scikit-learn's linear baseline) and HistGradientBoostingRegressor (the strongest default on tables;
one target at a time is all it fits, so several targets leave it out, named). Each trains on the
task's training split, exactly the rows fpt trained on, and is scored by R² (scikit-learn's
`r2_score`, the average over targets, as a regressor's `score`) on the same evaluation split. R² does
not change under a per-target affine rescaling, so the standardised targets fpt trains on give the
same scores as y in its own units.
"""

from __future__ import annotations

import numpy as np


def _rows(data) -> tuple[np.ndarray, np.ndarray]:
    """(features, one flat float vector a row; targets, (N, outputs))."""
    x, y = data.x.numpy(), data.y.numpy()
    return x.reshape(len(x), -1).astype(np.float64), y.reshape(len(y), -1).astype(np.float64)


def reference_r2(task, split: str) -> tuple[dict[str, float], list[str]]:
    """({method: R² on `split`}, the methods left out and why), each fitted on `task.train`."""
    from sklearn.ensemble import HistGradientBoostingRegressor
    from sklearn.linear_model import Ridge
    from sklearn.metrics import r2_score
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    (train_x, train_y), (test_x, test_y) = _rows(task.train), _rows(task.eval_split_data(split))
    mean = np.broadcast_to(train_y.mean(0), test_y.shape)
    scores = {"training mean": float(r2_score(test_y, mean))}
    ridge = make_pipeline(StandardScaler(), Ridge()).fit(train_x, train_y)
    scores["Ridge"] = float(r2_score(test_y, ridge.predict(test_x).reshape(test_y.shape)))
    if train_y.shape[1] > 1:
        return scores, [f"gradient boosting: fits one target, and y has {train_y.shape[1]}"]
    trees = HistGradientBoostingRegressor(random_state=0).fit(train_x, train_y[:, 0])
    scores["gradient boosting"] = float(r2_score(test_y[:, 0], trees.predict(test_x)))
    return scores, []
