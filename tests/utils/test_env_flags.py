"""accelerate's environment helpers in notebook_accel.utils: the answers accelerate gives, and clear errors."""

from __future__ import annotations

import os

import pytest

from notebook_accel.utils import (
    clear_environment,
    get_int_from_env,
    parse_choice_from_env,
    parse_flag_from_env,
    patch_environment,
    str_to_bool,
)


@pytest.mark.parametrize("value", ["y", "YES", "t", "True", "on", "1", " true "])
def test_true_values(value: str) -> None:
    assert str_to_bool(value) == 1 and str_to_bool(value, to_bool=True) is True


@pytest.mark.parametrize("value", ["n", "No", "f", "FALSE", "off", "0"])
def test_false_values(value: str) -> None:
    assert str_to_bool(value) == 0 and str_to_bool(value, to_bool=True) is False


def test_a_value_that_is_no_truth_value_lists_the_allowed_ones() -> None:
    with pytest.raises(ValueError, match=r"invalid truth value 'maybe': use one of y, yes.*n, no, f, false"):
        str_to_bool("maybe")
    with pytest.raises(TypeError, match="expects a string"):
        str_to_bool(1)  # type: ignore[call-overload]


def test_flags_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NA_TEST_FLAG", raising=False)
    assert parse_flag_from_env("NA_TEST_FLAG") is False and parse_flag_from_env("NA_TEST_FLAG", True) is True
    monkeypatch.setenv("NA_TEST_FLAG", "Yes")
    assert parse_flag_from_env("NA_TEST_FLAG") is True
    monkeypatch.setenv("NA_TEST_FLAG", "off")
    assert parse_flag_from_env("NA_TEST_FLAG", True) is False
    monkeypatch.setenv("NA_TEST_FLAG", "cpu")
    with pytest.raises(ValueError, match=r"NA_TEST_FLAG='cpu' is not a truth value.*or unset it"):
        parse_flag_from_env("NA_TEST_FLAG")


def test_choices_and_integers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("NA_TEST_CHOICE", raising=False)
    assert parse_choice_from_env("NA_TEST_CHOICE") == "no"
    monkeypatch.setenv("NA_TEST_CHOICE", "bf16")
    assert parse_choice_from_env("NA_TEST_CHOICE", "fp16") == "bf16"
    monkeypatch.setenv("NA_TEST_A", "-1")  # negative: passed over, as in accelerate
    monkeypatch.setenv("NA_TEST_B", "3")
    monkeypatch.delenv("NA_TEST_C", raising=False)
    assert get_int_from_env(["NA_TEST_C", "NA_TEST_A", "NA_TEST_B"], 7) == 3
    assert get_int_from_env(["NA_TEST_C", "NA_TEST_A"], 7) == 7
    monkeypatch.setenv("NA_TEST_A", "two")
    with pytest.raises(ValueError, match=r"NA_TEST_A='two' is not a whole number"):
        get_int_from_env(["NA_TEST_A"], 1)
    with pytest.raises(TypeError, match=r"get_int_from_env\(\['NA_TEST_A'\], default\)"):
        get_int_from_env("NA_TEST_A", 1)


def test_patch_environment_upper_cases_and_restores(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NA_TEST_KEEP", "before")
    monkeypatch.delenv("NA_TEST_NEW", raising=False)
    with patch_environment(na_test_keep="during", na_test_new=29501):
        assert os.environ["NA_TEST_KEEP"] == "during" and os.environ["NA_TEST_NEW"] == "29501"
        os.environ["NA_TEST_NEW"] = "changed in the block"
    assert os.environ["NA_TEST_KEEP"] == "before" and "NA_TEST_NEW" not in os.environ
    with pytest.raises(RuntimeError), patch_environment(na_test_keep="x"):
        raise RuntimeError("inside")
    assert os.environ["NA_TEST_KEEP"] == "before"


def test_clear_environment_empties_then_restores_exactly() -> None:
    before = dict(os.environ)
    with clear_environment():
        assert dict(os.environ) == {}
        os.environ["NA_TEST_SET_INSIDE"] = "1"
    assert dict(os.environ) == before
