"""accelerate's public names against ours: which of them notebook_accel lacks and the migration guide does not
explain.

A name counts as provided when ``notebook_accel`` (for ``accelerate.X``), ``notebook_accel.utils`` (for
``accelerate.utils.X``), ``notebook_accel.logging`` (for the functions ``accelerate.logging`` defines) or our
``Accelerator`` (for ``Accelerator.X``) has it, and as explained when the migration guide's
"not provided, and why" row or its "accelerate.utils names not provided" section names it (as a whole word).
``tests/test_accelerate_names.py`` fails on every name that is neither; ``tools/compat_latest.py`` runs
:func:`main` under a newer accelerate to list what that release added.

    .venv/bin/python -m tests.compat.accelerate_names      # JSON: the public names, and the unexplained ones
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from pathlib import Path
from types import ModuleType

# the API table of the migration guide (docs/guides/migrating.md; it was the README's)
README = Path(__file__).resolve().parents[2] / "docs" / "guides" / "migrating.md"
ROW = "| **not provided, and why** |"
SECTION = "### accelerate.utils names not provided"


def public_names(module: ModuleType) -> list[str]:
    """The names ``module`` exports that are not private and not modules (accelerate's submodules are laid out
    differently here; the migration guide says so)."""
    return sorted(n for n in dir(module) if not n.startswith("_") and not inspect.ismodule(getattr(module, n)))


def explanations(readme: str | None = None) -> str:
    """The migration guide's "not provided" row and its section of accelerate.utils names not provided, as one text.

    Raises:
        AssertionError: the migration guide lost the row or the section.
    """
    text = README.read_text() if readme is None else readme
    rows = [line for line in text.splitlines() if line.startswith(ROW)]
    assert len(rows) == 1, f"{README} must have exactly one line starting {ROW!r}"
    assert SECTION in text, f"{README} lost its section {SECTION!r}"
    section = text.split(SECTION, 1)[1]
    section = re.split(r"^#{1,3} ", section, maxsplit=1, flags=re.M)[0]
    return rows[0] + "\n" + section


def listed(readme: str | None = None) -> list[str]:
    """The names the section's bullets list as not provided: after each bullet's ``**group** (why):``, with the
    notes in parentheses left out (they name what to use instead)."""
    section = explanations(readme).split("\n", 1)[1]
    names: list[str] = []
    for bullet in re.split(r"^- ", section, flags=re.M)[1:]:
        body = bullet.split("): ", 1)[1] if "): " in bullet else bullet
        while re.search(r"\([^()]*\)", body):
            body = re.sub(r"\([^()]*\)", "", body)
        names += re.findall(r"`([A-Za-z_]\w*)`", body)
    return names


def explained(name: str, text: str) -> bool:
    """Whether ``text`` names ``name`` as a whole word."""
    return re.search(rf"(?<!\w){re.escape(name)}(?!\w)", text) is not None


def report() -> dict[str, object]:
    """accelerate's version, its public names by module, and those neither provided here nor explained."""
    import accelerate
    import accelerate.logging
    import accelerate.utils

    import notebook_accel
    import notebook_accel.logging
    import notebook_accel.utils
    from notebook_accel import Accelerator

    text = explanations()
    names = {"accelerate": public_names(accelerate), "accelerate.utils": public_names(accelerate.utils),
             "accelerate.logging": [n for n in public_names(accelerate.logging)
                                    if getattr(getattr(accelerate.logging, n), "__module__", "") == "accelerate.logging"],
             "Accelerator": [n for n in dir(accelerate.Accelerator) if not n.startswith("_")]}
    ours: dict[str, object] = {"accelerate": notebook_accel, "accelerate.utils": notebook_accel.utils,
                               "accelerate.logging": notebook_accel.logging, "Accelerator": Accelerator}
    missing = [f"{where}.{n}" for where, listed in names.items() for n in listed
               if not hasattr(ours[where], n) and not explained(n, text)]
    return {"version": accelerate.__version__, "names": names, "unexplained": missing}


def main() -> None:
    """Print :func:`report` as JSON."""
    json.dump(report(), sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
