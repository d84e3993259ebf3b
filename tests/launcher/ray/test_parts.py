"""The Ray placement's parts without a cluster: the request's checks, the back channel's handshake (strangers
included) and frames, the refusal of what cannot be pickled, the fit check, the rank order, and the watch's verdicts
(a result, a closed stream, a silent node)."""

from __future__ import annotations

import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

from notebook_accel import LaunchError, notebook_launcher
from notebook_accel.cluster import RayCluster, check_cluster
from notebook_accel.events import RankSystem, SystemSample
from notebook_accel.launcher.placement.ray import reserve
from notebook_accel.launcher.placement.remote import link, pickling
from notebook_accel.launcher.placement.ray.handles import RayWorkerHandle
from notebook_accel.launcher.placement.remote.dial import connect_back
from notebook_accel.launcher.placement.remote.link import BackChannel, FrameReader, send_frame
from notebook_accel.launcher.placement.ray.placement import _put, _rank_order
from notebook_accel.launcher.placement.remote.handles import unset_connection
from notebook_accel.launcher.placement.ray.watch import RayWatch
from notebook_accel.launcher.placement.remote.sampler import RemoteSampler
from notebook_accel.launcher.plan import cluster_devices


def _train() -> int:
    return 0


# -- the request ----------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("kwargs, words", [
    ({"placement": "scatter"}, "placement='scatter'"),
    ({"resources_per_worker": {"GPU": 2}}, "one GPU"),
    ({"resources_per_worker": {}}, "resources_per_worker={}"),
    ({"resources_per_worker": {"CPU": -1}}, "'CPU': -1"),
    ({"node_timeout": 0}, "node_timeout=0"),
    ({"reserve_timeout": float("nan")}, "reserve_timeout=nan"),
    ({"address": "head :6379"}, "address="),
    ({"runtime_env": "pip"}, "runtime_env='pip'"),
    ({"back_channel": "tunnel"}, "back_channel='tunnel'"),
])
def test_a_bad_cluster_request_is_refused_naming_the_value(kwargs: dict[str, Any], words: str) -> None:
    with pytest.raises(LaunchError, match="is not allowed|each worker drives") as caught:
        RayCluster(**kwargs)
    assert words in str(caught.value)


def test_the_forms_of_cluster() -> None:
    assert check_cluster(None) is None
    assert check_cluster("ray") == RayCluster()
    yaml_form = check_cluster({"kind": "ray", "address": "ray://head:10001", "placement": "spread",
                               "resources_per_worker": {"GPU": 1, "CPU": 8}})
    assert yaml_form is not None and yaml_form.uses_gpu and yaml_form.placement == "spread"
    with pytest.raises(LaunchError, match="unknown keys \\['adress'\\]"):
        check_cluster({"adress": "auto"})
    with pytest.raises(LaunchError, match="kind 'yarn' is not supported"):
        check_cluster({"kind": "yarn"})
    with pytest.raises(LaunchError, match="cluster=5 is not allowed"):
        check_cluster(5)


def test_devices_on_a_cluster_and_what_does_not_mean_anything_there() -> None:
    assert cluster_devices(RayCluster(), 3, None, None, 1) == (["cpu"] * 3, "gloo")
    assert cluster_devices(RayCluster(resources_per_worker={"GPU": 1}), 2, None, None, 1) == (["cuda:0"] * 2, "nccl")
    with pytest.raises(LaunchError, match="num_processes is needed"):
        cluster_devices(RayCluster(), None, None, None, 1)
    with pytest.raises(LaunchError, match="num_nodes=2 with a cluster"):
        cluster_devices(RayCluster(), 2, None, None, 2)
    with pytest.raises(LaunchError, match="gpu_ids=\\[0\\] with a cluster"):
        cluster_devices(RayCluster(), 2, [0], None, 1)
    with pytest.raises(LaunchError, match="use_cpu=True asks for CPU workers"):
        cluster_devices(RayCluster(resources_per_worker={"GPU": 1}), 2, None, True, 1)
    with pytest.raises(LaunchError, match="num_processes=0"):
        cluster_devices(RayCluster(), 0, None, None, 1)


def test_the_launcher_refuses_before_joining_any_cluster() -> None:
    with pytest.raises(LaunchError, match="gpu_ids"):
        notebook_launcher(_train, num_processes=2, cluster="ray", gpu_ids=[0], dashboard=False)
    with pytest.raises(LaunchError, match="cluster='nowhere' is not allowed"):
        notebook_launcher(_train, num_processes=2, cluster="nowhere", dashboard=False)


# -- the back channel -----------------------------------------------------------------------------------------------
def _dial(channel: BackChannel, secret: bytes, rank: int, kind: bytes, out: list[Any]) -> None:
    try:
        out.append(connect_back(channel.address, secret, rank, kind, timeout=5))
    except Exception as e:  # noqa: BLE001 - the test looks at it
        out.append(e)


def test_only_a_dialler_with_the_runs_secret_gets_a_stream() -> None:
    channel = BackChannel("127.0.0.1")
    try:
        outcomes: list[Any] = []
        stranger = threading.Thread(target=_dial, args=(channel, b"x" * 32, 0, b"E", outcomes))
        stranger.start()
        with pytest.raises(TimeoutError):  # the stranger's stream is dropped, never yielded
            list(channel.accept(1, time.monotonic() + 1.5))
        stranger.join()
        assert isinstance(outcomes[0], (ConnectionError, OSError))
        worker = threading.Thread(target=_dial, args=(channel, channel.secret, 3, b"O", outcomes))
        worker.start()
        accepted = list(channel.accept(1, time.monotonic() + 10))
        worker.join()
        assert [(d.rank, d.kind) for d in accepted] == [(3, b"O")]
        accepted[0].sock.sendall(b"hello")
        assert outcomes[1].recv(5) == b"hello"
        accepted[0].sock.close()
        outcomes[1].close()
    finally:
        channel.close()


def _strangers(address: tuple[str, int]) -> tuple[list[socket.socket], threading.Thread]:
    """5 silent connections and 5 garbage ones: random bytes, a wrong kind, a hello of the right size with a wrong
    proof (sent without waiting for the nonce, and after it, by the thread returned)."""
    silent = [socket.create_connection(address, timeout=10) for _ in range(5)]
    garbage = [socket.create_connection(address, timeout=10) for _ in range(5)]
    garbage[0].sendall(os.urandom(100))
    garbage[1].sendall(os.urandom(7))
    garbage[2].sendall(link._HELLO.pack(0, b"Z", b"n" * 32) + b"p" * 32)
    garbage[3].sendall(link._HELLO.pack(0, b"E", b"n" * 32) + b"p" * 32)

    def answer_with_the_wrong_secret(sock: socket.socket) -> None:
        try:
            nonce = sock.recv(32, socket.MSG_WAITALL)
            sock.sendall(link._HELLO.pack(1, b"O", b"n" * 32) + link._prove(b"x" * 32, b"worker", nonce, 1, b"O"))
        except OSError:
            pass

    thread = threading.Thread(target=answer_with_the_wrong_secret, args=(garbage[4],), daemon=True)
    thread.start()
    return silent + garbage, thread


def _closed_by_the_listener(sock: socket.socket, within: float) -> bool:
    """Whether the listener's end closes ``sock`` within ``within`` seconds (its nonce may come first)."""
    sock.settimeout(within)
    try:
        while sock.recv(1024):
            pass
        return True
    except ConnectionResetError:
        return True
    except OSError:  # timed out: still open
        return False


def _four_streams(strangers: bool) -> tuple[float, list[tuple[int, bytes]]]:
    """Seconds from the first of 4 genuine dials to their 4 streams, with the strangers dialling first or not."""
    channel = BackChannel("127.0.0.1")
    others, answering = _strangers(channel.address) if strangers else ([], None)
    outcomes: list[Any] = []
    try:
        start = time.monotonic()
        dials = [threading.Thread(target=_dial, args=(channel, channel.secret, 0, kind, outcomes))
                 for kind in link.KINDS]
        for dial in dials:
            dial.start()
        accepted = list(channel.accept(4, time.monotonic() + 20))
        took = time.monotonic() - start
        for dial in dials if answering is None else [*dials, answering]:
            dial.join()
        assert all(isinstance(o, socket.socket) for o in outcomes), outcomes
        for dialed in accepted:
            assert dialed.sock.gettimeout() is None and dialed.sock.getblocking()
            assert dialed.sock.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE)
            dialed.sock.close()
        assert all(_closed_by_the_listener(s, 5) for s in others)  # the silent ones when the wait ended
        return took, sorted((d.rank, d.kind) for d in accepted)
    finally:
        for sock in outcomes + others:
            if isinstance(sock, socket.socket):
                sock.close()
        channel.close()


def test_silent_and_garbage_connections_do_not_delay_the_workers_streams() -> None:
    """Anyone on the cluster's network can dial the listener: strangers cost the workers' streams no time (they
    used to be served one at a time, 10 s each for a silent one)."""
    baseline, streams = _four_streams(strangers=False)
    crowded, crowded_streams = _four_streams(strangers=True)
    print(f"4 streams: {baseline:.3f} s alone, {crowded:.3f} s behind 5 silent and 5 garbage connections")
    assert streams == crowded_streams == sorted((0, kind) for kind in link.KINDS)
    assert abs(crowded - baseline) < 3.0


def test_a_strangers_bytes_never_yield_a_stream_and_its_connection_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(link, "_HANDSHAKE_SECONDS", 0.5)
    channel = BackChannel("127.0.0.1")
    outcome: list[Any] = []

    def wait() -> None:
        try:
            outcome.extend(channel.accept(1, time.monotonic() + 4))
        except TimeoutError as e:
            outcome.append(e)

    waiter = threading.Thread(target=wait)
    waiter.start()
    try:
        start = time.monotonic()
        strangers, answering = _strangers(channel.address)
        answering.join(timeout=2)
        assert all(_closed_by_the_listener(s, 2.5) for s in strangers)  # the garbage at once, the silent at 0.5 s
        assert time.monotonic() - start < 3.0  # before the wait's own end closed them
        waiter.join()
        assert len(outcome) == 1 and isinstance(outcome[0], TimeoutError)
        for sock in strangers:
            sock.close()
    finally:
        waiter.join()
        channel.close()


def test_a_flood_of_connections_pushes_out_the_oldest_not_the_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(link, "_MAX_PENDING", 4)
    channel = BackChannel("127.0.0.1")
    flood = [socket.create_connection(channel.address, timeout=10) for _ in range(12)]
    outcomes: list[Any] = []
    try:
        dial = threading.Thread(target=_dial, args=(channel, channel.secret, 2, b"C", outcomes))
        time.sleep(0.2)  # the flood is in the listener's queue first
        dial.start()
        accepted = list(channel.accept(1, time.monotonic() + 10))
        dial.join()
        assert [(d.rank, d.kind) for d in accepted] == [(2, b"C")]
        assert _closed_by_the_listener(flood[0], 2)  # pushed out by the ones after it
        accepted[0].sock.close()
    finally:
        for sock in flood + [o for o in outcomes if isinstance(o, socket.socket)]:
            sock.close()
        channel.close()


def test_a_worker_refuses_a_listener_that_cannot_prove_the_secret() -> None:
    """An impostor listening where the kernel should be gets the worker's hello but cannot answer it: the worker
    sends it nothing else (no output, no events)."""
    impostor = socket.create_server(("127.0.0.1", 0))
    address = impostor.getsockname()

    def answer_wrongly() -> None:
        conn, _ = impostor.accept()
        with conn:
            conn.sendall(b"n" * 32)
            conn.recv(4 + 1 + 32 + 32)
            conn.sendall(b"p" * 32)  # not the HMAC of the worker's nonce under the run's secret
            conn.recv(1)

    fake = threading.Thread(target=answer_wrongly)
    fake.start()
    try:
        with pytest.raises(ConnectionError, match="is not this run's kernel"):
            connect_back(address, b"s" * 32, 0, b"E", timeout=5)
    finally:
        fake.join(timeout=10)
        impostor.close()


def test_control_frames_survive_being_cut_anywhere() -> None:
    left, right = socket.socketpair()
    try:
        reader = FrameReader(right)
        sample = SystemSample(1.0, (RankSystem(0, 50.0, 1, 1),), 2, 4)
        send_frame(left, ("beat", None))
        send_frame(left, ("sample", sample))
        got: list[Any] = []
        deadline = time.monotonic() + 5
        while len(got) < 2 and time.monotonic() < deadline:
            got += reader.read()
        assert got == [("beat", None), ("sample", sample)]
        left.sendall(b"\xff\xff\xff\xff")  # a frame no worker of ours would send: the stream ends
        while not reader.eof and time.monotonic() < deadline:
            reader.read()
        assert reader.eof
    finally:
        left.close()
        right.close()


# -- what cannot be pickled -----------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def _ray_pickler_imported() -> Iterator[None]:
    """Import Ray's cloudpickle (the walk's pickler) before any test's leak check looks at the environment: importing
    Ray sets ``RAY_CLIENT_MODE``; it is put back when this module's tests are done."""
    before = dict(os.environ)
    try:
        import ray.cloudpickle  # noqa: F401
    except ImportError:
        pass  # the walk falls back to cloudpickle or pickle
    yield
    for name in set(os.environ) - set(before):
        del os.environ[name]
    os.environ.update(before)


class _Holder:
    def __init__(self, **parts: Any) -> None:
        self.__dict__.update(parts)


class _Slotted:
    __slots__ = ("name", "__secret")

    def __init__(self, secret: Any) -> None:
        self.name = "slotted"
        self.__secret = secret


@pytest.mark.usefixtures("_ray_pickler_imported")
def test_the_path_to_the_innermost_object_that_cannot_be_pickled() -> None:
    lock = threading.Lock()
    nested = [1, {"data": [0.5], "opts": _Holder(size=3, model=_Holder(weights=[1.0], _lock=lock))}]
    found = pickling.find_unpicklable(nested, "args[1]")
    assert found is not None and found.path == "args[1][1]['opts'].model._lock"
    assert found.type_name == "_thread.lock" and "lock" in found.reason and not found.itself

    def step() -> Any:
        return lock  # closes over the lock

    closure = pickling.find_unpicklable(step, "args[0]")
    assert closure is not None and closure.path == "args[0].<closure:lock>"
    slotted = pickling.find_unpicklable(({1, 2}, _Slotted(lock)), "args[2]")
    assert slotted is not None and slotted.path == "args[2][1].__secret"
    whole = pickling.find_unpicklable(lock, "args[3]")
    assert whole is not None and whole.itself and str(whole).startswith("args[3] itself (_thread.lock)")
    assert pickling.find_unpicklable({"fine": [1, (2, "3")]}, "args[4]") is None


@pytest.mark.usefixtures("_ray_pickler_imported")
def test_the_walk_ends_on_cycles_and_within_its_bounds() -> None:
    lock = threading.Lock()
    ring: Any = _Holder(name="a")
    ring.next = _Holder(name="b", back=ring, parts=[ring])
    ring.next.parts.append(_Holder(lock=lock))
    found = pickling.find_unpicklable(ring, "args[0]")
    assert found is not None and found.path == "args[0].next.parts[1].lock"
    selfish: list[Any] = []
    selfish.append(selfish)
    selfish.append(lock)
    assert getattr(pickling.find_unpicklable(selfish, "x"), "path", None) == "x[1]"
    deep: Any = lock
    for _ in range(100):
        deep = [deep]
    bounded = pickling.find_unpicklable(deep, "d", max_depth=10)
    assert bounded is not None and bounded.path == "d" + "[0]" * 10 and bounded.type_name == "list"
    wide = pickling.find_unpicklable([*range(5000), lock], "w", max_tries=50)
    assert wide is not None and wide.path == "w"  # out of tries before the lock: the list is as far as it got


class _RayLikePut:
    """``ray.put`` as Ray's fails: its message holds a coloured serializability report, the pickler's error under."""

    def put(self, value: Any) -> object:
        probe = pickling.default_probe()
        error = probe(value)
        if error is not None:
            raise TypeError(f"Could not serialize the put value {value!r}:\n===\nChecking Serializability of "
                            f"{value!r}\n===\n\x1b[31m!!! FAIL\x1b[39m serialization: {error}\n    "
                            "Serializing 'model' ...\n\x1b[33mWARNING\x1b[39m: Did not find non-serializable "
                            "object") from error
        return object()


@pytest.mark.usefixtures("_ray_pickler_imported")
def test_the_refusal_of_what_cannot_be_pickled_is_one_clean_line() -> None:
    lock = threading.Lock()
    with pytest.raises(LaunchError) as caught:
        _put(_RayLikePut(), _train, ("ok", [{"opts": _Holder(model=_Holder(_lock=lock))}]))
    text = str(caught.value)
    print(text)
    assert "\x1b" not in text and "\n" not in text and "!!! FAIL" not in text
    assert "args[1] (list:" in text and "args[1][0]['opts'].model._lock (_thread.lock) cannot be pickled" in text
    assert "cannot pickle '_thread.lock' object" in text and "make it inside the function" in text

    def train() -> Any:
        return lock

    with pytest.raises(LaunchError) as caught:
        _put(_RayLikePut(), train, ())
    text = str(caught.value)
    assert "\x1b" not in text and "\n" not in text
    assert "train.<closure:lock> (_thread.lock) cannot be pickled" in text and "inside the function" in text
    assert pickling.one_line("\x1b[31m!!! FAIL\x1b[39m a\n b") == "!!! FAIL a b"


# -- reserving and numbering ----------------------------------------------------------------------------------------
class _FakeRay:
    """The few calls of Ray's API that the placement's pure parts make."""

    def __init__(self, nodes: list[dict[str, Any]]) -> None:
        self._nodes = nodes
        self.results: dict[Any, Any] = {}

    def nodes(self) -> list[dict[str, Any]]:
        return self._nodes

    def available_resources(self) -> dict[str, float]:
        return {"CPU": 1.0}

    def cluster_resources(self) -> dict[str, float]:
        return {"CPU": 2.0}

    def wait(self, refs: list[Any], num_returns: int = 1, timeout: float = 0) -> tuple[list[Any], list[Any]]:
        done = [r for r in refs if r in self.results]
        return done, [r for r in refs if r not in self.results]

    def get(self, ref: Any, timeout: float = 0) -> Any:
        value = self.results[ref]
        if isinstance(value, BaseException):
            raise value
        return value


def test_a_cluster_that_cannot_hold_the_run_is_refused_at_once_with_what_it_has() -> None:
    ray = _FakeRay([{"Alive": True, "Resources": {"CPU": 1.0}}, {"Alive": True, "Resources": {"CPU": 1.0}},
                    {"Alive": False, "Resources": {"CPU": 64.0}}])
    with pytest.raises(LaunchError) as caught:
        reserve.reserve(ray, RayCluster(), 3)
    assert "2 nodes with 1 free CPU and 0 free GPUs (of 2 CPUs, 0 GPUs)" in str(caught.value) and "3 x {'CPU': 1.0}" in str(caught.value)
    assert reserve._fits(ray, 2, {"CPU": 1.0}, "spread") and not reserve._fits(ray, 2, {"CPU": 1.0}, "strict_pack")
    assert not reserve._fits(ray, 1, {"CPU": 2.0}, "pack")  # a bundle never straddles two nodes


def test_ranks_are_numbered_node_by_node() -> None:
    places = [{"node_id": "a"}, {"node_id": "b"}, {"node_id": "a"}, {"node_id": "c"}, {"node_id": "b"}]
    assert _rank_order(places) == [0, 2, 1, 4, 3]


# -- the watch ------------------------------------------------------------------------------------------------------
def _handle(rank: int, node: str, ref: Any) -> tuple[RayWorkerHandle, socket.socket]:
    import os

    ours, theirs = socket.socketpair()
    ours.setblocking(False)
    reader, writer = os.pipe()
    handle = RayWorkerHandle(rank=rank, process=None, events=unset_connection(), stdout_fd=-1, stderr_fd=-1,
                             device="cpu", exit_fd=reader, node=node, ref=ref, control=ours, exit_writer=writer)
    return handle, theirs


def test_the_watch_ends_a_rank_by_its_result_by_its_closed_stream_and_by_its_silence() -> None:
    ray = _FakeRay([])
    finished, closed, silent = _handle(0, "10.0.0.1", "ref0"), _handle(1, "10.0.0.2", "ref1"), _handle(2, "10.0.0.3",
                                                                                                         "ref2")
    watch = RayWatch(ray, [finished[0], closed[0], silent[0]], node_timeout=1.5)
    watch.start()
    try:
        send_frame(finished[1], ("sample", SystemSample(1.0, (RankSystem(0, 10.0, 5, 5),), 100, 200)))
        ray.results["ref0"] = 0
        closed[1].close()
        deadline = time.monotonic() + 15
        while not all(h.ended.is_set() for h in (finished[0], closed[0], silent[0])) and time.monotonic() < deadline:
            send_frame(finished[1], ("beat", None)) if not finished[0].ended.is_set() else None
            time.sleep(0.1)
        assert finished[0].exit_code == 0 and finished[0].death_reason is None
        assert closed[0].exit_code == -int(signal.SIGKILL)
        assert "its process on node 10.0.0.2 ended without a result" in (closed[0].death_reason or "")
        assert "node 10.0.0.3 (ranks [2]) has not answered" in (silent[0].death_reason or "")
        sample = RemoteSampler(watch).sample()
        assert [r.rank for r in sample.ranks] == [0] and sample.host_available == 100
    finally:
        watch.stop()
        for handle, theirs in (finished, closed, silent):
            theirs.close()
            handle.reap()
            if handle.control is not None:
                handle.control.close()


def test_a_stopped_rank_is_no_failure_of_its_own() -> None:
    ray = _FakeRay([])
    handle, theirs = _handle(0, "10.0.0.1", "ref")
    handle.send_signal(signal.SIGTERM)
    assert theirs.recv(1) == b"T"  # the worker's control thread turns it into killpg(SIGTERM)
    ray.results["ref"] = RuntimeError("ActorDiedError: the actor died")
    watch = RayWatch(ray, [handle], node_timeout=30)
    watch.start()
    try:
        assert handle.ended.wait(10)
        assert handle.exit_code == -int(signal.SIGTERM) and handle.death_reason is None
    finally:
        watch.stop()
        theirs.close()
        handle.reap()
        assert handle.control is not None
        handle.control.close()


def test_no_sample_is_due_before_a_rank_sent_one() -> None:
    """An empty sample would show a machine of 0 bytes in the system panel."""
    watch = RayWatch(_FakeRay([]), [], node_timeout=30)
    sampler = RemoteSampler(watch, interval=0.0)
    assert not sampler.due(time.monotonic() + 10)
    watch.samples[0] = SystemSample(1.0, (RankSystem(0, 10.0, 5, 5),), 100, 200)
    assert sampler.due(time.monotonic() + 10)
