"""A seeded fuzzer over the command line (in process): every argv ends with exit code 0 or 2 and a message,
never a traceback, and leaves no child process, descriptor, environment change or signal handler behind.
Commands that would start processes run only with ``--dry_run``.
"""

from __future__ import annotations

import io
import os
import random
import stat
import time
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

from notebook_accel.cli.app import main
from tests.helpers import process_state

SEED = 4242
CALLS = 500

COMMANDS = [["launch", "--dry_run"], ["config", "--help"], ["env"], ["launch", "--dry_run", "--cpu"],
            ["test", "--help"], ["config", "--default", "--config_file"],
            ["config", "--default", "--force", "--config_file"], ["env", "--config_file"],
            ["launch", "--dry", "--config"]]
FLAGS = ["--num_processes", "--num_machines", "--machine_rank", "--main_process_port", "--main_process_ip",
         "--gradient_accumulation_steps", "--mixed_precision", "--gpu_ids", "--rdzv_backend", "--config_file",
         "--timeout", "--nope", "-x", "--", "--cpu", "--max_restarts", "--rdzv_conf", "--monitor_interval",
         "--log_line_prefix_template", "--main_training_function", "--num_cpu_threads_per_process",
         # abbreviations argparse accepts, the remaining options of every command, and help
         "--num", "--mixed", "--gpu", "--machine", "--main", "--rdzv", "--config", "--dry", "--force", "-h",
         "--help", "--num_processes=", "--mixed_precision=bf16", "--deepspeed_config_file", "--use_fsdp",
         "--same_network", "--module", "--no_python", "--num-processes"]
VALUES = ["2", "0", "-1", "nan", "inf", "1e9", "9" * 400, "", " ", "abc", "fp8", "bf16", "all", "0,0", "c10d",
          "etcd", "10.0.0.1", "::1", "/dev/zero", "/nonexistent.yaml", "\x00", "é", "--", "script.py", "a b; rm x",
          "x" * 100_000, "-" + "9" * 40, "{rank:>400000000}", "join_timeout=1e-300", "1e-300", "[1]", "{}",
          "None", "1.5", "0x10", "/dev/stdin", "/proc/self/mem", "-1e400", "\n", "a/" * 3000, "/", ".", "~",
          "/dev/null", "-", "2,", ",", "0,1,2,3,4,5,6,7,8,9" * 50, "\udcff", "=", "true", "[]", "65536", "-0"]


def _argv(rng: random.Random, tmp: Path) -> list[str]:
    """One command line: a command, a few flags with values (some missing or wrong), maybe a script."""
    argv = list(rng.choice(COMMANDS))
    if argv[-1] == "--config_file":
        argv.append(str(tmp / f"c{rng.randrange(1000)}.yaml"))
    for _ in range(rng.randrange(4)):
        argv.append(rng.choice(FLAGS))
        if rng.random() < 0.8:
            argv.append(rng.choice(VALUES))
    if argv[0] == "launch" and rng.random() < 0.7:
        argv += ["train.py", *rng.sample(VALUES, 2)]
    return argv


def test_cli_fuzz(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("NOTEBOOK_ACCEL_CONFIG_FILE", raising=False)
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED)
    codes: dict[int, int] = {}
    for index in range(CALLS):
        argv = _argv(rng, tmp_path)
        out, err = io.StringIO(), io.StringIO()
        before = process_state()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except BaseException as e:  # noqa: BLE001 - the point of the test
                pytest.fail(f"case {index}: notebook-accel {argv!r} raised {type(e).__name__}: {e}")
        assert before.leaks(process_state()) == [], f"case {index}: {argv!r}"
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 2), f"case {index}: notebook-accel {argv!r} exited {code}: {err.getvalue()[-500:]}"
        assert "Traceback" not in out.getvalue() + err.getvalue(), f"case {index}: {argv!r}"
        if code == 2:
            assert err.getvalue().strip(), f"case {index}: {argv!r} failed without a message"
    assert codes.get(0, 0) >= 10 and codes.get(2, 0) >= 100, codes
    # `config --default --config_file /dev/zero`, run as root, once put a config file in the device's place
    assert all(stat.S_ISCHR(os.stat(device).st_mode) for device in ("/dev/zero", "/dev/null"))


@pytest.mark.timeout(120)
@pytest.mark.filterwarnings("ignore::notebook_accel.config.ConfigWarning")  # accelerate-only keys: expected here
def test_cli_fuzz_over_config_file_contents(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Mutated and alias-laden config files given to ``launch --dry_run`` and ``env``: exit 0, or 2 with a message
    on stderr, each within a second; never a traceback."""
    from tests.config.test_fuzz import SEEDS, _alias_document, _mutate_text

    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.chdir(tmp_path)
    rng = random.Random(SEED + 1)
    path = tmp_path / "c.yaml"
    monkeypatch.setenv("NOTEBOOK_ACCEL_CONFIG_FILE", str(path))  # what `env` reads
    codes: dict[int, int] = {}
    for index in range(150):
        text = _alias_document(rng) if rng.random() < 0.3 else _mutate_text(rng, rng.choice(SEEDS))
        path.write_text(text)
        argv = rng.choice([["launch", "--dry_run", "--config_file", str(path), "train.py"], ["env"]])
        out, err = io.StringIO(), io.StringIO()
        before = process_state()
        start = time.perf_counter()
        with redirect_stdout(out), redirect_stderr(err):
            try:
                code = main(argv)
            except BaseException as e:  # noqa: BLE001 - the point of the test
                pytest.fail(f"case {index}: notebook-accel {argv!r} on {text!r} raised {type(e).__name__}: {e}")
        assert time.perf_counter() - start < 1.0, f"case {index}: {argv!r} on {text!r} took too long"
        assert before.leaks(process_state()) == [], f"case {index}: {argv!r} on {text!r}"
        codes[code] = codes.get(code, 0) + 1
        assert code in (0, 2), f"case {index}: {argv!r} on {text!r} exited {code}: {err.getvalue()[-500:]}"
        assert "Traceback" not in out.getvalue() + err.getvalue(), f"case {index}: {argv!r} on {text!r}"
        if code == 2:
            assert "notebook-accel: error:" in err.getvalue(), f"case {index}: {argv!r} failed without a message"
    assert codes.get(0, 0) >= 10 and codes.get(2, 0) >= 10, codes
