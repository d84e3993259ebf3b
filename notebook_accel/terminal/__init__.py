"""Output as a terminal shows it: carriage returns, cursor movements, erasing and ANSI colours, in pure Python.

Workers write for a terminal: tqdm redraws its bar with ``\\r``, nested bars move the cursor up (``ESC[A``),
libraries colour their text with SGR sequences (``ESC[31m``). A :class:`Screen` replays one output stream the
way a terminal would and hands back the lines that can no longer change (*final* lines) and the few that still
can (the *live* region: the line being written, and the lines a cursor-up has shown to be redrawn in place).

Lines are handed out as *styled text*: plain characters with normalised SGR sequences where the style
changes, and a reset at the end of a styled line. :func:`strip_ansi` turns it into plain text,
:func:`ansi_to_html` into HTML (``<span style="color:...">``) for the dashboard's log pane.

What is understood: ``\\n`` (new line, column 0), ``\\r``, ``\\b``, ``\\t``; CSI ``A``/``B``/``C``/``D`` (cursor
up/down/forward/back), ``E``/``F`` (next/previous line), ``G`` (column), ``K`` (erase in line), ``J`` (erase
below/all), ``m`` (SGR: bold, dim, italic, underline, inverse, strike, 16/256/24-bit colours). Everything else
(other CSI sequences, OSC titles and hyperlinks, other escapes, other control characters) is dropped. A line
above the cursor is final as soon as no cursor-up seen so far could reach it; a line that was redrawn with
``\\r`` (a progress bar) stays live until the line after it ends too, since a nested bar moves back up to it
only after the line feed. A line longer than :data:`MAX_LINE` columns wraps; written as plain output it is
handed out as one line, its head and tail with a note of how many characters were cut between them, while
the screen's *transcript* (a log file) receives it whole: the cost stays linear however long the line gets.

This package imports nothing beyond the standard library: the launcher, the console sink and the dashboard
all use it.

Example:
    >>> s = Screen()
    >>> s.feed("epoch 1\\n10%\\r50%")
    ['epoch 1']
    >>> s.live()
    ['50%']
    >>> s.feed("\\r100%\\ndone\\n")
    ['100%', 'done']
"""

from __future__ import annotations

from notebook_accel.terminal.render import ansi_to_html, palette
from notebook_accel.terminal.screen import MAX_LINE, Screen
from notebook_accel.terminal.sgr import Style, strip_ansi

__all__ = ["Screen", "Style", "strip_ansi", "ansi_to_html", "palette", "MAX_LINE"]
