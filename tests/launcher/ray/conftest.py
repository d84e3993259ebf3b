"""A real two-node Ray cluster for the Ray placement's tests: the head on the host, a worker node in a network
namespace.

The host and the namespace are joined by a veth pair (10.66.<n>.1 on the host, .2 in the namespace), so the worker
node is another machine as far as the network goes: its own address, its own interfaces, a link that can be cut.
Each node has 1 CPU. Every Ray process of the cluster runs with this session's ``--temp-dir``, which is how the
teardown finds exactly them (a Ray the developer runs elsewhere is left alone). The drivers (the "kernels") run in
subprocesses: a process that joined a Ray cluster has gRPC threads that a later local fork of the test process
must not inherit.

Skips, with the reason, when Ray is not installed (the ``ray`` extra), or when this is not root with ``ip``.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FAST_IMPORTS = str(ROOT / "tests" / "fast_imports")  # see tests/fast_imports/rfc3987_syntax
PYTHONPATH = f"{FAST_IMPORTS}{os.pathsep}{ROOT}"
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_agent_register_timeout_ms": "300000", "RAY_AUTH_MODE": "disabled",
           "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "5", "PYTHONPATH": PYTHONPATH}


@dataclass
class RayTestCluster:
    """The running cluster: the head's address, the namespace of the worker node and how to restart it."""

    address: str
    head_ip: str
    worker_ip: str
    namespace: str
    host_link: str
    temp_dir: str
    ray: str
    client_port: int = 0  # the head's Ray Client server (ray://)

    def start_worker(self) -> None:
        """(Re)start the worker node in its namespace and wait until the head counts two live nodes."""
        for attempt in range(_STARTS):
            try:
                _run(["ip", "netns", "exec", self.namespace, self.ray, "start", f"--address={self.address}",
                      f"--node-ip-address={self.worker_ip}", "--num-cpus=1", "--object-store-memory=80000000",
                      "--disable-usage-stats", f"--temp-dir={self.temp_dir}/w",
                      *_fixed_ports()], self.temp_dir, timeout=240)
                break
            except RuntimeError:
                self.stop_worker()
                if attempt == _STARTS - 1:
                    raise
        self.wait_nodes(2)

    def wait_nodes(self, count: int, timeout: float = 120.0) -> None:
        """Wait until exactly ``count`` nodes are alive."""
        deadline = time.monotonic() + timeout
        alive = -1
        while time.monotonic() < deadline:
            alive = int(str(self.query("alive")["alive"]))
            if alive == count:
                return
            time.sleep(1.0)
        raise AssertionError(f"the test cluster has {alive} live nodes, not {count}")

    def query(self, what: str) -> dict[str, object]:
        """Ask the cluster (from a short-lived driver): ``alive`` nodes, or our ``leftovers`` (actors, groups)."""
        out = subprocess.run([sys.executable, "-m", "tests.launcher.ray.driver", what, self.address], cwd=ROOT,
                             env=driver_env(), capture_output=True, text=True, timeout=120)
        return result_of(out.stdout, out.stderr)

    def kill_raylet(self) -> None:
        """SIGKILL the worker node's raylet alone (its workers notice and end by themselves)."""
        raylets = [pid for pid in _ray_pids(self.temp_dir, self.namespace) if _comm(pid) == "raylet"]
        assert raylets, "the worker node has no raylet"
        for pid in raylets:
            _kill(pid)

    def stop_worker(self) -> None:
        """Stop every Ray process of the worker node (they run in its namespace)."""
        _end_all(self.temp_dir, self.namespace)


def driver_env() -> dict[str, str]:
    """The environment of a driver subprocess: this checkout importable, Ray quiet."""
    return {**os.environ, **RAY_ENV, "PYTHONUNBUFFERED": "1"}


def result_of(stdout: str, stderr: str) -> dict[str, object]:
    """The JSON after the last ``RESULT `` line a driver printed (a clear failure when there is none)."""
    lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
    if not lines:
        raise AssertionError(f"the driver printed no result\n--- stdout\n{stdout[-4000:]}\n"
                             f"--- stderr\n{stderr[-4000:]}")
    return dict(json.loads(lines[-1][len("RESULT "):]))


_STARTS = 3  # Ray's raylet gives its agents a fixed 15 s to start (ray-project/ray#65983): a loaded machine retries


def _free_ports(count: int) -> list[int]:
    """``count`` distinct ports free now (held together while chosen, so they differ)."""
    import socket

    held = [socket.socket() for _ in range(count)]
    try:
        for sock in held:
            sock.bind(("0.0.0.0", 0))
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


def _fixed_ports() -> list[str]:
    """Free ports given to a node's agents, so the raylet need not wait for the agents to write theirs to files
    before it registers."""
    names = ("--dashboard-agent-grpc-port", "--dashboard-agent-listen-port", "--runtime-env-agent-port",
             "--metrics-export-port", "--node-manager-port", "--object-manager-port")
    return [f"{name}={port}" for name, port in zip(names, _free_ports(len(names)))]


def _run(args: list[str], temp_dir: str, timeout: float = 60.0) -> None:
    env = {**os.environ, **RAY_ENV, "NOTEBOOK_ACCEL_TEST_RAY": temp_dir}
    proc = subprocess.run(args, capture_output=True, text=True, timeout=timeout, env=env, cwd=temp_dir)
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed: {proc.stdout[-2000:]}{proc.stderr[-2000:]}")


def _ray_pids(temp_dir: str, namespace: str | None = None) -> list[int]:
    """The processes of this session's cluster (only those in ``namespace`` if given): every one started in the
    session's folder (``ray start`` runs there) or inherits ``NOTEBOOK_ACCEL_TEST_RAY``. A command line is no mark
    (Ray renames its processes, which also blanks what ``/proc`` shows of their environment)."""
    marker = f"NOTEBOOK_ACCEL_TEST_RAY={temp_dir}".encode()
    found = []
    ns = None
    if namespace is not None:
        try:
            ns = os.stat(f"/run/netns/{namespace}").st_ino
        except OSError:
            return []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if not os.readlink(f"/proc/{entry}/cwd").startswith(temp_dir):
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if marker not in f.read().split(b"\0"):
                        continue
        except OSError:
            continue
        if ns is not None:
            try:
                if os.stat(f"/proc/{entry}/ns/net").st_ino != ns:
                    continue
            except OSError:
                continue
        found.append(int(entry))
    return found


def _comm(pid: int) -> str:
    """The process's name (``raylet``, ``gcs_server``, ...), ``""`` once it is gone."""
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return ""


def _end_all(temp_dir: str, namespace: str | None = None) -> None:
    """Kill the cluster's processes until none is left (a raylet killed mid-start may still spawn an agent)."""
    quiet = 0
    deadline = time.monotonic() + 20.0
    while quiet < 3 and time.monotonic() < deadline:
        pids = _ray_pids(temp_dir, namespace)
        for pid in pids:
            _kill(pid)
        quiet = 0 if pids else quiet + 1
        time.sleep(0.3)


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[RayTestCluster]:
    """Start the two-node cluster once per session (or skip with the reason); stop exactly its processes after."""
    try:
        import ray  # noqa: F401
    except ImportError:
        pytest.skip("Ray is not installed: pip install 'notebook-accel[ray]' (CI installs it)")
    if os.geteuid() != 0 or shutil.which("ip") is None:
        pytest.skip("the two-node Ray tests need root and iproute2 (ip netns); run them as root, as CI does")
    ray_bin = str(Path(sys.executable).with_name("ray"))
    tag = os.getpid() % 200 + 20
    namespace, host_link, node_link = f"nar{tag}", f"nrh{tag}", f"nrn{tag}"
    head_ip, worker_ip = f"10.66.{tag}.1", f"10.66.{tag}.2"
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")  # short: Ray's socket paths must stay under 108 bytes
    try:
        subprocess.run(["ip", "netns", "add", namespace], check=True, capture_output=True)
        subprocess.run(["ip", "link", "add", host_link, "type", "veth", "peer", "name", node_link], check=True,
                       capture_output=True)
        subprocess.run(["ip", "link", "set", node_link, "netns", namespace], check=True, capture_output=True)
        subprocess.run(["ip", "addr", "add", f"{head_ip}/24", "dev", host_link], check=True, capture_output=True)
        subprocess.run(["ip", "link", "set", host_link, "up"], check=True, capture_output=True)
        for args in (["addr", "add", f"{worker_ip}/24", "dev", node_link], ["link", "set", node_link, "up"],
                     ["link", "set", "lo", "up"]):
            subprocess.run(["ip", "-n", namespace, *args], check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", host_link], capture_output=True)
        pytest.skip(f"network namespaces are not available here: {e.stderr}")
    port, client_port = _free_ports(2)  # ephemeral ports: outside the range Ray gives its workers (10002-19999)
    cluster = RayTestCluster(f"{head_ip}:{port}", head_ip, worker_ip, namespace, host_link, temp_dir, ray_bin,
                             client_port)
    try:
        for attempt in range(_STARTS):
            try:
                _run([ray_bin, "start", "--head", f"--node-ip-address={head_ip}", f"--port={port}", "--num-cpus=1",
                      f"--ray-client-server-port={client_port}",
                      "--include-dashboard=false", "--object-store-memory=80000000", "--disable-usage-stats",
                      f"--temp-dir={temp_dir}", *_fixed_ports()], temp_dir, timeout=300)
                break
            except RuntimeError:
                for pid in _ray_pids(temp_dir):
                    _kill(pid)
                if attempt == _STARTS - 1:
                    raise
                time.sleep(1.0)
        cluster.start_worker()
        yield cluster
    finally:
        _end_all(temp_dir)
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", host_link], capture_output=True)
        shutil.rmtree(temp_dir, ignore_errors=True)


@dataclass
class OffClusterNotebook:
    """A third machine for the notebook, off the cluster's network: a namespace joined to the head's machine by its
    own veth (a route to the head's address through it, as a VPN or a jump host gives), whose firewall lets it open
    connections to the head's Ray Client port and nothing else, and lets nothing in (as behind NAT). The worker
    node has no route to it at all."""

    namespace: str
    address: str  # ray://<the head's address>:<client port>, reached through the notebook's own link

    def command(self, *args: str) -> list[str]:
        """``args`` run inside the notebook's namespace."""
        return ["ip", "netns", "exec", self.namespace, *args]


@pytest.fixture(scope="module")
def off_cluster_notebook(ray_cluster: RayTestCluster) -> Iterator[OffClusterNotebook]:
    """Make the notebook's namespace for a module's tests (or skip, saying why); delete it after."""
    if shutil.which("iptables") is None:
        pytest.skip("the off-cluster notebook's firewall needs iptables (apt-get install iptables; CI installs it)")
    tag = os.getpid() % 200 + 20
    namespace, host_link, ns_link = f"nab{tag}", f"nbh{tag}", f"nbn{tag}"
    gateway, notebook = f"10.68.{tag}.1", f"10.68.{tag}.2"
    head = ray_cluster.head_ip  # Ray's client server listens on the head's node address (and loopback) only
    port = str(ray_cluster.client_port)
    steps = [["ip", "netns", "add", namespace],
             ["ip", "link", "add", host_link, "type", "veth", "peer", "name", ns_link],
             ["ip", "link", "set", ns_link, "netns", namespace],
             ["ip", "addr", "add", f"{gateway}/24", "dev", host_link], ["ip", "link", "set", host_link, "up"],
             ["ip", "-n", namespace, "addr", "add", f"{notebook}/24", "dev", ns_link],
             ["ip", "-n", namespace, "link", "set", ns_link, "up"], ["ip", "-n", namespace, "link", "set", "lo", "up"],
             ["ip", "-n", namespace, "route", "add", f"{head}/32", "via", gateway]]
    rules = [["-A", "INPUT", "-i", "lo", "-j", "ACCEPT"],
             ["-A", "INPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
             ["-P", "INPUT", "DROP"],
             ["-A", "OUTPUT", "-o", "lo", "-j", "ACCEPT"],
             ["-A", "OUTPUT", "-m", "conntrack", "--ctstate", "ESTABLISHED,RELATED", "-j", "ACCEPT"],
             ["-A", "OUTPUT", "-p", "tcp", "-d", head, "--dport", port, "-j", "ACCEPT"],
             ["-P", "OUTPUT", "DROP"]]
    def remove() -> None:
        subprocess.run(["ip", "netns", "del", namespace], capture_output=True)
        subprocess.run(["ip", "link", "del", host_link], capture_output=True)

    try:
        for step in steps:
            subprocess.run(step, check=True, capture_output=True)
        for rule in rules:
            subprocess.run(["ip", "netns", "exec", namespace, "iptables", *rule], check=True, capture_output=True)
    except subprocess.CalledProcessError as e:
        remove()
        pytest.skip(f"could not make the notebook's namespace: {e.stderr}")
    try:
        yield OffClusterNotebook(namespace, f"ray://{head}:{port}")
    finally:
        remove()
