"""Nested-structure helpers."""

from __future__ import annotations

from collections import OrderedDict, namedtuple

import torch

from notebook_accel.utils import recursively_apply, send_to_device
from notebook_accel.utils.nested import is_tensor_tree, on_device, tensors_of

Pair = namedtuple("Pair", "a b")


def test_recursively_apply_keeps_container_types() -> None:
    data = {"x": [torch.tensor(1), (torch.tensor(2), "s")], "p": Pair(torch.tensor(3), 4),
            "o": OrderedDict(k=torch.tensor(5))}
    out = recursively_apply(lambda t: t * 10, data)
    assert out["x"][0].item() == 10 and isinstance(out["x"][1], tuple) and out["x"][1][1] == "s"
    assert isinstance(out["p"], Pair) and out["p"].a.item() == 30 and out["p"].b == 4
    assert isinstance(out["o"], OrderedDict)
    assert [t.item() for t in tensors_of(data)] == [1, 2, 3, 5]


def test_is_tensor_tree() -> None:
    assert is_tensor_tree(torch.ones(1)) and is_tensor_tree({"a": [torch.ones(1)]})
    assert not is_tensor_tree(["x"]) and not is_tensor_tree([]) and not is_tensor_tree({"a": 1})


def test_send_to_device() -> None:
    t = torch.ones(1)
    assert send_to_device({"t": t}, "cpu")["t"] is t

    class Movable:
        def __init__(self) -> None:
            self.where = None

        def to(self, device: torch.device, non_blocking: bool = False) -> "Movable":
            self.where = device
            return self

    assert send_to_device(Movable(), "cpu").where == torch.device("cpu")

    class OldStyle:
        def to(self, device: torch.device) -> str:
            return "moved"

    assert send_to_device(OldStyle(), "cpu") == "moved"


class _Movable:
    """An object with its own ``.to`` (send_to_device calls it at the top level)."""

    def to(self, device: object, non_blocking: bool = False) -> _Movable:
        return self


def test_on_device_is_true_exactly_when_send_to_device_would_move_nothing() -> None:
    cpu, meta = torch.device("cpu"), torch.device("meta")
    batch = {"x": [torch.ones(2), (torch.zeros(1), "label")], "n": 3}
    assert on_device(batch, cpu) and on_device([torch.ones(1), None], cpu) and on_device("text", cpu)
    assert not on_device(batch, meta)
    assert not on_device([torch.ones(1), {"y": torch.ones(1, device="meta")}], cpu)
    assert not on_device(torch.ones(1, device="meta"), cpu)
    assert not on_device(_Movable(), cpu)  # its own .to decides
    assert on_device([_Movable()], cpu)  # inside a container, send_to_device leaves it alone


def test_on_device_told_the_device_is_a_cpu_answers_as_when_it_works_it_out() -> None:
    cpu, meta = torch.device("cpu"), torch.device("meta")
    cases = [{"x": [torch.ones(2), (torch.zeros(1), "label")], "n": 3}, [torch.ones(1), None], "text",
             [torch.ones(1), {"y": torch.ones(1, device="meta")}], torch.ones(1, device="meta"), torch.ones(1),
             (torch.ones(1), torch.ones(1, device="meta")), _Movable(), [_Movable()],
             [torch.nn.Parameter(torch.ones(1))]]
    for data in cases:
        for device, is_cpu in ((cpu, True), (meta, False)):
            assert on_device(data, device, is_cpu) == on_device(data, device), (data, device)
