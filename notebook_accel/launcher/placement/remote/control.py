"""A remote rank's control stream, its side: heartbeats and system samples to the kernel, stop signals from it.

The kernel's watch (:mod:`.watch`) reads the beats (a rank silent for ``node_timeout`` has lost its node) and the
samples (the dashboard's system panel); the kernel's stop comes back as one byte per signal (:data:`SIGNALS`), which
the rank sends to its own process group, as the kernel signals a local worker's group.
"""

from __future__ import annotations

import os
import select
import signal
import socket
import threading
import time

from notebook_accel.environment import LaunchEnvironment
from notebook_accel.launcher.placement.remote.link import send_frame

__all__ = ["ControlThread", "SIGNALS"]

SIGNALS = {b"T": signal.SIGTERM, b"K": signal.SIGKILL}  # the kernel's stop signals on the control stream


class ControlThread(threading.Thread):
    """Heartbeats and samples to the kernel, stop signals from it (a daemon: it ends with the rank's process).

    Args:
        sock: the rank's control stream; ``env``: its launch environment (rank and device, for the samples).
        beat_seconds, sample_seconds: heartbeat and system-sample periods.
    """

    def __init__(self, sock: socket.socket, env: LaunchEnvironment, beat_seconds: float,
                 sample_seconds: float) -> None:
        super().__init__(name="notebook-accel-control", daemon=True)
        self.sock = sock
        self.env = env
        self.beat_seconds = beat_seconds
        self.sample_seconds = sample_seconds

    def run(self) -> None:
        """Beat, sample, and obey until the kernel goes away."""
        from notebook_accel.monitor.sampler import SystemSampler

        env = self.env
        try:
            sampler: SystemSampler | None = SystemSampler({env.rank: os.getpid()}, {env.rank: env.device or "cpu"},
                                                          interval=self.sample_seconds)
        except Exception:  # noqa: BLE001 - no figures, but heartbeats still go
            sampler = None
        while True:
            try:
                now = time.monotonic()
                if sampler is not None and sampler.due(now):
                    send_frame(self.sock, ("sample", sampler.sample()))
                else:
                    send_frame(self.sock, ("beat", None))
                ready, _, _ = select.select([self.sock], [], [], self.beat_seconds)
                if ready:
                    data = self.sock.recv(16)
                    if not data:
                        return  # the kernel went away: the rank's holder ends it
                    for byte in data:
                        sig = SIGNALS.get(bytes([byte]))
                        if sig is not None:
                            os.killpg(os.getpgid(0), sig)
            except OSError:
                return
