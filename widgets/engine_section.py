"""One engine's settings in the config picker, built from its :class:`~notebook_accel.config.engine_form.EngineForm`.

Every field of the form becomes one control (a dropdown for a choice, a checkbox for a flag, a number or text box);
fields that do not apply (the layer classes under size-based wrapping, the ZeRO settings beside a DeepSpeed JSON)
are hidden and left out of the section. Nothing here knows FSDP or DeepSpeed by name: the form describes them.

A choice whose value is ``None`` ("automatic": the key is left out of the file) is offered as :data:`AUTOMATIC`,
because an ipywidgets dropdown takes ``None`` as "nothing selected" and shows a blank box;
:meth:`EngineSection.values` turns it back into ``None``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import ipywidgets as w

from notebook_accel.config.engine_form import EngineForm, FormField
from notebook_accel.widgets.form_layout import STYLE, labelled, split_label

__all__ = ["EngineSection", "AUTOMATIC"]

AUTOMATIC = "automatic"  # the dropdown value standing for a choice of None


def _shown(value: Any) -> Any:
    """A field's value as its control holds it."""
    return AUTOMATIC if value is None else value


def _control(f: FormField) -> w.ValueWidget:
    """The control for one field, showing its default, described by the field's short name."""
    name, _ = split_label(f.label)
    if f.kind == "choice":
        options = [(AUTOMATIC if c is None else str(c), _shown(c)) for c in f.choices]
        return w.Dropdown(options=options, value=_shown(f.default), description=name, style=STYLE)
    if f.kind == "bool":
        return w.Checkbox(value=bool(f.default), description=name, style=STYLE, indent=True)
    if f.kind == "int":
        return w.IntText(value=f.default, description=name, style=STYLE)
    if f.kind == "float":
        return w.FloatText(value=f.default, description=name, style=STYLE)
    return w.Text(value=str(f.default or ""), description=name, style=STYLE)


class EngineSection(w.VBox):
    """The controls of one engine's section (``fsdp_config``, ``deepspeed_config``).

    Args:
        form: the engine's form description.

    Attributes:
        form: that description; controls: file key -> its control (public so code and tests can set them).
    """

    def __init__(self, form: EngineForm) -> None:
        self.form = form
        self.controls: dict[str, w.ValueWidget] = {f.key: _control(f) for f in form.fields}
        self._rows = {f.key: labelled(self.controls[f.key], split_label(f.label)[1]) for f in form.fields}
        title = w.HTML(f"<b>{form.title}</b> settings (<code>{form.section}</code>)")
        super().__init__(children=[title, *self._rows.values()])
        for control in self.controls.values():
            control.observe(lambda _: self.refresh(), names="value")

    def values(self) -> dict[str, Any]:
        """Every control's value, by file key (``None`` for an automatic choice)."""
        return {key: None if c.value == AUTOMATIC and isinstance(c, w.Dropdown) else c.value
                for key, c in self.controls.items()}

    def set_values(self, section: dict[str, Any] | None) -> list[str]:
        """Show a loaded section; returns a note for each value the form cannot show (the default is used)."""
        notes = []
        start = self.form.defaults(section)
        for f in self.form.fields:
            value = start[f.key]
            control = self.controls[f.key]
            if f.kind == "choice" and value not in f.choices:
                notes.append(f"{self.form.section}.{f.key}: {value!r} is not one of {list(f.choices)}: using "
                             f"{f.default!r}")
                value = f.default
            control.value = _shown(value) if f.kind == "choice" else value
        self.refresh()
        return notes

    def section(self, base: dict[str, Any] | None) -> dict[str, Any]:
        """The section to write, keeping ``base``'s keys the form does not show."""
        return self.form.section_values(self.values(), base)

    def refresh(self) -> None:
        """Hide the controls whose field does not apply to the current values."""
        values = self.values()
        for f in self.form.fields:
            display = None if f.shown(values) else "none"
            self.controls[f.key].layout.display = display
            self._rows[f.key].layout.display = display

    def on_change(self, callback: Callable[[Any], None]) -> None:
        """Call ``callback`` whenever a control changes."""
        for control in self.controls.values():
            control.observe(callback, names="value")
