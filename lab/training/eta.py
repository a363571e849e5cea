"""How long a run has left: the recent step time (an exponential moving average, so a machine
that gets busier or freer shows in the estimate within a few dozen steps) times the steps left,
plus the evaluations still to come at the last one's measured duration (before the first, a
forward pass over the dev set estimated from the step time).
"""
from __future__ import annotations

import math

# how much each new step counts in the moving average: about the last 20 steps carry the estimate
STEP_WEIGHT = 0.1
# a dev batch is a forward pass only: about a third of a training step's work
EVAL_SHARE = 1 / 3


class StepTimes:
    """Seconds per step, recent steps weighing most. The first steps are averaged plainly (so
    the first step's one-off costs fade as 1/n), then each new one counts STEP_WEIGHT."""

    def __init__(self, weight: float = STEP_WEIGHT):
        self.weight, self.count, self.mean = weight, 0, None

    def add(self, seconds: float) -> None:
        self.count += 1
        if self.mean is None:
            self.mean = seconds
        else:
            self.mean += max(self.weight, 1 / self.count) * (seconds - self.mean)

    @property
    def per_step(self) -> float:
        return self.mean or 0.0


def evals_left(step: int, steps_left: int, steps_per_epoch: int, eval_every: int | None) -> int:
    """Epoch-end evaluations not yet done (the current epoch's counts until its evaluation ran),
    plus the mid-epoch ones every eval_every steps."""
    return (math.ceil((step + steps_left) / steps_per_epoch) - max(step - 1, 0) // steps_per_epoch
            + (steps_left // eval_every if eval_every else 0))


def eta_s(per_step: float, steps_left: int, evals: int, per_eval: float | None,
          dev_batches: float) -> float:
    """Seconds left: steps at per_step, evaluations at per_eval (measured), or before the first
    one at dev_batches forward passes of EVAL_SHARE of a step each."""
    if per_eval is None:
        per_eval = per_step * dev_batches * EVAL_SHARE
    return per_step * steps_left + per_eval * evals
