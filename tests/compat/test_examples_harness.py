"""The harness of test_accelerate_examples: where the examples come from, the offline hub, the comparison.

These run without accelerate's examples (a fresh CI machine has none), so the harness is checked there too.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.compat.accelerate_examples import ENV_VAR, Records, difference, examples_source, extract, verdict
from tests.compat.offline_hub import GlueMrpc, load_dataset, load_metric

try:  # imported here, at collection: importing scikit-learn sets KMP_* environment variables
    from sklearn import metrics
except ImportError:  # the test extra has it
    metrics = None


def _git(*args: str, cwd: Path) -> None:
    subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True)


def test_the_examples_come_from_the_variable_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(ENV_VAR, raising=False)
    assert examples_source() is None
    monkeypatch.setenv(ENV_VAR, str(tmp_path))
    assert examples_source() is None  # a folder without the examples
    (tmp_path / "examples").mkdir()
    (tmp_path / "examples" / "nlp_example.py").write_text("print('hi')\n")
    assert examples_source() == tmp_path
    monkeypatch.setenv(ENV_VAR, str(tmp_path / "examples"))
    assert examples_source() == tmp_path / "examples"


def test_extract_reads_a_bare_clone_at_its_head(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "examples" / "by_feature").mkdir(parents=True)
    (repo / "examples" / "nlp_example.py").write_text("print('nlp')\n")
    (repo / "examples" / "by_feature" / "memory.py").write_text("print('memory')\n")
    (repo / "setup.py").write_text("")
    _git("init", "-q", cwd=repo)
    _git("add", ".", cwd=repo)
    _git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "examples", cwd=repo)
    _git("clone", "-q", "--bare", str(repo), str(tmp_path / "bare.git"), cwd=tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    examples = extract(tmp_path / "bare.git", out)
    assert (examples / "by_feature" / "memory.py").read_text() == "print('memory')\n"
    assert sorted(p.name for p in out.iterdir()) == ["examples"]  # nothing but the examples


def _forward(loss: str) -> dict[str, object]:
    return {"kind": "forward", "train": True, "rows": ["a", "b"], "loss": loss, "logits": "x"}


def test_difference_names_the_first_record_that_differs_and_a_missing_tail() -> None:
    base: Records = {0: [_forward("0x1p-1"), {"kind": "end"}], 1: [_forward("0x1p-1"), {"kind": "end"}]}
    assert difference(base, base) == ""
    other: Records = {0: base[0], 1: [_forward("0x1.0000000000001p-1"), {"kind": "end"}]}
    assert difference(base, other).startswith("rank 1, record 0: ")
    assert difference(base, {0: base[0], 1: base[1][:1]}) == "rank 1: accelerate recorded 2 lines, notebook_accel 1"


def test_verdict_wants_every_rank_to_finish() -> None:
    assert verdict({0: [{"kind": "end"}], 1: [{"kind": "end"}]}) == "ok"
    assert verdict({0: [{"kind": "end"}], 1: [_forward("0x0p+0")]}) == "did not finish on ranks [1]"
    assert verdict({0: [{"kind": "error", "error": "ValueError: bad"}]}) == "rank 0: ValueError: bad"


def test_the_synthetic_mrpc_has_glue_shape_and_is_the_same_every_time() -> None:
    data = load_dataset("nyu-mll/glue", "mrpc")
    assert {k: v.num_rows for k, v in data.items()} == {"train": 64, "validation": 32, "test": 16}
    assert data["train"].column_names == ["sentence1", "sentence2", "label", "idx"]
    assert data["train"][:5] == load_dataset("glue", "mrpc")["train"][:5]
    with pytest.raises(ValueError, match="no data set 'imdb'"):
        load_dataset("imdb")


def test_the_local_metric_gives_what_glue_mrpc_gives() -> None:
    if metrics is None:
        pytest.skip("scikit-learn is not installed (the test extra has it)")
    predictions, references = [1, 0, 1, 1, 0, 1, 0, 0], [1, 0, 0, 1, 1, 1, 0, 1]
    metric = load_metric("glue", "mrpc")
    metric.add_batch(predictions=predictions[:5], references=references[:5])
    metric.add_batch(predictions=predictions[5:], references=references[5:])
    assert metric.compute() == pytest.approx({"accuracy": metrics.accuracy_score(references, predictions),
                                              "f1": metrics.f1_score(references, predictions)}, rel=1e-15)
    assert GlueMrpc().compute(predictions=[1], references=[1]) == {"accuracy": 1.0, "f1": 1.0}


def test_a_run_that_times_out_leaves_no_process_behind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A launcher whose worker sits in a session of its own (as torchrun's do) is ended with that worker."""
    import psutil

    from tests.compat import accelerate_examples as harness

    pid_file = tmp_path / "worker.pid"
    launcher = ("import subprocess, sys, time\n"
                "worker = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'],\n"
                "                          start_new_session=True)\n"
                f"open({str(pid_file)!r}, 'w').write(str(worker.pid))\n"
                "time.sleep(600)\n")
    monkeypatch.setattr(harness, "_command", lambda *_: [sys.executable, "-c", launcher])
    monkeypatch.setattr(harness, "prepared", lambda *_: tmp_path / "script.py")
    example = harness.Example("nlp_example.py", timeout_s=3.0)
    _, output = harness.run_example(example, tmp_path, "cli", tmp_path / "work")
    assert output.startswith("timed out after 3 s")
    worker = int(pid_file.read_text())
    assert not psutil.pid_exists(worker) or psutil.Process(worker).status() == psutil.STATUS_ZOMBIE
