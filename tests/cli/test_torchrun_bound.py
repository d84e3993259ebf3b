"""torchrun_bound's argument handling (the real run is in tests/cli/test_cli.py)."""

from __future__ import annotations

import socket

import pytest

from notebook_accel.cli import torchrun_bound


def test_option_value_reads_both_forms_and_stops_at_the_script() -> None:
    argv = ["--nnodes", "1", "--master_addr=127.0.0.1", "--master_port", "0", "s.py", "--master_port", "9"]
    assert torchrun_bound.option_value(argv, "--master_addr") == "127.0.0.1"
    assert torchrun_bound.option_value(argv, "--master_port") == "0"
    assert torchrun_bound.option_value(["s.py", "--nnodes", "2"], "--nnodes") is None


@pytest.mark.parametrize("argv", [["--master_port", "1", "s.py"], ["--master_addr", "127.0.0.1", "s.py"],
                                  ["--master_addr", "127.0.0.1", "--master_port", "x", "s.py"]])
def test_missing_or_bad_address_options_are_a_usage_error(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert torchrun_bound.main(argv) == torchrun_bound.EXIT_USAGE
    assert "--master_addr and a numeric --master_port are needed" in capsys.readouterr().err


def test_a_busy_port_is_a_usage_error_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code = torchrun_bound.main(["--master_addr", "127.0.0.1", "--master_port", str(port), "s.py"])
    assert code == torchrun_bound.EXIT_USAGE
    assert f"port {port} on 127.0.0.1 is already in use; pass another --main_process_port" in capsys.readouterr().err
