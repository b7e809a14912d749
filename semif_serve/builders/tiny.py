"""A tiny random-weight Qwen3.5 checkpoint, built offline, for CPU runs of the real path.

Production serves Qwen/Qwen3.5-4B on a GPU. This module writes a ~230k-parameter
stand-in into a Hugging Face hub cache, so that with ``HF_HOME=<out>`` and
``HF_HUB_OFFLINE=1`` the server loads ``semif-serve/tiny-qwen3.5`` at a pinned
40-hex revision through exactly the calls it makes for the real model, and the
scorers return real (if meaningless) decisions on CPU in milliseconds.

Choices, and why:

* **Config: composite ``qwen3_5``** (a ``text_config`` plus a tiny ``vision_config``),
  as production ships it, so the loader's ``config.get_text_config()`` step is
  exercised. The composite config does not force vision weights: only the text tower
  is saved, and ``Qwen3_5ForCausalLM`` ignores ``model.visual.*`` in production anyway.
  The weights use production's key layout (``model.language_model.*``, ``lm_head``), so
  loading goes through transformers' ``language_model`` prefix conversion as well.
  Four layers, three linear-attention then one full-attention, the 4B's pattern.
* **Weights: float32, seeded**, drawn with ten times the usual initialiser scale, so
  the ``lm_head`` spreads the option logits (a real top choice, e.g. 0.72/0.28, instead
  of a near-uniform tie) and the context still moves them a little. With random weights
  the top choice follows the options' positions, not the meaning of the state.
* **Tokenizer: byte-level BPE** trained by ``tokenizers`` on a small built-in corpus
  with ``Qwen3_5Tokenizer``'s own normaliser and pre-tokeniser (training is
  deterministic), saved as ``Qwen3_5Tokenizer`` so AutoTokenizer rebuilds it the way it
  rebuilds production's. A few hand-placed punctuation merges rank first; they make the
  INV-7 boundary case real: for an object state whose last value ends in ``)``, ``;``
  or ``}`` (``{"person_said": "ok :)"}``), the evidence text ends in a pre-token such
  as `` :)"}`` that tokenises ``[" :)", '"}']``, but once ``, "criterion"`` follows, the
  pre-token `` :)"},`` tokenises ``[" :", ')"},']``: the prompt re-tokenises two tokens
  back, so upstream's one-token ``_state_prefix`` is not a prefix of the full prompt.
  A string state (``"ok :)"``) or an ordinary value (``"fine"``) is unaffected.
* **Revision: the sha1 of the snapshot's files** (names and contents), so it changes
  exactly when the bytes do; every file is bit-identical across builds.
* **Default output: ``Path.cwd() / ".tiny-model"``** (taken at import), i.e. where the
  command runs: the repository root in practice, whose ``.gitignore`` lists it, and it
  keeps working from an installed package, where a path relative to this file would
  point into site-packages.
"""

from __future__ import annotations

import argparse
import json
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from . import snapshot

if TYPE_CHECKING:
    from transformers import PreTrainedTokenizerBase, Qwen3_5Config, Qwen3_5ForCausalLM

REPO_ID = "semif-serve/tiny-qwen3.5"
DEFAULT_OUT = Path.cwd() / ".tiny-model"
SEED = 20260927

VOCAB_SIZE = 512  # embedding rows; like production, more than the tokenizer uses
INIT_STD = 0.2  # 10x the usual 0.02: the lm_head then spreads option logits visibly
TEXT_DIMS = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 4,
    "layer_types": ["linear_attention"] * 3 + ["full_attention"],
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 16,
    "linear_num_key_heads": 2,
    "linear_num_value_heads": 4,
    "linear_key_head_dim": 16,
    "linear_value_head_dim": 16,
    "linear_conv_kernel_dim": 4,
    "max_position_embeddings": 32768,
    # Production's RoPE, with the mrope sections scaled to the 4-dim rotary slice.
    "rope_parameters": {
        "rope_type": "default",
        "rope_theta": 10000000,
        "partial_rotary_factor": 0.25,
        "mrope_section": [1, 1, 0],
        "mrope_interleaved": True,
    },
    "tie_word_embeddings": False,
}
# Config only: no vision weights are written (see the module docstring).
VISION_DIMS = {
    "depth": 1,
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_heads": 2,
    "patch_size": 4,
    "num_position_embeddings": 16,
    "out_hidden_size": TEXT_DIMS["hidden_size"],
}

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
VISION_TOKENS = ("<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>")
THINK_TOKENS = ("<think>", "</think>")

# Ranked before every trained merge. Each pair joins two existing tokens (text form;
# a space becomes byte-level "Ġ"). The first five let a value's last character fuse
# with '"},' only when ', "criterion"' follows the state; the last three are what the
# same characters become when the state text ends the pre-token.
BOUNDARY_MERGES = (
    ("}", ","),
    ('"', "},"),
    (")", '"},'),
    (";", '"},'),
    ("}", '"},'),
    (" ", ":"),
    (" :", ")"),
    ('"', "}"),
)

CORPUS = (
    "Apply the supplied criterion to the supplied evidence.",
    "Choose exactly one listed option.",
    "Respond with only its uppercase letter, with no explanation or reasoning.",
    "The person said they are fine. The person said they are upset.",
    "Is the person upset? Does the message ask for help? Is the request urgent?",
    '{"evidence": {"person_said": "fine"}, "criterion": "Is the person upset?", '
    '"options": [{"letter": "A", "description": "Yes"}, {"letter": "B", "description": "No"}]}',
    '{"evidence": "the message", "criterion": "Which option fits the evidence?", '
    '"options": [{"letter": "A", "description": "first option"}, '
    '{"letter": "B", "description": "second option"}, '
    '{"letter": "C", "description": "third option"}, '
    '{"letter": "D", "description": "none of the options"}]}',
    "system\nuser\nassistant\n\n",
)
TRAINED_VOCAB_SIZE = 448

# Qwen3 style: with enable_thinking=False the generation prompt closes an empty think block.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}"
    "{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined and enable_thinking is false %}"
    "{{- '<think>\\n\\n</think>\\n\\n' }}"
    "{%- endif %}"
    "{%- endif %}"
)

SNAPSHOT_FILES = (
    "chat_template.jinja",
    "config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)


def _byte_level(text: str) -> str:
    """Spell text in the byte-level alphabet the BPE vocabulary is written in."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    alphabet = bytes_to_unicode()
    return "".join(alphabet[byte] for byte in text.encode())


def _trained_merges() -> list[tuple[str, str]]:
    """Train BPE merges on CORPUS with production's normaliser and pre-tokeniser."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers
    from transformers import Qwen3_5Tokenizer

    pipeline = Qwen3_5Tokenizer().backend_tokenizer
    tokenizer = Tokenizer(models.BPE())
    tokenizer.normalizer = pipeline.normalizer
    tokenizer.pre_tokenizer = pipeline.pre_tokenizer
    trainer = trainers.BpeTrainer(
        vocab_size=TRAINED_VOCAB_SIZE,
        min_frequency=2,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(CORPUS, trainer)
    return [tuple(pair) for pair in json.loads(tokenizer.to_str())["model"]["merges"]]


def _vocab_and_merges() -> tuple[dict[str, int], list[tuple[str, str]]]:
    """Bytes in byte order, then one token per merge (boundary merges rank first)."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    vocab = {char: byte for byte, char in bytes_to_unicode().items()}
    boundary = [(_byte_level(left), _byte_level(right)) for left, right in BOUNDARY_MERGES]
    merges = boundary + [pair for pair in _trained_merges() if pair not in boundary]
    for left, right in merges:
        if left not in vocab or right not in vocab:
            raise ValueError(f"Merge {left!r} + {right!r} joins a token the vocabulary lacks")
        vocab.setdefault(left + right, len(vocab))
    return dict(sorted(vocab.items(), key=lambda item: item[1])), merges


def build_tokenizer() -> PreTrainedTokenizerBase:
    """The Qwen3.5-class tokenizer with Qwen's special tokens and chat template."""
    from tokenizers import AddedToken
    from transformers import Qwen3_5Tokenizer

    vocab, merges = _vocab_and_merges()
    for token in (ENDOFTEXT, IM_START, IM_END, *VISION_TOKENS, *THINK_TOKENS):
        vocab[token] = len(vocab)
    tokenizer = Qwen3_5Tokenizer(
        vocab=vocab,
        merges=merges,
        unk_token=None,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        model_max_length=TEXT_DIMS["max_position_embeddings"],
    )
    tokenizer.add_special_tokens({"additional_special_tokens": [IM_START, IM_END, *VISION_TOKENS]})
    # As in Qwen3: the think markers are single tokens but not special.
    tokenizer.add_tokens(
        [AddedToken(token, special=False, normalized=False) for token in THINK_TOKENS]
    )
    tokenizer.chat_template = CHAT_TEMPLATE
    if len(tokenizer) > VOCAB_SIZE:
        raise ValueError(
            f"Tokenizer has {len(tokenizer)} tokens, more than VOCAB_SIZE {VOCAB_SIZE}"
        )
    return tokenizer


def build_config(tokenizer: PreTrainedTokenizerBase) -> Qwen3_5Config:
    """Production's composite config shape at tiny size, wired to this tokenizer's ids."""
    from transformers import Qwen3_5Config

    ids = tokenizer.convert_tokens_to_ids
    text = {
        **TEXT_DIMS,
        "vocab_size": VOCAB_SIZE,
        "initializer_range": INIT_STD,
        "eos_token_id": ids(IM_END),
        "pad_token_id": ids(ENDOFTEXT),
        "dtype": "float32",
    }
    vision_start, vision_end, image_pad, video_pad = (ids(token) for token in VISION_TOKENS)
    return Qwen3_5Config(
        text_config=text,
        vision_config=VISION_DIMS,
        image_token_id=image_pad,
        video_token_id=video_pad,
        vision_start_token_id=vision_start,
        vision_end_token_id=vision_end,
        tie_word_embeddings=False,
        architectures=["Qwen3_5ForCausalLM"],
    )


def build_model(config: Qwen3_5Config) -> Qwen3_5ForCausalLM:
    """Seeded random weights at INIT_STD (the config's initializer_range)."""
    import torch
    from transformers import Qwen3_5ForCausalLM

    torch.manual_seed(SEED)
    return Qwen3_5ForCausalLM(config.get_text_config()).float().eval()


def _weights(model: Qwen3_5ForCausalLM) -> bytes:
    """safetensors bytes under production's key names (the text tower in model.language_model)."""
    from safetensors.torch import save

    def production_key(name: str) -> str:
        return (
            "model.language_model." + name.removeprefix("model.")
            if name.startswith("model.")
            else name
        )

    tensors = {
        production_key(name): tensor.contiguous() for name, tensor in model.state_dict().items()
    }
    blob: bytes = save(tensors, metadata={"format": "pt"})
    return blob


def render_files() -> dict[str, bytes]:
    """Every snapshot file's bytes, built from scratch; identical on every call."""
    tokenizer = build_tokenizer()
    config = build_config(tokenizer)
    model = build_model(config)
    with tempfile.TemporaryDirectory() as scratch:
        tokenizer.save_pretrained(scratch)
        config.save_pretrained(scratch)
        files = {path.name: path.read_bytes() for path in Path(scratch).iterdir()}
    files["model.safetensors"] = _weights(model)
    if sorted(files) != list(SNAPSHOT_FILES):
        raise RuntimeError(
            f"Unexpected snapshot files {sorted(files)}; expected {list(SNAPSHOT_FILES)}"
        )
    return files


def build(out: Path = DEFAULT_OUT) -> dict[str, str]:
    """Write the snapshot under out (unless an identical one is there) and return its settings."""
    return snapshot.publish(Path(out), REPO_ID, render_files(), label="tiny-model")


def main(argv: list[str] | None = None) -> int:
    """`tiny-model [--out DIR]`: build, then print the settings as KEY=VALUE lines."""
    parser = argparse.ArgumentParser(prog="tiny-model", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=DEFAULT_OUT,
        metavar="DIR",
        help=f"HF_HOME to build into (default {DEFAULT_OUT})",
    )
    args = parser.parse_args(argv)
    for key, value in build(args.out).items():
        print(f"{key}={value}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
