"""The keeper of a test Slurm cluster: the one process that starts its daemons, and ends the whole cluster when the
test process goes away.

``python -m tests.launcher.slurm.keeper <folder> <tag>`` reads one JSON command a line on stdin and answers one JSON
line on stdout:

- ``{"start": name, "argv": [...], "env": {...}}`` starts a daemon (its output to ``<folder>/<name>.out``), answers
  ``{"pid": n}``;
- ``{"kill": name}`` SIGKILLs that daemon and reaps it, answers ``{"killed": pid_or_null}``;
- ``{"stop": true}``, or the end of stdin, ends the cluster (``procs.end_cluster``) and answers ``{"left": [...]}``.

Why a keeper: its daemons are its children, not the test process's (the suite fails a test that leaves a child of the
test process running, and a test restarts slurmd), and each one gets ``PR_SET_PDEATHSIG`` = SIGKILL, so they die with
the keeper. The keeper runs in its own session and sees the end of stdin when the test process exits, however it
exits (SIGKILL included), and then ends the cluster: slurmstepd and the tasks (which Slurm detaches), the namespace,
the veth and the folder. What a killed keeper leaves, the next session's ``procs.clean_stale`` removes.
"""

from __future__ import annotations

import ctypes
import json
import signal
import subprocess
import sys
from types import FrameType

from tests.launcher.slurm import procs

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the keeper dies."""
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


class Keeper:
    """The daemons started so far, by name."""

    def __init__(self, folder: str, tag: int) -> None:
        self.folder, self.tag = folder, tag
        self.daemons: dict[str, subprocess.Popen[bytes]] = {}

    def start(self, name: str, argv: list[str], env: dict[str, str]) -> dict[str, object]:
        """Start ``argv`` as daemon ``name`` (replacing a dead one of that name)."""
        self.kill(name)
        with open(f"{self.folder}/{name}.out", "ab") as out:
            proc = subprocess.Popen(argv, env={**env, procs.MARK: self.folder}, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=subprocess.STDOUT, cwd=self.folder,
                                    preexec_fn=_die_with_parent)
        self.daemons[name] = proc
        return {"pid": proc.pid}

    def kill(self, name: str) -> dict[str, object]:
        """SIGKILL daemon ``name`` and reap it."""
        proc = self.daemons.pop(name, None)
        if proc is None:
            return {"killed": None}
        proc.kill()
        proc.wait()
        return {"killed": proc.pid}

    def stop(self) -> dict[str, object]:
        """End the whole cluster; say what is left."""
        for name in list(self.daemons):
            self.kill(name)
        return {"left": procs.end_cluster(self.folder, self.tag)}

    def serve(self) -> None:
        """Answer commands until ``stop`` or the end of stdin."""
        for line in sys.stdin:
            command = json.loads(line)
            if "start" in command:
                answer = self.start(command["start"], command["argv"], command["env"])
            elif "kill" in command:
                answer = self.kill(command["kill"])
            else:
                break
            for proc in self.daemons.values():
                proc.poll()  # reap one that died by itself
            _answer(answer)
        _answer(self.stop())


def _answer(answer: dict[str, object]) -> None:
    """One JSON line to the test process (which may be gone: then nobody needs it)."""
    try:
        print(json.dumps(answer), flush=True)
    except BrokenPipeError:
        pass


def _exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def main(argv: list[str]) -> int:
    """Keep the cluster in ``argv[0]`` (tag ``argv[1]``) until told to stop or the test process is gone."""
    keeper = Keeper(argv[0], int(argv[1]))
    for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(sig, _exit)
    try:
        keeper.serve()
    except BaseException:
        keeper.stop()
        raise
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
