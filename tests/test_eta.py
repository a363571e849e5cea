"""The ETA's arithmetic on a fake clock: the recent step time (a moving average) times the steps
left, plus the evaluations to come; a steady rate gives the truth, a changed rate is followed
within a few dozen steps, evaluation time is counted (measured, or estimated before the first)."""
import pytest

from lab.training import eta


def _times(durations):
    st = eta.StepTimes()
    for d in durations:
        st.add(d)
    return st


def test_a_steady_rate_gives_the_true_time_left():
    st = _times([2.0] * 30)
    assert st.per_step == pytest.approx(2.0)
    assert eta.eta_s(st.per_step, 70, 0, None, 10) == pytest.approx(140.0)


def test_the_first_steps_one_off_cost_fades():
    st = _times([20.0] + [2.0] * 40)          # a slow first step (warm-up)
    assert st.per_step == pytest.approx(2.0, rel=0.05)


def test_a_rate_that_changes_is_followed():
    st = _times([1.0] * 50 + [3.0] * 40)      # the machine got busy: steps three times slower
    assert st.per_step == pytest.approx(3.0, rel=0.05)
    plain_mean = (50 * 1.0 + 40 * 3.0) / 90   # what a mean over the whole run would say
    assert abs(st.per_step - 3.0) < abs(plain_mean - 3.0) / 10


def test_evaluations_are_counted_measured_or_estimated():
    # one epoch of 100 steps, at step 40: the epoch-end evaluation is still to come
    evals = eta.evals_left(40, 60, 100, None)
    assert evals == 1
    assert eta.eta_s(2.0, 60, evals, 30.0, 16) == pytest.approx(120 + 30)
    # before any evaluation ran: dev batches at EVAL_SHARE of a step each
    assert eta.eta_s(2.0, 60, evals, None, 16) == pytest.approx(120 + 16 * 2.0 * eta.EVAL_SHARE)
    # two epochs, mid-epoch evaluations every 25 steps: at step 100 (epoch 1's evaluation still
    # to come), epoch 2's, and 4 mid-epoch ones in the 100 steps left
    assert eta.evals_left(100, 100, 100, 25) == 2 + 4
    assert eta.evals_left(200, 0, 100, None) == 1       # the last evaluation, not yet done
