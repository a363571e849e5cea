"""Scheduled sampling's teacher-forcing probability, as the captions task's settings ask for it
(Bengio et al. 2015): the lab's trainer mixes the model's own sampled tokens into its inputs at
the probability this gives each step (Prepared.teacher_forcing)."""
from __future__ import annotations

import math


def teacher_forcing(s, step: int, total_steps: int) -> float:
    """Scheduled sampling's probability of feeding the gold token at a step (Bengio et al. 2015):
    linear 1 - step/k, exponential k^step, inverse sigmoid k/(k + exp(step/k)), never below
    ss_floor. ss_k=0 picks k so that the decay reaches the floor (or 1%) at the last step.
    s: the captions task's settings (scheduled_sampling, ss_k, ss_floor)."""
    kind, floor = s.scheduled_sampling, s.ss_floor
    if kind == "none":
        return 1.0
    end, k = max(floor, 0.01), s.ss_k
    if kind == "linear":
        k = k or total_steps / (1 - end)
        p = 1 - step / k
    elif kind == "exponential":
        k = k or end ** (1 / max(total_steps, 1))
        p = k ** step
    else:                   # inverse sigmoid: k/(k + exp(total/k)) = end, solved by bisection
        k = k or _inverse_sigmoid_k(total_steps, end)
        p = k / (k + math.exp(min(step / k, 700.0)))
    return max(floor, p)


def _inverse_sigmoid_k(total_steps: int, end: float) -> float:
    lo, hi = 1.0, max(float(total_steps), 2.0)
    for _ in range(60):
        mid = (lo + hi) / 2
        if mid / (mid + math.exp(min(total_steps / mid, 700.0))) > end:
            hi = mid
        else:
            lo = mid
    return lo
