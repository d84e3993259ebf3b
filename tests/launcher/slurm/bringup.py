"""Bringing a two-node test Slurm cluster up (and down): a folder, a namespace joined by a veth, munge, slurm.conf,
slurmctld and two slurmd, all started by the cluster's keeper.

``missing()`` says why this machine cannot (not root, no Slurm packages, no ``ip``/``nsenter``); ``start_cluster()``
is a context manager that yields a :class:`~tests.launcher.slurm.cluster.SlurmTestCluster` once both nodes are idle
and ends everything after, leftovers of earlier killed sessions first.
"""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.launcher.slurm import procs
from tests.launcher.slurm.cluster import (CPUS_PER_NODE, GPUS_PER_NODE, MESSAGE_TIMEOUT, NODES, SLURMD_TIMEOUT,
                                          SlurmTestCluster, wait_for)

ROOT = Path(__file__).resolve().parents[3]
BINARIES = {"slurmctld": "slurmctld", "slurmd": "slurmd", "srun": "slurm-client", "sbatch": "slurm-client",
            "munged": "munge", "ip": "iproute2", "nsenter": "util-linux"}
PARTITION = "nas"
_STARTS = 2  # a free port taken by someone else between choosing it and slurmctld binding it: try once more


def missing() -> str | None:
    """Why a test Slurm cluster cannot run here (the skip reason), or None when it can."""
    if os.name != "posix" or os.geteuid() != 0:
        return "the Slurm tests need root (network namespaces, slurmd as root); run them as root, as CI does"
    absent = sorted({package for binary, package in BINARIES.items() if shutil.which(binary) is None})
    if absent:
        return (f"the Slurm tests need the Debian packages {absent}: apt-get install -y slurmctld slurmd "
                "slurm-client munge iproute2 (python3 dev.py test installs them when run as root)")
    return None


def _claim() -> tuple[int, str]:
    """Claim a free tag: its folder ``/tmp/nas-slurm-<tag>`` made atomically, owned by this process."""
    for offset in range(250):
        tag = (os.getpid() + offset) % 250 + 1
        name, host_link, _ = procs.names(tag)
        folder = f"{procs.DIR_PREFIX}{tag}"
        if os.path.exists(f"/run/netns/{name}") or os.path.exists(f"/sys/class/net/{host_link}"):
            continue
        try:
            os.mkdir(folder, 0o755)
        except FileExistsError:
            continue
        started = procs.start_time(os.getpid())
        Path(folder, procs.OWNER_FILE).write_text(f"{os.getpid()} {started}")
        return tag, folder
    raise RuntimeError(f"no free test-cluster tag: 250 folders {procs.DIR_PREFIX}* or namespaces in use")


def _network(tag: int) -> None:
    """The namespace of n2 and the veth: 10.67.<tag>.1 on the host side, .2 inside."""
    namespace, host_link, node_link = procs.names(tag)
    for args in (["netns", "add", namespace], ["link", "add", host_link, "type", "veth", "peer", "name", node_link],
                 ["link", "set", node_link, "netns", namespace],
                 ["addr", "add", f"10.67.{tag}.1/24", "dev", host_link], ["link", "set", host_link, "up"],
                 ["-n", namespace, "addr", "add", f"10.67.{tag}.2/24", "dev", node_link],
                 ["-n", namespace, "link", "set", node_link, "up"], ["-n", namespace, "link", "set", "lo", "up"]):
        subprocess.run(["ip", *args], check=True, capture_output=True, text=True)


def _two_free_ports() -> tuple[int, int]:
    """Two distinct TCP ports free on the host now (slurmctld's and slurmd's; n2's slurmd has its own network)."""
    with socket.socket() as first, socket.socket() as second:
        first.bind(("0.0.0.0", 0))
        second.bind(("0.0.0.0", 0))
        return int(first.getsockname()[1]), int(second.getsockname()[1])


def slurm_conf(folder: str, tag: int, ctld_port: int, slurmd_port: int, gpus: int) -> str:
    """The cluster's slurm.conf: private munge socket, everything in ``folder``, two 2-CPU nodes with ``gpus``
    GPUs each (``gres.conf``)."""
    gres = f" Gres=gpu:{gpus}" if gpus else ""
    return "\n".join([
        f"ClusterName={procs.PREFIX}{tag}",
        f"SlurmctldHost={socket.gethostname().split('.')[0]}(10.67.{tag}.1)",
        f"SlurmctldPort={ctld_port}", f"SlurmdPort={slurmd_port}",
        "AuthType=auth/munge", "CredType=cred/munge", f"AuthInfo=socket={folder}/munge.sock",
        "SlurmUser=root", "SlurmdUser=root",
        f"StateSaveLocation={folder}/state", f"SlurmdSpoolDir={folder}/spool/%n",
        f"SlurmctldPidFile={folder}/slurmctld.pid", f"SlurmdPidFile={folder}/slurmd.%n.pid",
        f"SlurmctldLogFile={folder}/slurmctld.log", f"SlurmdLogFile={folder}/slurmd.%n.log",
        "ProctrackType=proctrack/linuxproc", "TaskPlugin=task/none",
        "SelectType=select/cons_tres", "SelectTypeParameters=CR_CPU",
        "SchedulerType=sched/builtin", "SchedulerParameters=batch_sched_delay=0,sched_min_interval=0",
        f"SlurmdTimeout={SLURMD_TIMEOUT}", f"MessageTimeout={MESSAGE_TIMEOUT}", "KillWait=2", "ReturnToService=2",
        "MinJobAge=2", "JobRequeue=0",  # a job that loses a node ends (NODE_FAIL) rather than queueing again
        "MpiDefault=none", "JobAcctGatherType=jobacct_gather/none", "AccountingStorageType=accounting_storage/none",
        "SlurmdParameters=config_overrides", *(["GresTypes=gpu"] if gpus else []),
        *(f"NodeName={node} NodeAddr=10.67.{tag}.{i + 1} CPUs={CPUS_PER_NODE}{gres} State=UNKNOWN"
          for i, node in enumerate(NODES)),
        f"PartitionName={PARTITION} Nodes={','.join(NODES)} Default=YES MaxTime=INFINITE State=UP",
        "",
    ])


def _fake_gpus(folder: str, count: int) -> int:
    """``count`` stand-in GPU device files (character devices like /dev/null: Slurm only checks their kind) and a
    gres.conf naming them, so ``--gpus-per-task`` sets ``CUDA_VISIBLE_DEVICES`` as on a GPU node. Return how many
    could be made (0 where mknod is not allowed)."""
    try:
        for index in range(count):
            os.mknod(f"{folder}/nvidia{index}", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
    except OSError:
        return 0
    if count:
        Path(folder, "gres.conf").write_text(f"Name=gpu File={folder}/nvidia[0-{count - 1}]\n")
    return count


def _start_keeper(folder: str, tag: int) -> subprocess.Popen[str]:
    """The keeper process (see keeper.py), in its own session so a Ctrl-C of the test run reaches only pytest."""
    return subprocess.Popen([sys.executable, "-m", "tests.launcher.slurm.keeper", folder, str(tag)], cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": str(ROOT)}, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)


def _start_daemons(cluster: SlurmTestCluster) -> None:
    """munged, then slurmctld and both slurmd; wait until both nodes are idle."""
    folder, conf = cluster.folder, cluster.conf
    key = Path(folder, "munge.key")
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    env = cluster.client_env()
    cluster.keeper_call({"start": "munged", "env": env, "argv": [
        "munged", "-F", "--force", f"--key-file={key}", f"--socket={folder}/munge.sock",
        f"--pid-file={folder}/munged.pid", f"--log-file={folder}/munged.log", f"--seed-file={folder}/munged.seed"]})
    wait_for(lambda: os.path.exists(f"{folder}/munge.sock"), 10.0, "munged's socket", cluster.logs)
    cluster._daemon_argv["slurmd-n1"] = ["slurmd", "-D", "-N", "n1", "-f", conf]
    cluster._daemon_argv["slurmd-n2"] = ["nsenter", f"--net=/run/netns/{cluster.namespace}", "slurmd", "-D", "-N",
                                         "n2", "-f", conf]
    cluster.keeper_call({"start": "slurmctld", "env": env, "argv": ["slurmctld", "-D", "-f", conf]})
    for node in NODES:
        cluster.start_slurmd(node)

    def idle() -> bool:
        out = cluster.slurm("sinfo", "-h", "-N", "-o", "%N %T", check=False).stdout
        return out.split() == ["n1", "idle", "n2", "idle"]

    wait_for(idle, 30.0, "both nodes to be idle", cluster.logs)


@contextmanager
def start_cluster() -> Iterator[SlurmTestCluster]:
    """A running two-node cluster for the block; everything of it ended after (raises if something stays)."""
    procs.clean_stale()
    for attempt in range(_STARTS):
        start = time.monotonic()
        tag, folder = _claim()
        cluster = SlurmTestCluster(folder, tag, PARTITION, _start_keeper(folder, tag))
        try:
            _network(tag)
            for sub in ("state", "spool/n1", "spool/n2"):
                os.makedirs(f"{folder}/{sub}")
            cluster.gpus_per_node = _fake_gpus(folder, GPUS_PER_NODE)
            Path(cluster.conf).write_text(slurm_conf(folder, tag, *_two_free_ports(), cluster.gpus_per_node))
            _start_daemons(cluster)
        except (TimeoutError, RuntimeError):
            cluster.stop()
            if attempt == _STARTS - 1:
                raise
            continue
        except BaseException:
            cluster.stop()
            raise
        cluster.bringup_s = time.monotonic() - start
        break
    try:
        yield cluster
    finally:
        left = cluster.stop()
        if left:
            raise RuntimeError(f"the test Slurm cluster in {folder} left {left}")
