"""EAGLE-3 (fused target layers, training-time test) and P-EAGLE (parallel drafting), trained in
seconds on the tiny pair's own generations: lossless, drafting at inference exactly what they
were trained to draft, and parallel drafting costing one forward for any k."""

import copy

import numpy as np
import pytest
import torch
from test_distribution import RUNS, ResampleFromTarget, _first_tokens, _p_value, _target_joint, toy  # noqa: F401

from specviz import generate
from specviz.analysis import metrics
from specviz.config import Warp
from specviz.errors import InputError
from specviz.runtime.head_nets import Eagle3Net, HeadSet, attach_heads, head_fingerprint, load_heads, save_heads
from specviz.runtime.tiny_pair import build_tiny_pair
from specviz.training import train
from specviz.training.data import Features, selfgen_features
from specviz.training.selfgen import SelfData, feature_layers, selfgen
from specviz.training.trainer import (TrainConfig, _Data, _held_out_trainer, _Trainer, draft_vocabulary, layer_probes,
    train_heads)

TINY_NET = dict(width=32, attn_heads=4, mlp=64)
METHODS = [dict(method="eagle3", k=5), dict(method="eagle3-tree", tree_budget=12, tree_depth=4, tree_width=3),
           dict(method="eagle3-tree", tree_budget="auto"), dict(method="peagle", k=5)]


@pytest.fixture(scope="module")
def tiny3(tmp_path_factory):
    pair = build_tiny_pair()
    work = tmp_path_factory.mktemp("eagle3-work")
    features = selfgen_features(selfgen(pair, work / "selfgen", 6000, batch=8, max_new_tokens=48,
                                              progress=False))
    out = {}
    for kind in ("eagle3", "peagle"):
        cfg = TrainConfig(kind, epochs=6, batch=256, window=64, eval_every=10_000, draft_vocab=60, lr=3e-3,
                                noise=0.0, unroll=4, **TINY_NET)
        out[kind] = train_heads(pair, features, cfg, work, progress=False)
        attach_heads(pair, out[kind][0])
    return pair, features, out


@pytest.mark.parametrize("kw", METHODS, ids=[kw["method"] + ("-auto" if kw.get("tree_budget") == "auto" else "") for kw in METHODS])
@pytest.mark.parametrize("prompt", ["def fibonacci(n):", "Hello, world! "])
def test_greedy_equals_ar(tiny3, kw, prompt):
    pair, _, _ = tiny3
    ar = list(generate(pair, prompt, method="ar", max_new_tokens=40))[-1]
    events = list(generate(pair, prompt, max_new_tokens=40, **kw))
    assert events[-1].token_ids == ar.token_ids
    assert sum(e.kind in ("draft_proposed", "tree_built") for e in events) > 3


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_batched_rows_equal_their_own_ar(tiny3, method):
    pair, _, _ = tiny3
    prompts = ["def fibonacci(n):", "Hello, world! ", "import os\n", "x = 1"]
    events = list(generate(pair, prompts, method=method, k=4, max_new_tokens=24))
    rows = {e.row: e.token_ids for e in events if e.kind == "run_finished"}
    for b, prompt in enumerate(prompts):
        assert rows[b] == list(generate(pair, prompt, method="ar", max_new_tokens=24))[-1].token_ids, prompt


def test_they_learn_and_read_three_layers(tiny3):
    pair, features, trained = tiny3
    layers = list(feature_layers(pair.target.config.num_hidden_layers))
    assert features.layers == layers and features.feats.shape[1:] == (4, pair.target.config.hidden_size)
    for kind, (heads, report) in trained.items():
        assert heads.feature_layers == tuple(layers) and heads.config["slots"] == 3
        before, after = report["curve"][0], report["curve"][-1]
        assert after["loss"][0] < before["loss"][0] - 0.1, kind
        assert after["accuracy"][0] > 2 * before["accuracy"][0], (kind, before["accuracy"], after["accuracy"])
    # drafts really are accepted on the tiny target, and parallel drafting costs one forward a step
    for kw in METHODS:
        events = list(generate(pair, "def fibonacci(n):", max_new_tokens=40, **kw))
        assert metrics.fold(events).accepted >= 1, kw
        steps = [e for e in events if e.kind == "step_finished" and e.drafted]
        if kw["method"] != "eagle3-tree":  # a chain of k: one forward in all (P-EAGLE), one per depth (EAGLE-3)
            assert steps and all(e.draft_forwards == (1 if kw["method"] == "peagle" else e.drafted) for e in steps)


def _unrolled(net, f, tokens, embed, steps):
    """The training-time test's outputs for one sequence (specviz.training.train's own unroll)."""
    trainer = _Trainer.__new__(_Trainer)
    trainer.embeddings = lambda t: embed(t).float()
    trainer.data = type("D", (), {"rows": staticmethod(lambda w: (f, tokens, None)), "rms": 1.0})()
    return trainer.eagle_unroll(net, np.arange(len(tokens)), steps)


@pytest.mark.parametrize("parallel", [False, True], ids=["eagle3", "peagle"])
def test_drafting_at_inference_is_what_training_trained(parallel):
    """For every base pair b and depth s, the output the training-time test trains (specviz.training.train)
    equals what drafting computes at inference: EAGLE-3 feeding its own output and the next token
    one depth at a time, P-EAGLE feeding placeholders in one forward. A mask that let a depth see
    what drafting cannot (or hid what it can) fails here."""
    torch.manual_seed(0)
    d, n, steps = 16, 9, 4
    net = Eagle3Net(d, width=16, heads=2, mlp=32, parallel=parallel).eval()
    embed = torch.nn.Embedding(50, d)
    f = torch.randn(n + 1, 4, d)
    tokens = torch.randint(0, 50, (n + 1,))
    with torch.no_grad():
        outs = _unrolled(net, f, tokens, embed, steps)
        e = embed(tokens[1:]).float()
        fused = net.features(f)
        positions = torch.arange(1, n + 1)
        for b in range(n - steps + 1):
            out, cache = net(fused[:b + 1], e[:b + 1], positions[:b + 1])  # the real pairs up to b
            assert torch.allclose(out[-1], outs[0][b], atol=1e-5)
            if parallel:
                mask_f, mask_e = net.placeholders(range(2, steps + 1), fused[b])  # anchored at pair b
                assert not torch.equal(mask_e[0], mask_e[1])  # each depth its own embedding
                with pytest.raises(ValueError, match="depths must be 2"):
                    net.placeholders([1], fused[b])
                more, _ = net(mask_f, mask_e, positions[b + 1:b + steps], cache)
                for s in range(2, steps + 1):
                    assert torch.allclose(more[s - 2], outs[s - 1][b + s - 1], atol=1e-5), (b, s)
            else:
                prev = out[-1:]
                for s in range(2, steps + 1):  # depth s: the last output, with the token x_{b+s}
                    prev, cache = net(prev, e[b + s - 1:b + s], positions[b + s - 1:b + s], cache)
                    assert torch.allclose(prev[0], outs[s - 1][b + s - 1], atol=1e-5), (b, s)


def test_saved_and_loaded_they_draft_the_same(tiny3, tmp_path):
    pair, _, trained = tiny3
    for kind in ("eagle3", "peagle"):
        heads = trained[kind][0]
        save_heads(heads, tmp_path, head_fingerprint(pair.target))
        loaded = load_heads(kind, pair, tmp_path)
        assert loaded.feature_layers == heads.feature_layers and loaded.net.parallel == (kind == "peagle")
        rounded = copy.deepcopy(heads)  # the file holds bfloat16 weights
        rounded.net.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in heads.net.state_dict().items()})
        drafts = []
        for h in (rounded, loaded):
            attach_heads(pair, h)
            events = generate(pair, "def f(x):", method=kind, k=4, max_new_tokens=16)
            drafts.append([(e.token_id, round(e.q, 5)) for e in events if e.kind == "draft_proposed"])
        assert drafts[0] and drafts[0] == drafts[1]
        attach_heads(pair, heads)


# ---------------------------------------------------------------------------------------------
# sampling on exact toy models: the toy target's "hidden state" is its logits row, fed unfused

def _toy_eagle3(pair, seed=0):
    v = pair.target.vocab_size
    torch.manual_seed(seed)
    for kind in ("eagle3", "peagle"):
        net = Eagle3Net(v, width=8, heads=2, mlp=8, parallel=kind == "peagle")
        attach_heads(pair, HeadSet(kind, net, None, {"hidden": v, "vocab_size": v, "width": 8, "heads": 2, "mlp": 8,
                                                     "slots": 3, "parallel": kind == "peagle"}))


SAMPLED = [dict(method="eagle3", k=2), dict(method="eagle3-tree", tree_budget=6, tree_depth=2, tree_width=2),
           dict(method="peagle", k=3)]


@pytest.mark.parametrize("kw", SAMPLED, ids=[kw["method"] for kw in SAMPLED])
def test_sampling_follows_the_target(toy, kw):  # noqa: F811
    _toy_eagle3(toy)
    warp = Warp(1.0)
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, **kw)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) > 1e-4
    assert sum(e.kind == "token_rejected" for events in runs for e in events) > RUNS // 20


@pytest.mark.parametrize("method", ["eagle3", "peagle"])
def test_a_broken_rule_fails_with_them_too(toy, method):  # noqa: F811
    _toy_eagle3(toy)
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, verifier=ResampleFromTarget(), method=method, k=2)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4


def test_the_apps_menu_says_which_methods_lack_trained_heads(tiny3, tmp_path, monkeypatch):
    pytest.importorskip("gradio")
    from specviz import files, methods
    from webapp.settings import method_choices

    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    heads = {"medusa", "medusa-tree", "eagle", "eagle-tree", "eagle3", "eagle3-tree", "peagle", "dflash", "dflash-tree"}

    def lacking(pair_name):
        choices = method_choices(pair_name)
        assert [value for _, value in choices] == list(methods.names())  # every method stays runnable
        return {value for label, value in choices if "no trained heads" in label}

    assert lacking("tiny") == heads
    pair, _, trained = tiny3
    save_heads(trained["eagle3"][0], files.train_dir("tiny") / "heads", head_fingerprint(pair.target))
    assert lacking("tiny") == heads - {"eagle3", "eagle3-tree"}
    assert not {"medusa", "medusa-tree", "eagle", "eagle-tree"} & lacking("qwen-coder")  # shipped


def test_layer_probes_read_the_last_state_as_the_target_does(tiny3):
    """Untrained (0 steps), the last state's offset-1 probe is the target's own output head on
    an RMS-rescaled state: its held-out top-1 is exactly the share of the target's choices inside
    the draft vocabulary (a probe read one token off, or another layer, would not be). Trained,
    the earlier layers' probes learn what they could not read untrained."""
    pair, features, _ = tiny3
    untrained = layer_probes(pair, features, offsets=3, steps=0, draft_vocab=60, progress=False)
    assert untrained["layers"] == [*features.layers, "last"] and untrained["offsets"] == [1, 2, 3]
    data = _Data(features, torch.device("cpu"), torch.float32, slots=-1)
    held = data.positions(data.held_segments, 3)
    ids = draft_vocabulary(features, 60, pair.target.config.vocab_size, pair.eos_token_ids)
    ceiling = float(np.isin(features.labels[held], ids.numpy()).mean())
    assert untrained["held_out_positions"] == len(held) > 30
    assert untrained["accuracy"][-1][0] == pytest.approx(ceiling, abs=1e-4)
    assert untrained["accuracy"][-1][1] < 0.5 * ceiling  # the same head one token further: mostly wrong
    trained = layer_probes(pair, features, offsets=3, steps=30, batch=256, draft_vocab=60, progress=False)
    assert all(0 <= a <= 1 for row in trained["accuracy"] for a in row)
    for layer in range(len(trained["layers"]) - 1):  # every earlier layer's probe learns something
        assert trained["loss"][layer][0] < untrained["loss"][layer][0] - 0.1, (layer, trained["loss"], untrained["loss"])
    with pytest.raises(InputError, match="selfgen"):
        layer_probes(pair, Features(features.folder, {"done": 0, "segments": []}, features.tokens,
                                                features.feats[:, -1], features.labels))


def test_heads_train_on_the_first_tokens_asked_for_when_the_run_went_on(tiny3):
    """`train eagle3 --tokens N` on a selfgen run that already holds more: the heads see the
    sequences inside the first N positions only, whole, and the same ones every time."""
    _, features, _ = tiny3
    data = SelfData(features.folder)
    whole = selfgen_features(data)
    assert whole.meta["tokens"] == data.meta["tokens"] == len(whole.tokens)
    cut = data.sequences[len(data.sequences) // 2][0] + 3  # three positions into a sequence
    part = selfgen_features(data, cut)
    kept = [s for s in data.sequences if s[0] + s[1] <= cut]
    assert [tuple(s) for s in part.segments] == [tuple(s) for s in kept] and len(kept) < len(data.sequences)
    assert part.meta["tokens"] == len(part.tokens) == len(part.feats) == kept[-1][0] + kept[-1][1] < cut
    assert np.array_equal(part.feats[-1], whole.feats[part.meta["tokens"] - 1])


def test_only_answers_are_trained_on_and_scored(tiny3):
    """selfgen's prompts are context, not targets: the positions scored are those whose label is an
    answer token (from the last prompt token on), every held-out draft starts at one, and a layer's
    held-out accuracy counts exactly those drafts."""
    pair, features, trained = tiny3
    data = SelfData(features.folder)
    scored = features.scored
    for seq, (start, length, _) in zip(data.meta["sequences"], features.segments):
        first = start + seq["prompt_tokens"] - 1  # its argmax is the answer's first token
        assert not scored[start:first].any() and scored[first:start + length].all()
    assert 0.05 < scored.mean() < 0.95  # (the tiny target answers briefly: 48 tokens at most)
    heads, report = trained["eagle3"]
    depths = report["config"]["depths"]  # the report's evaluation drafts this deep
    trainer, net = _held_out_trainer(pair, heads, features, depths)
    every = _Trainer.eagle_depths  # the same windows, unmasked: more rows
    with torch.no_grad():
        trainer.data.scored = None
        all_rows, _ = every(trainer, net, trainer.held_windows, depths)
        trainer.data.scored = scored
        answer_rows, _ = every(trainer, net, trainer.held_windows, depths)
    bases = sum(int(scored[w[1:len(w) - depths + 1]].sum()) for w in trainer.held_windows)
    assert len(answer_rows) == bases < len(all_rows)
    assert report["held_out"]["positions"] == bases
    assert Features(features.folder, {"done": 0, "segments": []}, features.tokens, features.feats,
                          features.labels).scored is None  # the corpus: every position


def test_soft_labels_are_the_targets_own_distribution(tiny3):
    """labels="soft" (EAGLE-3's loss): the cross-entropy from the target's distribution over the
    draft vocabulary at the label's position, read from its last hidden state. A draft that
    outputs exactly that state scores the entropy of p, which no other output beats; the state of
    the position before (the target one token off) scores more. Hard labels are the argmax alone."""
    pair, features, _ = tiny3
    cfg = TrainConfig("eagle3", labels="soft", draft_vocab=60)
    data = _Data(features, torch.device("cpu"), torch.float32)
    ids = draft_vocabulary(features, 60, pair.target.config.vocab_size, pair.eos_token_ids)
    trainer = _Trainer(cfg, pair, data, ids)
    index = data.positions(data.train_segments, 1)[:200]
    f, _, labels = data.rows(index)
    last = f[:, -1]  # the state after the final norm: what the target's head reads
    soft = trainer.soft_targets(f)
    assert torch.allclose(soft, torch.softmax(last @ trainer.head.T, -1))
    used = trainer.remap[labels].ge(0)
    p = soft[used]
    entropy = float(-(p * p.log()).sum(-1).mean())
    assert float(trainer.ce(last, labels, soft=soft)) == pytest.approx(entropy, rel=1e-5)
    shifted = torch.cat([last[:1], last[:-1]])  # each position's state one token early
    assert float(trainer.ce(shifted, labels, soft=soft)) > entropy + 0.1
    hard = torch.nn.functional.cross_entropy(last[used] @ trainer.head.T, trainer.remap[labels][used])
    assert float(trainer.ce(last, labels)) == pytest.approx(float(hard), rel=1e-5)
    assert _Trainer(TrainConfig("eagle3"), pair, data, ids).soft_targets(f) is None


def test_heads_learn_from_soft_labels_and_say_so(tiny3, tmp_path):
    pair, features, _ = tiny3
    cfg = TrainConfig("eagle3", epochs=6, batch=256, window=64, eval_every=10_000, draft_vocab=60, lr=3e-3,
                            noise=0.0, unroll=4, labels="soft", **TINY_NET)
    heads, report = train_heads(pair, features, cfg, tmp_path, progress=False)
    before, after = report["curve"][0], report["curve"][-1]
    assert after["accuracy"][0] > 2 * before["accuracy"][0], (before["accuracy"], after["accuracy"])
    assert report["config"]["labels"] == "soft"
    with pytest.raises(InputError, match="labels"):
        train.train("medusa", pair, tokens=2048, labels="soft")
    with pytest.raises(InputError, match="labels"):
        train.train("eagle3", pair, tokens=2048, labels="smooth")


def test_prompts_are_targets_only_when_asked(tiny3):
    """targets="answers" (the default): a window inside a prompt teaches nothing (loss 0);
    targets="all": its labels are learnt too."""
    pair, features, trained = tiny3
    net = copy.deepcopy(trained["eagle3"][0].net).float()
    data = _Data(features, torch.device("cpu"), torch.float32)
    seq = max(SelfData(features.folder).meta["sequences"], key=lambda s: s["prompt_tokens"])
    window = np.arange(seq["start"], seq["start"] + seq["prompt_tokens"] - 1)  # labels before the answer
    assert len(window) > 4 and not features.scored[window].any()
    data.windows = lambda *args: [window]
    losses = {}
    for targets in ("answers", "all"):
        cfg = TrainConfig("eagle3", window=len(window), batch=len(window), unroll=2, targets=targets)
        with torch.no_grad():
            losses[targets] = float(_Trainer(cfg, pair, data, None).eagle_loss(net, np.random.default_rng(0)))
    assert losses["answers"] == 0.0 and losses["all"] > 0.5, losses
    with pytest.raises(InputError, match="targets"):
        train.train("eagle3", pair, tokens=2048, targets="prompts")
