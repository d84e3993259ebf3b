"""notebook_accel.widgets.live_curves: redraws only where the picture changes, at a pace that follows it."""

from __future__ import annotations

from notebook_accel.widgets import svg as svg_module
from notebook_accel.widgets.live_curves import LiveCurves
from notebook_accel.widgets.series import Series


def test_an_unchanged_picture_is_not_counted_and_the_wait_doubles_up_to_the_longest() -> None:
    curves = LiveCurves(interval=0.5, share=1.0, longest=2.0)
    s = Series()
    s.append(0, 1.0)
    assert curves.draw({"loss": s}, 0.0) and curves.redraws == 1
    waits = []
    now = 0.0
    for _ in range(4):
        assert not curves.draw({"loss": s}, now)  # nothing new: the same picture
        nxt = next(t / 100 for t in range(int(now * 100), 10_000) if curves.due(t / 100))
        waits.append(round(nxt - now, 2))
        now = nxt
    assert waits == [1.0, 2.0, 2.0, 2.0] and curves.redraws == 1 and curves.unchanged == 4
    s.append(1, 0.5)
    assert curves.draw({"loss": s}, now) and not curves.due(now + 0.4) and curves.due(now + 0.5)  # back to the pace


def test_a_panel_whose_series_took_no_value_is_reused(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    built: list[str] = []
    panel = svg_module._panel

    def counting(title: str, lines: list[tuple[str, str, list[float], list[float]]]) -> str:
        built.append(title)
        return panel(title, lines)

    monkeypatch.setattr(svg_module, "_panel", counting)
    curves = LiveCurves(interval=0.0, share=1.0)
    loss, lr = Series(), Series()
    loss.append(0, 1.0)
    lr.append(0, 0.1)
    curves.draw({"train/loss": loss, "lr": lr}, 0.0)
    loss.append(1, 0.5)
    curves.draw({"train/loss": loss, "lr": lr}, 1.0)
    assert built == ["loss", "lr", "loss"]  # lr took no value: its panel was not rebuilt
    assert 'data-last-step="1"' in curves.svg
