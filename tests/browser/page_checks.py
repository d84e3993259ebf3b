"""What the browser test measures in a page: text cut off, red lines, and frames of a live dashboard.

The JavaScript runs in the page (``locator.evaluate``); the Python functions judge what it returns, so the rules
(which states may appear together, how much the height may move, how far the clock may lag) are plain code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["OVERFLOW_JS", "FRAME_JS", "RED_LINES_JS", "Frame", "parse_duration", "inconsistent", "height_jumps"]

# Every visible element of ``root`` whose text is cut: a box that hides its overflow (or ends it with an
# ellipsis) and holds more than it shows, a box of text that may not wrap and is wider than its box (scrolled out
# of sight, or drawn over the next figure), a dropdown whose chosen value is wider than the room left beside its
# arrow, or a blank dropdown. Returns one line per problem.
OVERFLOW_JS = """(root) => {
  const bad = [];
  const ctx = document.createElement('canvas').getContext('2d');
  const fits = (el, text) => {
    const cs = getComputedStyle(el);
    ctx.font = `${cs.fontStyle} ${cs.fontWeight} ${cs.fontSize} ${cs.fontFamily}`;
    const room = el.clientWidth - parseFloat(cs.paddingLeft) - parseFloat(cs.paddingRight);
    return [ctx.measureText(text).width, room];
  };
  for (const el of root.querySelectorAll('*')) {
    if (!el.getClientRects().length) continue;
    if (el.tagName === 'SELECT' && !el.multiple) {
      const opt = el.options[el.selectedIndex];
      const label = (el.closest('.widget-inline-hbox') || el).innerText.trim().slice(0, 40);
      if (!opt || !opt.text.trim()) { bad.push(`blank dropdown (${label})`); continue; }
      const [need, room] = fits(el, opt.text);
      if (need > room + 1) bad.push(`dropdown value "${opt.text}" needs ${need | 0}px, has ${room | 0}px`);
      continue;
    }
    if (el.tagName === 'INPUT' && el.type === 'text' && el.value) {
      const [need, room] = fits(el, el.value);
      if (need > room + 1) bad.push(`text value "${el.value}" needs ${need | 0}px, has ${room | 0}px`);
      continue;
    }
    const cs = getComputedStyle(el);
    const hides = ['hidden', 'clip'].includes(cs.overflowX) || cs.textOverflow === 'ellipsis';
    // text that may not wrap and is wider than its box: scrolled out of sight, or drawn over its neighbour
    const nowrap = cs.whiteSpace === 'nowrap' && cs.display !== 'inline';
    if ((hides || nowrap) && el.scrollWidth > el.clientWidth + 1 && el.innerText && el.innerText.trim()
        && !el.querySelector('svg, img, canvas')) {
      bad.push(`"${el.innerText.trim().slice(0, 80)}" is ${el.scrollWidth}px wide in ${el.clientWidth}px`);
    }
  }
  return bad;
}"""

# The text of every log line drawn in the error colour inside ``root``.
RED_LINES_JS = """(root) => Array.from(root.querySelectorAll('.nacc-logs span'))
  .filter(s => getComputedStyle(s).color === 'rgb(180, 35, 24)').map(s => s.innerText)"""

# One frame of the live dashboard inside ``root`` (a cell): header text, each rank's status, the dashboard's
# height; null while it is not drawn.
FRAME_JS = """(root) => {
  const dash = root.querySelector('.nacc-dashboard');
  if (!dash) return null;
  const header = dash.querySelector('.nacc-header');
  const rows = Array.from(dash.querySelectorAll('.nacc-ranks tr')).slice(1);
  const quiet = Array.from(dash.querySelectorAll('.nacc-no-output')).some(e => e.getClientRects().length);
  return {t: performance.now() / 1000, header: header ? header.innerText.trim() : '',
          ranks: rows.map(r => (r.children[1] || {innerText: ''}).innerText.trim()),
          height: dash.getBoundingClientRect().height, compact: dash.classList.contains('nacc-compact'),
          filled: [!!dash.querySelector('.nacc-curves svg'), !quiet]};
}"""

_DURATION = re.compile(r"^(?:(\d+)h )?(?:(\d+)m )?(\d+(?:\.\d+)?)s$")


@dataclass(frozen=True)
class Frame:
    """One sampled frame: page time (s), header status and clock, rank statuses, dashboard height (px), and which
    of the parts that come with the run's first values are there (``(curves, output)``)."""

    t: float
    status: str
    clock: float | None
    ranks: tuple[str, ...]
    height: float
    filled: tuple[bool, bool] = (False, False)
    compact: bool = False

    @classmethod
    def from_page(cls, raw: dict[str, object]) -> "Frame":
        """Parse what :data:`FRAME_JS` returned (``train · running · 4.2s · 2 processes · gloo``)."""
        bits = [b.strip() for b in str(raw["header"]).split("·")]
        clock = parse_duration(bits[2]) if len(bits) > 2 else None
        filled = tuple(raw.get("filled", (False, False)))  # type: ignore[call-overload]
        return cls(float(raw["t"]), bits[1] if len(bits) > 1 else "", clock,  # type: ignore[arg-type]
                   tuple(raw["ranks"]), float(raw["height"]),  # type: ignore[arg-type]
                   (bool(filled[0]), bool(filled[1])), bool(raw.get("compact", False)))


def parse_duration(text: str) -> float | None:
    """``4.2s`` / ``5m 35s`` / ``1h 02m 03s`` in seconds; ``None`` for anything else."""
    m = _DURATION.match(text.strip())
    if m is None:
        return None
    hours, minutes, seconds = m.groups()
    return int(hours or 0) * 3600 + int(minutes or 0) * 60 + float(seconds)


def inconsistent(frame: Frame) -> str:
    """Why the header and the rank rows contradict each other in ``frame`` (``""`` when they agree)."""
    ended = {"finished", "failed", "stopped"}
    if frame.status in ("starting", "running") and frame.ranks and all(r in ended for r in frame.ranks):
        return f"header says {frame.status} while every rank has ended: {frame.ranks}"
    if frame.status == "finished" and any(r != "finished" for r in frame.ranks):
        return f"header says finished while ranks are {frame.ranks}"
    if frame.status == "starting" and any(r in ended for r in frame.ranks):
        return f"header says starting while ranks are {frame.ranks}"
    if frame.status in ("timeout", "stopped") and "failed" in frame.ranks:
        return f"header says {frame.status} while ranks are {frame.ranks}: no rank failed"
    return ""


def height_jumps(frames: list[Frame], tolerance: float = 0.10) -> list[str]:
    """The frames whose height differs by more than ``tolerance`` from the first frame that has every part the run
    ever shows, the compact line before the view grows left aside (:mod:`notebook_accel.widgets.room`: a run
    grows once, when it is known to be long, never after)."""
    frames = [f for f in frames if not f.compact]
    if not frames:
        return []
    parts = (any(f.filled[0] for f in frames), any(f.filled[1] for f in frames))
    base = next(f for f in frames if all(have or not wanted for have, wanted in zip(f.filled, parts)))
    first = base.height
    return [f"{f.height:.0f}px at {f.t - frames[0].t:.1f}s (first full frame {first:.0f}px at "
            f"{base.t - frames[0].t:.1f}s)" for f in frames[frames.index(base):]
            if abs(f.height - first) > tolerance * first]
