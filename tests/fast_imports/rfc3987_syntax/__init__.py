"""Stands in for ``rfc3987_syntax`` in the processes the test suite starts (tests/conftest.py puts this folder first on
their ``PYTHONPATH``): Jupyter kernels, Ray's nodes and workers, the notebooks' kernels.

The real package compiles a grammar when imported: 4.3 s of CPU in every process that imports Ray (through
jsonschema's optional URI format checks, which fall back quietly without it). A Ray node starts five such processes
at once and its raylet gives its agents a fixed 15 s (ray-project/ray#65983), which a loaded 2-core machine misses.
Nothing the suite tests checks URIs; users' machines are unaffected (nothing of this ships).
"""

raise ImportError("rfc3987_syntax is left out of the test cluster's processes (tests/fast_imports)")
