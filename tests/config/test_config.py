"""Every setting's refusal (contract: Configuration; C1, S1, S8), in process.

Each bad value is refused by `config.load` with a ValueError naming its variable,
and the real entry point `semif_serve.cli.main` turns that into one line on
stderr and exit status 2 before anything is served. Each case changes exactly one
variable of an otherwise valid environment, so disabling any one check fails
exactly its cases. The process-level exit status is in test_entry_point.py.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path
from typing import Any

import pytest

from semif_serve import cli, config, server
from semif_serve.config import Settings
from semif_serve.decisions import calibration_file
from semif_serve.service import callers
from tests.wire_client import TOKEN

POSITIVE_INTS = (
    "SEMIF_MAX_TOKENS",
    "SEMIF_MAX_DECISIONS",
    "SEMIF_MAX_BODY_BYTES",
    "SEMIF_MAX_QUEUE",
    "SEMIF_MAX_CONNECTIONS",
    "SEMIF_PORT",
    "SEMIF_AUDIT_MAX_PENDING",
    "SEMIF_AUDIT_MAX_PENDING_BYTES",
    "SEMIF_AUDIT_MAX_OPTIONS",
)
POSITIVE_FLOATS = (
    "SEMIF_VRAM_CAP_GIB",
    "SEMIF_HEADER_TIMEOUT_S",
    "SEMIF_BODY_TIMEOUT_S",
    "SEMIF_IDLE_TIMEOUT_S",
    "SEMIF_SHUTDOWN_GRACE_S",
)
# int() would take "+5", " 5", "5_000" and "\u0665" (Arabic-Indic five): none is a plain count.
NOT_A_COUNT = ["0", "-1", "+5", " 5", "5 ", "5_000", "\u0665", "1.5", "1e3", "x", ""]
NOT_POSITIVE = ["0", "-0.5", "nan", "inf", "-inf", "x", "1,5"]

BAD: dict[str, list[str]] = {
    "SEMIF_API_TOKEN": ["x" * 31, "x" * 31 + " ", "x" * 40 + "\x7f", "\u00e9" * 40, ""],
    "SEMIF_MODEL": [""],
    "SEMIF_REVISION": [""],
    "SEMIF_HOST": [""],
    "SEMIF_DEVICE": [
        "",
        "gpu",
        "CPU",
        "cuda:",
        "cuda:x",
        "cuda:+1",
        "cuda:-1",
        "cuda: 1",
        "cuda:1 ",
        "cuda:\u0661",
        "cuda:0:1",
        "xcuda:0",
        "cpu:0",
    ],
    "SEMIF_SCORER": ["", "torch", "STUB", "stub "],
    "SEMIF_STUB_DELAY_MS": ["-1", "+1", " 1", "1.5", "1_0", "\u0665", ""],
    **{name: NOT_A_COUNT for name in POSITIVE_INTS},
    "SEMIF_PORT": NOT_A_COUNT + ["65536", "99999"],
    "SEMIF_METRICS_PORT": NOT_A_COUNT + ["65536", "8000"],  # 8000: SEMIF_PORT's default, taken
    **{name: NOT_POSITIVE + [""] for name in POSITIVE_FLOATS if name != "SEMIF_VRAM_CAP_GIB"},
    "SEMIF_VRAM_CAP_GIB": NOT_POSITIVE,  # "" means uncapped for the one setting whose default is absent
    "SEMIF_MAX_WAIT_S": NOT_POSITIVE,  # likewise: "" means no wait budget
    "SEMIF_API_TOKENS_FILE": [""],
    "SEMIF_AUDIT_RATE": ["-0.1", "1.01", "nan", "inf", "x", "", "10%"],
}
CASES = [(name, value) for name, values in BAD.items() for value in values]


def plain(text: str) -> str:
    """`text` with each character outside printable ASCII, and the backslash, as U+XXXX: a test id that
    pytest leaves as it is, so that a second collection in one process (mutmut's) finds the same id."""
    return "".join(c if " " <= c <= "~" and c != "\\" else f"U+{ord(c):04X}" for c in text)


def case_id(case: tuple[str, str]) -> str:
    return f"{case[0]}='{plain(case[1])}'"


def valid_env(**changes: str) -> dict[str, str]:
    return {"SEMIF_API_TOKEN": TOKEN, **changes}


@pytest.mark.parametrize("case", CASES, ids=case_id)
def test_load_refuses_each_bad_value_naming_its_variable(case: tuple[str, str]) -> None:
    name, value = case
    with pytest.raises(ValueError) as refused:
        config.load(valid_env(**{name: value}))
    assert str(refused.value).startswith(name)


def test_the_metrics_port_is_off_unless_set_and_needs_metrics() -> None:
    assert config.load(valid_env()).metrics_port is None
    assert config.load(valid_env(SEMIF_METRICS_PORT="9000")).metrics_port == 9000
    assert config.load(valid_env(SEMIF_METRICS_PORT="8000", SEMIF_PORT="8001")).metrics_port == 8000
    with pytest.raises(ValueError) as off:
        config.load(valid_env(SEMIF_METRICS_PORT="9000", SEMIF_METRICS="off"))
    assert str(off.value) == (
        "SEMIF_METRICS_PORT needs metrics on (SEMIF_METRICS is off or prometheus_client "
        "is not installed: pip install 'semif-serve[metrics]')"
    )


@pytest.mark.parametrize(
    "env,message",
    [
        (
            {"SEMIF_API_TOKEN": "x"},
            "SEMIF_API_TOKEN is shorter than 32 characters; it must be at least 32 characters of "
            "visible ASCII (33-126) (python3 -c 'import secrets; print(secrets.token_urlsafe(32))' "
            "makes one)",
        ),
        (  # 36 bytes, 35 characters: long enough; the message must not read as a length problem
            {"SEMIF_API_TOKEN": "t" * 34 + "é"},
            "SEMIF_API_TOKEN holds a character outside visible ASCII (33-126); it must be at least "
            "32 characters of visible ASCII (33-126) (python3 -c 'import secrets; "
            "print(secrets.token_urlsafe(32))' makes one)",
        ),
        ({"SEMIF_MODEL": ""}, "SEMIF_MODEL must not be empty"),
        (
            {"SEMIF_PID_FILE": ""},
            "SEMIF_PID_FILE is set but empty: set it to a file's path, or unset it",
        ),
        ({"SEMIF_DEVICE": "cuda:x"}, "SEMIF_DEVICE must be cuda, cuda:N or cpu, got 'cuda:x'"),
        (
            {"SEMIF_SCORER": "torch"},
            "SEMIF_SCORER must be one of semif_phase1, fastjev, stub, got 'torch'",
        ),
        ({"SEMIF_STUB_DELAY_MS": "-1"}, "SEMIF_STUB_DELAY_MS must be an integer >= 0, got '-1'"),
        ({"SEMIF_MAX_QUEUE": "0"}, "SEMIF_MAX_QUEUE must be an integer >= 1, got '0'"),
        ({"SEMIF_PORT": "65536"}, "SEMIF_PORT must be 1..65535, got 65536"),
        ({"SEMIF_HEADER_TIMEOUT_S": "x"}, "SEMIF_HEADER_TIMEOUT_S must be a number, got 'x'"),
        ({"SEMIF_VRAM_CAP_GIB": "nan"}, "SEMIF_VRAM_CAP_GIB must be finite and > 0, got 'nan'"),
    ],
    ids=lambda item: plain(str(item)),
)
def test_the_refusal_says_what_is_allowed(env: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError) as refused:
        config.load(valid_env(**env))
    assert str(refused.value) == message


MISSING_TOKEN = (
    "SEMIF_API_TOKEN is required: at least 32 characters of visible ASCII (33-126) "
    "(python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one), "
    "or SEMIF_API_TOKENS_FILE for named callers"
)


def test_a_missing_token_is_refused_saying_what_a_valid_one_is() -> None:
    with pytest.raises(ValueError) as refused:
        config.load({})
    assert str(refused.value) == MISSING_TOKEN


@pytest.mark.parametrize(
    "text,problem",
    [
        ("{not json", "is not valid JSON"),
        ("[1.0]", "must hold a JSON object"),
        ('{"triage": 0.01}', "is not in"),
        ('{"triage": "1"}', "needs a number"),
    ],
)
def test_a_bad_calibration_file_is_refused(tmp_path: Path, text: str, problem: str) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(calibration_file.Refused, match=f"^SEMIF_CALIBRATION: .*{problem}"):
        server.read_calibration(config.load(valid_env(SEMIF_CALIBRATION=str(path))))


def test_a_missing_calibration_file_is_refused_at_startup_naming_the_variable_and_the_path() -> (
    None
):
    """config holds the path; the server reads the file before the model loads (exit 2: test_entry_point.py)."""
    path = "/nonexistent/semif-calibration.json"
    settings = config.load(valid_env(SEMIF_CALIBRATION=path))
    assert settings.calibration_path == path
    with pytest.raises(calibration_file.Refused) as refused:
        server.read_calibration(settings)
    assert (
        str(refused.value) == f"SEMIF_CALIBRATION: cannot read {path!r}: No such file or directory"
    )


@pytest.mark.parametrize("installed", [True, False], ids=["extras-installed", "extras-missing"])
def test_settings_and_load_agree_on_every_default(
    monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    """`Settings(api_token=t)` is `config.load({"SEMIF_API_TOKEN": t})`, field by field, whether or not
    the packages the `auto` choices look for are installed and whatever the process environment says."""
    real = importlib.util.find_spec

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        if name in ("uvloop", "prometheus_client"):
            return real(name, *args, **kwargs) if installed else None
        return real(name, *args, **kwargs)

    if installed and not all(real(name) for name in ("uvloop", "prometheus_client")):
        pytest.skip("needs uvloop and prometheus_client installed (the test extra has both)")
    monkeypatch.setattr(importlib.util, "find_spec", find_spec)
    for name, value in (
        ("SEMIF_PORT", "9999"),
        ("SEMIF_METRICS", "off"),
        ("SEMIF_EVENT_LOOP", "asyncio"),
    ):
        monkeypatch.setenv(name, value)
    built, loaded = Settings(api_token=TOKEN), config.load({"SEMIF_API_TOKEN": TOKEN})
    for field in dataclasses.fields(Settings):
        assert getattr(loaded, field.name) == getattr(built, field.name), field.name
    assert (built.metrics, built.event_loop) == (installed, "uvloop" if installed else "asyncio")


def test_each_setting_is_declared_once_with_a_variable_of_its_own() -> None:
    """Every field carries its declaration (load and the docs read nothing else), and no two read one variable."""
    declared = config.declared()
    assert list(declared) == [field.name for field in dataclasses.fields(Settings)]
    variables = [setting.variable for setting in declared.values()]
    assert len(set(variables)) == len(variables)
    assert all(setting.help for setting in declared.values())


def test_the_defaults_are_the_contracts() -> None:
    loaded = config.load(valid_env())
    # SEMIF_EVENT_LOOP=auto resolves to uvloop exactly when the `fast` extra is installed.
    auto_loop = "uvloop" if importlib.util.find_spec("uvloop") is not None else "asyncio"
    assert loaded == Settings(api_token=TOKEN, event_loop=auto_loop)
    assert (loaded.model, loaded.revision, loaded.device, loaded.scorer) == (
        "Qwen/Qwen3.5-4B",
        "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a",
        "cuda",
        "semif_phase1",
    )
    assert (loaded.max_tokens, loaded.max_decisions, loaded.max_body_bytes, loaded.max_queue) == (
        4096,
        64,
        1 << 20,
        32,
    )
    assert (
        loaded.host,
        loaded.port,
        loaded.stub_delay_ms,
        loaded.vram_cap_gib,
        loaded.calibration_path,
    ) == ("127.0.0.1", 8000, 0, None, None)
    assert (
        loaded.header_timeout,
        loaded.body_timeout,
        loaded.idle_timeout,
        loaded.shutdown_grace,
        loaded.max_connections,
    ) == (10.0, 30.0, 60.0, 30.0, 512)


def test_the_boundary_values_are_accepted(tmp_path: Path) -> None:
    path = tmp_path / "calibration.json"
    path.write_text(json.dumps({"triage": 2.5}), encoding="utf-8")
    loaded = config.load(
        valid_env(
            SEMIF_API_TOKEN="!" * 31 + "~",  # 32 characters at both ends of visible ASCII
            SEMIF_MODEL="m",
            SEMIF_REVISION="r",
            SEMIF_HOST="::1",
            SEMIF_DEVICE="cuda:10",
            SEMIF_SCORER="stub",
            SEMIF_STUB_DELAY_MS="0",
            SEMIF_PORT="65535",
            SEMIF_MAX_TOKENS="1",
            SEMIF_MAX_DECISIONS="2",
            SEMIF_MAX_BODY_BYTES="3",
            SEMIF_MAX_QUEUE="4",
            SEMIF_MAX_CONNECTIONS="5",
            SEMIF_VRAM_CAP_GIB="0.5",
            SEMIF_HEADER_TIMEOUT_S="0.001",
            SEMIF_BODY_TIMEOUT_S="1e-3",
            SEMIF_IDLE_TIMEOUT_S="7",
            SEMIF_SHUTDOWN_GRACE_S="2.5",
            SEMIF_CALIBRATION=str(path),
            SEMIF_EVENT_LOOP="asyncio",
        )
    )
    assert loaded == Settings(
        api_token="!" * 31 + "~",
        model="m",
        revision="r",
        host="::1",
        device="cuda:10",
        scorer="stub",
        stub_delay_ms=0,
        port=65535,
        max_tokens=1,
        max_decisions=2,
        max_body_bytes=3,
        max_queue=4,
        max_connections=5,
        vram_cap_gib=0.5,
        header_timeout=0.001,
        body_timeout=0.001,
        idle_timeout=7.0,
        shutdown_grace=2.5,
        calibration_path=str(path),
        event_loop="asyncio",
    )
    assert type(loaded.port) is int and type(loaded.header_timeout) is float
    assert dict(server.read_calibration(loaded).table) == {"triage": {"none": 2.5}}


@pytest.mark.parametrize(
    "env,field,value",
    [
        ({"SEMIF_DEVICE": "cpu"}, "device", "cpu"),
        ({"SEMIF_DEVICE": "cuda"}, "device", "cuda"),
        ({"SEMIF_DEVICE": "cuda:0"}, "device", "cuda:0"),
        ({"SEMIF_SCORER": "fastjev"}, "scorer", "fastjev"),
        ({"SEMIF_SCORER": "semif_phase1"}, "scorer", "semif_phase1"),
        ({"SEMIF_VRAM_CAP_GIB": ""}, "vram_cap_gib", None),
        ({}, "max_wait_s", None),
        ({"SEMIF_MAX_WAIT_S": ""}, "max_wait_s", None),
        ({"SEMIF_MAX_WAIT_S": "2.5"}, "max_wait_s", 2.5),
        ({"SEMIF_PORT": "1"}, "port", 1),
        ({"SEMIF_STUB_DELAY_MS": "250"}, "stub_delay_ms", 250),
        ({}, "audit_rate", 0.0),
        ({"SEMIF_AUDIT_RATE": "0"}, "audit_rate", 0.0),
        ({"SEMIF_AUDIT_RATE": "0.05"}, "audit_rate", 0.05),
        ({"SEMIF_AUDIT_RATE": "1"}, "audit_rate", 1.0),
        ({}, "audit_max_options", 8),
    ],
)
def test_each_allowed_form_is_accepted(env: dict[str, str], field: str, value: Any) -> None:
    assert getattr(config.load(valid_env(**env)), field) == value


# -- the entry point: exit status 2, one line, nothing served ------------------------------


async def _must_not_serve(settings: Settings) -> int:
    raise AssertionError(f"configuration accepted {settings!r}")


@pytest.fixture
def entry_env(monkeypatch: pytest.MonkeyPatch) -> pytest.MonkeyPatch:
    """A clean SEMIF_ environment with a valid token; serving fails the test (exit 1, not 2)."""
    for key in [key for key in __import__("os").environ if key.startswith("SEMIF_")]:
        monkeypatch.delenv(key)
    monkeypatch.setenv("SEMIF_API_TOKEN", TOKEN)
    monkeypatch.setattr(server, "serve", _must_not_serve)
    return monkeypatch


ENV_SAFE = [case for case in CASES if "\x00" not in case[1]]


@pytest.mark.parametrize("case", ENV_SAFE, ids=case_id)
def test_the_entry_point_exits_2_with_one_line_naming_the_variable(
    entry_env, capsys, case: tuple[str, str]
) -> None:
    name, value = case
    entry_env.setenv(name, value)
    assert cli.main([]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.startswith(f"semif-serve: {name}") and captured.err.count("\n") == 1
    assert "Traceback" not in captured.err


def test_the_entry_point_exits_2_without_a_token(entry_env, capsys) -> None:
    entry_env.delenv("SEMIF_API_TOKEN")
    assert cli.main(["serve"]) == 2
    assert capsys.readouterr().err == f"semif-serve: {MISSING_TOKEN}\n"


@pytest.mark.parametrize(
    "argv,status", [(["bogus"], 2), (["serve", "extra"], 2), (["-h"], 0), (["--help"], 0)]
)
def test_the_entry_point_usage(entry_env, capsys, argv: list[str], status: int) -> None:
    assert cli.main(argv) == status
    assert capsys.readouterr().err.startswith("usage: semif-serve")


# -- the callers (extension) -------------------------------------------------------------------


def tokens_file(tmp_path: Path, text: str = f"alice {'a' * 32}\nbob {'b' * 32}\n") -> str:
    path = tmp_path / "tokens"
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def test_a_tokens_file_names_the_callers_and_the_one_token_is_the_caller_default(
    tmp_path: Path,
) -> None:
    """config says which form is set; the server reads the file (service/callers.py) before the model loads."""
    path = tokens_file(tmp_path)
    named = config.load({"SEMIF_API_TOKENS_FILE": path})
    assert (named.api_tokens_file, named.api_token) == (path, "")
    assert callers.for_settings(named).names == ("alice", "bob")
    one = config.load(valid_env())
    assert (one.api_tokens_file, one.api_token) == (None, TOKEN)
    assert callers.for_settings(one).names == ("default",)
    assert callers.for_settings(one).identify(TOKEN.encode()) == "default"


def test_an_empty_tokens_file_setting_is_refused_saying_what_to_set() -> None:
    with pytest.raises(ValueError) as refused:
        config.load({"SEMIF_API_TOKENS_FILE": ""})
    assert str(refused.value) == (
        "SEMIF_API_TOKENS_FILE is set but empty: set it to a file's path, or unset it"
    )


@pytest.mark.parametrize("name", ["SEMIF_API_TOKEN", "SEMIF_API_KEY"])
def test_both_bearer_forms_stop_startup(tmp_path: Path, name: str) -> None:
    env = {name: TOKEN, "SEMIF_API_TOKENS_FILE": tokens_file(tmp_path)}
    with pytest.raises(ValueError) as refused:
        config.load(env)
    assert str(refused.value) == (
        f"{name} and SEMIF_API_TOKENS_FILE are both set; set one (the file's callers replace the one token)"
    )


def test_the_share_per_caller_defaults_to_the_queue_and_never_exceeds_it() -> None:
    assert config.load(valid_env()).max_queue_per_caller == 32
    assert config.load(valid_env(SEMIF_MAX_QUEUE="8")).max_queue_per_caller == 8
    assert config.load(valid_env(SEMIF_MAX_QUEUE_PER_CALLER="3")).max_queue_per_caller == 3
    assert Settings(api_token=TOKEN, max_queue=5).max_queue_per_caller == 5
    with pytest.raises(ValueError) as refused:
        config.load(valid_env(SEMIF_MAX_QUEUE="8", SEMIF_MAX_QUEUE_PER_CALLER="9"))
    assert str(refused.value) == (
        "SEMIF_MAX_QUEUE_PER_CALLER must be at most SEMIF_MAX_QUEUE (8), got 9: a larger share never applies"
    )
    with pytest.raises(
        ValueError, match="^SEMIF_MAX_QUEUE_PER_CALLER must be an integer >= 1, got '0'$"
    ):
        config.load(valid_env(SEMIF_MAX_QUEUE_PER_CALLER="0"))


def test_the_cpu_dtype_is_float32_unless_the_operator_sets_bfloat16_on_the_cpu() -> None:
    assert config.load(valid_env()).cpu_dtype == "float32"
    assert config.load(valid_env(SEMIF_DEVICE="cpu")).cpu_dtype == "float32"
    on_cpu = config.load(valid_env(SEMIF_DEVICE="cpu", SEMIF_CPU_DTYPE="bfloat16"))
    assert on_cpu.cpu_dtype == "bfloat16"
    with pytest.raises(ValueError) as refused:
        config.load(valid_env(SEMIF_DEVICE="cpu", SEMIF_CPU_DTYPE="float16"))
    assert str(refused.value) == "SEMIF_CPU_DTYPE must be one of float32, bfloat16, got 'float16'"
    for device in ("cuda", "cuda:1"):  # ignored there, so refused
        with pytest.raises(ValueError) as refused:
            config.load(valid_env(SEMIF_DEVICE=device, SEMIF_CPU_DTYPE="float32"))
        assert str(refused.value) == "SEMIF_CPU_DTYPE needs SEMIF_DEVICE=cpu (CUDA serves bfloat16)"
    with pytest.raises(ValueError) as refused:
        config.load(valid_env(SEMIF_CPU_DTYPE="bfloat16"))  # SEMIF_DEVICE defaults to cuda
    assert str(refused.value).startswith("SEMIF_CPU_DTYPE needs SEMIF_DEVICE=cpu")


def test_semifs_dtype_setting_is_refused_naming_the_cpu_dtype_setting() -> None:
    with pytest.raises(ValueError) as refused:
        config.load(valid_env(SEMIF_DEVICE="cpu", SEMIF_DTYPE="bfloat16"))
    assert str(refused.value) == (
        "SEMIF_DTYPE='bfloat16' is SemIf's setting and is not read here: CUDA serves bfloat16; "
        "on the CPU set SEMIF_CPU_DTYPE (float32, the default, or bfloat16)"
    )


@pytest.mark.parametrize("installed", [True, False], ids=["uvloop-installed", "uvloop-missing"])
def test_the_event_loop_is_asyncio_uvloop_or_auto_and_uvloop_needs_the_fast_extra(
    monkeypatch: pytest.MonkeyPatch, installed: bool
) -> None:
    real = importlib.util.find_spec
    if installed and real("uvloop") is None:
        pytest.skip("needs uvloop installed (the test extra has it)")

    def find_spec(name: str, *args: Any, **kwargs: Any) -> Any:
        return None if name == "uvloop" and not installed else real(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", find_spec)

    def loop(value: str) -> str:
        return config.load(valid_env(SEMIF_EVENT_LOOP=value)).event_loop

    assert loop("asyncio") == "asyncio"
    assert loop("auto") == ("uvloop" if installed else "asyncio")
    if installed:
        assert loop("uvloop") == "uvloop"
    else:
        with pytest.raises(ValueError) as missing:
            loop("uvloop")
        assert str(missing.value) == (
            "SEMIF_EVENT_LOOP=uvloop needs uvloop: pip install 'semif-serve[fast]'"
        )
    with pytest.raises(ValueError) as spelled:
        loop("UVLOOP")
    assert str(spelled.value) == (
        "SEMIF_EVENT_LOOP must be one of auto, asyncio, uvloop, got 'UVLOOP'"
    )


def test_the_access_log_is_on_or_off_and_its_flush_0_to_1_second() -> None:
    assert [config.load(valid_env(SEMIF_ACCESS_LOG=v)).access_log for v in ("on", "off")] == [
        True,
        False,
    ]
    flushes = [config.load(valid_env(SEMIF_LOG_FLUSH_S=v)).log_flush_s for v in ("0", ".25", "1")]
    assert flushes == [0.0, 0.25, 1.0]
    for env, message in (
        ({"SEMIF_ACCESS_LOG": "On"}, "SEMIF_ACCESS_LOG must be one of on, off, got 'On'"),
        ({"SEMIF_LOG_FLUSH_S": "x"}, "SEMIF_LOG_FLUSH_S must be a number, got 'x'"),
        ({"SEMIF_LOG_FLUSH_S": "1.5"}, "SEMIF_LOG_FLUSH_S must be 0..1, got '1.5'"),
        ({"SEMIF_LOG_FLUSH_S": "-0.1"}, "SEMIF_LOG_FLUSH_S must be 0..1, got '-0.1'"),
        ({"SEMIF_LOG_FLUSH_S": "nan"}, "SEMIF_LOG_FLUSH_S must be 0..1, got 'nan'"),
    ):
        with pytest.raises(ValueError) as refused:
            config.load(valid_env(**env))
        assert str(refused.value) == message
