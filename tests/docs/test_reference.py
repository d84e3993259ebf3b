"""The reference pages' generator (tools/mkdocs_hooks.py) places every public name and flags undocumented ones.

Its warnings fail the strict build (tests/docs/test_site.py); here each kind of warning is provoked on purpose.
"""

from __future__ import annotations

import importlib.util
import logging
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.docs.site import MISSING, ROOT, SKIP_REASON

pytestmark = pytest.mark.skipif(bool(MISSING), reason=SKIP_REASON)


@pytest.fixture(scope="module")
def hooks() -> ModuleType:
    """tools/mkdocs_hooks.py, imported as mkdocs imports it."""
    spec = importlib.util.spec_from_file_location("mkdocs_hooks_under_test", ROOT / "tools" / "mkdocs_hooks.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_every_public_name_has_a_page_and_a_docstring(hooks: ModuleType, caplog: pytest.LogCaptureFixture) -> None:
    import notebook_accel

    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.reference"):
        pages = hooks.reference_pages()
    assert not caplog.records, [r.getMessage() for r in caplog.records]
    text = "\n".join(pages.values())
    for name in set(notebook_accel.__all__) - {"__version__"}:
        assert f".{name}\n" in text or f"`{name}`: the same object as" in text, name


def test_a_public_name_without_a_page_is_a_warning(hooks: ModuleType, caplog: pytest.LogCaptureFixture,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import notebook_accel

    monkeypatch.setattr(notebook_accel, "__all__", [*notebook_accel.__all__, "brand_new_name"])
    with caplog.at_level(logging.WARNING, logger="mkdocs.hooks.reference"):
        hooks.reference_pages()
    assert any("notebook_accel.brand_new_name is public but on no reference page" in r.getMessage()
               for r in caplog.records)


def test_a_missing_docstring_is_found_on_the_object_and_its_public_methods(hooks: ModuleType) -> None:
    class Documented:
        """Has a docstring."""

        def fine(self) -> None:
            """Documented."""

        def bare(self) -> None:
            pass

        @property
        def bare_property(self) -> int:
            return 1

        def _private(self) -> None:
            pass

    def undocumented() -> None:
        pass

    assert hooks._undocumented("m.Documented", Documented) == ["m.Documented.bare", "m.Documented.bare_property"]
    assert hooks._undocumented("m.undocumented", undocumented) == ["m.undocumented"]
    assert hooks._undocumented("m.CONSTANT", 3) == []


def test_sphinx_roles_in_docstrings_render_as_code(hooks: ModuleType) -> None:
    html = 'see :class:<code>~notebook_accel.state.ProcessState</code> and :func:<code>load_config</code>'
    assert hooks.on_page_content(html, None, None, None) == "see <code>ProcessState</code> and <code>load_config</code>"


def test_example_sections_are_read_as_examples(hooks: ModuleType) -> None:
    import griffe

    obj = griffe.Function("f", docstring=griffe.Docstring("Do it.\n\nExample:\n    >>> 1 + 1\n    2\n"))
    hooks.ExampleSections().on_instance(obj=obj)
    assert obj.docstring is not None
    sections = obj.docstring.parse("google")
    assert [s.kind.value for s in sections] == ["text", "examples"]


def test_a_notebooks_toc_entry_is_pointed_at_its_heading(hooks: ModuleType) -> None:
    from mkdocs.structure.toc import AnchorLink

    entries = [AnchorLink("A hang, and timeout=", "a-hang-and", 2),
               AnchorLink("Choosing GPUs", "choosing-gpus-before-anything-touches-cuda", 2),
               AnchorLink("Fine", "fine", 2)]
    hooks._mend_toc(entries, {"a-hang-and-timeout", "choosing-gpus-cuda_visible_devices-before-anything-touches-cuda",
                              "fine", "fine-print"})
    assert [e.id for e in entries] == ["a-hang-and-timeout",
                                       "choosing-gpus-cuda_visible_devices-before-anything-touches-cuda", "fine"]


def test_the_error_messages_page_lists_the_messages_from_the_source(hooks: ModuleType) -> None:
    messages = hooks.error_messages(ROOT)
    classes = {name for name, _, _ in messages}
    assert {"LaunchError", "CudaInitializedError", "CheckpointError", "ConfigurationError"} <= classes
    cuda = [text for name, text, _ in messages if name == "CudaInitializedError"]
    assert cuda and cuda[0].startswith("CUDA is already initialised in this process")
    assert any("{" in text for _, text, _ in messages)  # f-strings keep their fields, as written
    assert all(not where.startswith("widgets.") or ".widgets." not in where for _, _, where in messages)
    page = hooks.error_messages_page(ROOT)
    assert "## CudaInitializedError" in page and "| CUDA is already initialised in this process" in page
