"""Request bodies: Python arguments in, the contract's JSON bodies out.

Rules: this module shapes what the caller passed and nothing more. It does not
validate what the server validates (option counts, id uniqueness, known workloads):
the server's 422 names the problem better, and one set of rules cannot drift from
the other. `orderings` and `workload` are passed through as given; a key is written
only when the caller set it, so an old server never sees a field it does not know.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# {id: description}, [(id, description)] or [{"id": ..., "description": ...}]
Options = Mapping[str, str] | Sequence[tuple[str, str]] | Sequence[Mapping[str, str]]
State = str | Mapping[str, Any] | Sequence[Any]


def options(value: Options) -> list[dict[str, str]]:
    """The contract's `[{id, description}]` from any of the accepted spellings, in the caller's order."""
    items: Iterable[Any] = value.items() if isinstance(value, Mapping) else value
    out = []
    for item in items:
        if isinstance(item, Mapping):
            out.append({"id": item["id"], "description": item["description"]})
        else:
            option_id, description = item
            out.append({"id": option_id, "description": description})
    return out


@dataclass(frozen=True)
class Question:
    """One decision of a /decide/shared request (the state is shared)."""

    id: str
    question: str
    options: Options
    orderings: str | None = None

    def to_json(self) -> dict[str, Any]:
        return _with(
            {"id": self.id, "question": self.question, "options": options(self.options)},
            orderings=self.orderings,
        )


def decide(
    state: State,
    question: str,
    choices: Options,
    *,
    id: str,
    orderings: str | None,
    workload: str | None,
) -> dict[str, Any]:
    """The /decide body."""
    return _with(
        {"id": id, "state": state, "question": question, "options": options(choices)},
        orderings=orderings,
        workload=workload,
    )


def shared(state: State, questions: Sequence[Question], *, workload: str | None) -> dict[str, Any]:
    """The /decide/shared body."""
    return _with({"state": state, "decisions": [q.to_json() for q in questions]}, workload=workload)


def _with(body: dict[str, Any], **optional: str | None) -> dict[str, Any]:
    return {**body, **{key: value for key, value in optional.items() if value is not None}}
