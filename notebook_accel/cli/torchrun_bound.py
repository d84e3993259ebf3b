"""``python -m notebook_accel.cli.torchrun_bound TORCHRUN-ARGS``: torchrun whose rendezvous store listens on
``--master_addr`` only.

torchrun's static rendezvous makes its agent serve a ``TCPStore`` on every interface of the machine (IPv4 and
IPv6), whatever ``--master_addr`` says, and torch offers no way to choose the address. But that store is opened with
``multi_tenant=True``, which reuses a server already running in the same process on the same port. So this module,
run in place of ``python -m torch.distributed.run`` on the machine that serves the rendezvous (the only one of a
one-machine run, machine 0 of a static several-machine run):

1. binds ``--master_addr``:``--master_port`` itself (port 0: a free one, written back into the arguments, so the
   port is held from the choice to the run with no race);
2. serves the store on that socket (:class:`~notebook_accel.launcher.rendezvous.store.StoreServer`);
3. on a one-machine run with a loopback address, keeps gloo and nccl on the loopback interface, as
   ``notebook_launcher`` does;
4. runs torchrun in this process (``torch.distributed.run.main``), whose agent then uses the bound store.

The arguments are torchrun's own, unchanged; ``--master_addr`` and ``--master_port`` must be among them.
"""

from __future__ import annotations

import sys

from notebook_accel import environment
from notebook_accel.errors import LaunchError
from notebook_accel.launcher.rendezvous.store import StoreServer, bind_listener, worker_variables

__all__ = ["main", "option_value"]

EXIT_USAGE = 2


def option_value(argv: list[str], name: str) -> str | None:
    """The value of option ``name`` in ``argv`` (``--name VALUE`` or ``--name=VALUE``), ``None`` when absent.

    Options after the script (the first argument that is not an option or an option's value) are the script's and
    are not looked at.
    """
    for i, arg in enumerate(argv):
        if arg == name and i + 1 < len(argv):
            return argv[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg.endswith(".py"):
            break
    return None


def _with_port(argv: list[str], port: int) -> list[str]:
    """``argv`` with ``--master_port``'s value replaced by ``port``."""
    out = list(argv)
    for i, arg in enumerate(out):
        if arg == "--master_port":
            out[i + 1] = str(port)
            break
        if arg.startswith("--master_port="):
            out[i] = f"--master_port={port}"
            break
    return out


def main(argv: list[str]) -> int:
    """Bind and serve the store, then run torchrun with ``argv``; returns torchrun's exit code.

    Returns:
        0 when every worker succeeded; 2 when the address or port cannot be bound (the message says why);
        otherwise torchrun raises its ``ChildFailedError`` as it would on its own.
    """
    host, port = option_value(argv, "--master_addr"), option_value(argv, "--master_port")
    if host is None or port is None or not port.isdigit():
        print(f"torchrun_bound: --master_addr and a numeric --master_port are needed, got {host!r} and {port!r}",
              file=sys.stderr)
        return EXIT_USAGE
    try:
        listener = bind_listener(host, int(port), port_option="--main_process_port ")
    except LaunchError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_USAGE
    nodes_text = option_value(argv, "--nnodes") or "1"
    nodes = int(nodes_text) if nodes_text.isdigit() else 2  # an elastic range "1:2" counts as several machines
    server = StoreServer(listener, world_size=nodes, multi_tenant=True)
    argv = _with_port(argv, server.port)
    for name, value in worker_variables(host, nodes).items():  # torchrun sets the agent-store variables itself
        if name.endswith("_SOCKET_IFNAME"):
            environment.set_var(name, value)
    server.start()
    try:
        from torch.distributed.run import main as torchrun

        torchrun(argv)
    finally:
        server.close()
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
