"""The console sink as a terminal, a notebook and a file each need it: colours, live lines, where the logs are."""

from __future__ import annotations

import io

import pytest

from notebook_accel.events import Log, RunInfo, RunOutcome
from notebook_accel.display.console import ConsoleSink
from notebook_accel.terminal import Screen


class FakeTerminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def terminal(monkeypatch: pytest.MonkeyPatch) -> FakeTerminal:
    """Make stdout and stderr the same terminal (in the test body: pytest resets them between phases)."""
    screen = FakeTerminal()
    monkeypatch.setattr("sys.stdout", screen)
    monkeypatch.setattr("sys.stderr", screen)
    return screen


def _shown(raw: str) -> list[str]:
    """What a terminal shows after ``raw``."""
    screen = Screen()
    return screen.feed(raw) + screen.close()


def test_on_a_terminal_colours_pass_and_the_live_bar_stays_at_the_bottom(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = terminal(monkeypatch)
    sink = ConsoleSink()
    sink.handle(Log(0, "stdout", "\x1b[32mok\x1b[0m"))
    sink.handle(Log(0, "stderr", " 10%|#", partial=True))
    sink.handle(Log(0, "stderr", " 50%|#####", partial=True))
    sink.handle(Log(0, "stdout", "epoch 1 done"))
    assert "\x1b[32mok\x1b[0m" in tty.getvalue()
    assert _shown(tty.getvalue()) == ["\x1b[32mok\x1b[0m", "epoch 1 done", " 50%|#####"]
    sink.handle(Log(0, "stderr", "100%|##########"))
    sink.finish(RunOutcome("finished", 1.0))
    assert _shown(tty.getvalue()) == ["\x1b[32mok\x1b[0m", "epoch 1 done", "100%|##########", "Finished in 1.0s"]


def test_a_live_area_of_several_ranks_and_lines_is_redrawn_in_place(monkeypatch: pytest.MonkeyPatch) -> None:
    tty = terminal(monkeypatch)
    sink = ConsoleSink(show_all_ranks=True)
    sink.handle(Log(0, "stderr", "outer 1/3\ninner 2/5", partial=True))
    sink.handle(Log(1, "stderr", "outer 1/3", partial=True))
    sink.handle(Log(0, "stderr", "outer 2/3\ninner 0/5", partial=True))
    sink.handle(Log(1, "stdout", "hello"))
    assert _shown(tty.getvalue()) == [
        "[rank 1] hello", "[rank 0] outer 2/3", "[rank 0] inner 0/5", "[rank 1] outer 1/3",
    ]
    sink.finish(RunOutcome("finished", 1.0))
    assert _shown(tty.getvalue()) == ["[rank 1] hello", "Finished in 1.0s"]


def test_into_a_file_colours_are_stripped_and_live_lines_left_out(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink()
    sink.handle(Log(0, "stderr", " 50%|#####", partial=True))
    sink.handle(Log(0, "stdout", "\x1b[1;31mred\x1b[0m text"))
    sink.handle(Log(0, "stderr", "100%|##########"))
    out, err = capsys.readouterr()
    assert out == "red text\n" and err == "100%|##########\n"


def test_the_first_and_a_failing_last_line_say_where_the_output_is(capsys: pytest.CaptureFixture[str]) -> None:
    sink = ConsoleSink()
    sink.start(RunInfo(2, ("cpu", "cpu"), "gloo", "train", log_dir="runs/20261124-101500-train"))
    sink.finish(RunOutcome("failed", 2.0, "rank 1: ValueError: x", (1,)))
    out, err = capsys.readouterr()
    assert out == "Launching 2 processes on CPU (gloo); every rank's output is kept in runs/20261124-101500-train/\n"
    assert err == "Failed after 2.0s: rank 1: ValueError: x (every rank's output: runs/20261124-101500-train/)\n"
