"""A rank's output as the launcher passes it on: final lines at once, live lines after a delay, a log file."""

from __future__ import annotations

from pathlib import Path

from notebook_accel.events import Log
from notebook_accel.launcher.supervision.output import RankOutput
from notebook_accel.launcher.child.streams import frame
from notebook_accel.terminal import MAX_LINE
from notebook_accel.terminal.rows import CUT_NOTE


def test_final_lines_at_once_in_write_order_across_streams(tmp_path: Path) -> None:
    out = RankOutput(3, tmp_path / "rank3.log")
    events = out.ordered(b"one\n" + frame(b"warn\n") + b"two\n", now=0.0)
    assert events == [Log(3, "stdout", "one"), Log(3, "stderr", "warn"), Log(3, "stdout", "two")]
    assert out.next_due is None
    out.close()
    assert (tmp_path / "rank3.log").read_text() == "one\nwarn\ntwo\n"


def test_an_unfinished_line_is_shown_after_the_delay_then_replaced_by_its_final_form() -> None:
    out = RankOutput(0, None, delay=0.2)
    assert out.ordered(b"loading...", now=1.0) == []
    assert out.next_due == 1.2
    assert out.due(now=1.1) == []
    assert out.due(now=1.2) == [Log(0, "stdout", "loading...", partial=True)]
    assert out.next_due is None and out.due(now=5.0) == []
    assert out.ordered(b" done\n", now=2.0) == [Log(0, "stdout", "loading... done")]
    assert out.next_due is None  # nothing live any more: the final line replaced it


def test_a_redrawn_bar_is_sent_at_most_once_per_delay_and_stays_up_under_new_lines() -> None:
    out = RankOutput(0, None, delay=0.2)
    for i in range(10):  # ten redraws within 0.09 s
        assert out.ordered(frame(f"\r{i * 10}%".encode()), now=i * 0.01) == []
    assert out.due(now=0.2) == [Log(0, "stderr", "90%", partial=True)]
    # a line printed over the bar (tqdm.write) stays live until the next line ends: a nested bar could go back
    assert out.ordered(frame(b"\r    \rmessage 1\n\r95%"), now=0.3) == []
    assert out.due(now=0.5) == [Log(0, "stderr", "message 1\n95%", partial=True)]
    # when lines become final under a bar that is on screen, the bar is sent again at once, not after a delay
    events = out.ordered(frame(b"\r    \rmessage 2\n\r99%"), now=0.6)
    assert events == [Log(0, "stderr", "message 1"), Log(0, "stderr", "message 2\n99%", partial=True)]


def test_stdout_and_stderr_keep_separate_current_lines() -> None:
    out = RankOutput(0, None, delay=0.0)
    out.ordered(frame(b"\r 40%|####"), now=0.0)
    assert out.ordered(b"epoch 1\n", now=0.0) == [Log(0, "stdout", "epoch 1")]
    assert out.due(now=0.0) == [Log(0, "stderr", " 40%|####", partial=True)]


def test_c_level_stderr_and_python_stderr_share_the_stderr_line() -> None:
    out = RankOutput(0, None)
    assert out.ordered(frame(b"py "), now=0.0) == []
    assert out.stderr(b"c\n", now=0.0) == [Log(0, "stderr", "py c")]


def test_close_flushes_held_bytes_and_live_lines_as_final(tmp_path: Path) -> None:
    path = tmp_path / "rank0.log"
    out = RankOutput(0, path)
    out.ordered(b"\x1b[32mgreen\x1b[0m\n", now=0.0)
    out.ordered("no newline é".encode()[:-1], now=0.0)  # ends inside a UTF-8 character
    out.stderr(b"\r100%|##########|", now=0.0)
    events = out.close()
    assert events == [Log(0, "stdout", "no newline \ufffd"), Log(0, "stderr", "100%|##########|")]
    assert path.read_text() == "green\nno newline \ufffd\n100%|##########|\n"  # colours stay out of the file
    assert out.close() == []


def test_a_live_line_erased_before_the_end_is_cleared() -> None:
    out = RankOutput(0, None, delay=0.0)
    out.ordered(frame(b"\rworking"), now=0.0)
    assert out.due(now=0.0) == [Log(0, "stderr", "working", partial=True)]
    out.ordered(frame(b"\r       \r"), now=0.0)
    assert out.due(now=0.0) == [Log(0, "stderr", "", partial=True)]


def test_an_unwritable_log_file_warns_once_and_the_output_goes_on(tmp_path: Path) -> None:
    import pytest

    with pytest.warns(RuntimeWarning, match="cannot write rank 0's output"):
        out = RankOutput(0, tmp_path / "missing" / "rank0.log")
    assert out.ordered(b"still here\n", now=0.0) == [Log(0, "stdout", "still here")]


def test_a_finished_bar_comes_before_what_the_other_stream_writes_next() -> None:
    out = RankOutput(0, None)
    assert out.ordered(frame(b"\r 50%|#####\r100%|##########\n"), now=0.0) == []  # a nested bar may come back
    assert out.ordered(b"done\n", now=0.0) == [Log(0, "stderr", "100%|##########"), Log(0, "stdout", "done")]


def test_a_line_longer_than_the_screen_is_one_bounded_event_and_whole_in_the_log_file(tmp_path: Path) -> None:
    out = RankOutput(0, tmp_path / "rank0.log")
    line = "".join(str(i % 10) for i in range(3 * MAX_LINE + 7))
    events = out.ordered(frame(b"before\n") + line.encode(), now=0.0)  # the long line goes on stdout
    events += out.ordered(b"\nafter\n", now=1.0)
    out.close()
    cut = len(line) - MAX_LINE
    shown = line[: MAX_LINE // 2] + CUT_NOTE.format(cut=cut) + line[-MAX_LINE // 2 :]
    assert events == [Log(0, "stderr", "before"), Log(0, "stdout", shown + "\nafter")]
    assert (tmp_path / "rank0.log").read_text() == f"before\n{line}\nafter\n"
