#!/usr/bin/env python3
"""The project's two set-up-and-run commands; needs nothing but Python 3.10+.

    python3 dev.py test [pytest args]   # make .venv, install the package with its test extra, run the suite
    python3 dev.py demo                 # make .venv, run the quickstart notebook headless into build/
    python3 dev.py docs [mkdocs build args]
                                        # make .venv, build the documentation site (mkdocs.yml, docs/) into build/site
    python3 dev.py bench                # also install the bench extra, run every benchmark in benchmarks/, print ratios
    python3 dev.py bench --quick        # the headline figures in one command, a few minutes (benchmarks/summary.py)
    python3 dev.py bench --smoke        # its smallest form, without installing the peers (the test suite runs it)
    python3 dev.py compat-latest [--version V] [--base V]
                                        # before bumping accelerate's pin: its newest release (or V) in a scratch
                                        # environment, its scripts and names against the pinned one's, as tables
    python3 dev.py test-gpu [--cpu] [--wheels DIR] [pytest args]
                                        # on a GPU machine: .venv-gpu with a CUDA torch, then tests/gpu

The virtual environment is made once in ``.venv`` and re-synced only when pyproject.toml, setup.py or
constraints.txt change. torch is pinned by constraints.txt to the CPU build the tests use.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
BIN = VENV / ("Scripts" if os.name == "nt" else "bin")
PYTHON = BIN / ("python.exe" if os.name == "nt" else "python")
EXTRAS = "test,tutorials,tensorboard,browser,trackers,aim,deepspeed,multinode,ray,fp8,docs"
CHROMIUM = Path("/usr/bin/chromium")


def _fingerprint() -> str:
    """Hash of the files that decide what is installed."""
    digest = hashlib.sha256(EXTRAS.encode())
    for name in ("pyproject.toml", "setup.py", "constraints.txt"):
        digest.update((ROOT / name).read_bytes())
    return digest.hexdigest()[:16]


def ensure_venv() -> Path:
    """Create .venv and install the package (editable) with its extras, unless already up to date."""
    stamp = VENV / f".installed-{_fingerprint()}"
    if stamp.exists():
        return PYTHON
    if not PYTHON.exists():
        print(f"[dev] creating virtual environment in {VENV}", flush=True)
        venv.EnvBuilder(with_pip=True).create(VENV)
    print("[dev] installing notebook-accel with its test extras (torch pinned by constraints.txt)", flush=True)
    pip = [str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q"]
    # torch first, alone and pinned, so nothing can pull the CUDA build in its place.
    subprocess.run([*pip, "-c", str(ROOT / "constraints.txt"), "torch"], check=True, cwd=ROOT)
    subprocess.run([*pip, "-c", str(ROOT / "constraints.txt"), "-e", f".[{EXTRAS}]"], check=True, cwd=ROOT)
    for old in VENV.glob(".installed-*"):
        old.unlink()
    stamp.touch()
    return PYTHON


def ensure_bench_extra() -> None:
    """Install the ``bench`` extra (the peers the benchmarks compare with) into .venv, unless already done; the test
    suite never needs it, so ``dev.py test`` (CI) does not install it."""
    stamp = VENV / f".bench-{_fingerprint()}"
    if stamp.exists():
        return
    print("[dev] installing the bench extra (the benchmarks' peers; torch stays pinned)", flush=True)
    subprocess.run([str(PYTHON), "-m", "pip", "install", "--disable-pip-version-check", "-q", "-c",
                    str(ROOT / "constraints.txt"), "-e", ".[bench]"], check=True, cwd=ROOT)
    for old in VENV.glob(".bench-*"):
        old.unlink()
    stamp.touch()


def ensure_system_packages() -> None:
    """Install the Debian packages some tests need, when missing and we are root; else say which tests skip.

    ``chromium``: Playwright drives this system browser (``executable_path``) for tests/browser; ``playwright
    install`` is never used. ``iproute2`` (``ip netns``): tests/distributed/test_multinode.py makes two hosts.
    ``iptables``: the firewall of tests/launcher/ray/test_off_cluster.py's notebook, which reaches only the head.
    ``slurmctld``, ``slurmd``, ``slurm-client``, ``munge``: tests/launcher/slurm brings a two-node Slurm up.
    """
    needed = (("chromium", CHROMIUM), ("iproute2", Path("/usr/sbin/ip")), ("iptables", Path("/usr/sbin/iptables")),
              ("slurmctld", Path("/usr/sbin/slurmctld")), ("slurmd", Path("/usr/sbin/slurmd")),
              ("slurm-client", Path("/usr/bin/srun")), ("munge", Path("/usr/sbin/munged")))
    wanted = {name: binary for name, binary in needed
              if not binary.exists() and not (name == "iproute2" and Path("/sbin/ip").exists())}
    if not wanted:
        return
    apt = Path("/usr/bin/apt-get")
    if os.name != "posix" or os.geteuid() != 0 or not apt.exists():
        print(f"[dev] {sorted(wanted)} missing and this is not a root Debian shell: tests/browser and the two-host "
              "tests skip (install the packages to run them)", flush=True)
        return
    print(f"[dev] installing Debian packages for the browser, two-host and Slurm tests: {sorted(wanted)}", flush=True)
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    ok = subprocess.run([str(apt), "update", "-qq"], env=env).returncode == 0
    ok = ok and subprocess.run([str(apt), "install", "-y", "-qq", *sorted(wanted)], env=env).returncode == 0
    if not ok:
        print("[dev] could not install them: the tests that need them will skip", flush=True)


def main(argv: list[str]) -> int:
    """Dispatch ``test``, ``demo``, ``docs``, ``bench``, ``compat-latest`` or ``test-gpu``."""
    if not argv or argv[0] not in {"test", "demo", "docs", "bench", "compat-latest", "test-gpu"}:
        print(__doc__, file=sys.stderr)
        return 2
    command, rest = argv[0], argv[1:]
    if command == "test-gpu":
        sys.path.insert(0, str(ROOT / "tools"))
        import gpu_env

        return gpu_env.main(rest, cpu_python=ensure_venv() if "--cpu" in rest else None)
    if command == "compat-latest":
        sys.path.insert(0, str(ROOT / "tools"))
        import compat_latest

        return compat_latest.main(rest, python=ensure_venv())
    python = str(ensure_venv())
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    if command == "test":
        ensure_system_packages()
        return subprocess.run([python, "-m", "pytest", *rest], cwd=ROOT, env=env).returncode
    if command == "demo":
        return subprocess.run([python, str(ROOT / "tools" / "demo.py"), *rest], cwd=ROOT, env=env).returncode
    if command == "docs":
        # strict (mkdocs.yml): a broken link, a missing reference, an undocumented public name or a page left out
        # of the navigation fails the build
        code = subprocess.run([python, "-m", "mkdocs", "build", *rest], cwd=ROOT,
                              env={**env, "NO_MKDOCS_2_WARNING": "1"}).returncode
        if code == 0:
            print(f"[dev] the site is in {ROOT / 'build' / 'site'} (open index.html)", flush=True)
        return code
    if "--smoke" not in rest:  # the smallest form runs with what is installed (the test suite runs it)
        ensure_bench_extra()
    code = 0
    for command_line in bench_commands(python, rest):
        print(f"[dev] {' '.join(command_line[1:])}", flush=True)
        code |= subprocess.run(command_line, cwd=ROOT, env=env).returncode
    return code


def bench_commands(python: str, rest: list[str]) -> list[list[str]]:
    """What ``dev.py bench`` runs: with ``--quick`` or ``--smoke``, ``benchmarks/summary.py`` (the figures in one
    command, a few minutes; ``--smoke``: the smallest form); otherwise every benchmark in full, with ``rest``."""
    if "--quick" in rest or "--smoke" in rest:
        return [[python, str(ROOT / "benchmarks" / "summary.py"), *rest]]
    return [[python, str(script), *rest] for script in sorted((ROOT / "benchmarks").glob("*.py"))
            if script.name != "summary.py"]


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
