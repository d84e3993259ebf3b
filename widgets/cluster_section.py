"""The config picker's "Where it runs" section: this machine, or one of the placements of
:mod:`notebook_accel.cluster` (the config's ``cluster:`` section).

Each placement brings its own controls (its spec's ``picker_path``: :mod:`.ray_section` for Ray), shown when it is
chosen; on a cluster the form's process count means workers on the cluster.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import ipywidgets as w

from notebook_accel.cluster import spec_of, specs
from notebook_accel.widgets.form_layout import STYLE, labelled

__all__ = ["ClusterSection", "HERE"]

HERE = "This machine"


class ClusterSection(w.VBox):
    """Where the workers run, as controls; :meth:`section` gives the config's ``cluster:`` value (``None`` here).

    Attributes:
        where: this machine or a placement's title; sections: each placement's controls by its name.
    """

    def __init__(self) -> None:
        self._specs = {spec.title: spec for spec in specs()}
        self.where = w.ToggleButtons(options=[HERE, *self._specs], value=HERE, description="Where it runs",
                                     style=STYLE)
        self.sections: dict[str, Any] = {spec.name: spec.picker() for spec in self._specs.values()}
        hints = "; ".join(section.hint for section in self.sections.values())
        super().__init__([labelled(self.where, hints), *self.sections.values()])
        self.where.observe(lambda _: self._refresh(), names="value")
        self._refresh()

    @property
    def on_cluster(self) -> bool:
        """Whether the workers run on a cluster."""
        return bool(self.where.value != HERE)

    @property
    def chosen(self) -> Any:
        """The chosen placement's controls (``None``: this machine)."""
        spec = self._specs.get(self.where.value)
        return None if spec is None else self.sections[spec.name]

    @property
    def uses_gpu(self) -> bool:
        """Whether the chosen cluster's workers drive GPUs."""
        return self.chosen is not None and bool(self.chosen.uses_gpu)

    def on_change(self, callback: Callable[[dict[str, Any]], None]) -> None:
        """Call ``callback`` whenever a control changes."""
        self.where.observe(callback, names="value")
        for section in self.sections.values():
            for control in section.controls:
                control.observe(callback, names="value")

    def set_values(self, cluster: Any, kept: Mapping[str, Any] | None = None) -> None:
        """Show ``cluster`` (``None``: this machine)."""
        if cluster is None:
            self.where.value = HERE
        else:
            spec = spec_of(cluster)
            self.sections[spec.name].set_values(cluster)
            self.where.value = spec.title
        self._refresh()

    def section(self, kept: Mapping[str, Any] | None) -> dict[str, Any] | None:
        """The ``cluster:`` section the controls describe (keys the form does not show are kept from ``kept`` when
        it is of the chosen kind). A value the cluster cannot take is the Config's to report."""
        spec = self._specs.get(self.where.value)
        if spec is None:
            return None
        same = kept is not None and kept.get("kind", specs()[0].name) == spec.name
        return dict(self.sections[spec.name].section(kept if same else None))

    def _refresh(self) -> None:
        chosen = self.chosen
        for section in self.sections.values():
            section.layout.display = None if section is chosen else "none"
