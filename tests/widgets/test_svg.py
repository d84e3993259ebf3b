"""Tests for notebook_accel.widgets.svg: the live curves drawn as inline SVG."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

from notebook_accel.widgets.series import Series
from notebook_accel.widgets.svg import curves_svg, nice_ticks

NS = "{http://www.w3.org/2000/svg}"


def _series(*points: tuple[float, float], budget: int = 100) -> Series:
    s = Series(budget=budget)
    for x, y in points:
        s.append(x, y)
    return s


def _panels(page: str) -> list[ET.Element]:
    root = ET.fromstring(page)  # well-formed XML: the browser parses it as it is
    return list(root)


def test_nice_ticks_are_round_and_cover_the_range() -> None:
    assert nice_ticks(0, 100) == [0.0, 20.0, 40.0, 60.0, 80.0, 100.0]
    assert nice_ticks(0.013, 0.052, 4) == [0.02, 0.03, 0.04, 0.05]
    assert nice_ticks(5, 5) == [5] and nice_ticks(math.nan, 1) == []


def test_one_panel_per_group_with_a_polyline_and_a_last_point_dot_per_metric() -> None:
    series = {"train/loss": _series((0, 1.0), (1, 0.5), (2, 0.25)), "eval/loss": _series((2, 0.8)),
              "lr": _series((0, 0.1), (2, 0.05))}
    page = curves_svg(series)
    panels = _panels(page)
    assert [p.find(f"{NS}text").text for p in panels] == ["loss", "lr"]  # type: ignore[union-attr]
    loss = panels[0]
    assert len(loss.findall(f"{NS}polyline")) == 1  # eval/loss has one point: no line ...
    assert len(loss.findall(f"{NS}circle")) == 2  # ... but a dot, like every latest point
    assert len(loss.find(f"{NS}polyline").get("points", "").split()) == 3  # type: ignore[union-attr]
    assert 'data-last-step="2"' in page


def test_a_single_point_is_a_visible_dot_inside_the_plot() -> None:
    (panel,) = _panels(curves_svg({"loss": _series((7, 0.3))}))
    (dot,) = panel.findall(f"{NS}circle")
    assert 46 < float(dot.get("cx", "0")) < 292 and 24 < float(dot.get("cy", "0")) < 158


def test_names_are_escaped_and_nan_only_series_say_so() -> None:
    page = curves_svg({"a<b>/x": _series((0, math.nan))})
    assert "a&lt;b&gt;" in page and "no finite value yet" in page and "data-last-step" not in page
    assert "accelerator.log" in curves_svg({})


def test_the_frame_size_is_bounded_by_the_point_budget_not_the_steps() -> None:
    bound = 2 * (200 + 2) * len("123.4,123.4 ") + 3_000  # at most 2 points per bucket, plus axes and ticks
    for steps in (1_000, 100_000):
        page = curves_svg({"loss": _series(*((i, math.sin(i)) for i in range(steps)), budget=200)})
        assert len(page) < bound, (steps, len(page))
