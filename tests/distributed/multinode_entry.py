"""One "machine" of the two-host tests: run inside a network namespace by tests/distributed/test_multinode.py.

    python -m tests.distributed.multinode_entry train NODE_RANK MASTER_ADDR PORT OUT
    python -m tests.distributed.multinode_entry wait NODE_RANK MASTER_ADDR PORT OUT
    python -m tests.distributed.multinode_entry local 0 127.0.0.1 0 OUT
    python -m tests.distributed.multinode_entry partition NODE_RANK MASTER_ADDR PORT OUT
    python -m tests.distributed.multinode_entry secret NODE_RANK MASTER_ADDR PORT OUT

``train`` runs the shared training body with 2 processes on this node (4 in all) and writes rank 0's result
as JSON to OUT (node 0). ``wait`` does collectives until the other node disappears, then writes the error.
``partition`` is ``wait`` with a 1 s heartbeat (lost after 3 missed beats), and every node writes its error;
``silent`` is the same with the default heartbeat (5 s, 3 beats).
Every result also names the heartbeat threads still alive when the launch returned.
``secret`` runs :func:`keeps_a_secret` on 2 nodes (every node's launcher has ``NOTEBOOK_ACCEL_STORE_SECRET``).
``local`` is a one-machine run of 2 processes: once its process group is up, rank 0 writes every listening TCP
socket of this host as JSON to OUT and waits for OUT.done before the run ends.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path

import torch

from notebook_accel import Accelerator, notebook_launcher
from notebook_accel.launcher import WorkerError
from tests.distributed import workers


def collectives_forever(pid_file: str) -> None:
    """Reduce once in a while until a peer is lost; each rank writes its pid first."""
    accelerator = Accelerator()
    Path(f"{pid_file}.{accelerator.process_index}").write_text(str(os.getpid()))
    while True:
        accelerator.reduce(torch.ones(1), "sum")
        time.sleep(0.05)


def listen_then_wait(out: str) -> None:
    """Bring the group up (store and gloo connected), list what this host listens on, wait to be released."""
    from tests.launcher.rendezvous.test_store import listening_on_this_host

    accelerator = Accelerator()
    accelerator.reduce(torch.ones(1), "sum")
    if accelerator.is_main_process:
        Path(out).write_text(json.dumps(listening_on_this_host()))
        deadline = time.monotonic() + 90
        while not Path(f"{out}.done").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    accelerator.wait_for_everyone()


def keeps_a_secret(out: str) -> tuple[bool, str]:
    """Rank 0 stores a key and writes OUT.ready; once OUT.probed exists (an outsider had its go), whether the
    key the outsider wrote under the plain name is seen, and the stored key's value."""
    import torch.distributed as dist

    accelerator = Accelerator()
    store = dist.distributed_c10d._get_default_store()
    if accelerator.is_main_process:
        store.set("secret", "run data")
        Path(f"{out}.ready").write_text("")
    deadline = time.monotonic() + 90
    while not Path(f"{out}.probed").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    accelerator.wait_for_everyone()
    seen = store.check(["injected"]), store.get("secret").decode()
    # the store is served from rank 0's side: rank 0 returning first would take it away while rank 1 still reads
    accelerator.wait_for_everyone()
    return seen


def main(mode: str, node_rank: int, master_addr: str, port: int, out: str) -> int:
    """Launch this node's two workers; node 0 writes what the cell would show."""
    if mode == "local":
        notebook_launcher(listen_then_wait, (out,), 2, master_addr=master_addr, dashboard=False, timeout=120)
        return 0
    function, args = {"train": (workers.train, (2, 1, 24)), "secret": (keeps_a_secret, (out,))}.get(
        mode, (collectives_forever, (out,)))
    conf = {"keep_alive_interval": 1, "keep_alive_max_attempt": 3} if mode == "partition" else None
    try:
        value = notebook_launcher(function, args, 2, None, port, master_addr, node_rank, 2, rdzv_conf=conf,
                                  dashboard=False, timeout=120)
        result = {"value": value}
    except WorkerError as e:
        result = {"error": str(e)}
    result["threads"] = [t.name for t in threading.enumerate() if t.name.startswith("notebook-accel heartbeat")]
    if node_rank == 0 or mode in ("partition", "silent"):
        Path(f"{out}.node{node_rank}" if mode in ("partition", "silent") else out).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]), sys.argv[5]))
