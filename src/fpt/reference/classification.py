"""The field's reference classifiers on a dataset task's own splits, beside fpt's accuracy: the
majority label everywhere; a linear probe (scikit-learn's LogisticRegression) on the raw inputs
(features, pixels, series values; a bag of token counts for token ids); on rows of real-valued
features (an npz of features, series) gradient-boosted trees (HistGradientBoostingClassifier, the
strongest default on tables); and for series (`--task ucr:NAME`) MiniRocket (sktime's
MiniRocketMultivariate with a RidgeClassifierCV, the field's strongest cheap method) and, where
cheap, 1-NN DTW (sktime's KNeighborsTimeSeriesClassifier, the UCR archive's classic baseline). Each
trains on the task's training split, exactly the examples fpt trained on, and is scored on the same
evaluation split. A method whose package is missing, or too costly on this data, is left out and
named, never a failure: the score is fpt's, the reference is an aid.
"""

from __future__ import annotations

import numpy as np

PROBE_EXAMPLES = 20_000  # a linear probe on more (MNIST's 55,000 x 784) costs minutes on one core for little


def _features(task, data) -> np.ndarray:
    """Rows as one flat float vector each: pixels and values as they are stored, token ids as counts."""
    x = data.x.numpy()
    if task.spec.vocab_size is not None and np.issubdtype(x.dtype, np.integer):  # token ids: a bag of tokens
        counts = np.zeros((len(x), task.spec.vocab_size), dtype=np.float32)
        lengths = None if data.lengths is None else data.lengths.numpy()
        for row, ids in enumerate(x):
            np.add.at(counts[row], ids[: None if lengths is None else lengths[row]], 1.0)
        return counts
    flat = x.reshape(len(x), -1).astype(np.float32)
    return flat / 255.0 if x.dtype == np.uint8 else flat


def _series(task, data) -> np.ndarray:
    """A ucr task's tokens back to series (N, channels, steps), the padding of shorter series as zeros."""
    x = data.x.numpy()
    channels = task.notes["channels"]
    return x.reshape(len(x), -1, channels).transpose(0, 2, 1).astype(np.float64)


def majority(train_y: np.ndarray, test_y: np.ndarray) -> float:
    """The accuracy of always answering the training split's most frequent label."""
    values, counts = np.unique(train_y, return_counts=True)
    return float((test_y == values[counts.argmax()]).mean())


def linear_probe(task, train, test) -> float:
    """LogisticRegression on the raw inputs (standardised), trained on at most PROBE_EXAMPLES training rows."""
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    features, labels = _features(task, train), train.y.numpy().reshape(len(train), -1)[:, 0]
    keep = np.random.default_rng(0).permutation(len(features))[:PROBE_EXAMPLES]
    probe = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
    probe.fit(features[keep], labels[keep])
    return float((probe.predict(_features(task, test)) == test.y.numpy().reshape(len(test), -1)[:, 0]).mean())


def minirocket(task, train, test) -> float:
    """MiniRocket's features (sktime, seeded) and a RidgeClassifierCV, as its authors pair them."""
    from sklearn.linear_model import RidgeClassifierCV
    from sktime.transformations.panel.rocket import MiniRocketMultivariate

    transform = MiniRocketMultivariate(random_state=0)
    features = transform.fit_transform(_series(task, train))
    ridge = RidgeClassifierCV(alphas=np.logspace(-3, 3, 10))
    ridge.fit(features, train.y.numpy())
    return float((ridge.predict(transform.transform(_series(task, test))) == test.y.numpy()).mean())


def gradient_boosting(task, train, test) -> float:
    """HistGradientBoostingClassifier (seeded) on the raw features, at most PROBE_EXAMPLES training rows."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    features, labels = _features(task, train), train.y.numpy().reshape(len(train), -1)[:, 0]
    keep = np.random.default_rng(0).permutation(len(features))[:PROBE_EXAMPLES]
    trees = HistGradientBoostingClassifier(random_state=0).fit(features[keep], labels[keep])
    return float((trees.predict(_features(task, test)) == test.y.numpy().reshape(len(test), -1)[:, 0]).mean())


# 1-NN DTW costs about train x test x steps^2 x channels cell updates: GunPoint (50 x 150 x 150^2) is
# 1.7e8, seconds; above this it is left out and named (DTW on long series is hours)
DTW_CELLS = 2e9


def dtw_cells(train, test, series: np.ndarray) -> float:
    """What 1-NN DTW would cost on these splits, in DTW cell updates (see DTW_CELLS)."""
    return float(len(train)) * len(test) * series.shape[2] ** 2 * series.shape[1]


def nearest_neighbour_dtw(task, train, test) -> float:
    """1-NN under dynamic time warping (full window), as the UCR archive reports it."""
    from sktime.classification.distance_based import KNeighborsTimeSeriesClassifier

    knn = KNeighborsTimeSeriesClassifier(n_neighbors=1, distance="dtw")
    knn.fit(_series(task, train), train.y.numpy())
    return float((knn.predict(_series(task, test)) == test.y.numpy()).mean())


def _available(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def reference_accuracies(task, split: str) -> tuple[dict[str, float], list[str]]:
    """({method: accuracy on `split`}, the methods left out and the pip command that brings each)."""
    train, test = task.train, task.eval_split_data(split)
    single = train.y.dim() == 1 or train.y.shape[1] == 1  # one label per example: what the probes predict
    scores = {"majority label": majority(train.y.numpy().reshape(-1), test.y.numpy().reshape(-1))}
    missing = []
    if single and _available("sklearn"):
        scores["linear probe"] = linear_probe(task, train, test)
    elif single:
        missing.append('linear probe: pip install "fpt[sklearn]"')
    features = task.spec.vocab_size is None and train.x.is_floating_point()  # not pixels, not token ids
    if single and features and _available("sklearn"):
        scores["gradient boosting"] = gradient_boosting(task, train, test)
    notes = getattr(task, "notes", {})
    if notes.get("channels") is not None and "series_length" in notes:  # a ucr task
        if _available("sktime") and _available("sklearn") and _available("numba"):
            scores["MiniRocket"] = minirocket(task, train, test)
            cells = dtw_cells(train, test, _series(task, test))
            if cells <= DTW_CELLS:
                scores["1-NN DTW"] = nearest_neighbour_dtw(task, train, test)
            else:
                missing.append(f"1-NN DTW: too costly here ({cells:.1e} DTW cells, above {DTW_CELLS:.0e})")
        else:
            missing.append('MiniRocket and 1-NN DTW: pip install "fpt[timeseries,sklearn]"')
    return scores, missing
