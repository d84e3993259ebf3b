"""The terminal replay: what a terminal would show for carriage returns, cursor codes and colours."""

from __future__ import annotations

import io

import pytest

from notebook_accel.terminal import MAX_LINE, Screen, ansi_to_html, palette, strip_ansi
from notebook_accel.terminal.rows import CUT_NOTE


def replay(*chunks: str) -> tuple[list[str], list[str]]:
    """Feed ``chunks`` to a fresh screen; return (final lines, live lines)."""
    screen = Screen()
    final: list[str] = []
    for chunk in chunks:
        final += screen.feed(chunk)
    return final, screen.live()


def test_plain_lines_are_final_at_once_and_an_unfinished_line_is_live() -> None:
    assert replay("one\ntwo\nthr") == (["one", "two"], ["thr"])
    assert replay("one\n") == (["one"], [])


def test_carriage_return_overwrites_like_a_terminal() -> None:
    assert replay("10%\r50%\r100%\nnext\n") == (["100%", "next"], [])
    assert replay("abcdef\rXY\nnext\n") == (["XYcdef", "next"], [])  # overwritten, not cleared
    assert replay("loss 1.0", "\r", "loss 0.5") == ([], ["loss 0.5"])


def test_a_redrawn_line_stays_live_until_the_next_line_ends() -> None:
    # a bar on the next row moves the cursor back up to it *after* the line feed (tqdm's position=1)
    assert replay("bar 100%\r\x1b[2Kbar done\n") == ([], ["bar done"])
    assert replay("\rbar 1/2\n", "\rinner\x1b[A", "\rbar 2/2") == ([], ["bar 2/2", "inner"])


def test_crlf_ends_a_line_without_redrawing_it() -> None:
    assert replay("a\r\nb\r\n") == (["a", "b"], [])
    assert replay("a\r", "\nb\n") == (["a", "b"], [])  # a CR at the end of a chunk waits for the next one


def test_trailing_padding_is_not_part_of_the_line() -> None:
    assert replay("long progress text\rshort" + " " * 13 + "\nnext\n") == (["short", "next"], [])


def test_backspace_tab_and_cursor_columns() -> None:
    assert replay("ab\bc\n") == (["ac"], [])
    assert replay("a\tb\n") == (["a       b"], [])
    assert replay("abc\x1b[2Dx\n") == (["axc"], [])
    assert replay("abc\x1b[5Gz\n") == (["abc z"], [])
    assert replay("a\x1b[3Cb\n") == (["a   b"], [])


def test_settle_hands_out_a_held_bar_line_but_not_nested_bars() -> None:
    screen = Screen()
    assert screen.feed("\rbar 100%\n") == [] and screen.settle() == ["bar 100%"] and screen.settle() == []
    screen.feed("\router\n\rinner\x1b[A")  # nested bars in progress: nothing to settle
    assert screen.settle() == [] and screen.live() == ["outer", "inner"]


def test_erase_in_line() -> None:
    assert replay("abcdef\x1b[3D\x1b[K\n") == (["abc"], [])
    assert replay("abcdef\x1b[3D\x1b[1K\n") == (["    ef"], [])
    assert replay("abcdef\x1b[2K\rxy\nz\n") == (["xy", "z"], [])


def test_cursor_up_redraws_rows_kept_live() -> None:
    # two rows redrawn in place (what rich.live or a multi-line status does), then a final newline
    frames = ["status 1\nstep 1", "\x1b[1A\rstatus 2\nstep 2", "\x1b[1A\rstatus 3\nstep 3"]
    final, live = replay(*frames)
    assert live == ["status 3", "step 3"]
    assert "status 2" not in final


def test_erase_below_and_erase_all_live_rows() -> None:
    assert replay("a\nb", "\x1b[1A\r\x1b[J") == (["a"], [])  # redrawn row a... erased with everything below
    assert replay("bar 1\r", "\x1b[2J") == ([], [])


def test_unknown_sequences_and_controls_are_dropped() -> None:
    assert replay("\x1b[?25lhidden cursor\x1b[?25h\n") == (["hidden cursor"], [])
    assert replay("\x1b]0;window title\x07title set\n") == (["title set"], [])
    assert replay("\x1b]8;;https://x.org\x1b\\link\x1b]8;;\x1b\\\n") == (["link"], [])
    assert replay("bell\x07 nul\x00 esc\x1b(B ok\n") == (["bell nul esc ok"], [])
    assert replay("x\x1b[H\x1b[3;4Hy\n") == (["xy"], [])  # absolute positions are not a log's business


def test_an_escape_cut_between_two_chunks_is_completed() -> None:
    final, _ = replay("a\x1b", "[3", "1mred\x1b[", "0m\n")
    assert final == ["a\x1b[31mred\x1b[0m"]


def test_colours_are_kept_as_normalised_sgr_and_persist_across_lines() -> None:
    final, _ = replay("\x1b[1;32mok\n", "still green\x1b[0m plain\n")
    assert final == ["\x1b[1;32mok\x1b[0m", "\x1b[1;32mstill green\x1b[0m plain"]
    assert [strip_ansi(line) for line in final] == ["ok", "still green plain"]


def test_overwriting_keeps_each_cells_style() -> None:
    final, _ = replay("\x1b[31mred\x1b[0m\rX\nnext\n")
    assert final == ["X\x1b[31med\x1b[0m", "next"]


def test_over_long_line_shows_head_and_tail() -> None:
    final, live = replay("x" * (MAX_LINE + 10), "\n")
    assert final == ["x" * (MAX_LINE // 2) + CUT_NOTE.format(cut=10) + "x" * (MAX_LINE // 2)] and live == []


def test_close_makes_everything_final_and_resets() -> None:
    screen = Screen()
    assert screen.feed("a\nbar 50%\r") == ["a"]
    assert screen.close() == ["bar 50%"]
    assert screen.live() == [] and screen.feed("b\n") == ["b"]


def test_ansi_to_html_colours_and_escapes() -> None:
    assert ansi_to_html("<b> & plain") == "&lt;b&gt; &amp; plain"
    assert ansi_to_html("\x1b[31mred\x1b[0m") == '<span style="color:#cd3131">red</span>'
    assert ansi_to_html("\x1b[1;31mbold\x1b[0m") == '<span style="color:#f14c4c;font-weight:bold">bold</span>'
    assert ansi_to_html("\x1b[38;5;208mo\x1b[48;2;1;2;3mx") == (
        '<span style="color:#ff8700">o</span><span style="color:#ff8700;background-color:#010203">x</span>'
    )
    assert ansi_to_html("\x1b[4;9mu\x1b[24mv") == (
        '<span style="text-decoration:underline line-through">u</span>'
        '<span style="text-decoration:line-through">v</span>'
    )
    assert ansi_to_html("\x1b[7minv") == '<span style="color:#ffffff;background-color:#111111">inv</span>'


@pytest.mark.parametrize(("index", "colour"), [(1, "#cd3131"), (16, "#000000"), (196, "#ff0000"), (232, "#080808")])
def test_palette(index: int, colour: str) -> None:
    assert palette(index) == colour


class _Capture(io.StringIO):
    """A file that keeps each write, as the worker's stderr would pass them on."""

    def __init__(self) -> None:
        super().__init__()
        self.chunks: list[str] = []

    def write(self, s: str) -> int:
        self.chunks.append(s)
        return len(s)


def test_real_tqdm_bars_nested_with_messages() -> None:
    tqdm = pytest.importorskip("tqdm").tqdm
    out = _Capture()
    for epoch in tqdm(range(2), file=out, mininterval=0, ascii=True, ncols=60, desc="epochs"):
        for _ in tqdm(range(3), file=out, mininterval=0, ascii=True, ncols=60, desc="batches", leave=False):
            pass
        tqdm.write(f"epoch {epoch} done", file=out)
    screen = Screen()
    final: list[str] = []
    for chunk in out.chunks:
        final += screen.feed(chunk)
    final += screen.close()
    assert final[:2] == ["epoch 0 done", "epoch 1 done"]  # the bars never leave a trail of half-drawn states
    assert len(final) == 3 and final[2].startswith("epochs: 100%|") and "2/2" in final[2]


def test_real_tqdm_bar_is_one_live_line_while_it_runs() -> None:
    tqdm = pytest.importorskip("tqdm").tqdm
    out = _Capture()
    screen = Screen()
    bar = tqdm(total=4, file=out, mininterval=0, ascii=True, ncols=50)
    lives = []
    for _ in range(4):
        bar.update()
        assert screen.feed("".join(out.chunks)) == []
        out.chunks.clear()
        lives.append(screen.live())
    bar.close()
    assert all(len(live) == 1 for live in lives) and "4/4" in lives[-1][0]
    final = screen.feed("".join(out.chunks))
    assert len(final) == 0 and screen.close()[0].startswith("100%|")
