"""Every name in the migration guide's "same as accelerate" row exists here and takes accelerate's parameters.

The row is parsed from the migration guide (docs/guides/migrating.md), so the documentation cannot claim a name
that is missing. With accelerate
installed (the test extra installs it), each callable's parameters are compared with accelerate's own: every
parameter accelerate's version takes must be accepted by ours, by name.
"""

from __future__ import annotations

import inspect
import re
from pathlib import Path
from typing import Any

import pytest


import notebook_accel
from notebook_accel import Accelerator
from tests.compat import accelerate_names
from tests.helpers import import_accelerate

# the API table moved from the README into the documentation site's migration guide
README = Path(__file__).resolve().parents[1] / "docs" / "guides" / "migrating.md"


def same_as_accelerate() -> list[str]:
    """The names in the row, without their argument lists."""
    row = next(line for line in README.read_text().splitlines() if line.startswith("| **same as accelerate** |"))
    names = [re.sub(r"\(.*", "", code).strip() for code in re.findall(r"`([^`]+)`", row)]
    return sorted({n for n in names if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n)})


def ours(name: str) -> Any:
    """Our object for ``name``: an Accelerator attribute, else a top-level export."""
    if hasattr(Accelerator, name):
        return getattr(Accelerator, name)
    if name in {"device", "process_index", "local_process_index", "num_processes", "is_main_process",
                "is_local_main_process", "distributed_type", "mixed_precision", "sync_gradients",
                "gradient_accumulation_steps", "state"}:
        return getattr(Accelerator(cpu=True), name)
    return getattr(notebook_accel, name)


def theirs(name: str) -> Any:
    accelerate = import_accelerate()
    if hasattr(accelerate.Accelerator, name):
        return getattr(accelerate.Accelerator, name)
    for module in (accelerate, accelerate.utils):
        if hasattr(module, name):
            return getattr(module, name)
    return None


def test_the_row_is_not_empty() -> None:
    assert len(same_as_accelerate()) > 60


@pytest.mark.parametrize("name", same_as_accelerate())
def test_name_exists(name: str) -> None:
    ours(name)


# accelerate parameters we do not take, each listed with its reason in the migration guide's "not provided" row
NOT_PROVIDED = {
    "Accelerator": {"deepspeed_plugins", "dynamo_backend", "dynamo_plugin", "fsdp_plugin",
                    "megatron_lm_plugin", "parallelism_config", "torch_tp_plugin"},
}


def test_every_exception_is_explained_in_the_readme() -> None:
    row = next(line for line in README.read_text().splitlines() if line.startswith("| **not provided, and why** |"))
    for names in NOT_PROVIDED.values():
        for name in names - {"fsdp_plugin"}:
            assert name in row, f"{name} is not provided but the migration guide does not say why"


def _parameters(obj: Any) -> tuple[set[str], bool]:
    """Parameter names (``self`` dropped) and whether ``**kwargs`` is taken."""
    target = obj.__init__ if inspect.isclass(obj) else obj
    params = inspect.signature(target).parameters.values()
    names = {p.name for p in params if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD) and p.name != "self"}
    return names, any(p.kind is p.VAR_KEYWORD for p in params)


def callables() -> list[str]:
    """The row's names that are not properties of our Accelerator (properties take no parameters to compare)."""
    return [n for n in same_as_accelerate() if not isinstance(inspect.getattr_static(Accelerator, n, None), property)]


@pytest.mark.parametrize("name", callables())
def test_accepts_accelerates_parameters(name: str) -> None:
    mine, other = ours(name), theirs(name)
    if other is None or not callable(other) or isinstance(other, property) or not callable(mine):
        pytest.skip(f"{name}: not a callable in both")
    try:
        their_names, _ = _parameters(other)
        my_names, my_kwargs = _parameters(mine)
    except (TypeError, ValueError):
        pytest.skip(f"{name}: no signature to compare")
    missing = sorted(their_names - my_names - NOT_PROVIDED.get(name, set()))
    assert my_kwargs or not missing, f"{name} does not take accelerate's parameters {missing}"


def test_every_public_accelerate_name_is_ours_or_explained() -> None:
    """Every public name of the pinned accelerate's top level, its ``accelerate.utils`` and its Accelerator (modules
    aside) exists here, or the migration guide's "not provided" row or its "accelerate.utils names not provided"
    section
    names it with the reason: a release that adds a name fails here, naming it, once constraints.txt takes it."""
    import_accelerate()
    missing = accelerate_names.report()["unexplained"]
    assert not missing, (f"accelerate names neither provided by notebook_accel nor explained in the migration "
                         f"guide's 'not "
                         f"provided' row or its '{accelerate_names.SECTION}' section: {missing}")


def test_the_name_report_catches_a_name_that_is_not_explained() -> None:
    readme = README.read_text()
    text = accelerate_names.explanations(readme)
    assert accelerate_names.explained("ParallelismConfig", text)
    assert accelerate_names.explained("merge_fsdp_weights", text)
    assert not accelerate_names.explained("merge_fsdp", text)  # whole words only
    cut = readme.replace("`merge_fsdp_weights` (`save_model` writes the full weights directly), ", "")
    assert cut != readme and not accelerate_names.explained("merge_fsdp_weights", accelerate_names.explanations(cut))


def test_the_listed_names_are_accelerates_and_not_ours() -> None:
    """A name the migration guide's section lists as not provided must be one of accelerate.utils' names (a release
    that
    drops it makes the line stale) and must not be one we provide (the line would mislead)."""
    accelerate = import_accelerate()
    import notebook_accel.utils

    names = accelerate_names.listed()
    assert len(names) > 100 and "merge_fsdp_weights" in names and "synchronize_rng_states" not in names
    assert len(names) == len(set(names)), f"listed twice: {sorted({n for n in names if names.count(n) > 1})}"
    theirs = set(accelerate_names.public_names(accelerate.utils))
    assert not [n for n in names if n not in theirs], "the migration guide lists names accelerate.utils does not have"
    assert not [n for n in names if hasattr(notebook_accel.utils, n)], "the migration guide lists names we provide"
