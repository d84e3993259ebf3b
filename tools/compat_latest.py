"""Measure a newer accelerate before bumping its pin: ``python3 dev.py compat-latest [--version V] [--base V]``.

constraints.txt pins the accelerate that ``tests/compat`` and the name report were measured under, so a release
on the index changes nothing until someone bumps the pin. This command shows what the bump would change:

1. it installs the newest accelerate (or ``--version V``) into a scratch environment under
   ``build/compat/accelerate-V/`` that sees everything else of ``.venv`` (a ``.pth`` file; torch and the other pins
   held by constraints.txt, so only accelerate and what it newly needs are added);
2. it runs accelerate's own distributed test scripts of both versions (``tests.compat.accelerate_scripts``): the
   pinned one under accelerate, the new one under accelerate and, with only the imports changed, under
   notebook_accel;
3. it compares the public names of both versions (``tests.compat.accelerate_names``);

then prints every call whose outcome differs, every call that passes under the new accelerate and fails here, the
names the new version added or removed, and the names neither provided nor explained in the migration guide
(docs/guides/migrating.md).

Nothing in the repository changes; docs/development.md's "Bumping accelerate" says what to do with the table.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CONSTRAINTS = ROOT / "constraints.txt"
SCRATCH = ROOT / "build" / "compat"


def pinned_version(constraints: Path = CONSTRAINTS) -> str:
    """The accelerate version constraints.txt pins (``accelerate==X``).

    Raises:
        SystemExit: no such line (the message says what to add).
    """
    found = re.search(r"^accelerate==([^\s#]+)", constraints.read_text(), flags=re.M)
    if found is None:
        raise SystemExit(f"{constraints} pins no accelerate: add a line 'accelerate==<version>' (the version "
                         "tests/compat was measured under)")
    return found.group(1)


def newest_version(python: Path) -> str:
    """The newest accelerate release the package index offers (``pip index versions``)."""
    done = subprocess.run([str(python), "-m", "pip", "index", "versions", "accelerate", "--disable-pip-version-check"],
                          capture_output=True, text=True)
    found = re.search(r"^accelerate \(([^)]+)\)", done.stdout, flags=re.M)
    if done.returncode != 0 or found is None:
        raise SystemExit("could not ask the package index for accelerate's versions (pip index versions accelerate):\n"
                         + done.stdout + done.stderr + "\ngive the version yourself: --version <version>")
    return found.group(1)


def site_packages(python: Path) -> str:
    """The site-packages folder of ``python``'s environment."""
    return subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()


def scratch_environment(version: str, base_python: Path) -> Path:
    """A virtual environment with accelerate ``version`` that sees ``base_python``'s packages behind its own; made
    once per version. Returns its python."""
    folder = SCRATCH / f"accelerate-{version}"
    python = folder / "bin" / "python"
    stamp = folder / ".installed"
    if stamp.exists():
        return python
    print(f"[compat] making {folder.relative_to(ROOT)} with accelerate {version}", flush=True)
    venv.EnvBuilder(with_pip=False, clear=True).create(folder)
    # addsitedir also reads the base's own .pth files (the editable install of this package among them)
    Path(site_packages(python), "_base_venv.pth").write_text(
        f"import site; site.addsitedir({site_packages(base_python)!r})\n")
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as pins:
        pins.write("".join(line for line in CONSTRAINTS.read_text().splitlines(keepends=True)
                           if not line.startswith("accelerate")))
    done = subprocess.run([str(base_python), "-m", "pip", "--python", str(python), "install", "-q",
                           "--disable-pip-version-check", "-c", pins.name, f"accelerate=={version}"], cwd=ROOT)
    Path(pins.name).unlink()
    if done.returncode != 0:
        raise SystemExit(f"accelerate {version} could not be installed beside the pinned packages (see pip's message "
                         "above): it needs a newer version of one of them; bump that pin too, then run this again")
    stamp.touch()
    return python


def run_scripts(python: Path, library: str, out: Path) -> dict[str, str]:
    """Every call's outcome of accelerate's scripts (of ``python``'s accelerate) under ``library``."""
    print(f"[compat] {python.parent.parent.name if 'build' in python.parts else '.venv'}: accelerate's scripts "
          f"under {library} (a few minutes)", flush=True)
    subprocess.run([str(python), "-m", "tests.compat.accelerate_scripts", library, "--json", str(out)], cwd=ROOT,
                   capture_output=True, text=True)
    if not out.exists():
        raise SystemExit(f"the scripts did not run under {python}: try `{python} -m tests.compat.accelerate_scripts "
                         f"{library}` to see why")
    outcomes: dict[str, str] = json.loads(out.read_text())[library]
    return outcomes


def name_report(python: Path) -> dict[str, object]:
    """``tests.compat.accelerate_names``' report under ``python``."""
    done = subprocess.run([str(python), "-m", "tests.compat.accelerate_names"], cwd=ROOT, capture_output=True,
                          text=True)
    if done.returncode != 0:
        raise SystemExit(f"the name report failed under {python}:\n{done.stderr[-2000:]}")
    report: dict[str, object] = json.loads(done.stdout)
    return report


def short(outcome: str | None) -> str:
    """``PASS``, ``FAIL: <why>`` (cut to 70 characters) or ``-`` for a call that version does not have."""
    if outcome is None:
        return "-"
    return "PASS" if outcome == "ok" else ("FAIL: " + outcome.replace("|", "/"))[:70]


def call_table(base: str, new: str, base_acc: dict[str, str], new_acc: dict[str, str],
               new_ours: dict[str, str], explained: frozenset[str] = frozenset()) -> list[str]:
    """The lines for every call that changed between the versions or passes under the new accelerate only; a
    failure here that the migration guide explains (``explained``: its ``script.py::call`` names) says so."""
    lines = [f"| call | accelerate {base} | accelerate {new} | notebook_accel, {new}'s scripts |",
             "| --- | --- | --- | --- |"]
    for call in dict.fromkeys([*base_acc, *new_acc]):
        b, n, o = base_acc.get(call), new_acc.get(call), new_ours.get(call)
        if short(b) != short(n) or (n == "ok" and o != "ok"):
            mine = short(o) + (" (the migration guide explains it)" if o != "ok" and call in explained else "")
            lines.append(f"| `{call}` | {short(b)} | {short(n)} | {mine} |")
    return lines


def name_lines(base_report: dict[str, object], new_report: dict[str, object]) -> list[str]:
    """The names the new version added and removed, by module, and those not provided here nor explained."""
    lines: list[str] = []
    old_names: dict[str, list[str]] = base_report["names"]  # type: ignore[assignment]
    new_names: dict[str, list[str]] = new_report["names"]  # type: ignore[assignment]
    for module in new_names:
        added = sorted(set(new_names[module]) - set(old_names.get(module, [])))
        removed = sorted(set(old_names.get(module, [])) - set(new_names[module]))
        lines.append(f"{module}: added {', '.join(added) or 'nothing'}; removed {', '.join(removed) or 'nothing'}")
    unexplained = new_report["unexplained"]
    lines.append(f"neither provided by notebook_accel nor explained in the migration guide: {unexplained or 'none'}")
    return lines


def main(argv: list[str], python: Path) -> int:
    """Measure, print the tables; 0 when nothing would need fixing here (every call that passes under the new
    accelerate passes here or is one the migration guide already explains, every name is provided or
    explained)."""
    parser = argparse.ArgumentParser(prog="python3 dev.py compat-latest", description=__doc__.splitlines()[0])
    parser.add_argument("--version", help="the accelerate to measure (default: the newest on the package index)")
    parser.add_argument("--base", help="the accelerate to compare with (default: constraints.txt's pin, in .venv)")
    args = parser.parse_args(argv)
    base = args.base or pinned_version()
    new = args.version or newest_version(python)
    print(f"[compat] accelerate {base} (base) against {new}"
          + (" (the newest release is the pinned one: this measures it again)" if new == base else ""), flush=True)
    base_python = python if args.base is None else scratch_environment(base, python)
    new_python = scratch_environment(new, python)
    with tempfile.TemporaryDirectory(prefix="compat-latest-") as tmp:
        base_acc = run_scripts(base_python, "accelerate", Path(tmp, "base.json"))
        new_acc = run_scripts(new_python, "accelerate", Path(tmp, "new.json"))
        new_ours = run_scripts(new_python, "notebook_accel", Path(tmp, "ours.json"))
    sys.path.insert(0, str(ROOT))
    from tests.compat.test_accelerate_scripts import explained_in_readme

    explained = explained_in_readme()
    print("\n## accelerate's scripts: the calls that differ\n")
    print("\n".join(call_table(base, new, base_acc, new_acc, new_ours, frozenset(explained))))
    to_fix = [c for c, o in new_acc.items() if o == "ok" and new_ours.get(c) != "ok" and c not in explained]
    print(f"\naccelerate {base}: {sum(o == 'ok' for o in base_acc.values())} of {len(base_acc)} calls pass; "
          f"accelerate {new}: {sum(o == 'ok' for o in new_acc.values())} of {len(new_acc)}; of those, under "
          f"notebook_accel: {sum(new_ours.get(c) == 'ok' for c, o in new_acc.items() if o == 'ok')}")
    print(f"calls to add to PASSING_UNDER_ACCELERATE: "
          f"{[c for c, o in new_acc.items() if o == 'ok' and base_acc.get(c) != 'ok'] or 'none'}")
    print(f"calls to take out of it: {[c for c, o in base_acc.items() if o == 'ok' and new_acc.get(c) != 'ok'] or 'none'}")
    print(f"calls that pass under accelerate {new}, fail here and the migration guide does not explain: "
          f"{to_fix or 'none'}")
    print("\n## public names\n")
    new_report = name_report(new_python)
    print("\n".join(name_lines(name_report(base_python), new_report)))
    return 1 if to_fix or new_report["unexplained"] else 0
