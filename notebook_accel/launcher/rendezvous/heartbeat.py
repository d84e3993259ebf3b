"""Noticing a lost node of a run of several machines, within a bounded time, even when no packet says so.

A node whose machine dies closes its connections (the other nodes' collectives fail at once), but a broken
link (a cable, a switch, a firewall dropping packets) sends nothing: every collective waits for a peer that
will never answer, on every node, for as long as the process group's timeout (half an hour by default). So
each node's launcher keeps a heartbeat through node 0's rendezvous store, in a thread of its own:

- every ``interval`` seconds it writes ``<beat> <its address>`` under its node's key, and reads the others';
- a node whose value has not changed for ``interval * attempts`` seconds is lost (node 0 sees this);
- a store that does not answer within that time means this node lost the run (the other nodes see this: they
  cannot tell a cut link from a frozen node 0, and it is their own run that ends): a watchdog thread checks the
  time of the last round trip every second, since a store operation on a silent link may block without end
  whatever the store's timeout, so a node cut off ends within the same bound as node 0 does;
- a node that ends its run writes ``done`` (it is not watched any more), and a store connection that is
  closed or refused (node 0's run ended) just ends the watch: only silence counts as a loss.

When the run ends, :meth:`PeerWatch.close` lets the thread say ``done``; a thread still blocked in a store
operation after that (a node cut off: its packets go nowhere, and TCP would retry for many minutes) is woken by
shutting its store connection down (found among this process's sockets by its peer port when it was made), so no
thread of a run outlives it for long.

A loss makes the pipe :attr:`PeerWatch.fd` readable; the supervisor then stops the local workers and raises
a ``WorkerError`` naming the unreachable node. The timing is ``rdzv_conf``'s ``keep_alive_interval`` and
``keep_alive_max_attempt`` (torch's c10d rendezvous names; 5 s and 3 by default).
"""

from __future__ import annotations

import datetime
import os
import signal
import socket
import threading
import time
from typing import Any

from notebook_accel.launcher.kernel.fds import shut_down
from notebook_accel.launcher.placement.remote.interface import address_toward
from notebook_accel.launcher.supervision.failures import WorkerFailure

__all__ = ["PeerWatch", "KEY"]

KEY = "notebook_accel/heartbeat/node"
_CLOSED = ("closed", "reset", "refused", "broken pipe", "eof")  # the store went away: no silence, no loss


class PeerWatch:
    """The heartbeat of one node of a run: :meth:`start` once the store is served, :meth:`close` at the end.

    Args:
        host: node 0's address; ``port`` its store port.
        node: this node's index; ``nodes`` how many take part; ``local`` processes per node.
        interval: seconds between beats; ``attempts``: beats missed before a node is lost.
        join_timeout: how long the first connection to node 0's store may take (node 0 may start later).
        secret: the run's shared store secret: the beats go through a ``KeyedStore`` (see :mod:`.keyed_store`).
    """

    def __init__(self, host: str, port: int, node: int, nodes: int, local: int, interval: float, attempts: int,
                 join_timeout: float, secret: bytes | None = None) -> None:
        self.host, self.port, self.node, self.nodes, self.local = host, port, node, nodes, local
        self.interval, self.limit, self.join_timeout = interval, interval * attempts, join_timeout
        # silence after the last round trip that ends this node's run: the limit, but more than one beat's time
        self._silence = self.limit if attempts > 1 else self.limit + interval
        self.lost: WorkerFailure | None = None
        self._secret = secret
        self._read, self._write = os.pipe()
        self._stop = threading.Event()
        self._lock = threading.Lock()  # the pipe is written by the thread and closed by close()
        self._store: Any = None
        self._connections: set[tuple[int, int]] = set()  # (fd, inode) of the store client's socket
        self._last_ok: float | None = None  # monotonic time of the last complete beat
        self._address = ""  # this node's address on the route to node 0, found when connected
        self._thread = threading.Thread(target=self._run, name=f"notebook-accel heartbeat node {node}", daemon=True)
        self._watchdog = threading.Thread(target=self._watch_store, name=f"notebook-accel watchdog node {node}",
                                          daemon=True)

    @property
    def fd(self) -> int:
        """Readable once a node is lost (then read :attr:`lost`); ``-1`` after :meth:`close`."""
        return self._read

    def descriptors(self) -> tuple[int, int]:
        """The pipe's two ends while open (for :mod:`notebook_accel.launcher.kernel.fds`)."""
        return self._read, self._write

    def start(self) -> None:
        """Start beating (in a daemon thread), and on the nodes other than 0 watching the beats go through."""
        self._thread.start()
        if self.node:
            self._watchdog.start()

    def close(self) -> None:
        """Stop beating and say ``done`` (so the others stop watching this node); never blocks for long."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=min(self.limit, 2.0))
        if self._thread.is_alive():  # blocked in a store operation on a silent link: wake it by ending the link
            _shut_down(self._connections)
            self._thread.join(timeout=2.0)
        with self._lock:
            for fd in (self._read, self._write):
                if fd >= 0:
                    os.close(fd)
            self._read = self._write = -1

    def _ranks(self, node: int) -> list[int]:
        return list(range(node * self.local, (node + 1) * self.local))

    def _lose(self, node: int, address: str, why: str) -> None:
        """Record the loss of ``node`` (the first one only) and wake the supervisor."""
        self._fail(node * self.local, f"node {node} ({address}, ranks {self._ranks(node)}) is unreachable: {why}; "
                                      "every worker on this node was stopped. A network between the nodes that drops "
                                      "packets (or a machine that froze) does this")

    def _cut_off(self, seconds: float, detail: str) -> None:
        """Record that this node cannot reach node 0's store (its run is lost) and wake the supervisor; the
        failure is rank 0's, whose node this node cannot reach (the supervisor keeps one failure per rank)."""
        address = self._address or _own_address(self.host, self.port)  # once cut off, there may be no route
        self._fail(0, f"this node ({address}, ranks {self._ranks(self.node)}) cannot reach node 0's store at "
                   f"{self.host}:{self.port} for {seconds:.0f} s: {detail}; this node lost the run and stopped its "
                   "workers (the other nodes end theirs too). The network between the nodes drops this node's "
                   "packets, or node 0's machine froze")

    def _fail(self, rank: int, text: str) -> None:
        """Record the first failure (with the timing that found it) and wake the supervisor."""
        if self.lost is not None or self._stop.is_set():
            return
        self.lost = WorkerFailure(rank, None, None, "NodeUnreachable", f"{text}; rdzv_conf keep_alive_interval/"
                                  f"keep_alive_max_attempt set how soon it is noticed (now {self.limit:g} s)", "")
        with self._lock:
            if self._write >= 0:
                os.write(self._write, b"x")

    def _run(self) -> None:
        """The thread: connect, then beat and watch until closed or a node is lost."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})  # the stop button is for the cell's thread
        from torch.distributed import TCPStore

        deadline = time.monotonic() + self.join_timeout  # node 0 may start later: retry until the join timeout
        while True:
            before = _connections_to(self.port)
            try:  # the client's socket timeout is fixed here: every later operation waits at most the limit
                store: Any = TCPStore(self.host, self.port, None, False, datetime.timedelta(seconds=self.limit),
                                 wait_for_workers=False)
                self._connections = _connections_to(self.port) - before
                if self._secret is not None:
                    from notebook_accel.launcher.rendezvous.keyed_store import KeyedStore

                    store = KeyedStore(store, self._secret)
                break
            except Exception:  # noqa: BLE001 - not up yet; never up: the workers' own rendezvous reports it
                if self._stop.wait(self.interval) or time.monotonic() > deadline:
                    return
        self._store = store
        address = self._address = _own_address(self.host, self.port)
        seen: dict[int, tuple[str, float]] = {}
        beat = 0
        try:
            while not self._stop.wait(self.interval if beat else 0.0):
                beat += 1
                store.set(f"{KEY}{self.node}", f"{beat} {address}")
                now = time.monotonic()
                for node in range(self.nodes):
                    if node != self.node and store.check([f"{KEY}{node}"]):
                        value = store.get(f"{KEY}{node}").decode()
                        if value == "done":
                            seen.pop(node, None)
                        elif node not in seen or seen[node][0] != value:
                            seen[node] = (value, now)
                for node, (value, since) in seen.items():
                    if now - since > self.limit:
                        self._lose(node, value.partition(" ")[2] or "?", f"no heartbeat for {now - since:.0f} s")
                        return
                self._last_ok = time.monotonic()
            store.set(f"{KEY}{self.node}", "done")
        except Exception as e:  # noqa: BLE001 - the store's errors have several types across torch versions
            text = str(e).lower()
            if self.node and not self._stop.is_set() and not any(word in text for word in _CLOSED):
                last = self._last_ok
                self._cut_off(self.limit if last is None else time.monotonic() - last,
                              f"a store operation failed ({type(e).__name__}: {str(e).splitlines()[0][:200]})")


    def _watch_store(self) -> None:
        """The watchdog (nodes other than 0): this node lost the run when no beat went through for the limit."""
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
        while not self._stop.wait(min(self.interval, 1.0)):
            last = self._last_ok
            if last is not None and time.monotonic() - last > self._silence:
                self._cut_off(time.monotonic() - last, "no heartbeat went through (a store operation is still "
                                                       "waiting for an answer)")
                return


def _connections_to(port: int) -> set[tuple[int, int]]:
    """(fd, inode) of every TCP socket of this process connected to a peer's ``port`` (not accepted on it)."""
    found = set()
    for name in os.listdir("/proc/self/fd"):
        try:
            sock = socket.socket(fileno=os.dup(int(name)))
        except OSError:  # not a socket, or closed meanwhile
            continue
        try:
            internet = sock.family in (socket.AF_INET, socket.AF_INET6) and sock.type == socket.SOCK_STREAM
            if internet and sock.getpeername()[1] == port and sock.getsockname()[1] != port:
                found.add((int(name), os.fstat(sock.fileno()).st_ino))
        except OSError:  # not connected, or not an internet socket
            pass
        finally:
            sock.close()
    return found


def _shut_down(connections: set[tuple[int, int]]) -> None:
    """Shut the sockets down (a thread blocked on one returns at once); a number now naming another file is
    left alone."""
    for fd, inode in connections:
        shut_down(fd, socket.SHUT_RDWR, inode)


def _own_address(host: str, port: int) -> str:
    """This machine's address on the route to ``host`` (what the other nodes know it by)."""
    try:
        return address_toward(host, port)
    except OSError:
        return socket.gethostname()
