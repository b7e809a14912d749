"""The System One settings, validated at startup like every other: a bad value names its variable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from semif_serve import cli, config, server
from tests.calibration_files import MATCHING, PRIORS, prior_path
from tests.wire_client import TOKEN


def started(env: dict[str, str]) -> config.Settings:
    """The settings, then what startup checks before the model loads: the calibration file and
    System One's defaults against it (server.read_calibration)."""
    settings = config.load(env)
    server.read_calibration(settings)
    return settings


def load(tmp_path: Path, **env: str) -> config.Settings:
    table = tmp_path / "calibration.json"
    table.write_text(json.dumps({"triage": 1.5}))
    return started({"SEMIF_API_TOKEN": TOKEN, "SEMIF_CALIBRATION": str(table), **env})


def test_the_defaults_accept_semifs_own_names_without_averaging(tmp_path: Path) -> None:
    """SemIf's server accepts its Jev aliases (the SDK's default model among them) and semif-latest."""
    settings = config.load({"SEMIF_API_TOKEN": TOKEN})
    assert settings.model_aliases == ("jev-latest", "jev-preview", "jev-1.13.0", "semif-latest")
    assert config.Settings(api_token=TOKEN).model_aliases == settings.model_aliases
    assert (settings.systemone_orderings, settings.systemone_workload) == ("none", None)


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        (
            {"SEMIF_MODEL_ALIASES": "jev-latest, semif-latest"},
            "model_aliases",
            ("jev-latest", "semif-latest"),
        ),
        ({"SEMIF_MODEL_ALIASES": ""}, "model_aliases", ()),
        ({"SEMIF_SYSTEMONE_ORDERINGS": "rotations"}, "systemone_orderings", "rotations"),
        ({"SEMIF_SYSTEMONE_ORDERINGS": "all"}, "systemone_orderings", "all"),
        ({"SEMIF_SYSTEMONE_WORKLOAD": "triage"}, "systemone_workload", "triage"),
        ({"SEMIF_SYSTEMONE_WORKLOAD": ""}, "systemone_workload", None),
    ],
)
def test_each_allowed_form_is_accepted(
    tmp_path: Path, env: dict[str, str], field: str, value: object
) -> None:
    assert getattr(load(tmp_path, **env), field) == value


BAD = [
    ("SEMIF_MODEL_ALIASES", "jev-latest,,x"),
    ("SEMIF_MODEL_ALIASES", "has space"),
    ("SEMIF_MODEL_ALIASES", "a,a"),
    ("SEMIF_MODEL_ALIASES", "x" * 101),
    ("SEMIF_MODEL_ALIASES", "café"),
    ("SEMIF_SYSTEMONE_ORDERINGS", "rotation"),
    ("SEMIF_SYSTEMONE_ORDERINGS", ""),
    ("SEMIF_SYSTEMONE_WORKLOAD", "unknown"),
]


@pytest.mark.parametrize(("name", "value"), BAD)
def test_a_bad_value_is_refused_naming_its_variable(tmp_path: Path, name: str, value: str) -> None:
    with pytest.raises(ValueError, match=name):
        load(tmp_path, **{name: value})


def test_a_default_workload_needs_a_temperature_for_the_default_orderings(tmp_path: Path) -> None:
    """The plain table holds only `none` temperatures: averaging by default could never be calibrated."""
    with pytest.raises(
        ValueError,
        match="SEMIF_SYSTEMONE_WORKLOAD 'triage' has no temperature for SEMIF_SYSTEMONE_ORDERINGS='rotations'",
    ):
        load(tmp_path, SEMIF_SYSTEMONE_WORKLOAD="triage", SEMIF_SYSTEMONE_ORDERINGS="rotations")


def test_a_default_workload_without_a_calibration_file_is_refused() -> None:
    with pytest.raises(ValueError, match="SEMIF_SYSTEMONE_WORKLOAD names 'triage'"):
        started({"SEMIF_API_TOKEN": TOKEN, "SEMIF_SYSTEMONE_WORKLOAD": "triage"})


# A workload the calibration file lacks is refused by the startup read: a process in test_entry_point.py.
ENTRY_CASES = [
    ({"SEMIF_API_TOKEN": TOKEN, name: value}, name) for name, value in BAD[:1] + BAD[5:6]
] + [
    (
        {"SEMIF_API_KEY": "short"},
        "SEMIF_API_KEY",
    ),  # SemIf's server's names: the refusal names what was written
    ({"SEMIF_API_TOKEN": TOKEN, "SEMIF_MAX_INPUT_TOKENS": "x"}, "SEMIF_MAX_INPUT_TOKENS"),
    ({"SEMIF_API_TOKEN": TOKEN, "SEMIF_DEVICE": "auto"}, "SEMIF_DEVICE"),
    ({"SEMIF_API_TOKEN": TOKEN, "SEMIF_MODE": "shared"}, "SEMIF_MODE"),
]


@pytest.mark.parametrize(("env", "name"), ENTRY_CASES, ids=lambda item: str(item))
def test_the_entry_point_exits_2_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    env: dict[str, str],
    name: str,
) -> None:
    async def must_not_serve(settings: config.Settings) -> int:
        raise AssertionError(f"configuration accepted {settings!r}")

    monkeypatch.setattr(server, "serve", must_not_serve)
    for key in [key for key in os.environ if key.startswith("SEMIF_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert cli.main([]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"semif-serve: {name}") and err.count("\n") == 1


@pytest.mark.parametrize(
    ("aliases", "names"),
    [
        (
            "!" + "a" * 98 + "~",
            ("!" + "a" * 98 + "~",),
        ),  # the visible-ASCII ends ('!' 33, '~' 126) at the 100-character cap
    ],
)
def test_an_alias_at_each_bound_is_accepted(
    tmp_path: Path, aliases: str, names: tuple[str, ...]
) -> None:
    assert load(tmp_path, SEMIF_MODEL_ALIASES=aliases).model_aliases == names


def test_an_alias_with_a_delete_character_is_refused(tmp_path: Path) -> None:
    """DEL (127) is just past the visible ASCII range."""
    with pytest.raises(
        ValueError,
        match="SEMIF_MODEL_ALIASES must be comma-separated names of 1..100 visible ASCII characters",
    ):
        load(tmp_path, SEMIF_MODEL_ALIASES="jev\x7flatest")


def test_an_unknown_default_workload_is_told_what_the_table_holds(tmp_path: Path) -> None:
    table = tmp_path / "two.json"
    table.write_text(json.dumps({"triage": 1.5, "billing": 2.0}))
    with pytest.raises(ValueError) as caught:
        started(
            {
                "SEMIF_API_TOKEN": TOKEN,
                "SEMIF_CALIBRATION": str(table),
                "SEMIF_SYSTEMONE_WORKLOAD": "other",
            }
        )
    assert (
        str(caught.value)
        == "SEMIF_SYSTEMONE_WORKLOAD names 'other', which SEMIF_CALIBRATION does not hold (it holds: billing, triage)"
    )
    with pytest.raises(ValueError) as caught:
        started({"SEMIF_API_TOKEN": TOKEN, "SEMIF_SYSTEMONE_WORKLOAD": "other"})
    assert (
        str(caught.value)
        == "SEMIF_SYSTEMONE_WORKLOAD names 'other', which SEMIF_CALIBRATION does not hold (it holds: none)"
    )


# -- SemIf's own server's settings -----------------------------------------------------------

KEY = "k" * 40  # a valid token that is not TOKEN


@pytest.mark.parametrize(
    ("env", "field", "value"),
    [
        ({"SEMIF_API_KEY": KEY}, "api_token", KEY),
        ({"SEMIF_API_KEY": KEY, "SEMIF_API_TOKEN": KEY}, "api_token", KEY),
        ({"SEMIF_API_TOKEN": KEY}, "api_token", KEY),
        ({"SEMIF_API_KEY": KEY, "SEMIF_MAX_INPUT_TOKENS": "512"}, "max_tokens", 512),
        (
            {"SEMIF_API_KEY": KEY, "SEMIF_MAX_INPUT_TOKENS": "512", "SEMIF_MAX_TOKENS": "512"},
            "max_tokens",
            512,
        ),
        (
            {"SEMIF_API_KEY": KEY, "SEMIF_BACKEND": "torch", "SEMIF_MODE": "auto"},
            "scorer",
            "semif_phase1",
        ),
    ],
    ids=lambda item: str(item),
)
def test_semifs_name_for_one_of_our_settings_is_read_as_ours(
    env: dict[str, str], field: str, value: object
) -> None:
    assert getattr(config.load(env), field) == value


@pytest.mark.parametrize(
    ("env", "message"),
    [
        (
            {"SEMIF_API_KEY": "short"},
            "SEMIF_API_KEY is shorter than 32 characters; it must be at least 32 characters of "
            "visible ASCII (33-126) "
            "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one)",
        ),
        (
            {"SEMIF_API_KEY": ""},
            "SEMIF_API_KEY is shorter than 32 characters; it must be at least 32 characters of "
            "visible ASCII (33-126) "
            "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one)",
        ),
        (
            {"SEMIF_API_KEY": KEY, "SEMIF_API_TOKEN": TOKEN},
            "SEMIF_API_TOKEN and SEMIF_API_KEY (SemIf's name for it) are set to different values; set one",
        ),
        (
            {"SEMIF_API_TOKEN": TOKEN, "SEMIF_MAX_INPUT_TOKENS": "0"},
            "SEMIF_MAX_INPUT_TOKENS must be an integer >= 1, got '0'",
        ),
        (
            {"SEMIF_API_TOKEN": TOKEN, "SEMIF_MAX_INPUT_TOKENS": "512", "SEMIF_MAX_TOKENS": "1024"},
            "SEMIF_MAX_TOKENS and SEMIF_MAX_INPUT_TOKENS (SemIf's name for it) are set to different values; set one",
        ),
        (
            {"SEMIF_API_TOKEN": TOKEN, "SEMIF_DEVICE": "auto"},
            "SEMIF_DEVICE=auto (SemIf's default) is refused: INV-3 wants the device said explicitly, "
            "so a missing GPU never falls back to CPU; set SEMIF_DEVICE to cuda, cuda:N or cpu",
        ),
        (
            {"SEMIF_API_TOKEN": TOKEN, "SEMIF_MODE": "serial"},
            "SEMIF_MODE='serial' is SemIf's setting and is not read here: routing is always auto: one question direct, "
            "several shared (no serial fallback)",
        ),
        (
            {"SEMIF_API_TOKEN": TOKEN, "SEMIF_ACCEPT_JEV_ALIASES": "0"},
            "SEMIF_ACCEPT_JEV_ALIASES='0' is SemIf's setting and is not read here: SEMIF_MODEL_ALIASES lists the names "
            "accepted (empty: none)",
        ),
    ],
    ids=lambda item: str(item),
)
def test_semifs_settings_are_refused_naming_ours_when_they_cannot_mean_the_same(
    env: dict[str, str], message: str
) -> None:
    with pytest.raises(ValueError) as refused:
        config.load(env)
    assert str(refused.value) == message


@pytest.mark.parametrize("name", sorted(config.SEMIF_ONLY))
def test_each_semif_only_setting_is_refused_naming_what_to_set_here(name: str) -> None:
    same, instead = config.SEMIF_ONLY[name]
    with pytest.raises(ValueError) as refused:
        config.load({"SEMIF_API_TOKEN": TOKEN, name: "x"})
    assert str(refused.value) == f"{name}='x' is SemIf's setting and is not read here: {instead}"
    if same is not None:  # the one value that is what we do anyway
        assert config.load({"SEMIF_API_TOKEN": TOKEN, name: same}).api_token == TOKEN


def test_a_long_semif_only_value_is_quoted_to_40_characters() -> None:
    with pytest.raises(ValueError) as refused:
        config.load({"SEMIF_API_TOKEN": TOKEN, "SEMIF_GGUF": "g" * 50})
    assert str(refused.value).startswith(f"SEMIF_GGUF={'g' * 40 + '…'!r} is SemIf's setting")


# -- SEMIF_SYSTEMONE_ORDERINGS=prior (extension): the default workload needs priors, not a temperature ----------


def with_priors(tmp_path: Path, **env: str) -> config.Settings:
    return started({"SEMIF_API_TOKEN": TOKEN, "SEMIF_CALIBRATION": prior_path(tmp_path), **env})


@pytest.mark.parametrize(
    "workload", ["triage", "sorting"]
)  # sorting has priors and no temperature at all
def test_the_prior_by_default_needs_a_workload_with_priors(tmp_path: Path, workload: str) -> None:
    settings = with_priors(
        tmp_path, SEMIF_SYSTEMONE_ORDERINGS="prior", SEMIF_SYSTEMONE_WORKLOAD=workload
    )
    assert (settings.systemone_orderings, settings.systemone_workload) == ("prior", workload)


def test_the_prior_by_default_without_a_workload_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        with_priors(tmp_path, SEMIF_SYSTEMONE_ORDERINGS="prior")
    assert str(caught.value) == (
        "SEMIF_SYSTEMONE_ORDERINGS=prior needs SEMIF_SYSTEMONE_WORKLOAD naming a workload "
        "with priors in SEMIF_CALIBRATION"
    )


def test_the_prior_by_default_with_a_workload_without_priors_is_refused(tmp_path: Path) -> None:
    """A temperature alone does not make a prior: the plain table's workload has none."""
    with pytest.raises(ValueError) as caught:
        load(tmp_path, SEMIF_SYSTEMONE_ORDERINGS="prior", SEMIF_SYSTEMONE_WORKLOAD="triage")
    assert str(caught.value) == (
        "SEMIF_SYSTEMONE_WORKLOAD 'triage' has no priors for SEMIF_SYSTEMONE_ORDERINGS='prior'; "
        "workloads with priors: none"
    )
    bound = tmp_path / "both.json"
    bound.write_text(
        json.dumps({**MATCHING, "workloads": {"billing": {"none": 1.0}}, "priors": PRIORS})
    )
    with pytest.raises(ValueError) as caught:
        started(
            {
                "SEMIF_API_TOKEN": TOKEN,
                "SEMIF_CALIBRATION": str(bound),
                "SEMIF_SYSTEMONE_ORDERINGS": "prior",
                "SEMIF_SYSTEMONE_WORKLOAD": "billing",
            }
        )
    assert str(caught.value) == (
        "SEMIF_SYSTEMONE_WORKLOAD 'billing' has no priors for SEMIF_SYSTEMONE_ORDERINGS='prior'; "
        "workloads with priors: sorting, triage"
    )


def test_a_workload_with_priors_only_has_no_temperature_for_another_default(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        with_priors(tmp_path, SEMIF_SYSTEMONE_WORKLOAD="sorting")
    assert str(caught.value) == (
        "SEMIF_SYSTEMONE_WORKLOAD 'sorting' has no temperature for "
        "SEMIF_SYSTEMONE_ORDERINGS='none'; it has: none at all"
    )


# -- SEMIF_SYSTEMONE_ORDERINGS=adaptive: the default workload needs a threshold beside its priors ----------


def test_adaptive_by_default_needs_a_workload_with_a_threshold(tmp_path: Path) -> None:
    with pytest.raises(ValueError) as caught:
        with_priors(
            tmp_path, SEMIF_SYSTEMONE_ORDERINGS="adaptive", SEMIF_SYSTEMONE_WORKLOAD="triage"
        )
    assert str(caught.value) == (
        "SEMIF_SYSTEMONE_WORKLOAD 'triage' has no threshold beside its priors for "
        "SEMIF_SYSTEMONE_ORDERINGS='adaptive'; fit one with `bench prior`"
    )
    priors = {"triage": {"4": {**PRIORS["triage"]["4"], "threshold": 0.2}}}
    settings = started(
        {
            "SEMIF_API_TOKEN": TOKEN,
            "SEMIF_CALIBRATION": prior_path(tmp_path, priors=priors),
            "SEMIF_SYSTEMONE_ORDERINGS": "adaptive",
            "SEMIF_SYSTEMONE_WORKLOAD": "triage",
        }
    )
    assert (settings.systemone_orderings, settings.systemone_workload) == ("adaptive", "triage")


def test_a_default_workload_without_the_default_method_lists_every_method_it_has(
    tmp_path: Path,
) -> None:
    bound = tmp_path / "bound.json"
    bound.write_text(json.dumps({**MATCHING, "workloads": {"billing": {"none": 1.0, "all": 1.2}}}))
    with pytest.raises(ValueError) as caught:
        started(
            {
                "SEMIF_API_TOKEN": TOKEN,
                "SEMIF_CALIBRATION": str(bound),
                "SEMIF_SYSTEMONE_ORDERINGS": "rotations",
                "SEMIF_SYSTEMONE_WORKLOAD": "billing",
            }
        )
    assert str(caught.value) == (
        "SEMIF_SYSTEMONE_WORKLOAD 'billing' has no temperature for "
        "SEMIF_SYSTEMONE_ORDERINGS='rotations'; it has: all, none"
    )
