"""The tokens file (SEMIF_API_TOKENS_FILE) read and checked, and a presented token told to its caller: each
refusal with its message (naming the file and the line, never a token), and the same comparisons made
whichever token matches, or none."""

from __future__ import annotations

import hashlib
import os
import pickle
from pathlib import Path

import pytest

from semif_serve.service import callers
from semif_serve.service.callers import MAX_CALLERS, Callers

ALICE = "a" * 31 + "-alice-token"
BOB = "B" * 32 + "~!bob"
CAROL = "c" * 32


def written(tmp_path: Path, text: str, mode: int = 0o600, name: str = "tokens") -> str:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return str(path)


def refusal(tmp_path: Path, text: str, mode: int = 0o600) -> str:
    path = written(tmp_path, text, mode)
    with pytest.raises(ValueError) as refused:
        callers.load(path)
    message = str(refused.value)
    assert message.startswith(f"SEMIF_API_TOKENS_FILE {path}")
    for token in (ALICE, BOB, CAROL):  # Rule 1: never a token in a message
        assert token not in message
    return message.removeprefix(f"SEMIF_API_TOKENS_FILE {path}")


def test_a_file_of_callers_with_comments_blank_lines_and_any_whitespace(tmp_path: Path) -> None:
    path = written(
        tmp_path,
        f"# callers of the ranking replica\n\nalice {ALICE}\n  \t\nbob\t\t{BOB}  \n   # indented comment\n"
        f"svc.batch_2-x {CAROL}",
        0o640,  # group read is allowed
    )
    loaded = callers.load(path)
    assert loaded.names == ("alice", "bob", "svc.batch_2-x") and loaded.source == path
    assert ALICE not in repr(loaded) and "alice" in repr(loaded)


def test_each_of_several_tokens_is_its_callers_and_near_misses_are_no_one(tmp_path: Path) -> None:
    loaded = callers.load(written(tmp_path, f"alice {ALICE}\nbob {BOB}\ncarol {CAROL}\n"))
    assert [loaded.identify(t.encode()) for t in (ALICE, BOB, CAROL)] == ["alice", "bob", "carol"]
    for wrong in (
        "x" * 40,
        ALICE[:-1],  # a right prefix
        ALICE + "x",  # the right token and one character more
        "",
        BOB.lower(),
    ):
        assert loaded.identify(wrong.encode()) is None, wrong


def test_every_check_makes_one_compare_whichever_token_it_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """No exit that depends on the match, nor on how many tokens there are: a hit, a miss and an empty
    token each cost one digest and one `compare_digest` (a miss compares with the decoy)."""
    calls: list[tuple[int, int]] = []
    real = callers.hmac.compare_digest

    def counting(a: bytes, b: bytes) -> bool:
        calls.append((len(a), len(b)))
        return real(a, b)

    monkeypatch.setattr(callers.hmac, "compare_digest", counting)
    few = Callers.of([("alice", ALICE)])
    many = Callers.of([("alice", ALICE), ("bob", BOB), ("carol", CAROL), ("alice", "z" * 40)])
    made = []
    for table, token in ((few, ALICE), (few, "x" * 32), (many, ALICE), (many, CAROL), (many, "")):
        calls.clear()
        table.identify(token.encode())
        made.append(list(calls))
    assert made == [[(32, 32)]] * 5


class Untouchable(bytes):
    """A presented token that fails the test if it is ever hashed as a key or compared as itself:
    a table keyed by raw tokens (`table.get(token)`, `token == stored`) must touch one of these."""

    def __hash__(self) -> int:
        raise AssertionError("the raw token was used as a dict key")

    def __eq__(self, other: object) -> bool:
        raise AssertionError("the raw token was compared as itself")


def test_the_lookup_is_made_on_the_digest_never_on_the_raw_token() -> None:
    table = Callers.of([("alice", ALICE), ("bob", BOB), ("bob", CAROL)])
    for token, name in ((ALICE, "alice"), (CAROL, "bob"), ("x" * 40, None)):
        assert table.identify(Untouchable(token.encode())) == name
    # Nothing the table holds is a token, in any form: not a key, not a value, not a field.
    kept = pickle.dumps(table)
    for token in (ALICE, BOB, CAROL):
        assert token.encode() not in kept and token.encode("utf-16-le") not in kept
    assert set(table._by_digest) == {
        hashlib.sha256(t.encode()).digest() for t in (ALICE, BOB, CAROL)
    }


NAME_RULE = (
    " line 1: the name must match [A-Za-z0-9._-]{1,31} and not be '-' alone (a token, longer, never "
    "passes as a name: are the columns swapped?)"
)
SHORT = (
    "the token is shorter than 32 characters; it must be at least 32 characters of visible ASCII "
    "(33-126)"
)
NOT_ASCII = (
    "the token holds a character outside visible ASCII (33-126); it must be at least 32 "
    "characters of visible ASCII (33-126)"
)
TWICE = "the token is line 1's too; a token belongs to one name only"


@pytest.mark.parametrize(
    "text,message",
    [
        (f"alice {ALICE} extra\n", " line 1: 3 fields; each line is one `name token` pair"),
        (f"# x\nalice {ALICE}\nbob\n", " line 3: one field; each line is one `name token` pair"),
        (f"{ALICE}\n", " line 1: one field; each line is one `name token` pair"),
        (f"- {ALICE}\n", NAME_RULE),
        (f"{'n' * 32} {ALICE}\n", NAME_RULE),
        (f"al/ice {ALICE}\n", NAME_RULE),
        (f"{ALICE} alice\n", NAME_RULE),  # the columns swapped
        (f"{ALICE} {BOB}\n", NAME_RULE),  # a line of two tokens
        (f"alice {ALICE}\n\nbob {ALICE}\n", f" line 3: {TWICE}"),
        (f"alice {ALICE}\nalice {ALICE}\n", f" line 2: {TWICE}"),
        (
            f"alice {ALICE}\nbob {BOB}\nalice {CAROL}\nalice {'d' * 32}\n",
            " line 4: the name already holds 2 tokens (lines 1, 3), the most one name may hold",
        ),
        ("alice " + "s" * 31 + "\n", f" line 1: {SHORT}"),
        ("alice " + "é" * 40 + "\n", f" line 1: {NOT_ASCII}"),
        ("alice " + "t" * 34 + "é\n", f" line 1: {NOT_ASCII}"),  # 36 bytes: no length problem
        ("", " holds no caller (only blank lines and # comments)"),
        ("# only a comment\n\n  \n", " holds no caller (only blank lines and # comments)"),
        (
            "".join(f"c{k} {k:040d}\n" for k in range(MAX_CALLERS + 1)),
            f" holds more than {MAX_CALLERS} callers (names)",
        ),
    ],
)
def test_a_bad_file_is_refused_naming_the_line_and_the_rule_never_a_field(
    tmp_path: Path, text: str, message: str
) -> None:
    assert refusal(tmp_path, text) == message
    lines = [line.split() for line in text.splitlines() if not line.lstrip().startswith("#")]
    for field in (field for fields in lines for field in fields if len(field) > 1):
        assert field not in message, field  # neither a name nor a token (Rule 1)


def test_a_name_holds_two_tokens_and_at_most_max_callers_names(tmp_path: Path) -> None:
    """MAX_CALLERS bounds the names (the `caller` label); a name holds at most 2 tokens, so a file
    holds at most 2 x MAX_CALLERS tokens, each its one name's."""
    text = "".join(f"c{k} {k:040d}\nc{k} {k:041d}\n" for k in range(MAX_CALLERS))
    loaded = callers.load(written(tmp_path, text))
    assert loaded.names == tuple(f"c{k}" for k in range(MAX_CALLERS))
    assert loaded.tokens == 2 * MAX_CALLERS
    found = [loaded.identify(f"{k:0{width}d}".encode()) for k in (0, 63) for width in (40, 41)]
    assert found == ["c0", "c0", "c63", "c63"]


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o602, 0o666])
def test_a_file_other_users_may_read_or_write_is_refused(tmp_path: Path, mode: int) -> None:
    assert refusal(tmp_path, f"alice {ALICE}\n", mode) == (
        f" is readable or writable by other users (mode {mode:04o}): chmod o-rw it (in Kubernetes, "
        "set the Secret volume's defaultMode: 0440)"
    )


def test_an_unreadable_file_is_refused(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing")
    with pytest.raises(ValueError, match=rf"^SEMIF_API_TOKENS_FILE {missing} is unreadable: "):
        callers.load(missing)
    with pytest.raises(ValueError, match="is unreadable: Is a directory"):
        callers.load(str(tmp_path))
    if os.geteuid() != 0:  # root reads a 0o000 file anyway
        with pytest.raises(ValueError, match="is unreadable: Permission denied"):
            callers.load(written(tmp_path, f"alice {ALICE}\n", 0o000))


def test_a_symlink_is_followed_and_its_target_judged(tmp_path: Path) -> None:
    """A Kubernetes Secret volume: ..data/tokens behind a link (the link itself is 0777)."""
    target = written(tmp_path, f"alice {ALICE}\n", 0o440, "real")
    link = tmp_path / "tokens"
    link.symlink_to(target)
    assert callers.load(str(link)).names == ("alice",)
    Path(target).chmod(0o644)
    with pytest.raises(ValueError, match="readable or writable by other users"):
        callers.load(str(link))


def test_bytes_that_are_not_utf_8_are_refused_naming_the_line_not_a_codec(tmp_path: Path) -> None:
    """A token file saved in another encoding (or binary) fails the token rule on its line, as any
    other bad token does, at startup and on reload alike, never with a decoding error."""
    path = tmp_path / "tokens"
    path.write_bytes(f"alice {ALICE}\nbob ".encode() + b"\xff" * 40 + b"\n")
    path.chmod(0o600)
    with pytest.raises(callers.TokensFileError) as refused:
        callers.load(str(path))
    assert str(refused.value) == f"SEMIF_API_TOKENS_FILE {path} line 2: {NOT_ASCII}"
