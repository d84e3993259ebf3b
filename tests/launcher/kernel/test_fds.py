"""Shutting down the socket behind a descriptor without closing it (:func:`...kernel.fds.shut_down`): the rank's end
of output and the heartbeat's wake-up of a thread blocked on a silent link both use it."""

from __future__ import annotations

import os
import socket

from notebook_accel.launcher.kernel.fds import shut_down


def _open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_shutting_down_for_writing_sends_end_of_file_and_keeps_the_descriptor() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        before = _open_descriptors()
        shut_down(ours.fileno(), socket.SHUT_WR)
        assert theirs.recv(16) == b""  # the peer reads end of file
        theirs.sendall(b"still")
        assert ours.recv(16) == b"still"  # reading still works, and the descriptor is still ours
        assert _open_descriptors() == before


def test_a_descriptor_naming_another_file_or_no_socket_is_left_alone() -> None:
    ours, theirs = socket.socketpair()
    with ours, theirs:
        shut_down(ours.fileno(), socket.SHUT_RDWR, inode=os.fstat(theirs.fileno()).st_ino)  # not the one recorded
        ours.sendall(b"open")
        assert theirs.recv(16) == b"open"
        shut_down(ours.fileno(), socket.SHUT_RDWR, inode=os.fstat(ours.fileno()).st_ino)
        assert theirs.recv(16) == b""
    reader, writer = os.pipe()
    try:
        before = _open_descriptors()
        shut_down(reader, socket.SHUT_RDWR)  # a pipe: nothing to do, and no copy of it left open
        shut_down(10_000, socket.SHUT_RDWR)  # closed
        assert _open_descriptors() == before
    finally:
        os.close(reader)
        os.close(writer)
