"""notebook_accel.logging.get_logger: accelerate's multi-process logger, on one process and on 2 real processes."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from notebook_accel import Accelerator, notebook_launcher
from notebook_accel.logging import LoggingStateError, MultiProcessAdapter, get_logger
from notebook_accel.plugins import ConfigurationError
from tests.launcher.recording import RecordingSink

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def captured() -> Iterator[tuple[MultiProcessAdapter, list[logging.LogRecord]]]:
    """A fresh logger at INFO whose records land in a list."""
    records: list[logging.LogRecord] = []
    handler = logging.Handler()
    handler.emit = records.append  # type: ignore[method-assign]
    base = logging.getLogger("notebook_accel.tests.logging")
    base.handlers[:] = [handler]
    base.propagate = False
    root_level = logging.getLogger().level
    adapter = get_logger(base.name, log_level="info")
    yield adapter, records
    logging.getLogger().setLevel(root_level)


def test_one_process_logs_with_the_rank_prefix_at_the_callers_line(
        captured: tuple[MultiProcessAdapter, list[logging.LogRecord]]) -> None:
    logger, records = captured
    logger.info("loaded %d rows", 3)
    logger.info("everyone", main_process_only=False)
    logger.info("in order", in_order=True)
    logger.debug("below the level")
    logger.warning_once("careful")
    logger.warning_once("careful")
    assert [r.getMessage() for r in records] == [
        "[RANK 0] loaded 3 rows", "[RANK 0] everyone", "[RANK 0] in order", "[RANK 0] careful"]
    assert {Path(r.pathname).name for r in records[:3]} == {Path(__file__).name}  # not logging.py's own line
    assert logger.logger.level == logging.INFO == logging.getLogger().level  # accelerate sets the root's too


def test_the_level_comes_from_accelerates_variable_and_bad_levels_are_refused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    root_level = logging.getLogger().level
    try:
        monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "debug")
        assert get_logger("notebook_accel.tests.level").logger.level == logging.DEBUG
        monkeypatch.setenv("ACCELERATE_LOG_LEVEL", "LOUD")
        with pytest.raises(ConfigurationError, match="ACCELERATE_LOG_LEVEL='LOUD' is not a logging level; allowed"):
            get_logger("notebook_accel.tests.level")
        with pytest.raises(ConfigurationError, match="log_level=5 is not a logging level"):
            get_logger("notebook_accel.tests.level", log_level=5)  # type: ignore[arg-type]
    finally:
        logging.getLogger().setLevel(root_level)


def test_a_rank_of_a_run_without_its_process_group_is_refused(
        captured: tuple[MultiProcessAdapter, list[logging.LogRecord]], monkeypatch: pytest.MonkeyPatch) -> None:
    logger, records = captured
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(LoggingStateError, match="rank 1 of 2 .*create the Accelerator"):
        logger.info("too early")
    assert records == []


def log_from_two_ranks(path: str) -> None:
    """Each rank logs into one shared file (one write per line, appended)."""
    accelerator = Accelerator()
    logger = get_logger("notebook_accel.tests.two_ranks", log_level="INFO")
    handler = logging.FileHandler(path)
    handler.setFormatter(logging.Formatter("%(message)s"))
    logger.logger.addHandler(handler)
    logger.info("main only")
    accelerator.wait_for_everyone()
    logger.info("everyone", main_process_only=False)
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        time.sleep(0.5)  # without in_order's turns, rank 1's line would come first
    logger.info("in order", in_order=True)
    handler.close()


def test_two_ranks_log_main_only_everyone_and_in_rank_order(tmp_path: Path) -> None:
    path = tmp_path / "log.txt"
    notebook_launcher(log_from_two_ranks, args=(str(path),), num_processes=2, dashboard=RecordingSink())
    lines = path.read_text().splitlines()
    assert lines[0] == "[RANK 0] main only"
    assert sorted(lines[1:3]) == ["[RANK 0] everyone", "[RANK 1] everyone"]
    assert lines[3:] == ["[RANK 0] in order", "[RANK 1] in order"]


def test_verbosity_sets_only_this_librarys_logger() -> None:
    """accelerate 1.16's set_verbosity family, for the notebook_accel namespace: children that set no level of
    their own follow; the root logger and other libraries' loggers keep theirs."""
    import notebook_accel
    from notebook_accel.logging import LIBRARY_LOGGER, get_verbosity, set_verbosity, set_verbosity_error

    library = logging.getLogger(LIBRARY_LOGGER)
    saved, root_level, other_level = library.level, logging.getLogger().level, logging.getLogger("other_lib").level
    try:
        set_verbosity_error()
        assert get_verbosity() == logging.ERROR
        assert logging.getLogger(f"{LIBRARY_LOGGER}.data.worker_fork").getEffectiveLevel() == logging.ERROR
        notebook_accel.set_verbosity_info()
        assert get_verbosity() == logging.INFO
        set_verbosity("debug")
        assert get_verbosity() == logging.DEBUG
        assert (logging.getLogger().level, logging.getLogger("other_lib").level) == (root_level, other_level)
        with pytest.raises(ConfigurationError, match=r"set_verbosity\('loud'\): not a logging level"):
            set_verbosity("loud")
        with pytest.raises(ConfigurationError, match="not a logging level"):
            set_verbosity(True)  # type: ignore[arg-type]
    finally:
        library.setLevel(saved)
