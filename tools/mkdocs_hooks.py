"""MkDocs hooks for the documentation site (mkdocs.yml names this file; ``python3 dev.py docs`` builds the site).

The API reference is generated here, at build time, from the package's public names, so it cannot go stale:

- :data:`REFERENCE` places every name of ``notebook_accel.__all__`` on one reference page (a new public name that
  has no place fails the build, and ``tests/docs/test_reference.py``), and renders whole public modules
  (``notebook_accel.utils``, ``notebook_accel.logging``, ...) by their ``__all__``;
- each name becomes a mkdocstrings ``:::`` block under the module that defines it (mkdocstrings reads the source
  statically; the lazy top-level package cannot be read that way);
- a public name, or a public method or property of a public class, without a docstring is a warning, which the
  strict build turns into a failure.

Docstrings use Sphinx roles (``:class:`~x.Y```); the rendered pages show them as code (:func:`on_page_content`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import logging
import re
from pathlib import Path
from typing import Any

import griffe
from mkdocs.config.defaults import MkDocsConfig
from mkdocs.structure.files import File, Files
from mkdocs.structure.pages import Page

LOG = logging.getLogger("mkdocs.hooks.reference")

# page -> (title, introduction, top-level names of notebook_accel, whole modules rendered by their __all__,
#          other objects by dotted path)
REFERENCE: dict[str, tuple[str, str, list[str], list[str], list[str]]] = {
    "reference/launching.md": (
        "Launching", "Starting the workers from a notebook or a script, and what a launch returns or raises.",
        ["notebook_launcher", "debug_launcher", "RayCluster", "SlurmCluster", "ray_leftovers", "release_ray_workers",
         "release_slurm_steps"], [],
        ["notebook_accel.launcher.supervision.background.BackgroundRun",
         "notebook_accel.launcher.supervision.failures.WorkerFailure"]),
    "reference/accelerator.md": (
        "Accelerator and state", "The training function's API, as in accelerate.",
        ["Accelerator", "AcceleratorState", "PartialState", "GradientState", "DistributedType"], [], []),
    "reference/configuration.md": (
        "Configuration and plugins",
        "The config file, and the objects that configure an `Accelerator` (as accelerate's).",
        ["Config", "load_config", "DataLoaderConfiguration", "ProjectConfiguration", "GradientAccumulationPlugin",
         "DistributedDataParallelKwargs", "DDPCommunicationHookType", "GradScalerKwargs", "InitProcessGroupKwargs",
         "AORecipeKwargs", "AutocastKwargs", "ProfileKwargs", "FullyShardedDataParallelPlugin", "DeepSpeedPlugin",
         "DummyOptim", "DummyScheduler"], [], []),
    "reference/data.md": (
        "Data", "Preparing DataLoaders outside an `Accelerator`, and the samplers they use.",
        ["prepare_data_loader", "DataLoaderDispatcher", "SeedableRandomSampler", "skip_first_batches"], [], []),
    "reference/training.md": (
        "Training helpers", "Progress, memory, seeds, local SGD and model loading.",
        ["progress", "held_memory", "HeldMemory", "find_executable_batch_size", "release_memory", "LocalSGD",
         "init_empty_weights", "init_on_device", "load_checkpoint_in_model", "set_seed", "synchronize_rng_states",
         "is_rich_available"], [], []),
    "reference/errors.md": (
        "Errors", "Every error class a user can meet; each derives from `NotebookAccelError`. The "
        "[Troubleshooting](../troubleshooting.md) page lists the messages with their fixes.",
        ["NotebookAccelError", "LaunchError", "CudaInitializedError", "WorkerError", "LaunchTimeoutError",
         "CheckpointError", "ConfigError"], [],
        ["notebook_accel.plugins.ConfigurationError",
         "notebook_accel.launcher.supervision.background.RunArgumentError",
         "notebook_accel.launcher.supervision.background.RunStoppedError",
         "notebook_accel.engines.deepspeed.jit_ops.StaleBuildLockError",
         "notebook_accel.launcher.rendezvous.keyed_store.StoreTampered",
         "notebook_accel.launcher.rendezvous.keyed_store.StoreSecretUnusable",
         "notebook_accel.state.ProcessGroupError", "notebook_accel.state.ProcessHelperError",
         "notebook_accel.data.sharding.DataPrepareError", "notebook_accel.tracking.base.TrackerError",
         "notebook_accel.tracking.base.TrackerUnavailableError", "notebook_accel.ops.CollectiveShapeError",
         "notebook_accel.checkpointing.errors.UnregistrableError",
         "notebook_accel.checkpointing.errors.ShardSizeError", "notebook_accel.cli.common.UsageError",
         "notebook_accel.local_sgd.LocalSGDError", "notebook_accel.logging.LoggingStateError"]),
    "reference/logging.md": (
        "Logging", "accelerate's multi-process logger, and this library's own logger level.",
        ["get_logger", "get_verbosity", "set_verbosity", "set_verbosity_debug", "set_verbosity_info",
         "set_verbosity_warning", "set_verbosity_error"], ["notebook_accel.logging"], []),
    "reference/utils.md": (
        "notebook_accel.utils", "accelerate.utils' names, as `from notebook_accel.utils import ...` gives them "
        "(the ones also in `notebook_accel` are on their own pages).", [], ["notebook_accel.utils"], []),
    "reference/widgets.md": (
        "Widgets and integrations", "The config picker, the dashboard, and the Hugging Face `Trainer` callback.",
        [], ["notebook_accel.widgets", "notebook_accel.integrations.transformers"], []),
    "reference/events.md": (
        "Events and sinks", "What a run reports, for a sink of your own.", [], ["notebook_accel.events"], []),
    "reference/test-utils.md": (
        "Test utilities", "accelerate's test helpers, for code that uses them.", [], ["notebook_accel.test_utils"],
        []),
}


def _dotted(module: str, name: str) -> tuple[str, Any]:
    """The path mkdocstrings reads ``module.name`` from (where it is defined), and the object."""
    obj = getattr(importlib.import_module(module), name)
    home = getattr(obj, "__module__", None)
    qualname = getattr(obj, "__qualname__", None)
    if isinstance(home, str) and isinstance(qualname, str) and "<" not in qualname and home.startswith(
            ("notebook_accel", "widgets")):
        # widgets/ is installed as notebook_accel.widgets (setup.py); mkdocstrings reads it as the folder it is
        home = home.replace("notebook_accel.widgets", "widgets", 1)
        return f"{home}.{qualname}", obj
    return f"{module}.{name}", obj


def _undocumented(path: str, obj: Any) -> list[str]:
    """``path`` and its public methods and properties (defined on the class itself) that have no docstring."""
    if not (inspect.isclass(obj) or inspect.isroutine(obj)):
        return []  # a constant or a type alias: documented by the comment or text around it
    missing = [] if inspect.getdoc(obj) else [path]
    if inspect.isclass(obj):
        for name, member in vars(obj).items():
            if name.startswith("_"):
                continue
            target = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
            if callable(target) and not (target.__doc__ or "").strip():
                missing.append(f"{path}.{name}")
    return missing


def reference_pages() -> dict[str, str]:
    """Every reference page's markdown, and a warning for each public name that is placed nowhere or undocumented.

    Returns:
        page path (under docs/) -> markdown.
    """
    import notebook_accel

    placed = {name for _, _, names, _, _ in REFERENCE.values() for name in names}
    for name in sorted(set(notebook_accel.__all__) - placed - {"__version__"}):
        LOG.warning("notebook_accel.%s is public but on no reference page: add it to REFERENCE in %s", name, __file__)
    top = set(notebook_accel.__all__)
    pages: dict[str, str] = {}
    rendered: dict[str, str] = {}  # path -> the page it is on (an object is rendered once: one anchor each)
    for page, (title, intro, names, modules, others) in REFERENCE.items():
        entries = [("notebook_accel", name) for name in names]
        for module in modules:
            public = getattr(importlib.import_module(module), "__all__", [])
            entries += [(module, name) for name in public if not (module == "notebook_accel.utils" and name in top)]
        entries += [tuple(path.rsplit(".", 1)) for path in others]  # type: ignore[misc]
        blocks = [f"# {title}\n\n{intro}\n"]
        elsewhere: list[str] = []
        here = page.removeprefix("reference/")
        for module, name in entries:
            path, obj = _dotted(module, name)
            if path not in rendered:
                rendered[path] = here
                for bare in _undocumented(path, obj):
                    LOG.warning("%s has no docstring (every public name is documented on %s)", bare, page)
                blocks.append(f"::: {path}\n")
            where, short = ("" if rendered[path] == here else rendered[path]), path.rsplit(".", 1)[-1]
            if short != name:  # an alias: accelerate's name for one of ours
                elsewhere.append(f"- `{name}`: the same object as [`{short}`]({where}#{path})")
            elif where:
                elsewhere.append(f"- `{name}`: on [{REFERENCE['reference/' + where][0]}]({where}#{path})")
        if elsewhere:
            blocks.append("## Other names\n\n" + "\n".join(elsewhere) + "\n")
        pages[page] = "\n".join(blocks)
    return pages


def _message(node: ast.expr) -> str | None:
    """The text of an error's message argument, with each ``{...}`` field as written; ``None`` when it is not a
    string literal (a message built elsewhere)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(part.value if isinstance(part, ast.Constant) else "{" + ast.unparse(part.value) + "}"
                       for part in node.values if isinstance(part, (ast.Constant, ast.FormattedValue)))
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _message(node.left), _message(node.right)
        return None if left is None or right is None else left + right
    return None


def error_messages(root: Path) -> list[tuple[str, str, str]]:
    """Every error the package raises with a literal message: (error class, message, ``module:line``), sorted."""
    found = set()
    for folder in ("notebook_accel", "widgets"):
        for path in sorted((root / folder).rglob("*.py")):
            if path.is_symlink() or any(p.is_symlink() for p in path.parents if root in p.parents):
                continue
            tree = ast.parse(path.read_text(), str(path))
            for node in ast.walk(tree):
                if not (isinstance(node, ast.Raise) and isinstance(node.exc, ast.Call) and node.exc.args):
                    continue
                func = node.exc.func
                name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
                text = _message(node.exc.args[0])
                module = path.relative_to(root).with_suffix("").as_posix().replace("/", ".")
                if name and text and len(text) > 20 and not text.startswith("unreachable") and not module.endswith(
                        "test_utils"):  # an internal guard, or accelerate's test helpers (tests' own failures)
                    found.add((name, " ".join(text.split()), f"{module}:{node.lineno}"))
    return sorted(found)


def error_messages_page(root: Path) -> str:
    """The page of every error message, by error class: searchable by the message's words."""
    rows: dict[str, list[str]] = {}
    for name, text, where in error_messages(root):
        shown = re.sub(r"([|\[\]*_\\])", r"\\\1", text).replace("<", "&lt;").replace("`", "'")
        rows.setdefault(name, []).append(f"| {shown} | `{where}` |")
    sections = [f"## {name}\n\n| message (`{{...}}`: filled in when raised) | raised in |\n| --- | --- |\n"
                + "\n".join(lines) + "\n" for name, lines in sorted(rows.items())]
    return ("# Every error message\n\nEach error this library raises with a fixed message, read from the source when "
            "the site is built (so the list cannot go stale), grouped by the error's class. A message says what went "
            "wrong, the bad value, what is allowed and the fix; search this page (or the site) for the words of the "
            "one you met. The common ones are explained at more length in [Troubleshooting](troubleshooting.md), and "
            "each class is described in the [reference](reference/errors.md).\n\n" + "\n".join(sections))


def on_files(files: Files, config: MkDocsConfig) -> Files:
    """Add the generated reference pages and the page of error messages."""
    for page, text in reference_pages().items():
        files.append(File.generated(config, page, content=text))
    root = Path(config.config_file_path).parent
    files.append(File.generated(config, "error-messages.md", content=error_messages_page(root)))
    return files


_ROLE = re.compile(r":(?:py:)?(?:class|func|meth|mod|attr|exc|data|obj):<code>~?([^<]*)</code>")


def _mend_toc(items: Any, ids: set[str]) -> None:
    """Point table-of-contents entries at the heading ids the page has.

    mkdocs-jupyter slugs a notebook heading's TOC entry without its code spans (``A hang, and `timeout=` `` ->
    ``a-hang-and``) and the heading itself with them (``a-hang-and-timeout``); the entry takes the one id whose
    words hold its own words in order.
    """
    for item in items:
        if item.id not in ids:
            longer = [i for i in ids if _holds(i.split("-"), item.id.split("-"))]
            if len(longer) == 1:
                item.id = longer[0]
        _mend_toc(item.children, ids)


def _holds(words: list[str], part: list[str]) -> bool:
    """Whether ``part`` is ``words`` less some of its words (same order, same first word)."""
    remaining = iter(words)
    return bool(words) and words[0] == part[0] and all(word in remaining for word in part)


def on_page_content(html: str, page: Page, config: MkDocsConfig, files: Files) -> str:
    """Show a docstring's Sphinx role (``:class:`~a.B```) as the code it names (``B``); mend the TOC's anchors."""
    if page is not None and page.toc is not None:
        _mend_toc(page.toc, set(re.findall(r'\bid="([^"]+)"', html)))
    return _ROLE.sub(lambda m: f"<code>{m.group(1).rsplit('.', 1)[-1] if m.group(0).find('~') >= 0 else m.group(1)}"
                               "</code>", html)


_EXAMPLE = re.compile(r"^(\s*)Example:$", re.MULTILINE)


class ExampleSections(griffe.Extension):
    """Read a docstring's ``Example:`` section (this package's spelling) as Google style's ``Examples:``, so its
    ``>>>`` lines render as code, not as Markdown (mkdocs.yml loads this class as a griffe extension)."""

    def on_instance(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        """Rename the section before the docstring is parsed."""
        if obj.docstring is not None:
            obj.docstring.value = _EXAMPLE.sub(r"\1Examples:", obj.docstring.value)
