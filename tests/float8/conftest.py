"""torchao is an optional extra (``pip install 'notebook-accel[fp8]'``): the tests that convert models skip without
it, saying so."""

from __future__ import annotations

import pytest

from notebook_accel.float8 import torchao_installed

needs_torchao = pytest.mark.skipif(not torchao_installed(), reason="torchao is not installed (the fp8 extra: "
                                   "pip install 'notebook-accel[fp8]'); fp8 conversion cannot be exercised")
