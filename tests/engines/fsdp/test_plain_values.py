"""A DCP value record decoded from its opcodes: the value ``torch.load`` gives, or the record's bytes whenever it
holds anything but plain data."""

from __future__ import annotations

import io
import math
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import pytest
import torch

from notebook_accel.engines.fsdp.plain_values import Plain, plain_value, read_value
from tests.engines.fsdp.records import read_in_file, record_of

SHARED = [1, 2]
VALUES: dict[str, Any] = {
    "lr": 0.001, "betas": (0.9, 0.999), "eps": 1e-8, "false": False, "true": True, "none": None, "int": 5,
    "negative": -7, "big-int": 2**70, "name": "adamw", "unicode": "λ-schedule", "empty-list": [],
    "empty-tuple": (), "params": list(range(300)), "nested": [[1, (2.5, None)], ("a", [True])],
    "shared-list": (SHARED, SHARED), "triple": (1, 2, 3), "long-tuple": (1, 2, 3, 4, 5), "inf": math.inf,
}


def _record(value: object) -> bytes:
    return record_of(value)


def _read(tmp_path: Path, record: bytes, check: bool = False) -> Plain | bytes:
    return read_in_file(tmp_path, record, read_value, check)


def _same(got: Any, want: Any) -> None:
    """Equal, of the same types all the way down (floats bit for bit, NaN included)."""
    assert type(got) is type(want)
    if isinstance(want, (list, tuple)):
        assert len(got) == len(want)
        for a, b in zip(got, want):
            _same(a, b)
    elif isinstance(want, float):
        assert got.hex() == want.hex()
    else:
        assert got == want


@pytest.mark.parametrize("name", list(VALUES))
@pytest.mark.parametrize("check", [False, True], ids=["unchecked", "checked"])
def test_a_plain_value_reads_as_torch_load_gives_it(tmp_path: Path, name: str, check: bool) -> None:
    record = _record(VALUES[name])
    got = _read(tmp_path, record, check)
    assert isinstance(got, Plain), "read the slow way"
    _same(got.value, torch.load(io.BytesIO(record), weights_only=True))


def test_shared_lists_stay_shared_and_no_two_reads_share_one(tmp_path: Path) -> None:
    record = _record((SHARED, SHARED))
    first, second = _read(tmp_path, record), _read(tmp_path, record)
    assert isinstance(first, Plain) and isinstance(second, Plain)
    assert first.value[0] is first.value[1]  # one list, as pickle made it
    first.value[0].append(3)
    assert second.value == ([1, 2], [1, 2])  # a cached decoding is never handed out twice


class _Hostile:
    def __reduce__(self) -> tuple[Any, tuple[str]]:
        return (os.system, ("echo ran",))


@pytest.mark.parametrize("value", [{"lr": 0.1}, b"bytes", {1, 2}, torch.Size([2, 3]), torch.zeros(3),
                                   _Hostile()], ids=["dict", "bytes", "set", "size", "tensor", "hostile"])
def test_anything_else_comes_back_as_bytes_for_torch_load(tmp_path: Path, value: object) -> None:
    record = _record(value)
    assert _read(tmp_path, record) == record


@pytest.mark.parametrize("pickled", [
    b"\x80\x02K\x01K\x02.",  # two values left at STOP
    b"\x80\x02(.",  # a MARK left at STOP
    b"\x80\x02K\x01K\x02a.",  # APPEND onto an int
    b"\x80\x02]K\x01(a.",  # APPEND of a MARK
    b"\x80\x02K\x01t.",  # TUPLE without a MARK
    b"\x80\x02K\x01\x86.",  # TUPLE2 of one value
    b"\x80\x02h\x05.",  # BINGET of nothing memoized
    b"\x80\x02q\x00.",  # BINPUT of an empty stack
    b"K\x01.",  # no PROTO
    b"\x80\x02K\x01",  # no STOP
    b"\x80\x02cos\nsystem\n.",  # a global
    b"\x80\x02}.",  # a dict
    b"\x80\x02" + b"]" * 5000 + b"a" * 4999 + b".",  # lists nested 5,000 deep
], ids=["two-left", "mark-left", "append-to-int", "append-mark", "tuple-no-mark", "tuple2-of-one",
        "get-unknown", "put-empty", "no-proto", "no-stop", "global", "dict", "deep"])
def test_a_pickle_it_does_not_know_is_given_up(pickled: bytes) -> None:
    assert plain_value(pickled) is None


@pytest.mark.parametrize("name", ["betas", "params", "nested"])
def test_plain_value_agrees_with_pickle_on_pickles_python_writes(name: str) -> None:
    pickled = pickle.dumps(VALUES[name], protocol=2)
    got = plain_value(pickled)
    assert got is not None
    _same(got.value, pickle.loads(pickled))


def test_a_flipped_byte_anywhere_gives_what_torch_load_gives_or_the_bytes(tmp_path: Path) -> None:
    """Every byte of two records flipped two ways: a value decoded here is the one ``torch.load`` reads from the
    same bytes; where ``torch.load`` refuses them, they come back as bytes."""
    decoded = refused = 0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for value in ((0.9, 0.999), [0, 1, [2, 3]]):
            record = _record(value)
            for at in range(len(record)):
                for mask in (0x01, 0x80):
                    changed = bytearray(record)
                    changed[at] ^= mask
                    got = _read(tmp_path, bytes(changed))
                    try:
                        want: Any = torch.load(io.BytesIO(bytes(changed)), weights_only=True)
                        loads = True
                    except Exception:
                        want, loads = None, False
                    if isinstance(got, Plain):
                        assert loads, f"byte {at} ^ {mask:#x}: decoded, though torch.load refuses it"
                        _same(got.value, want)
                        decoded += 1
                    else:
                        assert got == bytes(changed)
                        refused += not loads
    assert decoded > 100 and refused > 100
