"""A rank's four back-channel streams opened at once (:func:`...remote.dial.connect_all`): each authenticated,
dialled together (a kernel that answers only once all four are waiting still serves
them), and every failure is the same clear error with no stream left open. No cluster: the kernel is this process."""

from __future__ import annotations

import gc
import os
import socket
import threading
import warnings
import time
from typing import Any

import pytest

from notebook_accel.launcher.placement.remote import link
from notebook_accel.launcher.placement.remote.dial import connect_all
from notebook_accel.launcher.placement.remote.link import KINDS, BackChannel

SECRET = b"k" * 32
HANG_GUARD = 30.0  # seconds: only a hang guard, never a timing claim


def _unclosed(caught: list[warnings.WarningMessage]) -> list[str]:
    """The sockets left for the garbage collector to close (what a failure must not leave)."""
    gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def _patient_kernel(listener: socket.socket, refuse: bytes = b"") -> list[socket.socket]:
    """A kernel that starts no handshake before every kind has connected (a one-at-a-time dialler waits for its
    nonce forever), then proves the secret to each, except to the stream of kind ``refuse``, which it hangs up."""
    accepted: list[socket.socket] = []
    listener.settimeout(HANG_GUARD)
    try:
        while len(accepted) < len(KINDS):
            accepted.append(listener.accept()[0])
    except OSError:
        return accepted  # the dialler gave up: the test sees its error
    for sock in accepted:
        sock.settimeout(HANG_GUARD)
        nonce = os.urandom(32)
        try:
            sock.sendall(nonce)
            hello = sock.recv(link._HELLO.size + 32, socket.MSG_WAITALL)
            if len(hello) < link._HELLO.size + 32:
                continue  # the dialler gave up on this one (another stream was refused)
            rank, kind, theirs = link._HELLO.unpack(hello[:link._HELLO.size])
            assert hello[link._HELLO.size:] == link._prove(SECRET, b"worker", nonce, rank, kind)
            if kind == refuse:
                sock.close()
            else:
                sock.sendall(link._prove(SECRET, b"kernel", theirs, rank, kind))
        except OSError:
            continue  # the dialler gave up on this one (another stream was refused)
    return accepted


def _serve(refuse: bytes = b"") -> tuple[socket.socket, threading.Thread, list[list[socket.socket]]]:
    listener = socket.create_server(("127.0.0.1", 0))
    served: list[list[socket.socket]] = []
    thread = threading.Thread(target=lambda: served.append(_patient_kernel(listener, refuse)), daemon=True)
    thread.start()
    return listener, thread, served


def test_the_streams_are_dialled_together_and_each_is_authenticated() -> None:
    listener, kernel, served = _serve()
    try:
        streams = connect_all(listener.getsockname(), SECRET, 3, timeout=HANG_GUARD / 3)
        kernel.join(HANG_GUARD)
        assert list(streams) == list(KINDS) and len(served[0]) == len(KINDS)
        for kind, stream in streams.items():
            stream.sendall(kind)
            assert stream.gettimeout() is None
        received = sorted(peer.recv(1) for peer in served[0])
        assert received == sorted(KINDS)
        for stream in streams.values():
            stream.close()
    finally:
        listener.close()
        for peer in served[0] if served else []:
            peer.close()


def test_a_real_back_channel_accepts_the_four_streams_by_kind() -> None:
    channel = BackChannel("127.0.0.1", SECRET)
    try:
        result: list[Any] = []
        dialler = threading.Thread(target=lambda: result.append(connect_all(channel.address, SECRET, 1, timeout=10)))
        dialler.start()
        dialed = list(channel.accept(len(KINDS), deadline=time.monotonic() + HANG_GUARD))
        dialler.join(HANG_GUARD)
        assert sorted((d.rank, d.kind) for d in dialed) == sorted((1, kind) for kind in KINDS)
        for stream in [*result[0].values(), *(d.sock for d in dialed)]:
            stream.close()
    finally:
        channel.close()


def test_a_refused_kernel_gives_the_clear_error_and_leaves_nothing_open() -> None:
    with socket.create_server(("127.0.0.1", 0)) as nobody:
        address = nobody.getsockname()  # closed below: nothing listens there
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with pytest.raises(ConnectionError, match=rf"rank 2 could not reach the kernel at 127.0.0.1:{address[1]} .*"
                                                  "the notebook's machine must accept connections from the cluster"):
            connect_all(address, SECRET, 2, timeout=5)
        assert _unclosed(caught) == []


def test_one_stream_refused_closes_the_others_and_raises_its_error() -> None:
    listener, kernel, served = _serve(refuse=b"O")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with pytest.raises(ConnectionError, match="closed the connection during the handshake"):
                connect_all(listener.getsockname(), SECRET, 0, timeout=HANG_GUARD / 3)
            assert _unclosed(caught) == []
        kernel.join(HANG_GUARD)
        assert len(served[0]) == len(KINDS)
        for peer in served[0]:
            if peer.fileno() != -1:
                peer.settimeout(HANG_GUARD)
                assert peer.recv(1) == b""  # the dialler closed its end of every stream that had opened
                peer.close()
    finally:
        listener.close()
