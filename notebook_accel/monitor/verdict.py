"""Why a run is slow, in plain words, from the workers' step times and the GPUs' utilisation.

:class:`StepBreakdown` adds up each rank's :class:`~notebook_accel.events.StepTimes`; :func:`verdict` names the
one thing the numbers clearly point at, or says nothing when they do not (no verdict beats a wrong one: users act
on it). In this order:

- **idle**: every rank's process tree has used no CPU and no GPU for 5 s or more up to now (a hang, see
  :mod:`.idle`; 2 s at the end of a run stopped by its timeout or an interrupt): what the run does now, whatever
  its steps said before;
- **data-bound**, every rank: each rank waits 30% or more of its steps for its DataLoader (two equally slow loaders
  make the ranks wait for each other too: that is no straggler);
- a **straggler**: one rank's own work per step (its step less its wait for data and for the others'
  communication) is 1.3x or more the others', while the others spend a fifth of their steps waiting in
  communication and it spends less than half their share there (it arrives last, so it hardly waits; a run where
  everyone waits is communication-bound, not held up by one rank), and its extra work explains at least 3/4 of
  the others' wait (otherwise they mostly wait for the communication itself: a loaded machine slowing one rank of
  a communication-heavy run is no straggler);
- **data-bound**, one rank: it waits 30% or more of its steps for its DataLoader;
- **communication-bound**: every rank *waits* for communication 30% or more of its steps (for DDP the all-reduce
  left when backward's computation ends, see :mod:`.steps`: a lower bound of what communication costs, since the
  all-reduce that overlaps the computation also slows it where they share the CPU);
- a **GPU** that is busy less than half the time, when no other reason was found.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from statistics import median

from notebook_accel.events import StepTimes
from notebook_accel.monitor.idle import idle_verdict

__all__ = ["RankSteps", "StepBreakdown", "verdict"]

MIN_STEPS = 5
COMM_BOUND = 0.3  # the least share of every rank's step spent waiting for communication that is named


@dataclass
class RankSteps:
    """One rank's summed step times (seconds) over :attr:`steps` steps."""

    steps: int = 0
    step: float = 0.0
    data: float = 0.0
    forward_backward: float = 0.0
    comm: float = 0.0
    optimizer: float = 0.0
    loader_workers: int = 0

    def share(self, seconds: float) -> float:
        """``seconds`` as a fraction of the step time."""
        return seconds / self.step if self.step > 0 else 0.0

    @property
    def step_ms(self) -> float:
        """The mean step, in milliseconds (0 without steps): the one step time every surface shows."""
        return 1000 * self.step / self.steps if self.steps else 0.0

    @property
    def compute(self) -> float:
        """Forward and backward without the communication in flight meanwhile."""
        return max(0.0, self.forward_backward - self.comm)

    @property
    def optimizer_own(self) -> float:
        """The optimizer step without the communication beyond forward and backward (ZeRO gathers the updated
        parameters there), so that no second is counted twice."""
        return max(0.0, self.optimizer - max(0.0, self.comm - self.forward_backward))

    @property
    def other(self) -> float:
        """What the step spent outside data, forward/backward, the optimizer and communication."""
        counted = self.data + max(self.forward_backward, self.comm) + self.optimizer_own
        return max(0.0, self.step - counted)

    @property
    def own_work(self) -> float:
        """Per step: the time neither waiting for data nor for communication (waiting for the others shows up
        there)."""
        return max(0.0, self.step - self.comm - self.data) / self.steps if self.steps else 0.0

    def split(self) -> dict[str, float]:
        """Fractions of the step: data, compute, communication, optimizer, other. They add up to 1 (to about 1 only
        where the measured parts exceed the step: DDP's communication is a running mean of sampled steps).

        Example:
            >>> r = RankSteps(steps=10, step=10.0, data=1.0, forward_backward=4.0, comm=6.0, optimizer=3.0)
            >>> {k: round(v, 2) for k, v in r.split().items()}  # 2 s of communication beyond backward: in the step
            {'data': 0.1, 'compute': 0.0, 'comm': 0.6, 'optimizer': 0.1, 'other': 0.2}
        """
        return {"data": self.share(self.data), "compute": self.share(self.compute), "comm": self.share(self.comm),
                "optimizer": self.share(self.optimizer_own), "other": self.share(self.other)}


@dataclass
class StepBreakdown:
    """Every rank's step times so far.

    Example:
        >>> b = StepBreakdown()
        >>> b.add(StepTimes(0, 10, 10.0, 5.0, 4.0, 2.0, 0.5, 1.0, 0))
        >>> round(b.ranks[0].split()["data"], 2)
        0.5
    """

    ranks: dict[int, RankSteps] = field(default_factory=dict)

    def add(self, times: StepTimes) -> None:
        """Add one worker's report."""
        r = self.ranks.setdefault(times.rank, RankSteps())
        r.steps += times.steps
        r.step += times.step_seconds
        r.data += times.data_seconds
        r.forward_backward += times.forward_backward_seconds
        r.comm += times.comm_seconds
        r.optimizer += times.optimizer_seconds
        r.loader_workers = times.loader_workers

    def lines(self) -> list[str]:
        """``rank 0: 48 ms a step: data 46%, compute 30%, communication 12%, optimizer 4%, other 8%`` per rank."""
        out = []
        for rank, r in sorted(self.ranks.items()):
            if not r.steps:
                continue
            parts = ", ".join(f"{_NAMES[k]} {v:.0%}" for k, v in r.split().items())
            out.append(f"rank {rank}: {r.step_ms:.0f} ms a step: {parts}")
        return out


_NAMES = {"data": "data", "compute": "compute", "comm": "communication", "optimizer": "optimizer", "other": "other"}


def _straggler(ranks: Mapping[int, RankSteps]) -> str | None:
    """The straggler sentence, when one rank's own work clearly exceeds the others'."""
    if len(ranks) < 2:
        return None
    work = {rank: r.own_work for rank, r in ranks.items()}
    slowest = max(work, key=lambda rank: work[rank])
    others = [w for rank, w in work.items() if rank != slowest]
    typical = median(others)
    waiting = min(ranks[rank].share(ranks[rank].comm) for rank in ranks if rank != slowest)
    own_wait = ranks[slowest].share(ranks[slowest].comm)  # a straggler arrives last: it hardly waits itself
    if typical <= 0 or work[slowest] < 1.3 * typical or waiting < 0.2 or own_wait > 0.5 * waiting:
        return None
    their_wait = median(ranks[rank].comm / ranks[rank].steps for rank in ranks if rank != slowest)
    if work[slowest] - typical < 0.75 * their_wait:  # they mostly wait for communication itself, not for it
        return None
    return (f"rank {slowest} is a straggler: its own work (compute, optimizer and the rest, its data wait left "
            f"out) takes {work[slowest] / typical:.1f}x the others' per step; the others wait for it in the next "
            "collective")


def verdict(breakdown: StepBreakdown, gpu_utilization: Mapping[int, float] | None = None, idle_seconds: float = 0.0,
            waiting_in: str | None = None, stopped: bool = False) -> str | None:
    """The one clear reason the run is slow, in words, or ``None`` when the numbers do not show one.

    Args:
        breakdown: every rank's step times.
        gpu_utilization: each rank's mean GPU utilisation % (empty or ``None`` on CPU).
        idle_seconds: how long every rank has been idle up to now (:class:`~notebook_accel.monitor.idle.IdleWatch`).
        waiting_in: who waits where, where the workers reported it (:meth:`~notebook_accel.monitor.stalls.Stalls.text`).
        stopped: the run has just been stopped from outside (its timeout, an interrupt): a shorter idle stretch
            at its end is named (:func:`~notebook_accel.monitor.idle.idle_verdict`).
    """
    idle = idle_verdict(idle_seconds, waiting_in, stopped)
    if idle:
        return idle
    ranks = {rank: r for rank, r in breakdown.ranks.items() if r.steps >= MIN_STEPS}
    if not ranks:
        return None
    data = {rank: r.share(r.data) for rank, r in ranks.items()}
    worst = max(data, key=lambda rank: data[rank])
    everyone = len(ranks) > 1 and min(data.values()) >= 0.3
    found = None if everyone else _straggler(ranks)
    if found:
        return found
    if data[worst] >= 0.3:
        who = "every rank waits" if everyone else f"rank {worst} waits"
        return (f"data-bound: {who} {data[worst]:.0%} of each step for its DataLoader; raise num_workers "
                f"(now {ranks[worst].loader_workers}) or make loading cheaper")
    comm = min(r.share(r.comm) for r in ranks.values())
    if len(ranks) > 1 and comm >= COMM_BOUND:
        return (f"communication-bound: {comm:.0%} of the step is spent waiting for communication (gradients, and "
                "parameters when sharded); a larger per-device batch or gradient_accumulation_steps=4 would "
                "amortise it")
    for rank, used in sorted((gpu_utilization or {}).items()):
        if used < 50:
            return f"rank {rank}'s GPU is busy only {used:.0f}% of the time"
    return None
