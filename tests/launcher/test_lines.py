"""Output bytes become whole lines."""

from __future__ import annotations

from notebook_accel.launcher.lines import LineSplitter


def test_lines_split_across_chunks_come_out_whole() -> None:
    s = LineSplitter()
    assert s.feed(b"one\ntw") == ["one"]
    assert s.feed(b"o") == []
    assert s.feed(b"\nthree\nfo") == ["two", "three"]
    assert s.finish() == ["fo"]
    assert s.finish() == []


def test_utf8_split_inside_a_character() -> None:
    s = LineSplitter()
    data = "héllo\n".encode()
    assert s.feed(data[:2]) == []
    assert s.feed(data[2:]) == ["héllo"]


def test_carriage_return_keeps_the_last_redraw() -> None:
    s = LineSplitter()
    assert s.feed(b"10%\r50%\r100%\r\n") == ["100%"]


def test_very_long_line_is_passed_on() -> None:
    s = LineSplitter()
    out = s.feed(b"x" * 70_000)
    assert len(out) == 1 and len(out[0]) == 70_000
