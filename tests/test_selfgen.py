"""The target's own generations as training data (specviz.training.selfgen): exact answers, the right
states at every position, a bank that never holds the benchmark's prompts, and a run that resumes."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest
import torch

from specviz import files, generate
from specviz.cli import main as cli_main
from specviz.config import Warp
from specviz.errors import InputError
from specviz.prompts import PROMPTS, SERVING_BANK
from specviz.training import prompt_bank, selfgen
from specviz.training.corpus import (Schedule, bank_fingerprint, bank_prefix, checkout_corpus, corpus_batches,
    read_corpus_batch, write_corpus_batch)

TEXTS = ["def add(a, b):", "Hello there", "x = [1, 2, 3]\nfor item in x:", "import os"]


def _ids(tiny):
    return [tiny.encode(t) for t in TEXTS]


def test_batched_answers_equal_each_prompts_own_ar_and_the_states_are_the_targets(tiny):
    layers = selfgen.feature_layers(tiny.target.config.num_hidden_layers)
    rows = selfgen.generate_rows(tiny, _ids(tiny), 12, layers)
    for text, ids, row in zip(TEXTS, _ids(tiny), rows):
        events = list(generate(tiny, text, method="ar", max_new_tokens=12))
        assert row["answer"] == events[-1].token_ids, text  # the single-sequence engine's own answer
        assert row["tokens"] == ids + row["answer"][:-1]
        # one plain forward over the whole sequence: every captured state and argmax is its own
        with torch.inference_mode():
            out = tiny.target(torch.tensor([row["tokens"]]), output_hidden_states=True)
        for j, layer in enumerate(layers):
            torch.testing.assert_close(torch.from_numpy(row["feats"][:, j].astype(np.float32)),
                                       out.hidden_states[layer][0].float(), atol=2e-2, rtol=1e-2)
        torch.testing.assert_close(torch.from_numpy(row["feats"][:, -1].astype(np.float32)),
                                   out.hidden_states[-1][0].float(), atol=2e-2, rtol=1e-2)
        assert row["labels"].tolist() == out.logits[0].argmax(-1).tolist()
        # greedy: every answer token is the target's argmax after the token before it
        assert row["labels"][len(ids) - 1:].tolist() == row["answer"][:len(row["labels"]) - len(ids) + 1]


def test_sampled_rows_follow_their_own_seed(tiny):
    layers = selfgen.feature_layers(tiny.target.config.num_hidden_layers)
    warp = Warp(temperature=1.0)
    a = selfgen.generate_rows(tiny, _ids(tiny), 10, layers, warp, seeds=[1, 2, 3, 4])
    b = selfgen.generate_rows(tiny, _ids(tiny)[::-1], 10, layers, warp, seeds=[4, 3, 2, 1])
    assert [r["answer"] for r in a] == [r["answer"] for r in b[::-1]]  # a row's draws are its own
    greedy = selfgen.generate_rows(tiny, _ids(tiny), 10, layers)
    assert [r["answer"] for r in a] != [r["answer"] for r in greedy]


def test_the_bank_is_varied_and_never_holds_the_benchmarks_prompts():
    bank = prompt_bank.prompt_bank()
    texts = [p.text for p in bank]
    assert len(bank) > 2000 and len(set(texts)) == len(texts)
    assert {p.kind for p in bank} == {"code", "rewrite", "chat", "general"}
    assert all(not p.chat for p in bank if p.kind == "code") and all(p.chat for p in bank if p.kind != "code")
    # the general chat came later: after every other prompt, so that older runs keep their prompts' places
    first = next(i for i, p in enumerate(bank) if p.kind == "general")
    assert first > 2000 and all(p.kind == "general" for p in bank[first:]) and len(bank) - first > 2500
    # and more of it later, after the first general prompts: each in its own place from then on
    more = {t.format(t=topic) for t in prompt_bank.GENERAL_TEMPLATES_MORE for topic in prompt_bank.GENERAL_TOPICS}
    more |= {t.format(t=topic) for t in prompt_bank.GENERAL_TEMPLATES + prompt_bank.GENERAL_TEMPLATES_MORE
             for topic in prompt_bank.GENERAL_TOPICS_MORE}
    later = next(i for i, p in enumerate(bank) if p.text in more)
    assert later - first == len(prompt_bank.GENERAL_TOPICS) * len(prompt_bank.GENERAL_TEMPLATES)
    assert all(p.text in more for p in bank[later:]) and len(bank) - later == len(more)
    assert bank_prefix(bank, bank_fingerprint(bank[:first])) == first
    assert not any(w in p.text.lower() for p in bank[first:] for w in ("sky", "blue", "light"))
    openings = {" ".join(p.text.split()[:3]).lower() for p in PROMPTS.values()}
    assert not any(" ".join(p.text.split()[:3]).lower() in openings for p in bank[first:])
    banned = {p.text for p in PROMPTS.values()} | set(SERVING_BANK)
    assert not banned & set(texts)
    assert any("is_prime" in t for t in banned) and not any("def is_prime(" in t for t in texts)
    held = sum(map(prompt_bank.held_out, bank)) / len(bank)
    assert 0.05 < held < 0.12
    assert [p.text for p in prompt_bank.prompt_bank()] == texts  # the same bank on every machine with this Python
    assert [p.text for p in prompt_bank.prompt_bank(seed=1)] != texts


def test_a_run_grows_resumes_and_survives_a_cut(tiny, tmp_path, monkeypatch):
    small = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS * 3]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: small)
    first = selfgen.selfgen(tiny, tmp_path, tokens=1, batch=2, max_new_tokens=6, progress=False)
    assert first.meta["batches"] == 1 and len(first.sequences) == 2
    kept = (first.tokens.copy(), first.feats.copy(), first.labels.copy())
    with open(tmp_path / "feats.f16", "ab") as fh:  # a batch cut short: half-written data
        fh.write(b"\x01" * 1000)
    grown = selfgen.selfgen(tiny, tmp_path, tokens=first.meta["tokens"] + 1, batch=2, max_new_tokens=6, progress=False)
    assert grown.meta["batches"] == 2 and (tmp_path / "feats.f16").stat().st_size == grown.feats.nbytes
    n = len(kept[0])
    assert np.array_equal(grown.tokens[:n], kept[0]) and np.array_equal(grown.feats[:n], kept[1])
    # the second batch is the bank's next prompts, their sequences where the first ended
    start, length, _ = grown.sequences[2]
    assert start == n and grown.tokens[start:start + len(tiny.encode(TEXTS[2]))].tolist() == tiny.encode(TEXTS[2])
    # greedy: only every SAMPLE_EVERY-th batch samples
    assert selfgen.SAMPLE_EVERY > 2 and [s["sampled"] for s in grown.meta["sequences"]] == [False] * 4
    meta = json.loads((tmp_path / "selfgen.json").read_text())
    assert sum(s["length"] for s in meta["sequences"]) == meta["tokens"] == len(grown.tokens)
    with pytest.raises(InputError, match="other settings"):
        selfgen.selfgen(tiny, tmp_path, tokens=10, batch=2, max_new_tokens=7, progress=False)
    # no batch given (as `train eagle3` calls it): the run goes on with its own, 2 rows a pass
    third = selfgen.selfgen(tiny, tmp_path, tokens=grown.meta["tokens"] + 1, max_new_tokens=6, progress=False)
    assert third.meta["batch"] == 2 and third.meta["batches"] == 3 and len(third.sequences) == 6


def test_a_run_longer_than_the_bank_samples_the_prompts_it_gives_again(tiny, tmp_path, monkeypatch):
    # three prompts, two a batch: batches 0-2 are greedy by the schedule (SAMPLE_EVERY > 3), so
    # only the second pass over the bank makes the repeats sampled, each row with its own seed
    bank = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS[:3]]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: bank)
    assert selfgen.SAMPLE_EVERY > 3
    tokens = 1
    for batches in (1, 2, 3):  # grown a batch at a time
        data = selfgen.selfgen(tiny, tmp_path, tokens=tokens, batch=2, max_new_tokens=8, progress=False)
        assert data.meta["batches"] == batches
        tokens = data.meta["tokens"] + 1
    seqs = data.meta["sequences"]
    assert [s["prompt"] for s in seqs] == [0, 1, 2, 0, 1, 2]
    assert [s["sampled"] for s in seqs] == [False, False, False, True, True, True]
    answers = [data.tokens[s["start"] + s["prompt_tokens"]:s["start"] + s["length"]].tolist() for s in seqs]
    assert answers[3:] != answers[:3]  # the same prompts, new answers: not the same data twice
    # each repeat is the target's own sampled answer from that row's seed, whatever shares its batch
    ids = [tiny.encode(t) for t in TEXTS[:3]]
    alone = selfgen.generate_rows(tiny, [ids[1]], 8, data.meta["layers"], selfgen.SAMPLE_WARP, seeds=[4])[0]
    assert alone["tokens"] == data.tokens[seqs[4]["start"]:seqs[4]["start"] + seqs[4]["length"]].tolist()


def test_a_run_that_would_not_fit_on_the_disk_is_refused_before_any_work(tiny, tmp_path, monkeypatch):
    small = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS * 3]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: small)
    first = selfgen.selfgen(tiny, tmp_path, tokens=1, batch=2, max_new_tokens=6, progress=False)
    kept = (tmp_path / "feats.f16").read_bytes()
    row = 4 + 4 + 2 * first.feats.shape[1] * first.feats.shape[2]
    usage = shutil.disk_usage(tmp_path)
    # room for 100 positions and the last batch's overshoot, exactly
    monkeypatch.setattr(files.shutil, "disk_usage", lambda path: usage._replace(free=(100 + 2 * 6) * row))
    with pytest.raises(files.DiskFullError,
                       match=r"for 101 more positions .* needs about 0.1 MB free .* Free some space.*about 100 more positions fit"):
        selfgen.selfgen(tiny, tmp_path, tokens=first.meta["tokens"] + 101, progress=False, max_new_tokens=6)
    assert (tmp_path / "feats.f16").read_bytes() == kept  # nothing generated, nothing lost
    assert json.loads((tmp_path / "selfgen.json").read_text())["batches"] == 1
    grown = selfgen.selfgen(tiny, tmp_path, tokens=first.meta["tokens"] + 100, max_new_tokens=6, progress=False)
    assert grown.meta["tokens"] >= first.meta["tokens"] + 100


def test_cli_says_what_is_wrong_in_one_line(capsys):
    assert cli_main(["selfgen", "--pair", "tiny", "--tokens", "0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "--tokens" in err[0]


def test_a_run_keeps_its_text_and_a_new_run_replays_it_instead_of_generating(tiny, tmp_path, monkeypatch):
    small = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS * 3]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: small)
    made = tmp_path / "made"
    data = None
    for _ in range(3):  # three batches, one run each
        data = selfgen.selfgen(tiny, made, tokens=(data.meta["tokens"] + 1) if data else 1, batch=2,
                               max_new_tokens=6, progress=False)
    corpus = made / "corpus"
    assert corpus_batches(corpus) == 3 and json.loads((corpus / "corpus.json").read_text())["batches"] == 3
    # the machine is gone, the text is kept: two batches of it (as a checkout keeps them)
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in ("corpus.json", "batch-00000.npz", "batch-00001.npz"):
        shutil.copy(corpus / name, kept / name)
    generated = []
    real = selfgen.generate_rows
    monkeypatch.setattr(selfgen, "generate_rows", lambda *a, **k: generated.append(a[1]) or real(*a, **k))
    again = selfgen.selfgen(tiny, tmp_path / "again", tokens=data.meta["tokens"], max_new_tokens=6,
                            progress=False, corpus=kept)
    assert again.meta["batch"] == 2  # the corpus's batch size, none given
    assert len(generated) == 1 and generated[0] == _ids(tiny)[:2]  # batches 0 and 1 replayed, batch 2 generated
    assert again.meta["sequences"] == data.meta["sequences"] and np.array_equal(again.tokens, data.tokens)
    # the states of one forward over each whole sequence: the generating passes' own, up to rounding
    np.testing.assert_allclose(again.feats.astype(np.float32), data.feats.astype(np.float32), atol=2e-2, rtol=1e-2)
    assert np.array_equal(again.labels, data.labels)
    # its own corpus is complete again, batch for batch the same text
    for b in range(3):
        assert read_corpus_batch(tmp_path / "again" / "corpus", b) == read_corpus_batch(corpus, b)
    # a run made before runs kept their text writes it from its data
    shutil.rmtree(corpus)
    selfgen.selfgen(tiny, made, tokens=1, max_new_tokens=6, progress=False)
    for b in range(3):
        assert read_corpus_batch(corpus, b) == read_corpus_batch(tmp_path / "again" / "corpus", b)


def test_a_corpus_of_a_bank_that_has_grown_at_its_end_goes_on_with_the_new_prompts(tiny, tmp_path, monkeypatch):
    """A corpus made before prompts were added at the bank's end is this bank's prefix: replayed, then
    continued with the added prompts (greedy, not the repeats of a bank gone round); with its size
    stated or not (corpus.json before bank_prompts existed)."""
    old = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS[:2]]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: old)
    made = selfgen.selfgen(tiny, tmp_path / "made", tokens=1, batch=2, max_new_tokens=6, progress=False, corpus=None)
    corpus = tmp_path / "made" / "corpus"
    meta = json.loads((corpus / "corpus.json").read_text())
    assert meta["bank_prompts"] == 2 and meta["bank"] == bank_fingerprint(old)
    grown = old + [prompt_bank.BankPrompt("general", t, True) for t in ("Tell me about tea.", "Why do cats purr?")]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: grown)
    for folder, stated in (("again", True), ("legacy", False)):
        if not stated:
            (corpus / "corpus.json").write_text(json.dumps({k: v for k, v in meta.items() if k != "bank_prompts"}))
        data = selfgen.selfgen(tiny, tmp_path / folder, tokens=made.meta["tokens"] + 1, max_new_tokens=6,
                               progress=False, corpus=corpus)
        seqs = data.meta["sequences"]
        assert [s["prompt"] for s in seqs] == [0, 1, 2, 3] and [s["kind"] for s in seqs[2:]] == ["general"] * 2
        assert not any(s["sampled"] for s in seqs)
        assert np.array_equal(data.tokens[:made.meta["tokens"]], made.tokens)
        ids = tiny.encode("Why do cats purr?", chat=True)
        assert data.tokens[seqs[3]["start"]:seqs[3]["start"] + len(ids)].tolist() == ids
    # the bank changed within (another Python's standard library): not this bank's prefix
    assert bank_prefix(grown[::-1], meta["bank"]) is None
    assert bank_prefix(grown, meta["bank"], 3) is None and bank_prefix(grown, meta["bank"], 2) == 2
    # a corpus names only the prompts its batches answered: a bank changed past them still continues it
    first = selfgen.selfgen(tiny, tmp_path / "part", tokens=1, batch=2, max_new_tokens=6, progress=False, corpus=None)
    part = json.loads((tmp_path / "part" / "corpus" / "corpus.json").read_text())
    assert part["bank_prompts"] == 2 and part["bank"] == bank_fingerprint(grown[:2])
    edited = grown[:3] + [prompt_bank.BankPrompt("general", "Why do dogs wag their tails?", True)]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: edited)
    data = selfgen.selfgen(tiny, tmp_path / "edited", tokens=first.meta["tokens"] + 1, max_new_tokens=6,
                           progress=False, corpus=tmp_path / "part" / "corpus")
    assert [s["prompt"] for s in data.meta["sequences"]] == [0, 1, 2, 3]


def test_the_schedule_gives_the_bank_in_order_then_rounds_and_takes_grown_banks_where_they_stopped():
    for n in (1, 2, 3, 7):  # a bank that never changes: prompt i % n, given again from the n-th on
        schedule = Schedule()
        assert [schedule.next(n) for i in range(5 * n + 2)] == [(i % n, i >= n) for i in range(5 * n + 2)]
        again = Schedule(i % n for i in range(5 * n + 2))  # rebuilt from a run's record
        assert (again.first, again.at) == (schedule.first, schedule.at)

    def run(sizes):  # the prompts a run gives while its bank has each size in turn, for that many answers
        schedule = Schedule()
        return [schedule.next(size) for size, count in sizes for _ in range(count)]

    # grown after one answer given again, then again; and after two whole rounds
    assert [p for p, _ in run([(3, 4), (5, 3), (7, 6)])] == [0, 1, 2, 0, 3, 4, 1, 5, 6, 2, 3, 4, 5]
    assert [p for p, _ in run([(3, 7), (5, 5)])] == [0, 1, 2, 0, 1, 2, 0, 3, 4, 1, 2, 3]
    given = run([(3, 4), (5, 3), (7, 6)])
    schedule = Schedule()
    assert [schedule.take(p) for p, _ in given] == [again for _, again in given]
    # a prompt out of that order is not taken: a skip, a repeat out of the round's order, a new prompt
    # that skips one after the bank went round
    for prompts in ([0, 2], [1], [0, 1, 1], [0, 1, 0, 3]):
        schedule = Schedule()
        assert None in [schedule.take(p) for p in prompts]
        with pytest.raises(InputError, match="another bank; give another --out"):
            Schedule(prompts)


def test_a_bank_grown_after_the_run_went_round_it_has_its_new_prompts_answered_next(tiny, tmp_path, monkeypatch):
    """A run that went round its bank (the last prompt's batch gave the first one again, sampled)
    and a bank grown at its end since: the corpus is replayed as it was made, its repeat keeps its
    place, the new prompts are answered next (first answers: greedy but in a sampling batch), and
    the round goes on after them where it stopped."""
    old = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS[:3]]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: old)
    made = selfgen.selfgen(tiny, tmp_path / "made", tokens=1, batch=2, max_new_tokens=6, progress=False, corpus=None)
    made = selfgen.selfgen(tiny, tmp_path / "made", tokens=made.meta["tokens"] + 1, max_new_tokens=6,
                           progress=False, corpus=None)
    assert [(s["prompt"], s["sampled"]) for s in made.meta["sequences"]] == [(0, False), (1, False), (2, False),
                                                                            (0, True)]
    corpus = tmp_path / "made" / "corpus"
    assert json.loads((corpus / "corpus.json").read_text())["bank_prompts"] == 3
    grown = old + [prompt_bank.BankPrompt("general", t, True) for t in ("Tell me about tea.", "Why do cats purr?")]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: grown)
    data = selfgen.selfgen(tiny, tmp_path / "grown", tokens=made.meta["tokens"] + 1, max_new_tokens=6,
                           progress=False, corpus=corpus)
    data = selfgen.selfgen(tiny, tmp_path / "grown", tokens=data.meta["tokens"] + 1, max_new_tokens=6,
                           progress=False, corpus=corpus)
    seqs = data.meta["sequences"]
    # batch 3 samples (every SAMPLE_EVERY-th); the round goes on at prompt 1
    assert selfgen.SAMPLE_EVERY == 4
    assert [(s["prompt"], s["sampled"]) for s in seqs] == [(0, False), (1, False), (2, False), (0, True),
                                                          (3, False), (4, False), (1, True), (2, True)]
    assert np.array_equal(data.tokens[:made.meta["tokens"]], made.tokens)
    ids = tiny.encode("Why do cats purr?", chat=True)
    assert data.tokens[seqs[5]["start"]:seqs[5]["start"] + len(ids)].tolist() == ids
    own = json.loads((tmp_path / "grown" / "corpus" / "corpus.json").read_text())
    assert own["bank_prompts"] == 5 and own["bank"] == bank_fingerprint(grown)
    # the same bank, never grown, goes round as before: prompt i of the run is i modulo the bank
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: old)
    again = selfgen.selfgen(tiny, tmp_path / "made", tokens=data.meta["tokens"], max_new_tokens=6, progress=False,
                            corpus=None)
    assert [s["prompt"] for s in again.meta["sequences"]] == [i % 3 for i in range(len(again.meta["sequences"]))]
    # a batch whose prompts are not the run's next ones, or not sampled as the rule says, is refused
    entries, tokens = read_corpus_batch(corpus, 1)
    # (prompt 0 given again in batch 0 would be the rule's for a bank of one prompt then: batch 1's
    # new prompt 2 is what cannot follow it)
    cases = ((1, {1: {"prompt": 1}}, 1), (0, {1: {"prompt": 0, "sampled": True}}, 1), (1, {1: {"sampled": False}}, 1))
    for b, change, refused in cases:
        stored = read_corpus_batch(corpus, b)
        changed = [{**e, **change.get(i, {})} for i, e in enumerate(stored[0])]
        write_corpus_batch(corpus, b, changed, stored[1])
        with pytest.raises(InputError,
                           match=rf"batch-0000{refused}.npz does not hold batch {refused} of this run .* --corpus none"):
            selfgen.selfgen(tiny, tmp_path / f"bad{b}", tokens=made.meta["tokens"], max_new_tokens=6, progress=False,
                            corpus=corpus)
        write_corpus_batch(corpus, b, *stored)
    # a run of a bank that has lost prompts since (another Python's) is refused, not misread
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: old[:2])
    with pytest.raises(InputError, match="another prompt bank; give another --out"):
        selfgen.selfgen(tiny, tmp_path / "grown", tokens=data.meta["tokens"] + 1, max_new_tokens=6, progress=False)


def test_a_corpus_of_other_settings_or_cut_short_is_refused_saying_what_to_do(tiny, tmp_path, monkeypatch):
    small = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS * 3]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: small)
    selfgen.selfgen(tiny, tmp_path / "made", tokens=1, batch=2, max_new_tokens=6, progress=False)
    corpus = tmp_path / "made" / "corpus"
    with pytest.raises(InputError, match=r"other settings \(max_new_tokens=6\).*--corpus none"):
        selfgen.selfgen(tiny, tmp_path / "other", tokens=1, batch=2, max_new_tokens=7, progress=False, corpus=corpus)
    batch = corpus / "batch-00000.npz"
    batch.write_bytes(batch.read_bytes()[:100])
    with pytest.raises(InputError, match="batch-00000.npz is not a corpus batch .* delete it"):
        selfgen.selfgen(tiny, tmp_path / "third", tokens=1, batch=2, max_new_tokens=6, progress=False, corpus=corpus)
    assert cli_main(["selfgen", "--pair", "tiny", "--tokens", "5", "--corpus", str(tmp_path / "nothing")]) == 2


def test_the_checkout_corpus_is_left_aside_when_its_settings_differ_and_a_foreign_bank_is_not_continued(
        tiny, tmp_path, monkeypatch, capsys):
    small = [prompt_bank.BankPrompt("code", t, False) for t in TEXTS * 3]
    monkeypatch.setattr(selfgen, "prompt_bank", lambda seed=0: small)
    selfgen.selfgen(tiny, tmp_path / "made", tokens=1, batch=2, max_new_tokens=6, progress=False)
    corpus = tmp_path / "made" / "corpus"
    # the default: the checkout's corpus, never asked for, made with other settings: a note, then as before
    monkeypatch.setattr(selfgen, "checkout_corpus", lambda name: corpus)
    other = selfgen.selfgen(tiny, tmp_path / "other", tokens=1, batch=2, max_new_tokens=7, progress=False)
    assert other.meta["batches"] == 1 and "not replaying the corpus" in capsys.readouterr().err
    # a run's own corpus/ left from other settings (its data deleted) is not taken for this run's text
    shutil.rmtree(tmp_path / "made" / "corpus")
    shutil.copytree(tmp_path / "other" / "corpus", tmp_path / "made" / "corpus")
    for name in ("selfgen.json", "tokens.i32", "labels.i32", "feats.f16"):
        (tmp_path / "made" / name).unlink()
    with pytest.raises(InputError, match=r"holds text generated with other settings \(max_new_tokens=7\)"):
        selfgen.selfgen(tiny, tmp_path / "made", tokens=1, batch=2, max_new_tokens=6, progress=False, corpus=None)
    # a corpus from another bank: its batches are replayed, none is generated past them
    selfgen.selfgen(tiny, tmp_path / "third", tokens=1, batch=2, max_new_tokens=7, progress=False, corpus=None)
    foreign = tmp_path / "third" / "corpus"
    meta = json.loads((foreign / "corpus.json").read_text())
    (foreign / "corpus.json").write_text(json.dumps({**meta, "bank": "00000000"}))
    replayed = selfgen.selfgen(tiny, tmp_path / "fourth", tokens=1, batch=2, max_new_tokens=7, progress=False,
                               corpus=foreign)
    assert replayed.meta["batches"] == 1
    with pytest.raises(InputError, match="another prompt bank .* its 1 batches are replayed"):
        selfgen.selfgen(tiny, tmp_path / "fourth", tokens=replayed.meta["tokens"] + 1, max_new_tokens=7,
                        progress=False, corpus=foreign)
    (foreign / "corpus.json").write_text("{not json")
    with pytest.raises(InputError, match="corpus.json cannot be read"):
        selfgen.selfgen(tiny, tmp_path / "fifth", tokens=1, batch=2, max_new_tokens=7, progress=False, corpus=foreign)


def test_the_checkout_keeps_its_selfgen_text_whole_and_made_as_the_shipped_heads_command_makes_it():
    corpus = checkout_corpus("qwen-coder")
    assert corpus is not None, "data/selfgen/qwen-coder is missing from the checkout"
    meta = json.loads((corpus / "corpus.json").read_text())
    manifest = json.loads((files.Path(selfgen.__file__).parents[1] / "data" / "heads" / "qwen-coder" / "manifest.json").read_text())
    shipped = manifest["eagle3"]
    assert f"--batch {meta['batch']}" in shipped["command"] and meta["layers"] == shipped["config"]["layers"]
    assert meta["batches"] == corpus_batches(corpus) > 0  # nothing missing before its last batch
    if sys.version_info[:2] == (3, 11):  # the Python whose standard library made its bank: still its prefix
        assert bank_prefix(prompt_bank.prompt_bank(), meta["bank"], meta["bank_prompts"]) == meta["bank_prompts"]
    held, schedule = [], Schedule()
    for b in range(meta["batches"]):
        entries, tokens = read_corpus_batch(corpus, b)
        assert len(entries) == meta["batch"] and [len(t) for t in tokens] == [e["length"] for e in entries]
        assert all(e["prompt_tokens"] + e["answer_tokens"] - 1 == e["length"] for e in entries)
        for e in entries:  # the bank in order, then round it again
            again = schedule.take(e["prompt"])
            assert again is not None, f"batch {b}: prompt {e['prompt']} is not the run's next"
            # greedy but every SAMPLE_EVERY-th batch, and every prompt the bank gives again
            assert e["sampled"] == (b % selfgen.SAMPLE_EVERY == selfgen.SAMPLE_EVERY - 1 or again)
        held += [e["held_out"] for e in entries]
    assert schedule.first == meta["bank_prompts"]  # the prompts it answered are the ones it names
    assert 0.05 < sum(held) / len(held) < 0.12


def test_an_interrupt_is_one_line_and_says_the_run_resumes(monkeypatch, capsys):
    """Ctrl-C in a long selfgen run: one line on stderr, status 130, no traceback."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(selfgen, "selfgen", interrupted)
    assert selfgen.main(["--pair", "tiny", "--tokens", "5", "--corpus", "none"]) == 130
    err = capsys.readouterr().err
    assert err.strip() == "error: interrupted; the finished batches are kept and the same command resumes after them"
