"""The nodes' heartbeat on one machine: a silent peer is lost in bounded time, a finished one is not, and a store
that stops answering (its process frozen: no FIN, no RST) is node 0 lost. The two-host version with a cut link
is tests/distributed/test_multinode.py."""

from __future__ import annotations

import datetime
import os
import signal
import subprocess
import sys
import time
from multiprocessing.connection import wait
from typing import Any

import pytest

from notebook_accel.launcher.rendezvous.heartbeat import KEY, PeerWatch
from notebook_accel.launcher.rendezvous.store import StoreServer, bind_listener

pytestmark = pytest.mark.timeout(120)


def _client(port: int) -> Any:
    from torch.distributed import TCPStore

    return TCPStore("127.0.0.1", port, None, False, datetime.timedelta(seconds=10), wait_for_workers=False)


def test_a_peer_that_goes_silent_is_lost_and_a_finished_one_is_not() -> None:
    server = StoreServer(bind_listener("127.0.0.1", None), world_size=1, timeout=30)
    server.start()
    watch = PeerWatch("127.0.0.1", server.port, 0, 3, 2, interval=0.2, attempts=3, join_timeout=10)
    try:
        peer = _client(server.port)
        peer.set(f"{KEY}1", "1 10.0.0.9")  # node 1 beats once, then nothing
        peer.set(f"{KEY}2", "1 10.0.0.10")
        watch.start()
        peer.set(f"{KEY}2", "done")  # node 2 finished its run: not a loss
        started = time.monotonic()
        assert wait([watch.fd], 30), "the silent node was never declared lost"
        assert time.monotonic() - started < 10
        assert watch.lost is not None and watch.lost.rank == 2 and watch.lost.exc_type == "NodeUnreachable"
        assert "node 1 (10.0.0.9, ranks [2, 3]) is unreachable: no heartbeat for" in watch.lost.message
    finally:
        watch.close()
        server.close()
    assert watch.fd == -1


_FROZEN_STORE = """
import datetime, sys, time
from torch.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, None, True, datetime.timedelta(seconds=30), wait_for_workers=False)
print(store.port, flush=True)
time.sleep(120)
"""


def test_a_store_that_stops_answering_means_this_node_lost_the_run() -> None:
    serving = subprocess.Popen([sys.executable, "-c", _FROZEN_STORE], stdout=subprocess.PIPE, text=True)
    watch = None
    try:
        assert serving.stdout is not None
        port = int(serving.stdout.readline())
        watch = PeerWatch("127.0.0.1", port, 1, 2, 2, interval=0.2, attempts=3, join_timeout=30)
        watch.start()
        time.sleep(1.0)  # some beats go through
        assert watch.lost is None
        os.kill(serving.pid, signal.SIGSTOP)  # the connection stays open and silent
        started = time.monotonic()
        assert wait([watch.fd], 30), "node 1 never noticed that node 0's store stopped answering"
        assert time.monotonic() - started < 10
        assert watch.lost is not None and watch.lost.rank == 0
        assert f"this node (127.0.0.1, ranks [2, 3]) cannot reach node 0's store at 127.0.0.1:{port} for " in (
            watch.lost.message) and "this node lost the run and stopped its workers" in watch.lost.message
    finally:
        if watch is not None:
            watch.close()
        serving.kill()
        serving.wait()
