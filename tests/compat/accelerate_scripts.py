"""accelerate's own distributed test scripts, run call by call under accelerate or under notebook_accel.

The scripts are read from the installed accelerate package (``accelerate/test_utils/scripts``) and never copied
into this repository. For notebook_accel only their import lines are rewritten (:func:`rewrite`), into a
temporary folder; the rest of each script is run as shipped. ``script_driver.py`` runs a script's ``main()`` and
records every check it calls, on each rank (see its docstring).

Measure both libraries by hand (prints one line per call and the counts)::

    .venv/bin/python -m tests.compat.accelerate_scripts            # both
    .venv/bin/python -m tests.compat.accelerate_scripts accelerate  # the baseline only
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Library = Literal["accelerate", "notebook_accel"]

DRIVER = Path(__file__).with_name("script_driver.py")
WORLD_SIZE = 2


# Calls that hang under accelerate on a CPU machine, so the baseline run skips them (they count as failing there):
# - test_can_join_uneven_inputs: accelerate's join_uneven_inputs is a no-op outside multi-GPU, so DDP's backward
#   on the rank with more batches waits forever for the other rank.
# - test_fault_tolerant: after the first failure torch elastic sends SIGTERM to the other worker and the launch
#   never comes back (2 of 2 runs here, stopped after 90 s; notebook_accel's restarts pass it).
ACCELERATE_HANGS = ("test_can_join_uneven_inputs", "test_fault_tolerant")


@dataclass(frozen=True)
class Script:
    """One of accelerate's scripts: its path under ``test_utils/scripts`` and how it is started."""

    path: str
    launched: bool = True  # False: one plain process (test_notebook starts its own workers)
    timeout_s: float = 150.0


SCRIPTS: tuple[Script, ...] = (
    Script("test_script.py"),
    Script("test_sync.py"),
    Script("test_ops.py"),
    Script("test_distributed_data_loop.py"),
    Script("test_notebook.py", launched=False),
    Script("test_cli.py"),
    Script("external_deps/test_metrics.py"),
)

# ``from accelerate.utils.operations import x`` -> ``from notebook_accel.utils import x``: the migration guide's rule
# ("import the names from notebook_accel or notebook_accel.utils"), applied to the module path only.
_IMPORT = re.compile(r"^(?P<indent>[ \t]*)(?P<kw>from|import)[ \t]+accelerate(?P<sub>(?:\.\w+)*)(?=[ \t]|$)", re.M)


def _target(sub: str) -> str:
    """Our module for accelerate's ``accelerate<sub>``."""
    for package in (".utils", ".test_utils"):
        if sub == package or sub.startswith(package + "."):
            return "notebook_accel" + package
    return "notebook_accel"


def rewrite(source: str) -> str:
    """``source`` with every ``from accelerate... import`` / ``import accelerate`` line pointed at notebook_accel.

    Only the module path of an import statement changes; ``import accelerate`` becomes
    ``import notebook_accel as accelerate`` so the names the script uses stay the same, and
    ``import accelerate.utils`` becomes ``import notebook_accel.utils`` (with ``notebook_accel`` bound as
    ``accelerate``).

    Example:
        >>> rewrite("from accelerate.utils.operations import gather")
        'from notebook_accel.utils import gather'
    """

    def replace(m: re.Match[str]) -> str:
        if m["kw"] == "import":
            extra = f"; import {_target(m['sub'])}" if m["sub"] else ""
            return f"{m['indent']}import notebook_accel as accelerate{extra}"
        return f"{m['indent']}from {_target(m['sub'])}"

    return _IMPORT.sub(replace, source)


def scripts_dir() -> Path | None:
    """accelerate's ``test_utils/scripts`` folder, or None when accelerate is not installed."""
    spec = importlib.util.find_spec("accelerate")
    if spec is None or spec.origin is None:
        return None
    return Path(spec.origin).parent / "test_utils" / "scripts"


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _command(script: Script, path: Path, results: Path, library: Library) -> list[str]:
    """The command that starts ``path`` with the driver, the way the library's users launch it."""
    driver = [str(DRIVER), str(path), str(results)]
    if not script.launched:
        return [sys.executable, *driver]
    return launch_command(library, driver)


def launch_command(library: Library, driver: list[str]) -> list[str]:
    """``driver`` (a script and its arguments) started on :data:`WORLD_SIZE` processes on a free port: by torchrun
    for accelerate (how its users launch), by ``notebook-accel launch`` for notebook_accel."""
    port = str(_free_port())
    if library == "accelerate":
        return [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD_SIZE}",
                f"--master_port={port}", *driver]
    return [sys.executable, "-m", "notebook_accel.cli", "launch", "--num_processes", str(WORLD_SIZE),
            "--main_process_port", port, *driver]


def _environment(library: Library, workdir: Path) -> dict[str, str]:
    """The scripts' environment: CPU only, 2 processes, a scratch HOME for anything they write."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ACCELERATE_", "NOTEBOOK_ACCEL_"))}
    env.update(CUDA_VISIBLE_DEVICES="", ACCELERATE_NUM_PROCESSES=str(WORLD_SIZE), OMP_NUM_THREADS="1",
               PYTHONPATH=os.pathsep.join(filter(None, [str(Path(__file__).resolve().parents[2]),
                                                        env.get("PYTHONPATH")])),
               NOTEBOOK_ACCEL_LOG_DIR=str(workdir / "runs"), HF_HOME=str(workdir / "hf"))
    if library == "accelerate":
        env["ACCELERATE_USE_CPU"] = "true"  # else accelerate gives N independent runs on a CPU machine
        env["SCRIPT_DRIVER_SKIP"] = ",".join(ACCELERATE_HANGS)
    return env


def merge(results: Path, ranks: int) -> dict[str, str]:
    """Every recorded call -> ``ok`` when it passed on all ``ranks``, else the first rank's failure."""
    per_rank: list[dict[str, str]] = []
    order: list[str] = []
    for rank in range(ranks):
        path = results / f"rank{rank}.jsonl"
        lines = path.read_text().splitlines() if path.exists() else []
        outcomes: dict[str, str] = {}
        for line in lines:
            entry = json.loads(line)
            outcomes[entry["call"]] = entry["outcome"] + (f" ({entry['where']})" if entry["where"] else "")
            if entry["call"] not in order:
                order.append(entry["call"])
        per_rank.append(outcomes)
    merged: dict[str, str] = {}
    for call in order:
        bad = [(r, o.get(call, "not reached")) for r, o in enumerate(per_rank) if o.get(call) != "ok"]
        merged[call] = "ok" if not bad else f"rank {bad[0][0]}: {bad[0][1]}"
    return merged


def run_script(script: Script, library: Library, workdir: Path) -> tuple[dict[str, str], str]:
    """Run one script under ``library``; returns call -> outcome and the processes' output (for failures)."""
    source = scripts_dir()
    if source is None:
        raise RuntimeError("accelerate is not installed: its test scripts cannot be read")
    name = script.path.replace("/", "__").removesuffix(".py")
    results = workdir / f"{name}-{library}"
    results.mkdir(parents=True)
    path = source / script.path
    if library == "notebook_accel":
        path = workdir / "scripts" / Path(script.path).name
        path.parent.mkdir(exist_ok=True)
        path.write_text(rewrite((source / script.path).read_text()))
    command = _command(script, path, results, library)
    try:
        done = subprocess.run(command, env=_environment(library, workdir), cwd=workdir, capture_output=True,
                              text=True, timeout=script.timeout_s, stdin=subprocess.DEVNULL)
        output = done.stdout + done.stderr
    except subprocess.TimeoutExpired as exc:
        output = f"timed out after {script.timeout_s:.0f} s\n" + str(exc.stdout or "") + str(exc.stderr or "")
    outcomes = merge(results, WORLD_SIZE if script.launched else 1)
    if "main" not in outcomes:
        outcomes["main"] = "not finished: " + (output.strip().splitlines() or ["no output"])[-1][:200]
    return outcomes, output


def main(argv: list[str]) -> None:
    """Print every call's outcome under the chosen libraries, then the counts; ``--json PATH`` also writes them
    (``{"accelerate": {call: outcome}, ...}``, ``tools/compat_latest.py`` reads it)."""
    json_path: Path | None = None
    if "--json" in argv:
        at = argv.index("--json")
        json_path, argv = Path(argv[at + 1]), argv[:at] + argv[at + 2:]
    libraries: list[Library] = [a for a in argv if a in ("accelerate", "notebook_accel")] or [  # type: ignore[misc]
        "accelerate", "notebook_accel"]
    wanted = [a for a in argv if a not in libraries]
    table: dict[Library, dict[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="accelerate-scripts-") as tmp:
        for library in libraries:
            table[library] = {}
            for script in SCRIPTS:
                if wanted and not any(w in script.path for w in wanted):
                    continue
                outcomes, _ = run_script(script, library, Path(tmp))
                table[library].update({f"{script.path}::{call}": o for call, o in outcomes.items()})
    if json_path is not None:
        json_path.write_text(json.dumps(table, indent=1))
    for library, outcomes in table.items():
        print(f"\n== {library}")
        for call, outcome in outcomes.items():
            print(f"{'PASS' if outcome == 'ok' else 'FAIL'} {call}" + ("" if outcome == "ok" else f"  -- {outcome}"))
    for library, outcomes in table.items():
        print(f"{library}: {sum(o == 'ok' for o in outcomes.values())} of {len(outcomes)} calls pass")
    if len(table) == 2:
        base, ours = table["accelerate"], table["notebook_accel"]
        both = [c for c, o in base.items() if o == "ok" and ours.get(c) == "ok"]
        print(f"passing under accelerate: {sum(o == 'ok' for o in base.values())}; of those, under notebook_accel: "
              f"{len(both)}")


if __name__ == "__main__":
    main(sys.argv[1:])
