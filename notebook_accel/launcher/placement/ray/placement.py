"""The Ray placement (a :class:`~notebook_accel.launcher.placement.protocol.Placement`): one actor per rank.

:meth:`RayPlacement.start`, in order, so that a mistake costs nothing on the cluster: join the cluster, put the
function and each argument in Ray's object store (an argument that cannot be pickled is named before anything is
reserved; a large one travels once per node, not once per worker), reserve every worker at once, start the actors
and ask where each landed, number the ranks node by node (so ``LOCAL_RANK`` is right; rank 0's node hosts the
rendezvous on a port free there), start each rank, and accept its four back-channel streams. On any failure the
actors and the reservation are released before the error is raised.
"""

from __future__ import annotations

import secrets
import signal
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any, Callable

from notebook_accel.cluster import RayCluster
from notebook_accel.environment import LaunchEnvironment
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.kernel.fds import RunDescriptors
from notebook_accel.launcher.placement.ray import reserve, warm
from notebook_accel.launcher.placement.ray.actor import SEALING_FIX, RankWorker, require_sealing
from notebook_accel.launcher.placement.ray.client import is_client
from notebook_accel.launcher.placement.ray.handles import RayWorkerHandle
from notebook_accel.launcher.placement.ray.relayed import RelayChannel, start_relay
from notebook_accel.launcher.placement.ray.watch import RayWatch
from notebook_accel.launcher.placement.remote.handles import accept_streams
from notebook_accel.launcher.placement.remote.link import BackChannel
from notebook_accel.launcher.placement.remote.payload import pickle_each
from notebook_accel.launcher.placement.remote.rank import RankSetup
from notebook_accel.launcher.placement.remote.sampler import RemoteSampler
from notebook_accel.launcher.placement.spawn import WorkerHandle
from notebook_accel.monitor.board import SystemBoard

__all__ = ["RayPlacement", "CONNECT_SECONDS"]

CONNECT_SECONDS = 120.0  # from the actors' start to their four streams each (a cold node imports torch first)
_WARM_ANSWER_SECONDS = 10.0  # a kept actor that does not say where it is within this is taken for gone


class RayPlacement:
    """Run the workers as actors of the Ray cluster ``cluster`` describes.

    Args:
        cluster: the cluster, the resources of each worker and how to spread them.
        descriptors: the run's registered descriptors (the back-channel sockets join them, so that a local run
            forked meanwhile does not inherit them).
        restart_after: when this attempt is a restart (``max_restarts``), the failure it follows: the reservation
            then waits for room that a lost node took away, and says so if it does not come.
    """

    def __init__(self, cluster: RayCluster, descriptors: RunDescriptors | None = None, restart_after: str = "") -> None:
        self.cluster = cluster
        self.descriptors = descriptors
        self.restart_after = restart_after
        self.ray: Any = None
        self.group: Any = None
        self.actors: list[Any] = []
        self.watch: RayWatch | None = None
        self.channel: BackChannel | RelayChannel | None = None
        self.relay: Any = None  # the relay actor while no channel owns it
        self.secret = secrets.token_bytes(32)
        self.handles: list[RayWorkerHandle] = []
        self.killed = False  # an actor was killed (a stop): none is kept warm

    def start(self, envs: Sequence[LaunchEnvironment], function: Callable[..., Any], args: tuple[Any, ...],
              board: SystemBoard | None) -> list[WorkerHandle]:
        """Place one actor per environment (their local ranks and rendezvous are set here); ``board`` is not used:
        the workers' trackers read no figures across machines."""
        self.ray = ray = reserve.require_ray()
        if len(envs) > 1:
            try:
                require_sealing("this kernel")
            except ImportError as e:
                raise LaunchError(str(e)) from e
        reserve.connect(ray, self.cluster)
        function_ref, arg_refs = _put(ray, function, args)
        try:
            probe = self._open_channels(ray, len(envs))
            places = self._warm_places(len(envs), probe)
            if places is None:  # nothing kept warm of this shape: reserve and start the actors
                freed = reserve.held_warm(ray)  # what the next line gives back (Ray frees it within a moment)
                warm.release_ray_workers()  # workers kept for another shape would hold the room this run needs
                self.group = reserve.reserve(ray, self.cluster, len(envs), self.restart_after, freed)
                self._start_actors(len(envs))
                places = ray.get([actor.where.remote(i == 0, probe) for i, actor in enumerate(self.actors)],
                                 timeout=CONNECT_SECONDS)
            self._choose_channel(places)
            order = _rank_order(places)
            if self.descriptors is not None:
                self.descriptors.sources.append(lambda: [fd for h in self.handles for fd in h.open_fds()])
            threads = max(1, int(float(self.cluster.resources_per_worker.get("CPU", 1))))
            self._run_ranks(envs, order, places, function_ref, arg_refs, threads)
            self._accept()
        except BaseException:
            self.release(self.handles)
            raise
        relay = self.channel if isinstance(self.channel, RelayChannel) else None
        self.watch = RayWatch(ray, self.handles, self.cluster.node_timeout,
                              relay_error=None if relay is None else (lambda: relay.error))
        self.watch.start()
        return list(self.handles)

    def _open_channels(self, ray: Any, count: int) -> tuple[str, int] | None:
        """Open the run's way back as ``back_channel`` asks: the kernel's listener (the direct path), and the relay
        at once when a relay is asked for or likely (a Ray Client kernel, ``"auto"``: it then starts while the
        workers are reserved). Returns the listener's address for the workers to try (``None``: no probe)."""
        mode = self.cluster.back_channel
        if mode != "relay":
            try:
                self.channel = BackChannel(reserve.kernel_address(ray, self.cluster), self.secret)
            except LaunchError:
                if mode == "direct":
                    raise
        if mode == "relay" or (mode == "auto" and is_client(ray)):
            self.relay = start_relay(ray, self.secret, 4 * count, CONNECT_SECONDS)
        if mode == "auto" and self.channel is not None:
            return self.channel.address
        return None

    def _choose_channel(self, places: list[dict[str, Any]]) -> None:
        """The direct path when asked for, or when every worker reached the kernel's listener (``"auto"``);
        else the relay through the cluster (its actor started now if not yet)."""
        mode = self.cluster.back_channel
        direct = isinstance(self.channel, BackChannel) and (
            mode == "direct" or (mode == "auto" and all(p.get("reaches") for p in places)))
        if direct:
            if self.relay is not None:  # started in case: not needed
                _kill(self.ray, self.relay)
                self.relay = None
            return
        if isinstance(self.channel, BackChannel):
            self.channel.close()
        if self.relay is None:
            self.relay = start_relay(self.ray, self.secret, 4 * len(places), CONNECT_SECONDS)
        relay, self.relay = self.relay, None  # the channel owns it from here
        self.channel = RelayChannel(self.ray, relay, self.secret, address_timeout=CONNECT_SECONDS)

    def _warm_places(self, count: int, probe: tuple[str, int] | None) -> list[dict[str, Any]] | None:
        """Take the workers a run of this shape left warm (:mod:`.warm`) and ask where each is (a free port on
        rank 0's node too, and whether it reaches ``probe``); ``None`` when none are kept, or one of them is gone
        (then all are released)."""
        if self.cluster.keep_warm <= 0:
            return None
        kept = warm.take(warm.shape_of(self.cluster, count))
        if kept is None:
            return None
        try:
            places = self.ray.get([actor.where.remote(i == 0, probe) for i, actor in enumerate(kept.actors)],
                                  timeout=_WARM_ANSWER_SECONDS)
        except Exception:  # noqa: BLE001 - an actor died or its node is gone: start afresh
            kept.release()
            return None
        self.group, self.actors = kept.group, list(kept.actors)
        return list(places)

    def _start_actors(self, count: int) -> None:
        """One actor per bundle of the placement group, never restarted (a dead rank ends the run)."""
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        resources = dict(self.cluster.resources_per_worker)
        cpus, gpus = float(resources.pop("CPU", 0)), float(resources.pop("GPU", 0))
        remote = self.ray.remote(RankWorker)
        for index in range(count):
            options: dict[str, Any] = {
                "num_cpus": cpus, "num_gpus": gpus, "resources": resources, "max_restarts": 0,
                "scheduling_strategy": PlacementGroupSchedulingStrategy(self.group, placement_group_bundle_index=index),
            }
            if self.cluster.runtime_env is not None:
                options["runtime_env"] = dict(self.cluster.runtime_env)
            self.actors.append(remote.options(**options).remote(gpus > 0))

    def _run_ranks(self, envs: Sequence[LaunchEnvironment], order: list[int], places: list[dict[str, Any]],
                   function_ref: Any, arg_refs: list[Any], threads: int) -> None:
        """Start ``run`` on every actor with its rank's environment; make the handles (streams come next)."""
        assert self.channel is not None
        master = places[order[0]]
        nodes = [places[i]["node_id"] for i in order]
        for rank, index in enumerate(order):
            node = places[index]["node_id"]
            local_rank = nodes[:rank].count(node)
            env = replace(envs[rank], rank=rank, local_rank=local_rank, local_world_size=nodes.count(node),
                          world_size=len(order), master_addr=master["address"], master_port=master["port"],
                          device="cuda:0" if self.cluster.uses_gpu else "cpu")
            setup = RankSetup(env, self.channel.address, self.channel.secret, threads, sealing_fix=SEALING_FIX)
            ref = self.actors[index].run.remote(setup, function_ref, arg_refs)
            self.handles.append(RayWorkerHandle.create(
                rank, env.device or "cpu", int(places[index]["pid"]), str(places[index]["address"]),
                actor=self.actors[index], ref=ref, node_id=str(node)))

    def _accept(self) -> None:
        """Wait for every rank's four streams; a rank whose ``run`` ended first (it could not connect) fails it."""
        assert self.channel is not None

        def alive() -> None:
            waiting = [h for h in self.handles if not h.connected]  # a connected rank may end: it ran
            if not waiting:
                return
            done, _ = self.ray.wait([h.ref for h in waiting], num_returns=len(waiting), timeout=0)
            if done:
                handle = next(h for h in waiting if h.ref in done)
                try:
                    self.ray.get(handle.ref)
                    error = "it ended before connecting"
                except Exception as e:  # noqa: BLE001 - the worker's own error says why
                    error = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
                raise LaunchError(f"rank {handle.rank} on node {handle.node} could not start: {error}")

        try:
            accept_streams(self.channel, self.handles, time.monotonic() + CONNECT_SECONDS, alive)
        except TimeoutError as e:
            host, port = self.channel.address
            if isinstance(self.channel, RelayChannel):
                raise LaunchError(f"the Ray workers did not reach this run's relay at {host}:{port} on the cluster's "
                                  f"head within {CONNECT_SECONDS:.0f} s ({e}); the nodes must reach the head's "
                                  "address") from e
            raise LaunchError(f"the Ray workers did not connect back to this kernel at {host}:{port} within "
                              f"{CONNECT_SECONDS:.0f} s ({e}); the cluster's nodes must be able to reach the "
                              "notebook's machine, or use RayCluster(back_channel='relay') (through the cluster)") from e
        finally:
            self.channel.close()

    def signal(self, handle: WorkerHandle, sig: signal.Signals) -> None:
        """Send ``sig`` to the rank's process group; SIGKILL also asks Ray to kill the actor (a node that does not
        answer any more cannot obey)."""
        if not isinstance(handle, RayWorkerHandle):
            return
        handle.send_signal(sig)
        if sig == signal.SIGKILL and handle.actor is not None:
            self.killed = True
            _kill(self.ray, handle.actor)

    def _every_run_returned(self) -> bool:
        """Whether every actor's run returned an exit code (so every actor lives, with no user code in it), and no
        actor was killed: only then are they worth keeping."""
        refs = [h.ref for h in self.handles if h.ref is not None]
        if self.killed or len(refs) != len(self.actors):
            return False
        try:
            done, _ = self.ray.wait(refs, num_returns=len(refs), timeout=0)
            return len(done) == len(refs) and all(isinstance(code, int) for code in self.ray.get(done, timeout=5))
        except Exception:  # noqa: BLE001 - an actor died (its call raised): none is kept
            return False

    def end_leftovers(self, handles: Sequence[WorkerHandle]) -> None:
        """Nothing: a rank's process group ends with it (:meth:`signal`), and :meth:`release` kills the actors."""

    def sampler(self, handles: Sequence[WorkerHandle]) -> RemoteSampler | None:
        """The figures each rank's node sends (``None`` before the start)."""
        return None if self.watch is None else RemoteSampler(self.watch)

    def release(self, handles: Sequence[WorkerHandle]) -> None:
        """Keep the actors and their reservation warm for the next launch when every rank's run returned (and
        ``keep_warm`` asks for it); else kill every actor and its process group and free the reservation. Close
        the streams. Idempotent."""
        for handle in self.handles:
            if not handle.ended.is_set():
                handle.send_signal(signal.SIGKILL)
        if self.watch is not None:
            self.watch.stop()
        if self.actors and self.group is not None and self.cluster.keep_warm > 0 and self._every_run_returned():
            warm.keep(warm.shape_of(self.cluster, len(self.actors)), warm.WarmWorkers(self.ray, self.group, self.actors),
                      self.cluster.keep_warm)
            self.actors, self.group = [], None
        for actor in self.actors:
            _kill(self.ray, actor)
        self.actors = []
        if self.group is not None:
            reserve.release_group(self.ray, self.group)
            self.group = None
        if self.relay is not None:
            _kill(self.ray, self.relay)
            self.relay = None
        if self.channel is not None:
            self.channel.close()
            if isinstance(self.channel, RelayChannel):
                self.channel.end()
        for handle in self.handles:
            handle.end(-int(handle.signalled or signal.SIGKILL))
            handle.reap()
            handle.close_streams()


def _kill(ray: Any, actor: Any) -> None:
    """Ask Ray to kill an actor (gone already, or the cluster unreachable, is fine)."""
    try:
        ray.kill(actor, no_restart=True)
    except Exception:  # noqa: BLE001
        pass


def _put(ray: Any, function: Callable[..., Any], args: tuple[Any, ...]) -> tuple[Any, list[Any]]:
    """The function and each argument in the object store; one that cannot be pickled is named in one line (Ray's
    own report stays out of it)."""
    return pickle_each(ray.put, function, args, "the Ray workers", cause=_cause)


def _cause(error: BaseException) -> BaseException:
    """The pickler's own error under Ray's (whose message carries a coloured report), else ``error``."""
    return error.__cause__ if error.__cause__ is not None else error


def _rank_order(places: list[dict[str, Any]]) -> list[int]:
    """Actor indices in rank order: node by node (the node of actor 0 first, then in order of first appearance)."""
    nodes: list[str] = []
    for place in places:
        if place["node_id"] not in nodes:
            nodes.append(place["node_id"])
    return [i for node in nodes for i, place in enumerate(places) if place["node_id"] == node]
