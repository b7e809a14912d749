"""SEMIF_METRICS (contract: operations extension), every value against both installs.

`config.load` decides `Settings.metrics` from the variable and from whether
prometheus_client can be imported. The import probe is replaced per test (only for
prometheus_client, every other lookup goes through) so both installs are proven on
one machine: `auto` follows the install, `on` insists on it with one exact refusal,
`off` is off either way, and any other spelling is refused naming the variable.
"""

from __future__ import annotations

import importlib.util
from typing import Any

import pytest

from semif_serve import config
from tests.wire_client import TOKEN

REFUSAL = "SEMIF_METRICS=on needs prometheus_client: pip install 'semif-serve[metrics]'"


@pytest.fixture(params=[True, False], ids=["installed", "missing"])
def installed(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> bool:
    """Pretend prometheus_client is (or is not) importable, for this test only."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        if name == "prometheus_client" and not request.param:
            return None
        return real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    return request.param


def load(**changes: str) -> config.Settings:
    return config.load({"SEMIF_API_TOKEN": TOKEN, **changes})


def test_auto_and_the_default_follow_the_install(installed: bool) -> None:
    assert load().metrics is installed
    assert load(SEMIF_METRICS="auto").metrics is installed


def test_off_is_off_whatever_is_installed(installed: bool) -> None:
    assert load(SEMIF_METRICS="off").metrics is False


def test_on_serves_metrics_when_installed_and_is_refused_otherwise(installed: bool) -> None:
    if installed:
        assert load(SEMIF_METRICS="on").metrics is True
        return
    with pytest.raises(ValueError) as refused:
        load(SEMIF_METRICS="on")
    assert str(refused.value) == REFUSAL


@pytest.mark.parametrize("value", ["", "ON", "Off", "true", "1", "on "])
def test_any_other_spelling_is_refused_naming_the_variable(value: str) -> None:
    with pytest.raises(ValueError) as refused:
        load(SEMIF_METRICS=value)
    assert str(refused.value) == f"SEMIF_METRICS must be one of auto, on, off, got {value!r}"
