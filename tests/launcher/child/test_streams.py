"""The ordered pipe: stderr frames among raw stdout bytes, split back in the order written."""

from __future__ import annotations

import io
import os
import threading

import pytest

from notebook_accel.launcher.child.streams import FRAME_PAYLOAD, MARK, Demux, FramedWriter, frame


def _demux_in_pieces(data: bytes, size: int) -> list[tuple[str, bytes]]:
    """Feed ``data`` in pieces of ``size`` bytes; merge the segments."""
    d = Demux()
    out: list[tuple[str, bytes]] = []
    for start in range(0, len(data), size):
        out += d.feed(data[start : start + size])
    out += d.finish()
    merged: list[tuple[str, bytes]] = []
    for stream, chunk in out:
        if merged and merged[-1][0] == stream:
            merged[-1] = (stream, merged[-1][1] + chunk)
        else:
            merged.append((stream, chunk))
    return merged


@pytest.mark.parametrize("size", [1, 2, 3, 7, 11, 1000])
def test_segments_come_back_in_order_however_the_reads_cut_them(size: int) -> None:
    data = b"out 1\n" + frame(b"err 1\n") + b"out 2\n" + frame(b"err 2\n") + frame(b"err 3\n") + b"\x1b[31mred\n"
    assert _demux_in_pieces(data, size) == [
        ("stdout", b"out 1\n"), ("stderr", b"err 1\n"), ("stdout", b"out 2\n"),
        ("stderr", b"err 2\nerr 3\n"), ("stdout", b"\x1b[31mred\n"),
    ]


def test_stdout_ending_in_part_of_the_mark_is_held_then_released() -> None:
    d = Demux()
    assert d.feed(b"text" + MARK[:3]) == [("stdout", b"text")]
    assert d.feed(b"more") == [("stdout", MARK[:3] + b"more")]
    assert d.feed(b"esc at end \x1b") == [("stdout", b"esc at end ")]
    assert d.finish() == [("stdout", b"\x1b")]


def test_framed_writer_frames_big_writes_at_the_atomic_size() -> None:
    r, w = os.pipe()
    try:
        writer = FramedWriter(w)
        payload = bytes(range(256)) * 40  # 10240 bytes: three frames
        assert writer.write(payload) == len(payload)
        assert writer.fileno() == 2 and not writer.isatty()
        os.close(w)
        data = b""
        while chunk := os.read(r, 65536):
            data += chunk
    finally:
        os.close(r)
    assert data.count(MARK) == 3 and len(frame(b"x" * FRAME_PAYLOAD)) <= 4096
    assert _demux_in_pieces(data, 4096) == [("stderr", payload)]


def test_text_stream_on_the_framed_writer_keeps_order_with_raw_writes_from_threads() -> None:
    """Python's stderr (framed) and raw writes to the same pipe from another thread stay whole and ordered."""
    r, w = os.pipe()
    received = bytearray()
    reader = threading.Thread(target=lambda: _read_all(r, received))
    reader.start()
    err = io.TextIOWrapper(io.BufferedWriter(FramedWriter(w)), encoding="utf-8", line_buffering=True)

    def raw() -> None:
        for i in range(300):
            os.write(w, f"raw {i}\n".encode())

    thread = threading.Thread(target=raw)
    thread.start()
    for i in range(300):
        err.write(f"err {i} é\n")
    thread.join()
    err.flush()
    os.close(w)
    reader.join()
    os.close(r)
    segments = _demux_in_pieces(bytes(received), 4096)
    out = b"".join(c for s, c in segments if s == "stdout").decode().splitlines()
    errs = b"".join(c for s, c in segments if s == "stderr").decode().splitlines()
    assert out == [f"raw {i}" for i in range(300)]
    assert errs == [f"err {i} é" for i in range(300)]


def _read_all(fd: int, into: bytearray) -> None:
    while chunk := os.read(fd, 65536):
        into += chunk
