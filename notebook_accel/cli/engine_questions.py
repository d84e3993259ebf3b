"""``notebook-accel config``'s engine questions: DDP, FSDP or DeepSpeed, then the chosen engine's section.

The questions walk :data:`notebook_accel.config.engine_form.ENGINES` (the same descriptions the config picker
shows), and every answer is checked by the engine's settings table, so a wrong answer gets the file's own message
(allowed values, did-you-mean) and the question is asked again.
"""

from __future__ import annotations

from typing import Any

from notebook_accel.cli.questions import ask, ask_choice
from notebook_accel.config.choices import DistributedType
from notebook_accel.config.engine_form import ENGINES, EngineForm, FormField

__all__ = ["ask_engine"]

_DDP = "ddp"
_AUTO = "auto"


def _shown_default(f: FormField) -> str:
    """The default as the question shows it (``auto`` for an automatic choice, ``yes``/``no`` for a flag)."""
    if f.kind == "bool":
        return "yes" if f.default else "no"
    return _AUTO if f.default is None else str(f.default)


def _prompt(f: FormField) -> str:
    if f.kind == "choice":
        return f"{f.label} ({'/'.join(_AUTO if c is None else str(c) for c in f.choices)})"
    return f"{f.label} (yes/no)" if f.kind == "bool" else f.label


def _parser(form: EngineForm, f: FormField) -> Any:
    """The parse function for one field's answer: the table's check, in the form's spelling."""

    def parse(text: str) -> Any:
        if f.kind == "choice" and text.lower() == _AUTO and None in f.choices:
            return None
        if f.kind == "text" and not text:
            return ""
        value: Any = text
        if f.kind in ("int", "float"):
            try:
                value = int(text) if f.kind == "int" else float(text)
            except ValueError:
                raise ValueError(f"{text!r} is not a number") from None
        problem = form.answer_problem(f.key, value)
        if problem is not None:
            raise ValueError(problem)
        return form.canonical(f, value)

    return parse


def ask_section(form: EngineForm) -> dict[str, Any]:
    """Ask every field of ``form`` that applies (given the answers so far); the section to write."""
    values: dict[str, Any] = {}
    for f in form.fields:
        if f.shown(values):
            values[f.key] = ask(_prompt(f), _shown_default(f), _parser(form, f))
    return form.section_values(values)


def ask_engine() -> tuple[DistributedType | None, dict[str, Any]]:
    """Ask which engine to run and its settings: ``(distributed_type or None for DDP, extra sections)``.

    Raises:
        UsageError: stdin ended early or an answer stayed wrong.
    """
    names = {form.title.lower(): name for name, form in ENGINES.items()}
    chosen = ask_choice("Engine: DDP copies the model to every process; FSDP and DeepSpeed shard it",
                        [_DDP, *names], _DDP)
    if chosen == _DDP:
        return None, {}
    form = ENGINES[names[chosen]]
    print(f"{form.title} settings ({form.section}); mixed precision is the answer above.")
    return form.distributed_type, {form.section: ask_section(form)}
