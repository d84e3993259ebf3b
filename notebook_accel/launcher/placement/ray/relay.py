"""The relay of a run whose workers cannot reach the kernel (a Ray Client notebook, a notebook behind NAT): an actor
inside the cluster that the workers dial instead, and that the kernel reads and writes through Ray calls.

The workers do exactly what they do on the direct path: each dials four streams and proves the run's secret
(:mod:`notebook_accel.launcher.placement.remote.link`), here to :class:`RunRelay`'s listener on its node. The relay
keeps what arrives, stream by stream and in order, until the kernel's next :meth:`RunRelay.pull` takes it (a long poll
that returns at once when something is waiting, after gathering for :data:`GATHER_SECONDS`, so a fast-logging run costs
the kernel a few Ray calls a second, not one per record); it writes the kernel's stop signals to a rank's control stream
(:meth:`RunRelay.push`). A rank's stream that ends is told as an end of file. Nothing is interpreted: the bytes are
those a direct stream carries, so the kernel's end (:mod:`.relayed`) turns them back into local sockets the supervisor
reads as it reads any worker's.
"""

from __future__ import annotations

import os
import selectors
import socket
import threading
import time
from typing import Optional

from notebook_accel.launcher.placement.remote.link import BackChannel, Dialed

__all__ = ["RunRelay", "Chunk", "GATHER_SECONDS", "HELD_BYTES"]

Chunk = tuple[str, int, bytes, Optional[bytes]]  # ("open" | "data" | "end" | "error", rank, kind, data)
GATHER_SECONDS = 0.15  # a pull that finds something waits this long for more before it returns
HELD_BYTES = 16 << 20  # the relay stops reading its workers while this much waits for the kernel (backpressure)
_READ = 1 << 16


class RunRelay:
    """The cluster's end of a relayed run (made a Ray actor, threaded, by :mod:`.relayed`).

    Args:
        secret: the run's secret, which each worker's stream must prove (and the relay proves back).
        expected: how many streams to accept (four per rank).
        connect_seconds: how long to wait for them all.
    """

    def __init__(self, secret: bytes, expected: int, connect_seconds: float) -> None:
        import ray

        self._channel = BackChannel(ray.util.get_node_ip_address(), secret)
        self._expected = expected
        self._deadline = time.monotonic() + connect_seconds
        self._chunks: list[Chunk] = []
        self._held = 0
        self._ready = threading.Condition()
        self._streams: dict[tuple[int, bytes], socket.socket] = {}
        self._new: list[Dialed] = []
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = os.pipe()
        self._selector.register(self._wake_r, selectors.EVENT_READ)
        self._closed = threading.Event()
        self._threads = [threading.Thread(target=self._accept, name="notebook-accel-relay-accept", daemon=True),
                         threading.Thread(target=self._read, name="notebook-accel-relay-read", daemon=True)]
        for thread in self._threads:
            thread.start()

    def address(self) -> tuple[str, int]:
        """Where the workers dial (this node's address and the listener's port)."""
        return self._channel.address

    def pull(self, wait: float) -> list[Chunk]:
        """What the workers sent since the last pull, in order: streams opened, bytes, ends, and the relay's own
        failure (``("error", -1, b"", text)``). Waits up to ``wait`` seconds for the first chunk, then
        :data:`GATHER_SECONDS` for more; ``[]`` when nothing came."""
        with self._ready:
            if not self._chunks and not self._closed.is_set():
                self._ready.wait(wait)
        if self._chunks:
            time.sleep(GATHER_SECONDS)
        with self._ready:
            chunks, self._chunks, self._held = _merged(self._chunks), [], 0
            self._ready.notify_all()
        return chunks

    def push(self, rank: int, data: bytes) -> bool:
        """Write ``data`` (stop signals) to rank ``rank``'s control stream; ``False`` when it is gone."""
        sock = self._streams.get((rank, b"C"))
        if sock is None:
            return False
        try:
            sock.sendall(data)
            return True
        except OSError:
            return False

    def end_stream(self, rank: int, kind: bytes) -> None:
        """Close one of a rank's streams (the kernel closed its end)."""
        sock = self._streams.pop((rank, kind), None)
        if sock is not None:
            self._forget(sock)

    def close(self) -> None:
        """Close every stream and the listener (the run is over), and wait for the relay's threads. Idempotent."""
        if self._closed.is_set():
            return
        self._closed.set()
        os.write(self._wake_w, b"x")
        with self._ready:
            self._ready.notify_all()
        for thread in self._threads:
            thread.join(timeout=5.0)
        self._channel.close()
        self._selector.close()
        os.close(self._wake_r)
        os.close(self._wake_w)

    def _add(self, chunk: Chunk) -> None:
        with self._ready:
            self._chunks.append(chunk)
            self._held += len(chunk[3] or b"")
            self._ready.notify_all()

    def _accept(self) -> None:
        """Take the workers' streams (each proves the secret) until all came, or tell the kernel why not."""
        try:
            for dialed in self._channel.accept(self._expected, self._deadline, self._check_open):
                with self._ready:
                    self._new.append(dialed)
                os.write(self._wake_w, b"n")
        except TimeoutError as e:
            self._add(("error", -1, b"", f"the workers did not reach the relay at {self._channel.address[0]}:"
                                         f"{self._channel.address[1]} in time ({e})".encode()))
        except Exception as e:  # noqa: BLE001 - told to the kernel, which ends the run with it
            if not self._closed.is_set():
                self._add(("error", -1, b"", f"the relay stopped accepting: {type(e).__name__}: {e}".encode()))
        finally:
            self._channel.close()

    def _check_open(self) -> None:
        if self._closed.is_set():
            raise TimeoutError("the run ended before its workers connected")

    def _read(self) -> None:
        """Move what the workers send into the chunks the kernel pulls, until :meth:`close`."""
        while not self._closed.is_set():
            if self._held >= HELD_BYTES:  # the kernel is behind: let the workers' sends wait
                with self._ready:
                    self._ready.wait(0.1)
                continue
            for key, _ in self._selector.select(0.5):
                if key.fileobj == self._wake_r:
                    os.read(self._wake_r, 4096)
                    self._register_new()
                    continue
                rank, kind = key.data
                sock = key.fileobj
                assert isinstance(sock, socket.socket)
                try:
                    data = sock.recv(_READ)
                except (BlockingIOError, InterruptedError):
                    continue
                except OSError:
                    data = b""
                if data:
                    self._add(("data", rank, kind, data))
                else:
                    self._add(("end", rank, kind, None))
                    self._streams.pop((rank, kind), None)
                    self._forget(sock)
        for sock in list(self._streams.values()):
            self._forget(sock)
        self._streams.clear()

    def _register_new(self) -> None:
        with self._ready:
            new, self._new = self._new, []
        for dialed in new:
            dialed.sock.setblocking(False)
            self._streams[(dialed.rank, dialed.kind)] = dialed.sock
            self._selector.register(dialed.sock, selectors.EVENT_READ, (dialed.rank, dialed.kind))
            self._add(("open", dialed.rank, dialed.kind, None))

    def _forget(self, sock: socket.socket) -> None:
        try:
            self._selector.unregister(sock)
        except (KeyError, ValueError):
            pass
        sock.close()


def _merged(chunks: list[Chunk]) -> list[Chunk]:
    """Adjacent data chunks of the same stream joined (fewer, larger pieces to pickle and write)."""
    out: list[Chunk] = []
    for chunk in chunks:
        last = out[-1] if out else None
        if last is not None and last[0] == chunk[0] == "data" and last[1:3] == chunk[1:3]:
            out[-1] = ("data", chunk[1], chunk[2], (last[3] or b"") + (chunk[3] or b""))
        else:
            out.append(chunk)
    return out
