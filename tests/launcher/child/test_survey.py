"""What the kernel surveys before forking: the logging handlers a worker must move onto its own streams."""

from __future__ import annotations

import io
import logging
import sys

from notebook_accel.launcher.child.main import survey_kernel


def test_the_survey_finds_every_handler_on_the_kernels_streams_and_no_other() -> None:
    deep = logging.getLogger("notebook_accel_tests.survey.deep.down")
    on_stdout, on_stderr = logging.StreamHandler(sys.stdout), logging.StreamHandler(sys.stderr)
    elsewhere = logging.StreamHandler(io.StringIO())
    root_handler = logging.StreamHandler(sys.stdout)
    for handler in (on_stdout, on_stderr, elsewhere):
        deep.addHandler(handler)
    logging.getLogger().addHandler(root_handler)
    try:
        found = dict(survey_kernel().stream_handlers)
    finally:
        for handler in (on_stdout, on_stderr, elsewhere):
            deep.removeHandler(handler)
        logging.getLogger().removeHandler(root_handler)
    assert found[on_stdout] == 1 and found[on_stderr] == 2 and found[root_handler] == 1
    assert elsewhere not in found
