"""Property test: every loader shape on 1, 2 and 3 real processes loses and repeats nothing (issue 19).

The shapes (map-style and iterable, with and without a length, every kind of sampler and batch sampler, batch sizes
that leave tails, ``batch_size=None``, ``drop_last``, ``even_batches``, ``split_batches``, DataLoader workers) are
enumerated in :mod:`tests.data.loader_shapes`, which also says what is checked.
"""

from __future__ import annotations

import pytest

from notebook_accel import notebook_launcher
from tests.data import loader_shapes


@pytest.mark.timeout(300)
@pytest.mark.parametrize("world", [1, 2, 3])
def test_every_loader_shape_visits_every_item_exactly_once(world: int) -> None:
    result = notebook_launcher(loader_shapes.count_every_item, num_processes=world, dashboard=False)
    assert result["world"] == world and result["shapes"] == len(loader_shapes.shapes(world)) > 100
    assert result["problems"] == []
