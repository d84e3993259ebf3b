"""Tests for notebook_accel.widgets.series: a fixed point budget, spikes kept, NaN skipped."""

from __future__ import annotations

import math

import pytest

from notebook_accel.widgets.series import Series


def test_short_series_are_drawn_exactly() -> None:
    s = Series(budget=100)
    for i in range(50):
        s.append(i, float(i * i))
    assert s.points() == ([float(i) for i in range(50)], [float(i * i) for i in range(50)])


@pytest.mark.parametrize("n", [10**3, 10**5])
def test_the_number_of_points_stays_within_the_budget(n: int) -> None:
    s = Series(budget=200)
    for i in range(n):
        s.append(i, math.sin(i / 100))
    xs, ys = s.points()
    assert len(xs) == len(ys) <= 2 * (200 + 2)
    assert xs == sorted(xs) and xs[0] == 0 and xs[-1] == n - 1
    assert s.count == n and s.last == (n - 1, math.sin((n - 1) / 100))


def test_single_spikes_up_and_down_survive() -> None:
    s = Series(budget=50)
    for i in range(100_000):
        y = 100.0 if i == 31_337 else (-50.0 if i == 77_777 else 1.0)
        s.append(i, y)
    xs, ys = s.points()
    assert max(ys) == 100.0 and xs[ys.index(100.0)] == 31_337
    assert min(ys) == -50.0 and xs[ys.index(-50.0)] == 77_777


def test_non_finite_values_are_counted_but_not_drawn() -> None:
    s = Series()
    s.append(0, 1.0)
    s.append(1, float("nan"))
    s.append(2, float("inf"))
    assert s.points() == ([0], [1.0])
    assert s.count == 3 and s.last is not None and math.isinf(s.last[1])


def test_budget_must_be_at_least_two() -> None:
    with pytest.raises(ValueError, match=r"budget=1"):
        Series(budget=1)


def test_extend_gives_what_appending_one_by_one_gives() -> None:
    import random
    from array import array

    rng = random.Random(23)
    for budget in (2, 3, 7, 200):
        one, many = Series(budget), Series(budget)
        x = 0
        for _ in range(40):
            n = rng.randint(0, 400)
            xs = array("q", range(x, x + n))
            x += n
            ys = array("d", (rng.choice((0.5, 0.25, rng.random(), float("nan") if rng.random() < 0.01 else 0.5))
                             for _ in range(n)))
            for xi, yi in zip(xs, ys):
                one.append(xi, yi)
            many.extend(xs, ys)
            assert many.points() == one.points()
            assert (many.count, many.width, many._closed, many._open) == (one.count, one.width, one._closed, one._open)


def test_extend_keeps_a_spike_and_counts_non_finite_values() -> None:
    s = Series(budget=10)
    ys = [1.0] * 10_000
    ys[4_321] = 50.0
    s.extend(list(range(10_000)), ys)
    s.extend([10_000, 10_001], [float("inf"), 2.0])
    xs, drawn = s.points()
    assert max(drawn) == 50.0 and xs[drawn.index(50.0)] == 4_321
    assert s.count == 10_002 and s.last == (10_001, 2.0) and len(xs) <= 2 * (10 + 2)
