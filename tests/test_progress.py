"""Tests for notebook_accel.progress: events through a real channel, the terminal line, passthrough cases."""

from __future__ import annotations

import io
import multiprocessing as mp
from collections.abc import Iterator

import pytest

import notebook_accel
from notebook_accel import channel
from notebook_accel.events import Progress
from notebook_accel.progress import format_progress, progress


class _Tty(io.StringIO):
    """A stderr stand-in that says it is a terminal."""

    def isatty(self) -> bool:
        return True


@pytest.fixture
def writer() -> Iterator[tuple[channel.EventWriter, object]]:
    reader, conn = mp.Pipe(duplex=False)
    w = channel.EventWriter(conn, flush_interval=10.0)
    channel.install(w)
    try:
        yield w, reader
    finally:
        channel.uninstall()
        w.close()
        reader.close()


def _events(w: channel.EventWriter, reader) -> list[Progress]:  # type: ignore[no-untyped-def]
    w.flush()
    out = []
    while reader.poll(0.2):
        out.extend(channel.read_events(reader))
    return out


def test_with_a_channel_posts_first_and_last_and_rate_limits(writer) -> None:  # type: ignore[no-untyped-def]
    w, reader = writer
    assert list(progress(range(1000), desc="eval", interval=3600)) == list(range(1000))
    events = _events(w, reader)
    assert [(e.rank, e.n, e.total, e.desc) for e in events] == [(0, 0, 1000, "eval"), (0, 1000, 1000, "eval")]


def test_a_tiny_interval_reports_every_item(writer) -> None:  # type: ignore[no-untyped-def]
    w, reader = writer
    list(progress(iter(range(5)), interval=1e-9))
    events = _events(w, reader)
    assert [e.n for e in events][:6] == [0, 1, 2, 3, 4, 5]
    assert all(e.total is None for e in events)


def test_other_ranks_report_nothing(writer, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    w, reader = writer
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert list(progress(range(3))) == [0, 1, 2]
    assert _events(w, reader) == []


def test_in_a_terminal_a_line_is_rewritten(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = _Tty()
    monkeypatch.setattr("sys.stderr", tty)
    assert list(progress([1, 2, 3], desc="prep", interval=1e-9)) == [1, 2, 3]
    text = tty.getvalue()
    assert text.startswith("\rprep: 1/3 [")
    assert text.endswith("it/s]\n") and "\rprep: 3/3 [" in text


def test_not_a_terminal_and_no_channel_prints_nothing(capsys: pytest.CaptureFixture[str]) -> None:
    assert list(progress(range(3))) == [0, 1, 2]
    assert capsys.readouterr().err == ""


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match=r"total=-1"):
        progress(range(3), total=-1)
    with pytest.raises(ValueError, match=r"interval=0"):
        progress(range(3), interval=0)


def test_format_progress() -> None:
    assert format_progress(50, 100, 10.0, "eval") == "eval: 50/100 [00:10<00:10, 5.00 it/s]"
    assert format_progress(3, None, 0.0) == "3 [00:00, 0.00 it/s]"
    assert format_progress(0, 10, 0.0) == "0/10 [00:00<?, 0.00 it/s]"
    assert format_progress(1, 2, 3700.0) == "1/2 [1:01:40<1:01:40, 0.00 it/s]"


def test_the_package_name_is_callable_even_after_the_module_is_imported() -> None:
    import notebook_accel.progress as module

    assert list(module(range(2))) == [0, 1]
    assert list(notebook_accel.progress(range(2))) == [0, 1]
