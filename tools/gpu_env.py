"""``python3 dev.py test-gpu``: set up an environment with a CUDA build of torch and run ``tests/gpu``.

Standard library only (dev.py imports it before any virtual environment exists). On a GPU machine:

1. Refuse at once, before installing anything, when no NVIDIA GPU is visible (``nvidia-smi -L``): a CUDA build
   of torch is several GB and would be of no use.
2. Make ``.venv-gpu``. When the Python running this already has a CUDA build of torch (GPU images usually do),
   the venv sees its packages (``--system-site-packages``) and nothing large is downloaded; otherwise torch is
   installed unpinned from the package index, which gives the CUDA build (the CPU pin in constraints.txt is for
   the normal suite only).
3. Install this package editable without its dependencies, then whatever the GPU suite needs that the
   environment lacks (pytest, pytest-timeout, jupyter_client, ipykernel, pyyaml, numpy, safetensors, ipywidgets,
   xxhash, torchao, ray, cryptography). On a machine without a package index pass ``--wheels DIR``, a folder filled
   elsewhere with ``pip download --only-binary=:all: --python-version 3.12 ... -d DIR NAME`` (see the README).
4. Run ``pytest tests/gpu`` with ``NOTEBOOK_ACCEL_REQUIRE_GPU=1``, so a GPU that torch cannot use fails the run
   instead of skipping it.

``--cpu`` runs the suite's device-agnostic cases on the CPU in the normal ``.venv`` instead: a check of the
suite's own plumbing, not of CUDA.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GPU_VENV = ROOT / ".venv-gpu"
NEEDED = {  # import name -> distribution name
    "pytest": "pytest", "pytest_timeout": "pytest-timeout", "jupyter_client": "jupyter_client",
    "ipykernel": "ipykernel", "yaml": "pyyaml", "numpy": "numpy", "safetensors": "safetensors",
    "ipywidgets": "ipywidgets", "xxhash": "xxhash",  # the package's own (installed --no-deps): checkpoints hash
    "torchao": "torchao",  # the fp8 cases (mixed_precision="fp8"); they skip without it
    "ray": "ray", "cryptography": "cryptography",  # the Ray case (one rank, nccl, on a one-node Ray); skips without
}


def gpu_names() -> list[str]:
    """The GPUs ``nvidia-smi -L`` lists (empty without a driver); never touches CUDA."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return []
    try:
        out = subprocess.run([smi, "-L"], capture_output=True, text=True, timeout=30, check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return []
    return [line.strip() for line in out.splitlines() if line.startswith("GPU ")]


def _probe(python: Path | str, code: str) -> str:
    """What ``python -c code`` prints, or ``""`` when it fails."""
    proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True, check=False)
    return proc.stdout.strip() if proc.returncode == 0 else ""


def _cuda_torch(python: Path | str) -> str:
    """The CUDA version torch was built with under ``python`` (``""``: no torch, or a CPU build)."""
    return _probe(python, "import torch; print(torch.version.cuda or '')")


def _pip(python: Path, args: list[str], wheels: Path | None) -> int:
    """Run pip in ``python``'s environment, from ``wheels`` only when given."""
    source = ["--no-index", "--find-links", str(wheels)] if wheels is not None else []
    cmd = [str(python), "-m", "pip", "install", "--disable-pip-version-check", "-q", *source, *args]
    print("[dev] " + " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=ROOT, check=False).returncode


def _see_parent_venv(python: Path) -> None:
    """Make ``.venv-gpu`` see the packages of the venv running this (GPU images often ship torch in one).

    ``system_site_packages`` only reaches the *base* interpreter's site-packages; when this Python is itself a
    venv, its own site-packages (where the CUDA torch lives) needs a ``.pth`` line.
    """
    import site

    theirs = [p for p in site.getsitepackages() if p.startswith(sys.prefix)]
    ours = _probe(python, "import sysconfig; print(sysconfig.get_paths()['purelib'])")
    if theirs and ours:  # addsitedir, not a plain path line: the parent's own .pth files (a venv made from a
        # venv, as .venv-gpu is on an image whose torch lives in /opt/torch/.venv) are read too, all the way up
        lines = [f"import site; site.addsitedir({path!r})" for path in theirs]
        (Path(ours) / "_parent_venv.pth").write_text("\n".join(lines) + "\n")


def ensure_gpu_venv(wheels: Path | None) -> Path:
    """``.venv-gpu`` with a CUDA torch, this package and the suite's needs; returns its python."""
    python = GPU_VENV / "bin" / "python"
    if not python.exists():
        shared = bool(_cuda_torch(sys.executable))
        print(f"[dev] creating {GPU_VENV}" + (" (sharing this Python's CUDA torch)" if shared else ""), flush=True)
        venv.EnvBuilder(with_pip=True, system_site_packages=shared).create(GPU_VENV)
        if shared and sys.prefix != sys.base_prefix:
            _see_parent_venv(python)
    if not _cuda_torch(python):
        if _pip(python, ["torch>=2.2,<3"], wheels) != 0 or not _cuda_torch(python):
            raise SystemExit("[dev] could not install a CUDA build of torch into .venv-gpu; install one there by "
                             "hand (e.g. .venv-gpu/bin/pip install torch) or pass --wheels DIR with its wheels")
    isolation = [] if _probe(python, "import setuptools, sys; print(int(setuptools.__version__.split('.')[0]) >= 68)") == "True" \
        else ["setuptools>=68"]
    if isolation and _pip(python, isolation, wheels) != 0:
        raise SystemExit("[dev] setuptools>=68 is needed to install notebook-accel; pass --wheels DIR with its wheel")
    if _pip(python, ["--no-deps", "--no-build-isolation", "-e", "."], wheels) != 0:
        raise SystemExit("[dev] installing notebook-accel into .venv-gpu failed (see pip's message above)")
    missing = [dist for mod, dist in NEEDED.items()
               if not _probe(python, f"import importlib.util as u; print(u.find_spec({mod!r}) is not None)") == "True"]
    if missing and _pip(python, missing, wheels) != 0:
        print(f"[dev] warning: could not install {missing}; the tests that need them skip", flush=True)
    return python


def main(args: list[str], cpu_python: Path | None = None) -> int:
    """Entry point for ``dev.py test-gpu [--cpu] [--wheels DIR] [pytest args]``."""
    wheels: Path | None = None
    if "--wheels" in args:
        at = args.index("--wheels")
        if at + 1 >= len(args) or not Path(args[at + 1]).is_dir():
            print("[dev] --wheels needs a folder of wheels, e.g. --wheels .whl", file=sys.stderr)
            return 2
        wheels = Path(args[at + 1]).resolve()
        args = args[:at] + args[at + 2:]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    pytest_args = ["-m", "pytest", "tests/gpu", "-o", "addopts=-ra", "-p", "no:cacheprovider"]
    if "--cpu" in args:
        args.remove("--cpu")
        if cpu_python is None:
            raise SystemExit("[dev] --cpu needs the normal test environment")
        env["NOTEBOOK_ACCEL_GPU_SUITE"] = "cpu"
        return subprocess.run([str(cpu_python), *pytest_args, *args], cwd=ROOT, env=env, check=False).returncode
    names = gpu_names()
    if not names:
        print("[dev] test-gpu needs an NVIDIA GPU, and `nvidia-smi -L` lists none here (no driver, or no GPU). "
              "Run it on a GPU machine, or `python3 dev.py test-gpu --cpu` to check the suite's plumbing on the CPU.",
              file=sys.stderr)
        return 2
    print("[dev] GPUs: " + "; ".join(names), flush=True)
    python = ensure_gpu_venv(wheels)
    env["NOTEBOOK_ACCEL_REQUIRE_GPU"] = "1"
    return subprocess.run([str(python), *pytest_args, *args], cwd=ROOT, env=env, check=False).returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
