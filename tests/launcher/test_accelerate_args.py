"""accelerate's notebook_launcher signature: its order, its string port, its rendezvous and restart options."""

from __future__ import annotations

import inspect
import os
import pickle
from pathlib import Path
from typing import Any

import pytest
import torch

from notebook_accel import Accelerator
from notebook_accel.errors import LaunchError
from notebook_accel.launcher import WorkerError, accelerate_args, notebook_launcher
from tests.helpers import free_port, import_accelerate
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)

# accelerate 1.x: accelerate.notebook_launcher's parameters, in order
ACCELERATE_ORDER = [
    "function", "args", "num_processes", "mixed_precision", "use_port", "master_addr", "node_rank", "num_nodes",
    "rdzv_backend", "rdzv_endpoint", "rdzv_conf", "rdzv_id", "max_restarts", "monitor_interval",
    "log_line_prefix_template",
]


def report() -> dict[str, Any]:
    return {"precision": os.environ.get("NOTEBOOK_ACCEL_MIXED_PRECISION"), "port": os.environ["MASTER_PORT"]}


def crash_after_saving(folder: str) -> tuple[int, int, str]:
    """First attempt: save a checkpoint at step 5, then fail. A restart resumes from it."""
    accelerator = Accelerator()
    accelerator.prepare(torch.nn.Linear(2, 2))
    if accelerator.restart_count == 0:
        accelerator.step = 5
        accelerator.save_state(folder)
        if accelerator.is_main_process:
            raise RuntimeError("crashed after the checkpoint")
        accelerator.wait_for_everyone()  # rank 0 never arrives: the launcher stops this rank
    path = accelerator.load_state()
    return accelerator.restart_count, accelerator.step, path


def crash_without_saving() -> None:
    raise RuntimeError("crashed before any checkpoint")


def fail_twice(folder: str) -> int | None:
    """Rank 0 fails on the first two attempts (counted in a file), then returns the attempt number."""
    if os.environ["RANK"] != "0":
        return None
    marks = Path(folder) / "attempts"
    with marks.open("a") as f:
        f.write("x")
    attempt = len(marks.read_text())
    if attempt < 3:
        raise RuntimeError(f"attempt {attempt} fails")
    return attempt


def say_hello() -> None:
    print(f"hello from {os.environ['RANK']}", flush=True)


def test_positional_order_is_accelerates() -> None:
    names = list(inspect.signature(notebook_launcher).parameters)
    assert names[: len(ACCELERATE_ORDER)] == ACCELERATE_ORDER
    extras = list(inspect.signature(notebook_launcher).parameters.values())[len(ACCELERATE_ORDER):]
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in extras)


def test_the_order_is_the_installed_accelerates() -> None:
    accelerate = import_accelerate()
    theirs = inspect.signature(accelerate.notebook_launcher).parameters
    ours = inspect.signature(notebook_launcher).parameters
    assert list(ours)[: len(theirs)] == list(theirs) == ACCELERATE_ORDER
    assert [p.kind for p in list(ours.values())[: len(theirs)]] == [p.kind for p in theirs.values()]


def test_accelerates_positional_call_works() -> None:
    value = notebook_launcher(report, (), 2, "bf16", str(free_port()), dashboard=RecordingSink())
    assert value["precision"] == "bf16"


def test_rdzv_endpoint_gives_the_port() -> None:
    port = free_port()
    value = notebook_launcher(report, num_processes=2, rdzv_backend="c10d", rdzv_endpoint=f"127.0.0.1:{port}",
                              rdzv_conf={"join_timeout": 60}, rdzv_id="job-7", dashboard=RecordingSink())
    assert value["port"] == str(port)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"rdzv_backend": "etcd"}, "rdzv_backend='etcd' is not supported"),
        ({"rdzv_endpoint": "host:port"}, "not host\\[:port\\]"),
        ({"rdzv_endpoint": 5}, "rdzv_endpoint=5"),
        ({"rdzv_conf": {"join_timeout": -1}}, "join_timeout=-1"),
        ({"rdzv_conf": {"joins": 1}}, "unknown keys \\['joins'\\]"),
        ({"rdzv_conf": "x"}, "rdzv_conf='x'"),
        ({"rdzv_id": 3}, "rdzv_id=3"),
        ({"max_restarts": -1}, "max_restarts=-1"),
        ({"max_restarts": 1.5}, "max_restarts=1.5"),
        ({"monitor_interval": 0}, "monitor_interval=0"),
        ({"log_line_prefix_template": "{nope}"}, "cannot be filled"),
        ({"log_line_prefix_template": "{rank:>400000000} "}, "asks for 400000000 characters, at most 200"),
        ({"log_line_prefix_template": "{rank:{local_rank}0000000}"}, "field inside its format"),
        ({"log_line_prefix_template": "[{rank}]" * 40}, "makes a prefix of .* at most 200"),
        ({"rdzv_conf": {"join_timeout": 1e-300}}, "join_timeout=1e-300 .* from 1 "),
        ({"rdzv_conf": {"join_timeout": 1e300}}, "join_timeout=1e\\+300 .* to 604800"),
        ({"rdzv_conf": {"keep_alive_interval": 0}}, "keep_alive_interval=0 .* from 0.1 to 3600"),
        ({"rdzv_conf": {"keep_alive_max_attempt": 2.5}}, "keep_alive_max_attempt=2.5 .* from 1 to 1000"),
        ({"max_restarts": 1, "num_nodes": 2, "node_rank": 1, "use_port": 29500, "master_addr": "10.0.0.1"},
         "restart together"),
    ],
)
def test_bad_accelerate_arguments_are_refused(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(LaunchError, match=match):
        notebook_launcher(report, num_processes=2, dashboard=RecordingSink(), **kwargs)


def test_keep_alive_options_are_read() -> None:
    rdzv = accelerate_args.check_rendezvous("static", "", {"keep_alive_interval": 0.5, "keep_alive_max_attempt": 4}, "x", 0.1)
    assert (rdzv.keep_alive_interval, rdzv.keep_alive_max_attempt) == (0.5, 4)
    assert accelerate_args.check_rendezvous("static", "", None, "x", 0.1).keep_alive_interval == 5.0


def test_endpoint_forms() -> None:
    assert accelerate_args.check_rendezvous("static", "", None, "none", 0.1).endpoint_host is None
    ipv6 = accelerate_args.check_rendezvous("c10d", "[::1]:29400", None, "none", 0.1)
    assert (ipv6.endpoint_host, ipv6.endpoint_port) == ("::1", 29400)
    assert accelerate_args.check_rendezvous("c10d", "node0", None, "none", 0.1).endpoint_port is None


def test_max_restarts_resumes_from_the_last_checkpoint(tmp_path: Path) -> None:
    folder = tmp_path / "ckpt"
    sink = RecordingSink()
    restarts, step, path = notebook_launcher(crash_after_saving, args=(str(folder),), num_processes=2,
                                             max_restarts=2, dashboard=sink)
    assert (restarts, step, path) == (1, 5, str(folder))
    assert sink.info is not None  # the restart's attempt tells the sinks which restart, from where and why
    assert sink.info.restart == (f"restart 1 of 2 from {folder} after rank 0: RuntimeError: crashed after the "
                                 "checkpoint")


def test_max_restarts_without_a_checkpoint_restarts_from_the_start(tmp_path: Path,
                                                                    capfd: pytest.CaptureFixture[str]) -> None:
    attempts = notebook_launcher(fail_twice, args=(str(tmp_path),), num_processes=2, max_restarts=3,
                                 dashboard=False)
    assert attempts == 3
    err = capfd.readouterr().err  # the console says it before each restart's launch line
    assert "notebook-accel: restart 2 of 3 from the start (no checkpoint committed yet) after rank 0: RuntimeError: " \
           "attempt 2 fails" in err


def test_max_restarts_gives_up_after_the_last_restart_listing_every_attempt() -> None:
    sink = RecordingSink()
    with pytest.raises(WorkerError, match="crashed before any checkpoint") as caught:
        notebook_launcher(crash_without_saving, num_processes=2, max_restarts=1, dashboard=sink)
    assert caught.value.attempts == (
        "attempt 1: ranks 0, 1: RuntimeError: crashed before any checkpoint; restarted from the start (no "
        "checkpoint committed yet)", "attempt 2: ranks 0, 1: RuntimeError: crashed before any checkpoint")
    assert "every attempt (2):\n  attempt 1: " in str(caught.value)
    assert sink.info is not None and sink.info.restart.startswith("restart 1 of 1 from the start")
    assert pickle.loads(pickle.dumps(caught.value)).attempts == caught.value.attempts


def test_line_prefix_template(capsys: pytest.CaptureFixture[str]) -> None:
    notebook_launcher(say_hello, num_processes=2, dashboard=False, show_all_ranks=True,
                      log_line_prefix_template="${rank}|{local_rank}: ")
    assert "1|1: hello from 1" in capsys.readouterr().out
