"""Configuration: every setting read from the environment once, validated at startup.

A bad value is a ValueError naming the variable, so an operator sees which knob
is wrong before the model loads (contract: C1, S1, S8).

Extension: an operator coming from SemIf's own System One server
(`src/semif_api/runtime.py` in SemIf) keeps its environment. Where SemIf's name
means what ours means it is read as ours (SEMIF_NAMES; both names set to
different values is refused); where it does not, the value is refused naming
our setting (SEMIF_ONLY), never silently ignored.
"""

from __future__ import annotations

import importlib.util
import math
import os
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, field, fields
from typing import Any, TypedDict

from .decisions import calibration_file, methods
from .errors import excerpt

DEFAULT_MODEL = "Qwen/Qwen3.5-4B"
DEFAULT_REVISION = "851bf6e806efd8d0a36b00ddf55e13ccb7b8cd0a"
SCORERS = ("semif_phase1", "fastjev", "stub")
# How much of the pinned snapshot is proved before the weights load (engine/snapshot_verify.py).
VERIFY_MODES = ("hash", "presence")
LOG_FORMATS = ("text", "json")  # SEMIF_LOG_FORMAT: ops/logs.py formats each
MIN_TOKEN_LENGTH = 32
TOKEN_RULE = f"at least {MIN_TOKEN_LENGTH} characters of visible ASCII (33-126)"
# How to make one, said wherever a token is missing or refused.
TOKEN_RECIPE = "python3 -c 'import secrets; print(secrets.token_urlsafe(32))' makes one"
# The names /v1/systemone accepts in `model` by default: SemIf's server's own (its Jev aliases and its alias).
DEFAULT_ALIASES = ("jev-latest", "jev-preview", "jev-1.13.0", "semif-latest")
# Our setting -> SemIf's name for the same thing; either is read (a value set under both must agree).
SEMIF_NAMES = {"SEMIF_API_TOKEN": "SEMIF_API_KEY", "SEMIF_MAX_TOKENS": "SEMIF_MAX_INPUT_TOKENS"}
# SemIf's settings that mean something we do not do -> (the one value that is what we do, or None; what to set here).
SEMIF_ONLY: dict[str, tuple[str | None, str]] = {
    "SEMIF_BACKEND": (
        "torch",
        "SEMIF_SCORER picks the torch scorer package; other backends are not served",
    ),
    "SEMIF_MODE": (
        "auto",
        "routing is always auto: one question direct, several shared (no serial fallback)",
    ),
    "SEMIF_DTYPE": (
        None,
        "CUDA serves bfloat16; on the CPU set SEMIF_CPU_DTYPE (float32, the default, or bfloat16)",
    ),
    "SEMIF_ACCEPT_JEV_ALIASES": (
        None,
        "SEMIF_MODEL_ALIASES lists the names accepted (empty: none)",
    ),
    "SEMIF_TEMPERATURE": (
        None,
        "SEMIF_CALIBRATION holds temperatures per workload, SEMIF_SYSTEMONE_WORKLOAD picks one",
    ),
    "SEMIF_PROMPT_VERSION": (
        None,
        "the scorer package (SEMIF_SCORER) fixes the prompt version; /healthz reports it",
    ),
    **{
        name: (None, "SEMIF_SCORER: only the torch scorers are served")
        for name in (
            "SEMIF_GGUF",
            "SEMIF_LLAMA_THREADS",
            "SEMIF_MLX_BITS",
            "SEMIF_MLX_CACHE_LIMIT_MIB",
        )
    },
}


def _installed(module: str) -> bool:
    return importlib.util.find_spec(module) is not None


def auto_metrics() -> bool:
    """SEMIF_METRICS=auto (the default): on when prometheus_client is installed."""
    return _installed("prometheus_client")


def auto_event_loop() -> str:
    """SEMIF_EVENT_LOOP=auto (the default): uvloop when installed (the `fast` extra), else asyncio."""
    return "uvloop" if _installed("uvloop") else "asyncio"


@dataclass(frozen=True)
class Settings:
    """The validated settings of one server process."""

    api_token: str = field(repr=False)  # never printed with the settings; "" with a tokens file
    # Extension: SEMIF_API_TOKENS_FILE, named callers and their tokens, read (and on SIGHUP
    # re-read) by service/callers.py; None: the one caller `default` of api_token.
    api_tokens_file: str | None = None
    model: str = DEFAULT_MODEL
    revision: str = DEFAULT_REVISION
    device: str = "cuda"
    # Extension (issue 38): the CPU's dtype, the operator's choice, never the host's (CUDA: bfloat16).
    cpu_dtype: str = "float32"
    vram_cap_gib: float | None = None
    max_tokens: int = 4096
    max_decisions: int = 64
    max_body_bytes: int = 1 << 20
    max_queue: int = 32
    # Extension: the most in-progress POSTs one caller may hold (None: max_queue).
    max_queue_per_caller: int | None = None
    # Extension: admission by a wait budget, checked once the body's rows are known (None: off).
    max_wait_s: float | None = None
    # workload -> {method: T}; a plain {workload: T} mapping is accepted and validated.
    calibration: calibration_file.Table = field(default_factory=calibration_file.Table)
    calibration_path: str | None = None  # SEMIF_CALIBRATION, re-read on SIGHUP (extension)
    verify_weights: str = "hash"
    scorer: str = "semif_phase1"
    stub_delay_ms: int = 0
    host: str = "127.0.0.1"
    port: int = 8000
    # Extension: a second listener that answers /metrics alone and stays open through a drain,
    # so Prometheus watches a replica leave (None: /metrics only on `port`, closed at SIGTERM).
    metrics_port: int | None = None
    # Deadlines and connection limits (seconds / counts): slow clients are cut off
    # before they can pin a connection or a file descriptor indefinitely.
    header_timeout: float = 10.0
    body_timeout: float = 30.0
    idle_timeout: float = 60.0
    max_connections: int = 512
    shutdown_grace: float = 30.0
    # Operating it in a fleet (semif_serve/ops): log format, access log, Prometheus metrics.
    log_format: str = "text"
    access_log: bool = True
    metrics: bool = field(default_factory=auto_metrics)
    # Extension (perf): access lines are buffered and written at most this long after they are
    # made (0: each line written at once); and which event loop runs the server.
    log_flush_s: float = 0.5
    event_loop: str = field(default_factory=auto_event_loop)
    # Extension (/v1/systemone): the names `model` may carry besides the served id, and the
    # averaging and calibration a System One caller gets without asking (request `semif` overrides).
    model_aliases: tuple[str, ...] = DEFAULT_ALIASES
    systemone_orderings: str = "none"
    systemone_workload: str | None = None
    # Extension: where the ready server writes its pid, as nginx's pid file (ops/pid_file.py); None: nowhere.
    pid_file: str | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "calibration", calibration_file.as_table(self.calibration))
        if self.max_queue_per_caller is None:
            object.__setattr__(self, "max_queue_per_caller", self.max_queue)


def default(name: str) -> Any:
    """A setting's default: its Settings field's, so `load` and `Settings(...)` never disagree."""
    found = _FIELDS[name]
    return found.default if found.default_factory is MISSING else found.default_factory()


_FIELDS = {found.name: found for found in fields(Settings)}


def _named(env: Mapping[str, str], ours: str) -> str:
    """The name a setting is read under: ours, or SemIf's when only that is set (so a refusal names
    what the operator wrote). Both set to different values is refused: which one was meant is unknowable."""
    theirs = SEMIF_NAMES[ours]
    if theirs not in env:
        return ours
    if ours in env and env[ours] != env[theirs]:
        raise ValueError(
            f"{ours} and {theirs} (SemIf's name for it) are set to different values; set one"
        )
    return theirs


def _semif_only(env: Mapping[str, str]) -> None:
    """Refuse a SemIf setting that would otherwise be ignored, naming what to set here."""
    for name, (same, instead) in SEMIF_ONLY.items():
        value = env.get(name)
        if value is not None and value != same:
            raise ValueError(
                f"{name}={excerpt(value, 40)!r} is SemIf's setting and is not read here: {instead}"
            )


def _bearer(env: Mapping[str, str]) -> dict[str, Any]:
    """The bearer form: SEMIF_API_TOKEN (or SEMIF_API_KEY), the one caller `default`, or
    SEMIF_API_TOKENS_FILE, named callers (its file is read and checked by the server before the model
    loads: service/callers.py); exactly one of them."""
    name = _named(env, "SEMIF_API_TOKEN")
    token, path = env.get(name), env.get("SEMIF_API_TOKENS_FILE")
    if token is not None and path is not None:
        raise ValueError(
            f"{name} and SEMIF_API_TOKENS_FILE are both set; set one (the file's callers replace the one token)"
        )
    if path is not None:
        return {"api_token": "", "api_tokens_file": path}
    if token is None:
        raise ValueError(
            f"SEMIF_API_TOKEN is required: {TOKEN_RULE} ({TOKEN_RECIPE}), "
            "or SEMIF_API_TOKENS_FILE for named callers"
        )
    if (problem := token_problem(token)) is not None:
        raise ValueError(f"{name} {problem} ({TOKEN_RECIPE})")
    return {"api_token": token}


def token_problem(token: str) -> str | None:
    """Why a token cannot be used, or None. A CR, LF or NUL can never arrive in a header, so such a
    token would lock its caller out (S2); a short one is guessable."""
    if any(not 33 <= ord(ch) <= 126 for ch in token):  # said first: `é` is one character, two bytes
        return f"holds a character outside visible ASCII (33-126); it must be {TOKEN_RULE}"
    if len(token) < MIN_TOKEN_LENGTH:
        return f"is shorter than {MIN_TOKEN_LENGTH} characters; it must be {TOKEN_RULE}"
    return None


def _per_caller(env: Mapping[str, str], max_queue: int) -> int:
    """SEMIF_MAX_QUEUE_PER_CALLER: 1..SEMIF_MAX_QUEUE (its default), since a larger share never applies."""
    share = _positive_int(env, "SEMIF_MAX_QUEUE_PER_CALLER", max_queue)
    if share > max_queue:
        raise ValueError(
            f"SEMIF_MAX_QUEUE_PER_CALLER must be at most SEMIF_MAX_QUEUE ({max_queue}), got {share}: "
            "a larger share never applies"
        )
    return share


def _positive_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    text = raw
    # int() accepts "+5", " 5", "5_000" and non-ASCII digits: none of those is a plain count.
    if not (text.isascii() and text.isdigit()) or int(text) < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {raw!r}")
    return int(text)


def _port(env: Mapping[str, str], name: str = "SEMIF_PORT") -> int:
    port = _positive_int(env, name, default("port"))
    if port > 65535:
        raise ValueError(f"{name} must be 1..65535, got {port}")
    return port


def _metrics_port(env: Mapping[str, str], port: int, metrics: bool) -> int | None:
    """SEMIF_METRICS_PORT: unset (default) for none; a port of its own, never SEMIF_PORT's, and only
    with metrics on: a listener that could answer nothing but 404 would hide the mistake."""
    if env.get("SEMIF_METRICS_PORT") is None:
        return None
    metrics_port = _port(env, "SEMIF_METRICS_PORT")
    if metrics_port == port:
        raise ValueError(f"SEMIF_METRICS_PORT must differ from SEMIF_PORT ({port})")
    if not metrics:
        raise ValueError(
            "SEMIF_METRICS_PORT needs metrics on (SEMIF_METRICS is off or prometheus_client "
            "is not installed: pip install 'semif-serve[metrics]')"
        )
    return metrics_port


def _positive_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name)
    return default if raw is None else _parse_positive_float(name, raw)


def _optional_positive_float(
    env: Mapping[str, str], name: str, default: float | None
) -> float | None:
    """As `_positive_float`, for a setting that may be absent: empty means unset."""
    raw = env.get(name)
    return default if raw is None or raw == "" else _parse_positive_float(name, raw)


def _parse_positive_float(name: str, raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number, got {raw!r}") from None
    # 0 used to mean "uncapped"; now a cap is either a real cap or absent.
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be finite and > 0, got {raw!r}")
    return value


def _switch(env: Mapping[str, str], name: str, default: bool) -> bool:
    """`on` or `off`."""
    return _choice(env, name, "on" if default else "off", ("on", "off")) == "on"


def _choice(env: Mapping[str, str], name: str, default: str, allowed: tuple[str, ...]) -> str:
    value = env.get(name, default)
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _nonempty(env: Mapping[str, str], name: str, default: str) -> str:
    value = env.get(name, default)
    if not value:
        raise ValueError(f"{name} must not be empty")
    return value


def _device(env: Mapping[str, str]) -> str:
    value = _nonempty(env, "SEMIF_DEVICE", default("device"))
    if value == "auto":  # SemIf's default: whatever accelerator it finds
        raise ValueError(
            "SEMIF_DEVICE=auto (SemIf's default) is refused: INV-3 wants the device said explicitly, "
            "so a missing GPU never falls back to CPU; set SEMIF_DEVICE to cuda, cuda:N or cpu"
        )
    # N as plain ASCII digits: `cuda:x` or `cuda:+1` would pass here and fail only at load (exit 1).
    index = value.removeprefix("cuda:")
    if value not in ("cpu", "cuda") and not (
        index != value and index.isascii() and index.isdigit()
    ):
        raise ValueError(f"SEMIF_DEVICE must be cuda, cuda:N or cpu, got {value!r}")
    return value


CPU_DTYPES = ("float32", "bfloat16")


def _cpu_dtype(env: Mapping[str, str]) -> str:
    """SEMIF_CPU_DTYPE: float32 (default) or bfloat16, set explicitly: which is faster depends on
    the CPU (bfloat16 wins with AMX, loses badly without), so the host never picks. Only with
    SEMIF_DEVICE=cpu: on CUDA it would be ignored, and an ignored setting is refused."""
    value = _choice(env, "SEMIF_CPU_DTYPE", "float32", CPU_DTYPES)
    if "SEMIF_CPU_DTYPE" in env and env.get("SEMIF_DEVICE", "cuda") != "cpu":
        raise ValueError("SEMIF_CPU_DTYPE needs SEMIF_DEVICE=cpu (CUDA serves bfloat16)")
    return value


def load(env: Mapping[str, str] | None = None) -> Settings:
    """Read and validate every setting; raise ValueError naming the first bad one."""
    env = os.environ if env is None else env
    _semif_only(env)
    path = env.get("SEMIF_CALIBRATION")
    calibration_table = calibration_file.load(path) if path is not None else default("calibration")
    port, metrics = _port(env), _metrics(env)
    max_queue = _positive_int(env, "SEMIF_MAX_QUEUE", default("max_queue"))
    return Settings(
        **_bearer(env),
        model=_nonempty(env, "SEMIF_MODEL", default("model")),
        revision=_nonempty(env, "SEMIF_REVISION", default("revision")),
        device=_device(env),
        cpu_dtype=_cpu_dtype(env),
        vram_cap_gib=_optional_positive_float(env, "SEMIF_VRAM_CAP_GIB", default("vram_cap_gib")),
        max_tokens=_positive_int(env, _named(env, "SEMIF_MAX_TOKENS"), default("max_tokens")),
        max_decisions=_positive_int(env, "SEMIF_MAX_DECISIONS", default("max_decisions")),
        max_body_bytes=_positive_int(env, "SEMIF_MAX_BODY_BYTES", default("max_body_bytes")),
        max_queue=max_queue,
        max_queue_per_caller=_per_caller(env, max_queue),
        max_wait_s=_optional_positive_float(env, "SEMIF_MAX_WAIT_S", default("max_wait_s")),
        calibration=calibration_table,
        calibration_path=path,
        verify_weights=_choice(
            env, "SEMIF_VERIFY_WEIGHTS", default("verify_weights"), VERIFY_MODES
        ),
        scorer=_choice(env, "SEMIF_SCORER", default("scorer"), SCORERS),
        stub_delay_ms=_non_negative_int(env, "SEMIF_STUB_DELAY_MS", default("stub_delay_ms")),
        host=_nonempty(env, "SEMIF_HOST", default("host")),
        port=port,
        metrics_port=_metrics_port(env, port, metrics),
        header_timeout=_positive_float(env, "SEMIF_HEADER_TIMEOUT_S", default("header_timeout")),
        body_timeout=_positive_float(env, "SEMIF_BODY_TIMEOUT_S", default("body_timeout")),
        idle_timeout=_positive_float(env, "SEMIF_IDLE_TIMEOUT_S", default("idle_timeout")),
        max_connections=_positive_int(env, "SEMIF_MAX_CONNECTIONS", default("max_connections")),
        shutdown_grace=_positive_float(env, "SEMIF_SHUTDOWN_GRACE_S", default("shutdown_grace")),
        log_format=_choice(env, "SEMIF_LOG_FORMAT", default("log_format"), LOG_FORMATS),
        access_log=_switch(env, "SEMIF_ACCESS_LOG", default("access_log")),
        metrics=metrics,
        log_flush_s=_log_flush(env),
        event_loop=_event_loop(env),
        **_systemone(env, calibration_table),
        pid_file=_pid_file(env),
    )


MAX_LOG_FLUSH_S = 1.0


def _log_flush(env: Mapping[str, str]) -> float:
    """Seconds an access line may wait in the buffer: 0 (unbuffered) up to 1, like nginx's `flush=`."""
    raw = env.get("SEMIF_LOG_FLUSH_S")
    if raw is None:
        return float(default("log_flush_s"))
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"SEMIF_LOG_FLUSH_S must be a number, got {raw!r}") from None
    if not 0 <= value <= MAX_LOG_FLUSH_S:
        raise ValueError(f"SEMIF_LOG_FLUSH_S must be 0..{MAX_LOG_FLUSH_S:g}, got {raw!r}")
    return value


def _event_loop(env: Mapping[str, str]) -> str:
    """`auto` (default): `auto_event_loop`, as Settings' default is; `uvloop` insists on it."""
    value = _choice(env, "SEMIF_EVENT_LOOP", "auto", ("auto", "asyncio", "uvloop"))
    if value == "uvloop" and not _installed("uvloop"):
        raise ValueError("SEMIF_EVENT_LOOP=uvloop needs uvloop: pip install 'semif-serve[fast]'")
    return auto_event_loop() if value == "auto" else value


def _metrics(env: Mapping[str, str]) -> bool:
    """`auto` (default): `auto_metrics`, as Settings' default is; `on` insists on it; `off`."""
    value = _choice(env, "SEMIF_METRICS", "auto", ("auto", "on", "off"))
    installed = auto_metrics()
    if value == "on" and not installed:
        raise ValueError(
            "SEMIF_METRICS=on needs prometheus_client: pip install 'semif-serve[metrics]'"
        )
    return value != "off" and installed


def _non_negative_int(env: Mapping[str, str], name: str, default: int) -> int:
    raw = env.get(name)
    if raw is None:
        return default
    if not (raw.isascii() and raw.isdigit()):
        raise ValueError(f"{name} must be an integer >= 0, got {raw!r}")
    return int(raw)


# A model alias: visible ASCII without a comma (the list's separator), like a model id.
MAX_ALIAS_LENGTH = 100


def _aliases(env: Mapping[str, str]) -> tuple[str, ...]:
    """SEMIF_MODEL_ALIASES: comma-separated names `model` may carry; empty means none.
    The default is SemIf's server's names (the SDK's own default model, `jev-latest`, among them)."""
    raw = env.get("SEMIF_MODEL_ALIASES", ", ".join(default("model_aliases")))
    names = tuple(name.strip() for name in raw.split(",")) if raw.strip() else ()
    for name in names:
        if not name or len(name) > MAX_ALIAS_LENGTH or any(not 33 <= ord(ch) <= 126 for ch in name):
            raise ValueError(
                f"SEMIF_MODEL_ALIASES must be comma-separated names of 1..{MAX_ALIAS_LENGTH} "
                f"visible ASCII characters, got {raw!r}"
            )
    if len(set(names)) != len(names):
        raise ValueError(f"SEMIF_MODEL_ALIASES names a model twice: {raw!r}")
    return names


class _SystemOne(TypedDict):
    model_aliases: tuple[str, ...]
    systemone_orderings: str
    systemone_workload: str | None


def _systemone(env: Mapping[str, str], table: calibration_file.Table) -> _SystemOne:
    """The /v1/systemone defaults: an orderings method, and a workload that has what the method needs
    (decisions/methods.py): a temperature where it requires one, priors where it needs them (a method
    that needs priors needs a workload)."""
    orderings = _choice(
        env, "SEMIF_SYSTEMONE_ORDERINGS", default("systemone_orderings"), methods.ORDERINGS
    )
    method = methods.TABLE[orderings]
    workload = env.get("SEMIF_SYSTEMONE_WORKLOAD") or None
    if workload is None and method.needs_prior:
        raise ValueError(
            f"SEMIF_SYSTEMONE_ORDERINGS={orderings} needs SEMIF_SYSTEMONE_WORKLOAD naming a workload "
            "with priors in SEMIF_CALIBRATION"
        )
    if workload is not None:
        if workload not in table:
            raise ValueError(
                f"SEMIF_SYSTEMONE_WORKLOAD names {workload!r}, which SEMIF_CALIBRATION does not hold "
                f"(it holds: {', '.join(sorted(table)) or 'none'})"
            )
        if method.needs_prior and workload not in table.priors:
            raise ValueError(
                f"SEMIF_SYSTEMONE_WORKLOAD {workload!r} has no priors for SEMIF_SYSTEMONE_ORDERINGS="
                f"{orderings!r}; workloads with priors: {', '.join(sorted(table.priors)) or 'none'}"
            )
        if method.temperature_required and orderings not in (fitted := table.methods()[workload]):
            raise ValueError(
                f"SEMIF_SYSTEMONE_WORKLOAD {workload!r} has no temperature for "
                f"SEMIF_SYSTEMONE_ORDERINGS={orderings!r}; it has: {', '.join(sorted(fitted)) or 'none at all'}"
            )
    return {
        "model_aliases": _aliases(env),
        "systemone_orderings": orderings,
        "systemone_workload": workload,
    }


def _pid_file(env: Mapping[str, str]) -> str | None:
    """SEMIF_PID_FILE: a path, or unset for none; empty is refused (it names no file)."""
    path = env.get("SEMIF_PID_FILE")
    if path == "":
        raise ValueError("SEMIF_PID_FILE must not be empty (unset it for no pid file)")
    return path
