"""Package layout: ``notebook_accel/`` is the library and ``widgets/`` is installed as ``notebook_accel.widgets``.

Metadata lives in pyproject.toml; only the package list and its folder mapping are computed here, so a new
subpackage in either folder is picked up without editing a list.
"""

from setuptools import find_packages, setup

core = find_packages(include=["notebook_accel", "notebook_accel.*"])
ui = ["notebook_accel.widgets"] + [f"notebook_accel.widgets.{p}" for p in find_packages(where="widgets")]
setup(
    packages=core + ui,
    package_dir={"notebook_accel.widgets": "widgets"},
)
