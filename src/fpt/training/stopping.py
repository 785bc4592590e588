"""When a run stops before its last step, and what it says: Ctrl-C or SIGTERM (fpt.core.runtime's
StopOnSignal) at a step boundary or in the middle of an evaluation, and the end of a sitting's
--max-minutes at a step boundary; under torchrun, the ranks' agreement (the Trainer's step all-reduce)."""

from __future__ import annotations

import signal
import sys
import time

from tqdm.auto import tqdm

from fpt.core.errors import StopRequested
from fpt.core.runtime import StopOnSignal


class TimeLimitReached(StopRequested):
    """A run stopped at a step boundary because its sitting's time (--max-minutes) was up, after
    saving its checkpoint; not an interruption: the CLI exits 0."""

    def __init__(self, message: str):
        super().__init__(message, 0)


class EvaluationInterrupted(Exception):
    """Ctrl-C or SIGTERM arrived while the held-out or test split was being scored: the evaluation
    stops between two batches (fpt.training.evaluation) instead of running on for minutes."""


class RunStop:
    """Whether, and why, a run stops before its last step.

    `signals` is the `with` block that turns Ctrl-C and SIGTERM into a request; `deadline` the
    perf_counter() at which this sitting's --max-minutes end. A signal also interrupts an evaluation
    (`interrupts_evaluation`): the last one scores the whole split, hours at a long look-back on one
    thread. The time limit does not: a sitting shorter than an evaluation would never finish one.
    """

    def __init__(self, main_process: bool, distributed: bool):
        self.signals = StopOnSignal(self._say_stopping if main_process else None)
        self.distributed = distributed
        self.deadline: float | None = None
        self.agreed = False  # every rank saw the request by the end of the last step

    def start(self, max_minutes: float | None) -> None:
        """A sitting begins now, with at most `max_minutes` (None: no limit)."""
        self.deadline = None if max_minutes is None else time.perf_counter() + max_minutes * 60
        self.agreed = False

    def wanted(self) -> bool:
        """This process was asked to stop, or its sitting's time is up."""
        return self.signals.requested or (self.deadline is not None and time.perf_counter() >= self.deadline)

    def requested(self) -> bool:
        """One process stops at once; ranks stop as the last step's all-reduce agreed."""
        return self.agreed if self.distributed else self.wanted()

    def interrupts_evaluation(self) -> bool:
        """Stop scoring a split now: a signal reached this process. Not under torchrun, where every
        rank must reach the evaluation's all-reduce (a rank leaving it early would hang the others)."""
        return self.signals.requested and not self.distributed

    def error(
        self, step: int, steps: int, max_minutes: float | None, where: str, left: str = "", best: int | None = None
    ) -> StopRequested:
        """What the run says as it stops at `step` of `steps` with its checkpoint saved (`where`: how
        to continue; `left`: what it left unfinished, e.g. 'its evaluation of step 40'; `best`:
        the step whose weights --keep-best holds)."""
        unfinished = f"; {left} was not finished and is made first when resumed" if left else ""
        unfinished += "" if best is None else f"; --keep-best holds step {best}'s weights"
        if self.signals.signum is None and max_minutes is not None:  # no rank was signalled: the time is up
            return TimeLimitReached(
                f"stopped at step {step} of {steps}: --max-minutes {max_minutes:g} reached, checkpoint saved"
                f"{unfinished}; the test split is scored once the run ends: continue with {where}"
            )
        signum = self.signals.signum or signal.SIGTERM  # a rank that got no signal stops with the others
        return StopRequested(
            f"stopped at step {step} of {steps} on {signal.Signals(signum).name}, "
            f"checkpoint saved{unfinished}; continue with {where}",
            signum,
        )

    @staticmethod
    def _say_stopping(signum: int) -> None:
        tqdm.write(
            f"fpt: {signal.Signals(signum).name}: stopping once the step under way is done, or the evaluation "
            "under way cut short, with a checkpoint (send it again to stop at once)",
            file=sys.stderr,
        )
