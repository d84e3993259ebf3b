"""``notebook-accel test``: a 2-process gloo all-reduce on this machine, through ``launch``'s own machinery."""

from __future__ import annotations

import argparse
import re
import time
from pathlib import Path

from notebook_accel import environment
from notebook_accel.cli.common import EXIT_FAILED, EXIT_OK, positive_seconds, process_count
from notebook_accel.cli.launch_cmd import child_environment, torchrun_command
from notebook_accel.cli.process import run_child
from notebook_accel.config import Config

__all__ = ["register", "sanity_check"]

SCRIPT = Path(__file__).with_name("_sanity_script.py")


def register(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``test`` subcommand."""
    parser = commands.add_parser(
        "test",
        help="check that this machine can run a 2-process job",
        description="Start 2 CPU processes through torch.distributed.run, all-reduce a tensor over gloo, and say "
        "whether it worked. Exit code 0 when ready, 1 when not.",
    )
    parser.add_argument("--num_processes", "--num-processes", type=process_count, default=2, metavar="N",
                        help="processes to start (default 2)")
    parser.add_argument("--timeout", type=positive_seconds, default=120.0, metavar="SECONDS",
                        help="give up after (default 120)")
    parser.set_defaults(run=sanity_check)


def sanity_check(args: argparse.Namespace) -> int:
    """Run the sanity script and print one success or failure line (the output too on failure)."""
    config = Config(num_processes=args.num_processes, use_cpu=True)
    cmd = torchrun_command(config, str(SCRIPT), [])
    start = time.monotonic()
    code, output = run_child(cmd, environment.environ_with(child_environment(config)), args.timeout, capture=True)
    elapsed = time.monotonic() - start
    passed = len(re.findall(r"^sanity rank \d+/\d+: .*: ok$", output, flags=re.MULTILINE))
    if code == 0 and passed == config.num_processes:
        print(f"notebook-accel test: OK - {passed} processes all-reduced a tensor over gloo on CPU in {elapsed:.1f} s; "
              "this machine is ready.")
        return EXIT_OK
    why = "timed out" if code == 124 else f"exited with code {code}"
    print(output.rstrip())
    print(f"notebook-accel test: FAILED - the {config.num_processes}-process check {why} after {elapsed:.1f} s "
          f"({passed} of {config.num_processes} processes reported ok); see the output above.")
    return EXIT_FAILED
