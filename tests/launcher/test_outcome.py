"""notebook_accel.launcher.supervision.outcome: the outcome a sink is told, as pure functions of what was seen."""

from __future__ import annotations

from notebook_accel.launcher.supervision.outcome import run_outcome


def test_a_timeout_names_its_limit_in_the_one_duration_format() -> None:
    outcome, error = run_outcome(ranks=[0, 1], finished={}, failures={}, timed_out=True, saved=None, elsewhere=(),
                                 elapsed=10.4, timeout=10)
    assert outcome.status == "timeout" and outcome.failed_ranks == (0, 1)
    assert outcome.error == "the run did not finish within timeout=10.0s (ranks still running: [0, 1])"
    assert error is not None and "timeout=10.0s" in str(error)
    long, _ = run_outcome(ranks=[0], finished={}, failures={}, timed_out=True, saved=None, elsewhere=(), elapsed=400,
                          timeout=335)
    assert "timeout=5m 35s " in long.error
