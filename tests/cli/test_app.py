"""The entry point in process: exit codes and the question helpers."""

from __future__ import annotations

import io
from pathlib import Path

import pytest

from notebook_accel.cli import main
from notebook_accel.cli.common import UsageError
from notebook_accel.cli.config_cmd import interview
from notebook_accel.cli.questions import ask_choice, ask_int
from notebook_accel.config import Config
from notebook_accel.hardware import GpuInfo

A100 = [GpuInfo(0, "A100", 80 * 2**30, (8, 0)), GpuInfo(1, "A100", 80 * 2**30, (8, 0))]


def _stdin(monkeypatch: pytest.MonkeyPatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def test_main_returns_exit_codes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["--help"]) == 0
    assert main(["--version"]) == 0
    assert "notebook-accel 0.1.0" in capsys.readouterr().out
    assert main(["nope"]) == 2
    assert main(["launch", "--config_file", str(tmp_path / "none.yaml"), "x.py"]) == 2
    err = capsys.readouterr().err
    assert "notebook-accel: error: invalid notebook-accel config" in err and "no config file" in err


def test_interrupt_exits_130(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted(_: object) -> int:
        raise KeyboardInterrupt

    monkeypatch.setattr("notebook_accel.cli.env_cmd.report", interrupted)
    assert main(["env"]) == 130
    assert "interrupted" in capsys.readouterr().err


def test_ask_int_retries_then_gives_up(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _stdin(monkeypatch, "0\n9\n3\n")
    assert ask_int("n", 1, 1, 5) == 3
    out = capsys.readouterr().out
    assert "0 is out of range; answer between 1 and 5" in out and "9 is out of range" in out
    _stdin(monkeypatch, "x\n" * 5)
    with pytest.raises(UsageError, match="no valid answer"):
        ask_int("n", 1, 1)


def test_ask_choice_is_case_insensitive_and_requires_an_answer_without_default(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _stdin(monkeypatch, "BF16\n")
    assert ask_choice("mp", ["no", "bf16"], "no") == "bf16"
    _stdin(monkeypatch, "\n")
    with pytest.raises(UsageError, match="input ended"):
        ask_int("n", None, 0)


def test_interview_on_a_gpu_machine(monkeypatch: pytest.MonkeyPatch) -> None:
    # device, machines, port, gpus (a wrong one first), processes, precision, accumulation
    _stdin(monkeypatch, "gpu\n1\n0\n0,7\n1\n\nfp16\n\n")
    config = interview(A100, 8)
    assert config == Config(num_processes=1, gpu_ids="1", mixed_precision="fp16", main_process_port=0)


def test_interview_for_two_machines(monkeypatch: pytest.MonkeyPatch) -> None:
    # device, machines, rank, ip, port, backend, gpus, processes, precision, accumulation, engine
    _stdin(monkeypatch, "\n2\n1\n10.0.0.1\n\nc10d\n\n\nbf16\n2\n\n")
    config = interview(A100, 8)
    assert (config.num_processes, config.num_machines, config.machine_rank) == (4, 2, 1)
    assert (config.main_process_ip, config.main_process_port, config.rdzv_backend) == ("10.0.0.1", 29500, "c10d")
    assert (config.gpu_ids, config.mixed_precision, config.gradient_accumulation_steps) == ("all", "bf16", 2)
