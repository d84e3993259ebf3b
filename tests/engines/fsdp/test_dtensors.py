"""The load path's DTensor helpers give what DTensor's public calls give: same layout, same local tensor."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
import torch.distributed as dist
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from notebook_accel.engines.fsdp import dtensors
from notebook_accel.engines.fsdp.dtensors import empty_like, local_part, with_local


@pytest.fixture()
def sharded(port: int) -> Iterator[DTensor]:
    """A DTensor sharded on dim 1 of a one-process mesh (its local part is not contiguous in the global one)."""
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        mesh = init_device_mesh("cpu", (1,))
        yield distribute_tensor(torch.arange(24.0).reshape(4, 6), mesh, [Shard(1)])
    finally:
        dist.destroy_process_group()


def _same_layout(a: DTensor, b: DTensor) -> None:
    assert (a.shape, a.stride(), a.dtype, a.placements, a.device_mesh) == \
        (b.shape, b.stride(), b.dtype, b.placements, b.device_mesh)


@pytest.mark.parametrize("fast", [True, False], ids=["constructor", "public-fallback"])
def test_with_local_lays_a_new_local_tensor_out_like_the_live_one(sharded: DTensor, fast: bool,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    if not fast:  # a torch whose DTensor cannot be built from a spec: the public call gives the same
        monkeypatch.setattr(dtensors, "DTensor", type("NoSpecDTensor", (), {
            "__new__": lambda cls, *a, **k: (_ for _ in ()).throw(TypeError("no")),
            "from_local": staticmethod(DTensor.from_local)}))
    local = torch.full_like(sharded.to_local(), 7.0)
    made = with_local(sharded, local)
    assert isinstance(made, DTensor)
    _same_layout(made, sharded)
    assert made.to_local().data_ptr() == local.data_ptr()  # the tensor itself, not a copy
    assert not made.requires_grad and torch.equal(made.full_tensor(), torch.full((4, 6), 7.0))


def test_local_part_is_to_local_and_empty_like_is_fresh(sharded: DTensor) -> None:
    assert local_part(sharded).data_ptr() == sharded.to_local().data_ptr()
    fresh = empty_like(sharded)
    _same_layout(fresh, sharded)
    assert local_part(fresh).data_ptr() != local_part(sharded).data_ptr()
    plain = torch.ones(3, requires_grad=True)
    assert empty_like(plain).shape == (3,) and not empty_like(plain).requires_grad
    assert empty_like(5) == 5
