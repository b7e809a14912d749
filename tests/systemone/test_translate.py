"""System One requests -> SemIf rows, pinned exactly as SemIf's own server builds them.

SemIf's spec is docs/JEV_API_COMPAT.md in TheoLeeCJ/SemIf: section 4.1 (each
question one row, id = key, the state object passed through unchanged), 4.3
(instructions: a string verbatim; an object or array as json.dumps with
ensure_ascii=False, default separators, key order kept), and 4.4 (noul options
true/false with the frozen defaults "The answer to the question is yes." / "...no.";
choice options in criteria order, a null or "" description becoming the key;
score options "0".."n-1" described by the levels). Same rows means the same
prompt, so the same `prompt_sha256`. The refusals are System One's, each a
422 naming its field in `param`.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from semif_serve.decisions import request_model
from semif_serve.errors import ApiError
from semif_serve.systemone import translate
from tests.systemone_cases import NOUL, REFUSALS

LIMITS = request_model.Limits(
    max_decisions=64,
    workloads=frozenset({"triage"}),
    methods={"triage": frozenset({"none", "rotations"})},
)
POLICY = translate.Policy(LIMITS, frozenset({"served", "jev-latest"}), "none", None)
STATE = {"ticket": "Help! My payouts have been failing for 3 days.", "plan": "pro"}


def rows(questions: dict[str, Any], **extra: Any) -> list[dict[str, Any]]:
    body = {"model": "jev-latest", "state": STATE, "questions": questions, **extra}
    return [
        d.row
        for d in translate.translate(
            json.dumps(body, ensure_ascii=False).encode(), POLICY
        ).request.decisions
    ]


def refused(body: Any) -> ApiError:
    raw = body if isinstance(body, bytes) else json.dumps(body).encode()
    with pytest.raises(ApiError) as caught:
        translate.translate(raw, POLICY)
    assert caught.value.status == 422 and caught.value.code == "invalid_request"
    return caught.value


def test_noul_rows_with_criteria_and_with_semifs_defaults() -> None:
    """JEV_API_COMPAT.md 4.4 Noul: true first, then false; an absent or null side gets the frozen default."""
    assert rows(
        {
            "is_urgent": {
                "type": "noul",
                "instructions": "Does this convey urgency?",
                "criteria": {"true": "Explicitly time-sensitive", "false": "No urgency expressed"},
            },
            "spam": {"type": "noul", "instructions": "Is this spam?", "criteria": {"false": None}},
            "plain": {"type": "noul", "instructions": "Is this polite?"},
        }
    ) == [
        {
            "id": "is_urgent",
            "state": STATE,
            "question": "Does this convey urgency?",
            "options": [
                {"id": "true", "description": "Explicitly time-sensitive"},
                {"id": "false", "description": "No urgency expressed"},
            ],
        },
        {
            "id": "spam",
            "state": STATE,
            "question": "Is this spam?",
            "options": [
                {"id": "true", "description": "The answer to the question is yes."},
                {"id": "false", "description": "The answer to the question is no."},
            ],
        },
        {
            "id": "plain",
            "state": STATE,
            "question": "Is this polite?",
            "options": [
                {"id": "true", "description": "The answer to the question is yes."},
                {"id": "false", "description": "The answer to the question is no."},
            ],
        },
    ]


def test_choice_rows_keep_criteria_order_and_describe_null_or_empty_by_the_key() -> None:
    """JEV_API_COMPAT.md 4.4 Choice: options in JSON insertion order; null and "" become the key."""
    (row,) = rows(
        {
            "department": {
                "type": "choice",
                "instructions": "Which team should handle this?",
                "criteria": {
                    "technical": None,
                    "billing": "Payments, invoicing, refunds",
                    "sales": "",
                },
            }
        }
    )
    assert row == {
        "id": "department",
        "state": STATE,
        "question": "Which team should handle this?",
        "options": [
            {"id": "technical", "description": "technical"},
            {"id": "billing", "description": "Payments, invoicing, refunds"},
            {"id": "sales", "description": "sales"},
        ],
    }


def test_score_rows_number_the_levels_and_structured_values_render_as_semif_renders_them() -> None:
    """JEV_API_COMPAT.md 4.3 and 4.4 Score: levels "0".. in order; objects and arrays as
    json.dumps(ensure_ascii=False) with default separators and their key order."""
    instructions = {
        "potential_duplicate": {"name": "José Smith", "location": "Oakland"},
        "question": "Same person?",
    }
    (row,) = rows(
        {
            "frustration": {
                "type": "score",
                "instructions": instructions,
                "criteria": ["Calm", {"z": 1, "a": ["ü", 2]}, ["Very", "angry"]],
            }
        }
    )
    assert (
        row["question"]
        == '{"potential_duplicate": {"name": "José Smith", "location": "Oakland"}, "question": "Same person?"}'
    )
    assert row["options"] == [
        {"id": "0", "description": "Calm"},
        {"id": "1", "description": '{"z": 1, "a": ["ü", 2]}'},
        {"id": "2", "description": '["Very", "angry"]'},
    ]


def test_the_state_is_the_parsed_value_unchanged_in_every_row() -> None:
    """JEV_API_COMPAT.md 4.1: no normalisation of the state (score_shared finds it by its serialisation)."""
    state = {"z": [1, 2.5, "ü"], "a": {"k": None}}
    body = {
        "model": "served",
        "state": state,
        "questions": {
            "a": {"type": "noul", "instructions": "A?"},
            "b": {"type": "noul", "instructions": "B?"},
        },
    }
    plan = translate.translate(json.dumps(body, ensure_ascii=False).encode(), POLICY)
    assert [list(d.row["state"]) for d in plan.request.decisions] == [["z", "a"], ["z", "a"]]
    assert all(d.row["state"] == state for d in plan.request.decisions)
    assert plan.request.shared and [q.kind for q in plan.questions] == ["noul", "noul"]


def test_absent_or_null_instructions_get_the_default_question_of_the_type() -> None:
    got = rows(
        {
            "n": {"type": "noul", "criteria": {"true": "It is spam"}},
            "c": {"type": "choice", "instructions": None, "criteria": {"a": None, "b": None}},
            "s": {"type": "score", "criteria": ["low", "high"]},
        }
    )
    assert [row["question"] for row in got] == [
        translate.DEFAULT_INSTRUCTIONS[kind] for kind in ("noul", "choice", "score")
    ]


def test_unknown_fields_are_ignored_as_the_api_does() -> None:
    assert rows(
        {"n": {"type": "noul", "instructions": "A?", "future": 1}}, newer_client_field={"x": 1}
    ) == rows({"n": {"type": "noul", "instructions": "A?"}})


def test_the_extension_object_overrides_orderings_and_workload() -> None:
    body = {
        "model": "served",
        "state": "s",
        "questions": {"n": {"type": "noul", "instructions": "A?"}},
        "semif": {"orderings": "rotations", "workload": "triage"},
    }
    plan = translate.translate(json.dumps(body).encode(), POLICY)
    assert plan.request.workload == "triage" and plan.request.decisions[0].method == "rotations"
    assert plan.request.averaged and not plan.request.shared
    defaults = translate.Policy(LIMITS, POLICY.models, "rotations", "triage")
    body.pop("semif")
    assert (
        translate.translate(json.dumps(body).encode(), defaults).request.decisions[0].method
        == "rotations"
    )
    body["semif"] = {"orderings": "none", "workload": None}
    overridden = translate.translate(json.dumps(body).encode(), defaults).request
    assert (overridden.decisions[0].method, overridden.workload) == ("none", None)


@pytest.mark.parametrize(
    ("case", "body", "param", "says"), REFUSALS, ids=[case for case, *_ in REFUSALS]
)
def test_each_refusal_names_its_field_and_says_why(
    case: str, body: Any, param: str | None, says: str
) -> None:
    error = refused(body)
    assert error.param == param
    assert error.message.startswith(says), error.message


FIVE = {"type": "choice", "criteria": {f"o{i}": None for i in range(5)}}


def test_orderings_all_over_4_options_blames_what_chose_all_and_says_which_question() -> None:
    sent = refused(
        {
            "model": "served",
            "state": "s",
            "questions": {"q": NOUL, "k": FIVE},
            "semif": {"orderings": "all"},
        }
    )
    assert (sent.param, sent.message) == (
        "semif.orderings",
        'questions.k: semif.orderings "all" allows at most 4 options, got 5',
    )
    body = json.dumps({"model": "served", "state": "s", "questions": {"k": FIVE}}).encode()
    with pytest.raises(
        ApiError
    ) as caught:  # the server's default is sound for 2..4 options: the caller's 5 are to blame
        translate.translate(body, translate.Policy(LIMITS, POLICY.models, "all", None))
    assert (caught.value.param, caught.value.message) == (
        "questions.k.criteria",
        'questions.k: the server\'s default orderings "all" allows at most 4 options, got 5',
    )


@pytest.mark.parametrize(
    ("orderings", "workload", "semif", "param"),
    [
        (
            "none",
            "triage",
            {"orderings": "all"},
            "semif.orderings",
        ),  # the default workload has no "all"
        (
            "all",
            None,
            {"workload": "triage"},
            "semif.workload",
        ),  # the workload sent has no temperature for the default
    ],
)
def test_a_workload_and_method_mismatch_blames_the_field_the_request_sent(
    orderings: str, workload: str | None, semif: dict[str, str], param: str
) -> None:
    body = json.dumps(
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": semif}
    ).encode()
    with pytest.raises(ApiError) as caught:
        translate.translate(body, translate.Policy(LIMITS, POLICY.models, orderings, workload))
    assert (
        caught.value.param == param
        and "has no temperature for method 'all'" in caught.value.message
    )


def test_a_repeated_question_key_is_refused_naming_the_questions_object() -> None:
    body = b'{"model": "served", "state": "s", "questions": {"q": {"type": "noul", "instructions": "A?"}, "q": {"type": "noul"}}}'
    error = refused(body)
    assert error.param == "questions" and "'q'" in error.message


def test_a_repeated_key_deeper_down_is_named_by_its_path() -> None:
    body = b'{"model": "served", "state": {"a": [1, {"x": 1, "x": 2}]}, "questions": {"q": {"type": "noul", "instructions": "A?"}}}'
    assert refused(body).param == "state.a[1]"
    assert refused(b'{"model": "served", "model": "served"}').param is None  # the body itself


def test_a_repeated_empty_key_is_named_by_its_path_too() -> None:
    body = b'{"model": "served", "state": "s", "questions": {"q": {"type": "choice", "criteria": {"": 1, "": 2}}}}'
    error = refused(body)
    assert (error.param, error.message) == ("questions.q.criteria", "duplicate key ''")


def test_a_body_that_is_not_json_is_refused_as_on_every_endpoint() -> None:
    assert "not valid JSON" in refused(b"{nope").message


def test_a_box_question_is_refused_as_what_it_is_not_as_an_unknown_type() -> None:
    error = refused(
        {
            "model": "served",
            "state": "s",
            "questions": {"dog": {"type": "box", "instructions": "Find the dog"}},
        }
    )
    assert "box" in error.message and "text only" in error.message


def test_an_unknown_model_is_told_every_served_name_sorted() -> None:
    assert (
        refused({"model": "gpt", "state": "s", "questions": {"q": NOUL}}).message
        == "unknown model 'gpt'; served: jev-latest, served"
    )


def test_unknown_extension_fields_name_at_most_five() -> None:
    error = refused(
        {
            "model": "served",
            "state": "s",
            "questions": {"q": NOUL},
            "semif": {key: 1 for key in "fedcba"},
        }
    )
    assert (error.param, error.message) == ("semif", "semif has unknown field(s): a, b, c, d, e")


def test_exactly_the_cap_of_questions_is_accepted() -> None:
    assert len(rows({f"q{i}": NOUL for i in range(LIMITS.max_decisions)})) == 64


@pytest.mark.parametrize(
    ("body", "param", "message"),
    [
        (
            b'{"model": "served", "model": "served"}',
            None,
            "duplicate key 'model'",
        ),  # top level: no path to name
        (
            b'{"model": "served", "state": "s", "questions": {"q": {"type": "noul", "criteria": {"true": "y", "false": "n", "false": "m"}}}}',
            "questions.q.criteria",
            "duplicate key 'false'",
        ),  # the key repeated, not the object's first
        (b'[{"a": 1, "a": 2}]', "[0]", "duplicate key 'a'"),  # inside an array
        (
            b'{"' + b"k" * 50 + b'": 1, "' + b"k" * 50 + b'": 2}',
            None,
            "duplicate key '" + "k" * 40 + "\u2026'",
        ),
    ],
)
def test_a_duplicate_key_is_named_with_where_it_was_repeated(
    body: bytes, param: str | None, message: str
) -> None:
    error = refused(body)
    assert (error.param, error.message) == (param, message)


def test_sixteen_options_the_last_of_semifs_letters_are_accepted() -> None:
    (row,) = rows({"q": {"type": "choice", "criteria": {f"o{i}": None for i in range(16)}}})
    assert [option["id"] for option in row["options"]] == [f"o{i}" for i in range(16)]


# -- orderings "prior" (extension): the workload names the prior, per option count --------------------------

PRIOR_LIMITS = request_model.Limits(
    max_decisions=64,
    workloads=frozenset({"triage", "sorting"}),
    methods={"triage": frozenset({"none"}), "sorting": frozenset()},
    priors={"triage": frozenset({2}), "sorting": frozenset({2, 3})},
)
THREE = {"type": "choice", "criteria": {"a": None, "b": None, "c": None}}


def prior_plan(
    semif: dict[str, Any] | None,
    questions: dict[str, Any],
    orderings: str = "none",
    workload: str | None = None,
) -> translate.Plan:
    body = {
        "model": "served",
        "state": "s",
        "questions": questions,
        **({} if semif is None else {"semif": semif}),
    }
    return translate.translate(
        json.dumps(body).encode(),
        translate.Policy(PRIOR_LIMITS, POLICY.models, orderings, workload),
    )


def test_the_prior_is_one_ordering_per_question_and_needs_no_temperature() -> None:
    plan = prior_plan({"orderings": "prior", "workload": "sorting"}, {"q": NOUL, "k": THREE})
    assert [d.method for d in plan.request.decisions] == ["prior", "prior"]
    assert plan.request.workload == "sorting" and plan.request.averaged and plan.request.shared
    defaults = prior_plan(
        None, {"q": NOUL}, "prior", "triage"
    )  # triage has no temperature for "prior"
    assert (defaults.request.decisions[0].method, defaults.request.workload) == (
        "prior",
        "triage",
    )


@pytest.mark.parametrize(
    ("semif", "defaults", "param", "message"),
    [
        (
            {"orderings": "prior"},
            ("none", None),
            "semif.workload",
            "decision 'q' has orderings \"prior\" over 2 options, which needs a workload naming the prior; the request names no workload",
        ),
        (
            {"orderings": "prior", "workload": "triage"},
            ("none", None),
            "semif.workload",
            "workload 'triage' has no prior for 3 options (decision 'k'); it has priors for: 2",
        ),
        (
            {"orderings": "prior"},
            ("none", "triage"),
            "semif.orderings",
            "workload 'triage' has no prior for 3 options (decision 'k'); it has priors for: 2",
        ),
        (
            None,
            ("prior", "triage"),
            "semif.orderings",
            "workload 'triage' has no prior for 3 options (decision 'k'); it has priors for: 2",
        ),
        (
            {"workload": "sorting"},
            ("none", None),
            "semif.workload",
            "workload 'sorting' has no temperature for method 'none' (decision 'q'); it has: none at all",
        ),
    ],
)
def test_a_missing_prior_is_refused_naming_the_workload_and_the_option_count(
    semif: dict[str, Any] | None, defaults: tuple[str, str | None], param: str, message: str
) -> None:
    with pytest.raises(ApiError) as caught:
        prior_plan(semif, {"q": NOUL, "k": THREE}, *defaults)
    assert (caught.value.param, caught.value.message) == (param, message)


def test_orderings_lists_the_prior_among_its_values() -> None:
    error = refused(
        {"model": "served", "state": "s", "questions": {"q": NOUL}, "semif": {"orderings": "pride"}}
    )
    assert (error.param, error.message) == (
        "semif.orderings",
        "semif.orderings must be one of none, rotations, all, prior, adaptive",
    )
