"""Event messages are read without blocking: whole ones come out, a partial one never holds the kernel."""

from __future__ import annotations

import os
import signal
import struct
import time
from multiprocessing import Pipe

import pytest

from notebook_accel.launcher import WorkerError, notebook_launcher
from notebook_accel.launcher.supervision.messages import MessageReader
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(90)


def test_messages_of_every_size_come_out_whole_and_in_order() -> None:
    reader_conn, writer_conn = Pipe(duplex=False)
    reader = MessageReader(reader_conn.fileno())
    sent = [b"", b"a", b"x" * 100_000, b"y" * 3]
    got: list[bytes] = []
    for payload in sent:
        if len(payload) < 60_000:
            writer_conn.send_bytes(payload)
        else:  # does not fit the pipe: read while it is being written
            _send_in_pieces(writer_conn, reader, got, payload)
        got.extend(bytes(m) for m in reader.read())
    writer_conn.close()
    got.extend(bytes(m) for m in reader.read())
    assert got == sent and reader.eof and not reader.partial
    reader_conn.close()


def _send_in_pieces(conn: object, reader: MessageReader, got: list[bytes], payload: bytes) -> None:
    """Write a message by hand in two halves, reading in between (as the kernel does while a worker sends)."""
    fd = conn.fileno()  # type: ignore[attr-defined]
    os.write(fd, struct.pack("!i", len(payload)) + payload[:50_000])
    got.extend(bytes(m) for m in reader.read())
    assert reader.partial
    os.write(fd, payload[50_000:])


def test_a_partial_message_is_kept_and_never_blocks() -> None:
    reader_conn, writer_conn = Pipe(duplex=False)
    reader = MessageReader(reader_conn.fileno())
    os.write(writer_conn.fileno(), struct.pack("!i", 1 << 20) + b"x" * 1000)  # claims 1 MiB, sends 1000 bytes
    assert reader.read() == [] and reader.partial and not reader.eof  # returns at once
    writer_conn.close()
    reader_conn.close()


def partial_message_then_killed() -> None:
    """Rank 0 leaves a child holding its pipes, starts a message it never finishes, and is killed."""
    if os.environ["RANK"] == "0":
        from notebook_accel import channel

        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        writer = channel.current()
        assert writer is not None
        os.write(writer._conn.fileno(), struct.pack("!i", 1 << 20) + b"x" * 1000)
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(120)


def test_a_worker_killed_mid_message_does_not_hold_the_cell() -> None:
    """Before, the kernel blocked in recv_bytes for the rest of the message, which the grandchild holding the pipe
    open never sent: the cell hung past timeout= until the grandchild ended (120 s here; the test's limit is 90)."""
    with pytest.raises(WorkerError, match="rank 0: killed by SIGKILL"):
        notebook_launcher(partial_message_then_killed, num_processes=2, dashboard=RecordingSink(), timeout=60)
