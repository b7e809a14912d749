"""A System One request body in, SemIf rows and what assembly needs out, before any scoring.

Rules: the package's (systemone/__init__.py): a pure function of the body and the
server's Policy; it knows no HTTP, no engine and no envelope, only ApiError values.

What the API promises (TypeSafe's reference; SemIf's docs/JEV_API_COMPAT.md 4):
`{model, state, questions: {key: {type, instructions, criteria}}}`; each question
becomes exactly one SemIf row `{id: key, state, question, options}`, in the
questions' order, so the same request gives the same rows (and `prompt_sha256`)
as SemIf's own server:
- `instructions` and every criterion: a string as it is; an object or array as
  `json.dumps(value, ensure_ascii=False)` with default separators, key order kept.
- noul: options `true`, `false`, described by `criteria.true` / `criteria.false`,
  or SemIf's frozen defaults when absent or null.
- choice: one option per `criteria` key, in order; a null or "" description is the key.
- score: options "0".."n-1" described by the levels, low to high.

Where we differ, and why:
- An absent or null `instructions` gets DEFAULT_INSTRUCTIONS[type] (SemIf's server
  refuses it; the SDK and the hosted API allow it). A blank one is a 422, as there.
- Text only: `box` questions and `assets` are refused, naming what is refused.
- 2..16 options (SemIf's letters), 2..10 score levels (the API's cap).
- Unknown fields are ignored, as the API's servers do; our own `semif` extension
  object (`orderings`, `workload`) is strict, like our other endpoints.
Every refusal is a 422 whose `param` is the JSON path of the field to blame; the
request model's own checks (state, workload, row cap) are reused, not repeated: each
raises its refusal with the `param` translation passes it, so nothing here rewrites an error.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from ..decisions import methods, request_model
from ..decisions.request_model import DecideRequest, Decision, Limits
from ..errors import ApiError, excerpt

# SemIf's frozen noul descriptions: changing either changes every noul prompt hash.
NOUL_TRUE = "The answer to the question is yes."
NOUL_FALSE = "The answer to the question is no."
# Ours: the question a row asks when the caller sent no instructions.
DEFAULT_INSTRUCTIONS = {
    "noul": "Which of the two options holds for the state?",
    "choice": "Which option best fits the state?",
    "score": "Which level best describes the state?",
}
MAX_LEVELS = 10  # the API's cap on score levels
REFUSED_TYPES = {"box": "box questions locate regions in images; this service scores text only"}
EXTENSION_KEYS = frozenset({"orderings", "workload"})


@dataclass(frozen=True)
class Question:
    """What assembly needs about one question: its key, type and (score) legend."""

    key: str
    kind: str
    legend: dict[str, str] | None = None


@dataclass(frozen=True)
class Plan:
    """A translated request: the request model's decisions, and the questions they answer."""

    request: DecideRequest
    questions: tuple[Question, ...]


@dataclass(frozen=True)
class Policy:
    """What translation enforces from the server's settings (not a question's answer options)."""

    limits: Limits
    models: frozenset[str]  # the served id and every alias
    orderings: str  # SEMIF_SYSTEMONE_ORDERINGS
    workload: str | None  # SEMIF_SYSTEMONE_WORKLOAD


def refuse(message: str, param: str | None) -> ApiError:
    return ApiError("invalid_request", message, param=param)


class _Repeated(dict[str, Any]):
    """An object that repeated a key (the JSON rules refuse it; the path says where)."""

    repeated: str


def _parse(body: bytes) -> Any:
    """Strict JSON as for every endpoint; a repeated key is refused naming its object's path."""
    seen: list[bool] = []

    def pairs(items: list[tuple[str, Any]]) -> dict[str, Any]:
        built = dict(items)
        if len(built) == len(items):
            return built
        seen.append(True)
        keys = [key for key, _ in items]
        repeated = _Repeated(built)
        repeated.repeated = next(key for i, key in enumerate(keys) if key in keys[:i])
        return repeated

    data = request_model.parse_json(body, pairs)
    if seen:
        path, key = next(_repeats(data, ""))
        raise refuse(f"duplicate key {excerpt(key, 40)!r}", path or None)
    return data


def _repeats(value: Any, path: str) -> Iterator[tuple[str, str]]:
    """The path of each object that repeated a key, and the key, outermost first (walked only after one did).
    "Not found" is the generator's end, never a value: the repeated key may itself be ""."""
    if isinstance(value, _Repeated):
        yield path, value.repeated
    children = (
        value.items()
        if isinstance(value, dict)
        else enumerate(value)
        if isinstance(value, list)
        else ()
    )
    for name, child in children:
        yield from _repeats(
            child,
            f"{path}[{name}]" if isinstance(name, int) else f"{path}.{name}" if path else name,
        )


def _text(value: Any, param: str) -> str:
    """Instructions or a criterion as the nonempty string SemIf's row needs."""
    if isinstance(value, str):
        if not value.strip():
            raise refuse(f"{param} is empty", param)
        return value
    if isinstance(value, (dict, list)):
        if not value:
            raise refuse(f"{param} is empty", param)
        return json.dumps(value, ensure_ascii=False)
    raise refuse(f"{param} must be a string, object or array", param)


def _noul(criteria: Any, param: str) -> tuple[list[dict[str, str]], None]:
    if criteria is None:
        criteria = {}
    if not isinstance(criteria, dict):
        raise refuse(f"{param} must be an object with keys true and/or false", param)
    unknown = sorted(set(criteria) - {"true", "false"})
    if unknown:
        raise refuse(f"{param} accepts only true and false, got {excerpt(unknown[0], 40)!r}", param)
    options = []
    for key, default in (("true", NOUL_TRUE), ("false", NOUL_FALSE)):
        value = criteria.get(key)
        options.append(
            {"id": key, "description": default if value is None else _text(value, f"{param}.{key}")}
        )
    return options, None


def _choice(criteria: Any, param: str) -> tuple[list[dict[str, str]], None]:
    if not isinstance(criteria, dict) or not 2 <= len(criteria) <= methods.MAX_OPTIONS:
        raise refuse(
            f"{param} must be an object of 2..{methods.MAX_OPTIONS} options (SemIf's letters A..P), "
            f"got {len(criteria) if isinstance(criteria, dict) else type(criteria).__name__}",
            param,
        )
    options = []
    for key, value in criteria.items():
        if not key.strip():
            raise refuse(f"{param} has an empty option name", param)
        described = key if value is None or value == "" else _text(value, f"{param}.{key}")
        options.append({"id": key, "description": described})
    return options, None


def _score(criteria: Any, param: str) -> tuple[list[dict[str, str]], dict[str, str]]:
    if not isinstance(criteria, list) or not 2 <= len(criteria) <= MAX_LEVELS:
        raise refuse(
            f"{param} must be an array of 2..{MAX_LEVELS} levels, "
            f"got {len(criteria) if isinstance(criteria, list) else type(criteria).__name__}",
            param,
        )
    levels = [_text(level, f"{param}[{index}]") for index, level in enumerate(criteria)]
    return [{"id": str(i), "description": level} for i, level in enumerate(levels)], {
        str(i): level for i, level in enumerate(levels)
    }


OPTIONS = {"noul": _noul, "choice": _choice, "score": _score}


def _question(
    key: str, item: Any, state: Any, method: str, sent: bool
) -> tuple[Decision, Question]:
    """One question: its row (and so its prompt) and what its answer needs. An orderings method the
    request `sent` that these options cannot take blames `semif.orderings`; the server's default
    (sound for some option counts, not all) blames the criteria, the part the caller wrote."""
    param = f"questions.{key}"
    if not key.strip():
        raise refuse("question keys must be nonempty", "questions")
    if not isinstance(item, dict):
        raise refuse(f"{param} must be an object", param)
    kind = item.get("type")
    named = isinstance(
        kind, str
    )  # an array or object is unhashable: only a string meets the tables
    if named and kind in REFUSED_TYPES:
        raise refuse(f"{param}: {REFUSED_TYPES[kind]}", f"{param}.type")
    if not named or kind not in OPTIONS:
        raise refuse(
            f"{param}.type must be one of {', '.join(OPTIONS)}, got {excerpt(kind, 40)!r}",
            f"{param}.type",
        )
    if kind != "noul" and "criteria" not in item:
        raise refuse(f"{param}.criteria is required for a {kind} question", f"{param}.criteria")
    instructions = item.get("instructions")
    question = (
        DEFAULT_INSTRUCTIONS[kind]
        if instructions is None
        else _text(instructions, f"{param}.instructions")
    )
    options, legend = OPTIONS[kind](item.get("criteria"), f"{param}.criteria")
    source = "semif.orderings" if sent else "the server's default orderings"
    checked = request_model.checked_orderings(
        method, options, f"{param}: {source}", "semif.orderings" if sent else f"{param}.criteria"
    )
    row = {"id": key, "state": state, "question": question, "options": options}
    return Decision(row=row, method=checked), Question(key, kind, legend)


def _extension(value: Any, policy: Policy) -> tuple[str, str | None, frozenset[str]]:
    """Our own `semif` object: orderings method and workload, each overriding the server's default, and
    which of the two the request sent (so that a refusal blames the field it wrote)."""
    if value is None:
        return policy.orderings, policy.workload, frozenset()
    if not isinstance(value, dict):
        raise refuse("semif must be an object with orderings and/or workload", "semif")
    unknown = sorted(set(value) - EXTENSION_KEYS)
    if unknown:
        raise refuse(
            f"semif has unknown field(s): {', '.join(excerpt(key, 40) for key in unknown[:5])}",
            "semif",
        )
    method = value.get("orderings", policy.orderings)
    if not isinstance(method, str) or method not in methods.BY_NAME:
        raise refuse(
            f"semif.orderings must be one of {', '.join(methods.ORDERINGS)}", "semif.orderings"
        )
    workload = (
        request_model.checked_workload(value["workload"], policy.limits, "semif.workload")
        if "workload" in value
        else policy.workload
    )
    return method, workload, EXTENSION_KEYS & set(value)


def translate(body: bytes, policy: Policy) -> Plan:
    """A /v1/systemone body as the request model's decisions: one row per question, in order."""
    data = _parse(body)
    if not isinstance(data, dict):
        raise refuse("body must be a JSON object", None)
    if data.get("assets") is not None:
        raise refuse("image assets are refused: this service scores text only", "assets")
    for name in ("model", "state", "questions"):
        if name not in data:
            raise refuse(f"body is missing field {name}", name)
    if (
        not isinstance(data["model"], str) or data["model"] not in policy.models
    ):  # a list or object: 422, not a crash
        raise refuse(
            f"unknown model {excerpt(str(data['model']), 60)!r}; served: {', '.join(sorted(policy.models))}",
            "model",
        )
    state = request_model.checked_state(data["state"], "state")
    method, workload, sent = _extension(data.get("semif"), policy)
    questions = data["questions"]
    limit = policy.limits.max_decisions
    if not isinstance(questions, dict) or not 1 <= len(questions) <= limit:
        raise refuse(f"questions must be an object of 1..{limit} questions", "questions")
    translated = [
        _question(key, item, state, method, "orderings" in sent) for key, item in questions.items()
    ]
    request = DecideRequest(tuple(d for d, _ in translated), workload, shared=len(translated) > 1)
    # One method and one workload for every question, so the field the request sent is to blame (neither
    # sent: the server's two defaults, which configuration refuses to start with unless they agree; a
    # prior missing for one option count is then the orderings' to answer for, as any method's limit).
    # No workload at all can only fail a method that needs a prior: the missing workload is to blame.
    blamed = "semif.workload" if "workload" in sent or workload is None else "semif.orderings"
    request_model.check_fit(workload, request.decisions, policy.limits, blamed)
    request_model.check_request(request, policy.limits, "questions")
    return Plan(request, tuple(q for _, q in translated))
