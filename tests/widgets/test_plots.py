"""Tests for notebook_accel.widgets.plots: panels per group, plotted line data, constant cost inputs."""

from __future__ import annotations

from notebook_accel.widgets.plots import CurvePlot
from notebook_accel.widgets.series import Series


def _series(**points: list[tuple[float, float]]) -> dict[str, Series]:
    out = {}
    for name, pts in points.items():
        s = out[name.replace("__", "/")] = Series(budget=100)
        for x, y in pts:
            s.append(x, y)
    return out


def test_one_panel_per_group_and_the_line_data_is_the_series() -> None:
    series = _series(train__loss=[(0, 1.0), (1, 0.5)], eval__loss=[(1, 0.8)], lr=[(0, 0.1), (1, 0.05)])
    plot = CurvePlot()
    png = plot.render(series)
    assert png.startswith(b"\x89PNG")
    assert plot.figure is not None
    titles = [ax.get_title(loc="left") for ax in plot.figure.axes]
    assert titles == ["loss", "lr"]
    line = plot.lines["train/loss"]
    assert list(line.get_xdata()) == [0, 1] and list(line.get_ydata()) == [1.0, 0.5]
    assert line.axes is plot.lines["eval/loss"].axes
    assert [t.get_text() for t in line.axes.get_legend().get_texts()] == ["train", "eval"]


def test_the_figure_is_reused_until_a_metric_appears() -> None:
    series = _series(train__loss=[(0, 1.0)])
    plot = CurvePlot()
    plot.render(series)
    first = plot.figure
    series["train/loss"].append(1, 0.5)
    plot.render(series)
    assert plot.figure is first
    assert list(plot.lines["train/loss"].get_ydata()) == [1.0, 0.5]
    series["eval/acc"] = Series()
    series["eval/acc"].append(0, 0.9)
    plot.render(series)
    assert plot.figure is not first and len(plot.figure.axes) == 2


def test_long_series_are_drawn_with_a_bounded_number_of_points() -> None:
    s = Series(budget=100)
    for i in range(200_000):
        s.append(i, 5.0 if i == 123_456 else 0.0)
    plot = CurvePlot()
    plot.render({"train/loss": s})
    ydata = list(plot.lines["train/loss"].get_ydata())
    assert len(ydata) <= 204 and max(ydata) == 5.0


def test_empty_figure_has_a_placeholder() -> None:
    plot = CurvePlot()
    assert plot.render({}).startswith(b"\x89PNG")
    assert plot.figure is not None and "waiting" in plot.figure.texts[0].get_text()


def test_a_single_point_is_drawn_with_a_marker() -> None:
    plot = CurvePlot()
    series = _series(loss=[(3, 0.5)])
    plot.render(series)
    assert plot.lines["loss"].get_marker() == "o"
    series["loss"].append(4, 0.4)
    plot.render(series)
    assert plot.lines["loss"].get_marker() in ("", "None")


def test_the_legend_sits_above_the_plot_and_covers_no_point() -> None:
    from notebook_accel.widgets.plots import CurvePlot
    from notebook_accel.widgets.series import Series

    train, evaluation = Series(), Series()
    for step in range(20):
        train.append(step, 1.0 - step / 40)
        evaluation.append(step, 0.9 - step / 40)  # the last point high in the upper right corner
    plot = CurvePlot()
    plot.render({"train/loss": train, "eval/loss": evaluation})
    assert plot.canvas is not None
    renderer = plot.canvas.get_renderer()
    (ax,) = plot._axes.values()
    legend = ax.get_legend().get_window_extent(renderer)  # type: ignore[attr-defined]
    area = ax.get_window_extent(renderer)  # type: ignore[attr-defined]
    assert legend.y0 >= area.y1 - 1, (legend, area)
    assert legend.y1 <= plot.figure.bbox.y1 + 1  # still inside the image
