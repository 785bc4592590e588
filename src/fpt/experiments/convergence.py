"""When a run has converged, for Table 6: each run to its own plateau, as the paper counts it.

The paper reports the gradient steps each model needs to converge, whatever accuracy it converges
to (its Random on Bit Memory: 4e4 steps, to 75.8%). A fixed accuracy threshold measures something
else: a model whose plateau lies below it never "converges". Here, from a run's evaluations:

- smoothed accuracy: the mean of the last WINDOW evaluations (a trailing moving average), defined
  from the WINDOW-th evaluation on;
- the run plateaued if the best smoothed accuracy over the last TAIL share of its steps beats the
  best one before by less than TOLERANCE (absolute); otherwise it was still improving when its
  budget ended, and it has not converged within it;
- it converged at the step where it entered its plateau: the first evaluation of the first window
  whose smoothed accuracy is within TOLERANCE of the run's best smoothed accuracy, to that best
  (not the window's last evaluation, which came WINDOW - 1 evaluation intervals later and once
  made every converged step that much later than the curve shows);
- a run whose best smoothed accuracy stays within two standard errors of chance has not left
  chance: it has not started to learn, so it has not converged, however flat its curve (random
  init on Bit XOR sits at 50% for thousands of steps before it learns; the paper's Table 6: 2e4).
  Chance is the share of the split's most frequent label (always answering it scores that; a
  uniform guess scores less). The standard error counts examples, not labels: on tasks with
  several labels an example (Bit XOR, Bit Memory: one per bit) the labels of one example are not
  independent, so the examples are the safe, conservative count.

A regression run (a forecast) is read the same way on its MSE, lower being better: its plateau is
its lowest smoothed MSE, and the tolerance is relative, TOLERANCE of that best MSE (1%), as an
MSE's scale is its data's where accuracy's is always 0..1. It has no chance level to leave (no
labels to count); a forecaster's floor, the last-value forecast, is a table row of its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

WINDOW = 3  # evaluations averaged
TOLERANCE = 0.01  # absolute accuracy: 1 point; for MSE, relative: 1% of the best
TAIL = 0.25  # share of the budget (the last steps) that must not improve by TOLERANCE


@dataclass(frozen=True)
class Convergence:
    """Whether and where one run converged (module docstring): the step it entered its plateau, the plateau's
    smoothed score, the last step evaluated, and, when it did not converge, why."""

    step: int | None  # the step it converged at; None: not converged within `budget`
    score: float | None  # the best smoothed score (accuracy, or a regression run's MSE), the plateau it converged to
    budget: int  # the last step evaluated
    why_not: str = ""  # why it has not converged (empty when it has)
    metric: str = "accuracy"  # or "mse"

    @property
    def converged(self) -> bool:
        """Whether the run converged within its budget (`step` is set)."""
        return self.step is not None

    @property
    def accuracy(self) -> float | None:
        """The plateau's score under its older name: `score` (an MSE for a regression run, despite the name)."""
        return self.score


def describe(window: int = WINDOW, tolerance: float = TOLERANCE, tail: float = TAIL, metric: str = "accuracy") -> str:
    """The definition in one paragraph, for the text above a table."""
    if metric == "mse":
        return (
            f"Converged (MSE, lower is better): at the first of the first {window} consecutive evaluations "
            f"whose mean MSE comes within {100 * tolerance:g}% of the run's lowest such mean, where the run "
            f"entered its plateau; counted only if the run plateaued, i.e. its lowest mean over the last "
            f"{100 * tail:g}% of its steps is lower than the lowest before by less than {100 * tolerance:g}% "
            f"of it; otherwise it did not converge within its steps."
        )
    return (
        f"Converged: at the first of the first {window} consecutive evaluations whose mean accuracy comes "
        f"within {100 * tolerance:g} point(s) (absolute) of the run's best such mean, where the run entered "
        f"its plateau; counted only if the run "
        f"plateaued, i.e. its best mean over the last {100 * tail:g}% of its steps beats the best before "
        f"by less than {100 * tolerance:g} point(s), and its best mean is more than two standard errors "
        f"(over the examples scored) above chance, the share of the split's most frequent label; "
        f"otherwise it did not converge within its steps."
    )


def smoothed(accuracies: list[float], window: int = WINDOW) -> list[float]:
    """Trailing means over `window` values: element i is the mean of values i .. i + window - 1."""
    return [sum(accuracies[i : i + window]) / window for i in range(len(accuracies) - window + 1)]


def near_chance(accuracy: float, chance: float, examples: int) -> bool:
    """Whether an accuracy on `examples` (at least 1) examples is within two standard errors of chance."""
    if examples < 1:
        raise ValueError(f"the chance check needs the number of examples scored, got {examples}")
    return accuracy <= chance + 2 * math.sqrt(chance * (1 - chance) / examples)


def convergence(
    history: list[tuple[int, float]],
    window: int = WINDOW,
    tolerance: float = TOLERANCE,
    tail: float = TAIL,
    chance: tuple[float, int] | None = None,
    metric: str = "accuracy",
) -> Convergence:
    """Where a run converged, from its (step, score) evaluations in step order, the score its
    accuracy or, with metric "mse", its MSE (lower is better, `tolerance` relative to the best);
    `chance`: (the share of the split's most frequent label, the examples scored each time), to
    tell a flat run at chance from a converged one (None: no such check)."""
    if metric == "mse":
        return _lowest_mse(history, window, tolerance, tail)
    if not history:
        return Convergence(None, None, 0, "no evaluations")
    steps = [step for step, _ in history]
    budget = steps[-1]
    means = smoothed([accuracy for _, accuracy in history], window)
    starts = steps[: len(means)]  # a window's first evaluation: where the run entered it
    ends = steps[window - 1 :]  # a mean is known at the step of its last evaluation
    cut = budget * (1 - tail)
    before = [m for m, step in zip(means, ends) if step <= cut]
    after = [m for m, step in zip(means, ends) if step > cut]
    if not before or not after:
        return Convergence(
            None,
            None,
            budget,
            f"too few evaluations to tell (need {window} before the last {100 * tail:g}% of the steps and one within)",
        )
    best = max(means)
    if chance is not None and near_chance(best, *chance):
        return Convergence(None, best, budget, f"never left chance ({100 * chance[0]:.1f}%)")
    if max(after) - max(before) >= tolerance:
        return Convergence(None, best, budget, "still improving at the end")
    step = next(step for m, step in zip(means, starts) if m >= best - tolerance)
    return Convergence(step, best, budget)


def _lowest_mse(history: list[tuple[int, float]], window: int, tolerance: float, tail: float) -> Convergence:
    """`convergence` on MSE: accuracy's rules on the negated MSE, the tolerance a share of the lowest mean."""
    means = smoothed([mse for _, mse in history], window)
    found = convergence([(step, -mse) for step, mse in history], window, tolerance * min(means, default=0.0), tail)
    return Convergence(found.step, None if found.score is None else -found.score, found.budget, found.why_not, "mse")
