"""A line longer than the screen is wide: shown as head, note and tail; written whole to the transcript; linear."""

from __future__ import annotations

import time

from notebook_accel.terminal import Screen, strip_ansi
from notebook_accel.terminal.rows import CUT_NOTE


def screen_with_transcript(width: int) -> tuple[Screen, list[str]]:
    """A screen ``width`` columns wide and the list its transcript goes to."""
    written: list[str] = []
    return Screen(max_line=width, transcript=written.append), written


def test_a_long_line_shows_its_head_and_tail_with_a_note_and_the_transcript_keeps_every_character() -> None:
    screen, written = screen_with_transcript(10)
    line = "".join(chr(ord("a") + i % 26) for i in range(47))
    final = screen.feed("before\n" + line[:20])
    assert final == ["before"]
    assert screen.live() == [line[:5] + CUT_NOTE.format(cut=10) + line[15:20]]  # in progress: so far
    final = screen.feed(line[20:] + "\nafter\n")
    assert final == [line[:5] + CUT_NOTE.format(cut=37) + line[-5:], "after"]
    assert "".join(written) == f"before\n{line}\nafter\n"  # every character, in order, no newline added
    assert screen.feed("short\n") == ["short"]  # the next line is an ordinary one


def test_a_long_line_split_across_many_feeds_and_ended_by_close() -> None:
    screen, written = screen_with_transcript(8)
    for _ in range(50):
        assert screen.feed("0123456789") == []
    assert screen.close() == ["0123" + CUT_NOTE.format(cut=492) + "6789"]
    assert "".join(written) == "0123456789" * 50 + "\n"


def test_a_long_coloured_line_keeps_its_colours_in_head_and_tail_and_none_in_a_stripped_transcript() -> None:
    screen, written = screen_with_transcript(6)
    final = screen.feed("\x1b[31m" + "r" * 20 + "\x1b[0m\n")
    red = "\x1b[31m{}\x1b[0m".format
    assert final == [red("rrr") + CUT_NOTE.format(cut=14) + red("r") + red("rr")]  # the tail spans two rows
    assert strip_ansi("".join(written)) == "r" * 20 + "\n"


def test_a_line_wrapped_where_a_cursor_up_can_reach_stays_rows_of_its_own() -> None:
    screen, written = screen_with_transcript(4)
    screen.feed("bar\n\x1b[A")  # a nested bar's cursor-up: the rows are not plain output
    assert screen.feed("abcdefgh") == []
    assert screen.live() == ["abcd", "efgh"]
    assert screen.close() == ["abcd", "efgh"] and "".join(written) == "abcd\nefgh\n"


def test_erasing_a_long_line_before_it_ends_ends_its_line_in_the_transcript() -> None:
    screen, written = screen_with_transcript(4)
    screen.feed("abcdefgh")
    assert screen.feed("\x1b[2J\x1b[Gnext\n") == ["next"]  # "efgh" was erased before it was final
    assert "".join(written) == "abcd\nnext\n"


def test_a_long_line_costs_time_linear_in_its_length() -> None:
    """A hang guard, not a benchmark: 16 MB must not take much more than 8 times 2 MB."""

    def cost(megabytes: int) -> float:
        screen, written = screen_with_transcript(16384)
        chunk = "x" * 65536
        start = time.perf_counter()
        for _ in range(megabytes * 16):
            screen.feed(chunk)
            screen.live()
        screen.close()
        assert sum(map(len, written)) == megabytes * 16 * 65536 + 1
        return time.perf_counter() - start

    small, large = min(cost(2) for _ in range(3)), min(cost(16) for _ in range(2))  # the best of a few: less noise
    print(f"2 MB line: {small:.3f} s, 16 MB line: {large:.3f} s, ratio {large / small:.1f} (linear: 8, quadratic: 64)")
    assert large < 8 * small * 4, (small, large)
