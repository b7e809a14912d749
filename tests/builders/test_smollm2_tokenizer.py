"""SmolLM2's tokenizer as `small-model` writes it (builder version 2): `clean_up_tokenization_spaces`
false, so transformers never warns about it, and not one token id or decoded text changed.

"Before" is the version-1 build, rebuilt here from the new one: every snapshot file is the same
blob but tokenizer_config.json, whose one changed value is flipped back and then proved to be the
old file byte for byte (its git blob id, pinned). Both tokenizers then encode and decode the same
prompts. The warning is looked for in a fresh interpreter (transformers warns once per process),
with the old file as the control that shows the look can see it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from semif_serve.builders import smollm2, snapshot
from tests.request_bodies import ROW

# tokenizer_config.json of builder version 1 (revision 42c91864842f40b183d5dd301aa314c0936bb981).
OLD_CONFIG_BLOB = "5a11e2db4c036074e5db0596ca53f73761d4ebc4"
NEW, OLD = b'"clean_up_tokenization_spaces": false', b'"clean_up_tokenization_spaces": true'
WARNING = "clean_up_tokenization_spaces"
TEXTS = [
    "Hello , world !",
    "don 't stop ; it 's fine .",
    "a  b   c\t\td\n\ne",
    " leading and trailing ",
    "Ünïcödé — “quotes” 中文 🙂",
    "x+",
    '{"ticket": {"text": "printer jammed"}}',
    "1,234.5e-6 %",
    "",
]
ROWS = [
    ROW,
    {
        **ROW,
        "id": "t",
        "state": "I was charged twice , for one order .",
        "question": "Who 's upset ?",
    },
    {**ROW, "id": "n", "state": {"ticket": {"text": "printer jammed"}}},
    {
        **ROW,
        "id": "p",
        "state": {"person_said": "x+"},
        "options": ROW["options"] + [{"id": "m", "description": "Maybe ."}],
    },
]


@pytest.fixture(scope="module")
def snapshot_dir(smollm2_build: dict[str, str]) -> Path:
    """The snapshot `small-model` builds (or finds) in the per-machine cache."""
    home = Path(smollm2_build["HF_HOME"])
    return snapshot.repo_dir(home, smollm2.REPO_ID) / "snapshots" / smollm2_build["SEMIF_REVISION"]


@pytest.fixture(scope="module")
def before_dir(snapshot_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The version-1 build's tokenizer files: the same blobs, tokenizer_config.json as it was."""
    folder = tmp_path_factory.mktemp("smollm2-v1")
    for name in ("tokenizer.json", "chat_template.jinja", "config.json"):
        shutil.copyfile(snapshot_dir / name, folder / name)
    config = (snapshot_dir / "tokenizer_config.json").read_bytes()
    assert config.count(NEW) == 1
    old = config.replace(NEW, OLD)
    assert snapshot.etag("tokenizer_config.json", old) == OLD_CONFIG_BLOB
    (folder / "tokenizer_config.json").write_bytes(old)
    return folder


def load(folder: Path) -> Any:
    import transformers

    return transformers.AutoTokenizer.from_pretrained(str(folder), local_files_only=True)


def test_the_built_config_says_false_and_nothing_else_moved(snapshot_dir, before_dir) -> None:
    new, old = (
        json.loads((d / "tokenizer_config.json").read_text()) for d in (snapshot_dir, before_dir)
    )
    assert new.pop(WARNING) is False and old.pop(WARNING) is True and new == old


def test_not_one_token_id_or_decoded_text_changed(snapshot_dir, before_dir) -> None:
    from fastjev._runtime import direct

    after, before = load(snapshot_dir), load(before_dir)
    assert (
        after.clean_up_tokenization_spaces is False and before.clean_up_tokenization_spaces is True
    )
    for text in TEXTS:
        ids = after.encode(text, add_special_tokens=False)
        assert ids == before.encode(text, add_special_tokens=False), text
        assert after(text)["input_ids"] == before(text)["input_ids"], text
        assert after.decode(ids) == before.decode(ids) == text, text
    for (
        row
    ) in ROWS:  # the prompts the scorer builds, its answer slots and their round trip included
        assert direct.encode_prompt(after, row, 4096) == direct.encode_prompt(before, row, 4096), (
            row["id"]
        )
    messages = [{"role": "user", "content": "Is this urgent ?"}]
    assert after.apply_chat_template(
        messages, add_generation_prompt=True
    ) == before.apply_chat_template(messages, add_generation_prompt=True)


LOAD_AND_SCORE_PROMPT = """
import sys, transformers
from fastjev._runtime import direct
row = {"id": "r", "state": "s", "question": "q?", "options": [{"id": "a", "description": "A"}, {"id": "b", "description": "B"}]}
for folder in sys.argv[1:]:
    tokenizer = transformers.AutoTokenizer.from_pretrained(folder, local_files_only=True)
    direct.encode_prompt(tokenizer, row, 4096)  # the scorer's own first decode
    print("--- done:", folder, file=sys.stderr, flush=True)
"""


def test_loading_it_and_scoring_a_prompt_prints_no_such_warning(snapshot_dir, before_dir) -> None:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("TRANSFORMERS_VERBOSITY")
    }
    done = subprocess.run(
        [sys.executable, "-c", LOAD_AND_SCORE_PROMPT, str(snapshot_dir), str(before_dir)],
        env={**env, "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    new, _, old = done.stderr.partition(f"--- done: {snapshot_dir}\n")
    assert WARNING not in new
    assert (
        WARNING in old
    )  # the control: the version-1 file does warn, and the look above would have seen it
