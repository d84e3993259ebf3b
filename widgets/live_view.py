"""The widgets of a live dashboard: a handful of HTML widgets, made once and then only given new values.

Every widget is a model the front end opens with a message, a layout and a style are models of their own, so the
view is kept small: three HTML widgets sharing one layout and one style (the top: header, ranks, progress rows,
error; the curves with the table of values; the output pane), the "main process | all ranks" tabs when there
are several ranks, and a stop button for a background run. What they show is built elsewhere
(:mod:`notebook_accel.widgets.views`); :class:`~notebook_accel.widgets.dashboard.Dashboard` decides when.
"""

from __future__ import annotations

from collections.abc import Callable

import ipywidgets as w
from ipywidgets.widgets.widget_string import HTMLStyle

__all__ = ["LiveView"]


class LiveView:
    """The live view's widgets, made with their first values (no update message right after).

    Args:
        top: the HTML of the top part.
        body: the HTML of the curves and the table.
        log_main: the HTML of the main process's output pane.
        log_all: the HTML of every rank's pane (``None``: one pane, no tabs).
        all_ranks_first: open the tabs on "all ranks".

    Example:
        >>> view = LiveView("<b>top</b>", "", "no output yet", None)
        >>> view.set(view.top, "<b>top</b>")  # unchanged: nothing sent
        False
        >>> view.close()
    """

    def __init__(self, top: str, body: str, log_main: str, log_all: str | None, all_ranks_first: bool = False) -> None:
        layout, style = w.Layout(), HTMLStyle()  # never changed, so sharing them hides nothing by accident
        self.top = w.HTML(top, layout=layout, style=style)
        self.body = w.HTML(body, layout=layout, style=style)
        self.log_main = w.HTML(log_main, layout=layout, style=style)
        self.log_all: w.HTML | None = None
        self.logs: w.Tab | None = None
        self.stop_button: w.Button | None = None
        pane: w.Widget = self.log_main
        if log_all is not None:
            self.log_all = w.HTML(log_all, layout=layout, style=style)
            pane = self.logs = w.Tab(children=[self.log_main, self.log_all], titles=("main process", "all ranks"),
                                     selected_index=1 if all_ranks_first else 0)
        else:
            self.log_main.layout = w.Layout()  # its own: hidden while there is no output (show_output)
        pane.add_class("nacc-logs")
        self.pane = pane
        self.root = w.VBox([self.top, self.body, pane], _dom_classes=("nacc-dashboard",))

    def show_output(self, shown: bool) -> None:
        """Show the output pane (its tabs too), or hide it while there is no output (the body then says so in one
        line: an empty pane's frame would be room kept for nothing)."""
        display = None if shown else "none"
        if self.pane.layout.display != display:
            self.pane.layout.display = display

    @staticmethod
    def set(widget: w.HTML | None, value: str) -> bool:
        """Give ``widget`` the HTML ``value`` when it changed (an unchanged value sends nothing); whether it did."""
        if widget is None or widget.value == value:
            return False
        widget.value = value
        return True

    def add_stop_button(self, stop: Callable[[], None]) -> None:
        """A "Stop run" button beside the top part (its own column: it never moves as the clock text widens),
        calling ``stop`` once when pressed."""
        if self.stop_button is not None:
            return
        button = w.Button(description="Stop run", button_style="danger", icon="stop",
                          tooltip="Stop this background run (as run.stop())",
                          layout=w.Layout(flex="0 0 auto", align_self="flex-start"), _dom_classes=("nacc-stop",))

        def pressed(_: w.Button) -> None:
            button.disabled = True
            button.description = "Stopping..."
            stop()

        button.on_click(pressed)
        self.stop_button = button
        self.top.layout = w.Layout(flex="1 1 auto")
        self.root.children = (w.HBox([self.top, button]), *self.root.children[1:])

    def models(self) -> list[w.Widget]:
        """Every model of the view: the widgets, their layouts and styles (each once)."""
        seen: dict[int, w.Widget] = {}
        for widget in [self.root, *_descendants(self.root)]:
            for model in (widget, getattr(widget, "layout", None), getattr(widget, "style", None)):
                if isinstance(model, w.Widget):
                    seen.setdefault(id(model), model)
        return list(seen.values())

    def close(self) -> None:
        """Close every model (they leave the front end; nothing is left to save)."""
        for model in self.models():
            model.close()


def _descendants(box: w.Widget) -> list[w.Widget]:
    """The widgets inside ``box``, depth first."""
    out: list[w.Widget] = []
    for child in getattr(box, "children", ()):
        out += [child, *_descendants(child)]
    return out
