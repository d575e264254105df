"""DFlash, the block drafter (specviz.runtime.head_nets.DFlashNet), trained in seconds on the tiny
pair's own generations: lossless greedy and sampled, as a chain and as a tree, a whole block
drafted in one forward, and drafting at inference exactly what training trained."""

import copy

import numpy as np
import pytest
import torch
from test_distribution import RUNS, ResampleFromTarget, _first_tokens, _p_value, _target_joint, toy  # noqa: F401
from test_tree import ResampleFromTargetAfterSibling

from specviz import generate
from specviz.analysis import metrics
from specviz.config import Warp
from specviz.drafters.heads import DFlashDrafter
from specviz.errors import InputError
from specviz.runtime.head_nets import DFlashLlamaNet, DFlashNet, HeadSet, attach_heads, head_fingerprint, load_heads, save_heads
from specviz.runtime.tiny_pair import build_tiny_pair
from specviz.training.data import selfgen_features
from specviz.training.selfgen import selfgen
from specviz.training.trainer import TrainConfig, _Data, _Trainer, train_heads
from specviz.verifiers import sampling

BLOCK = 8


@pytest.fixture(scope="module")
def tiny_dflash(tmp_path_factory):
    pair = build_tiny_pair()
    work = tmp_path_factory.mktemp("dflash-work")
    features = selfgen_features(selfgen(pair, work / "selfgen", 6000, batch=8, max_new_tokens=48, progress=False))
    cfg = TrainConfig("dflash", epochs=6, batch=256, window=64, eval_every=10_000, draft_vocab=60, lr=3e-3,
                      width=32, attn_heads=4, mlp=64, block=BLOCK, depths=BLOCK - 1, eval_stride=1)
    heads, report = train_heads(pair, features, cfg, work, progress=False)
    attach_heads(pair, heads)
    return pair, features, heads, report


@pytest.mark.parametrize("prompt", ["def fibonacci(n):", "Hello, world! "])
@pytest.mark.parametrize("k", [3, BLOCK - 1])
def test_greedy_equals_ar(tiny_dflash, prompt, k):
    pair = tiny_dflash[0]
    ar = list(generate(pair, prompt, method="ar", max_new_tokens=40))[-1]
    events = list(generate(pair, prompt, method="dflash", k=k, max_new_tokens=40))
    assert events[-1].token_ids == ar.token_ids
    steps = [e for e in events if e.kind == "step_finished" and e.drafted]
    assert len(steps) > 3 and all(e.draft_forwards == 1 for e in steps)  # a whole block, one forward
    assert all(e.drafted <= k for e in steps) and max(e.drafted for e in steps) == k
    from specviz.render import panel
    from specviz.render import steps as views
    run = views.build([e.to_dict() for e in events])
    step = next(s for s in run.steps if s.drafted)
    assert any(f"one forward of a {BLOCK}-position block" in n for n in panel.step_notes(step, run.texts()))
    assert all(t.source_note.startswith(f"row {i + 1} of DFlash's block") for i, t in enumerate(step.drafted))


@pytest.mark.parametrize("prompt", ["def fibonacci(n):", "Hello, world! "])
def test_as_a_tree_greedy_equals_ar(tiny_dflash, prompt):
    pair = tiny_dflash[0]
    ar = list(generate(pair, prompt, method="ar", max_new_tokens=40))[-1]
    events = list(generate(pair, prompt, method="dflash-tree", tree_budget=10, tree_depth=BLOCK - 1, tree_width=3,
                           max_new_tokens=40))
    assert events[-1].token_ids == ar.token_ids
    steps = [e for e in events if e.kind == "step_finished" and e.drafted]
    assert len(steps) > 3 and all(e.draft_forwards == 1 for e in steps)  # every depth from the one block forward
    from specviz.render import steps as views
    run = views.build([e.to_dict() for e in events])
    trees = [s for s in run.steps if s.nodes]
    assert trees and all(len(s.nodes) <= 10 and max(n.depth for n in s.nodes) <= BLOCK - 1 for s in trees)
    # a tree, not a chain: some position gets two candidates (siblings), and a path goes deeper than 2
    assert any(len({n.parent for n in s.nodes}) < len(s.nodes) for s in trees)
    assert max(n.depth for s in trees for n in s.nodes) > 2
    # a node at depth d is row d of the block, whatever its parent's token
    assert all(n.source_note.startswith(f"row {n.depth} of DFlash's block") for s in trees for n in s.nodes)
    with pytest.raises(InputError, match=f"at most {BLOCK - 1} deep"):
        list(generate(pair, "x", method="dflash-tree", tree_depth=BLOCK, max_new_tokens=4))


def test_batched_rows_equal_their_own_ar(tiny_dflash):
    pair = tiny_dflash[0]
    prompts = ["def fibonacci(n):", "Hello, world! ", "import os\n", "x = 1"]
    events = list(generate(pair, prompts, method="dflash", k=5, max_new_tokens=24))
    rows = {e.row: e.token_ids for e in events if e.kind == "run_finished"}
    for b, prompt in enumerate(prompts):
        assert rows[b] == list(generate(pair, prompt, method="ar", max_new_tokens=24))[-1].token_ids, prompt


def test_it_learns_every_depth_of_the_block(tiny_dflash):
    pair, features, heads, report = tiny_dflash
    assert heads.config["slots"] == 4 and heads.config["block"] == BLOCK and heads.depth == BLOCK - 1
    before, after = report["curve"][0], report["curve"][-1]
    assert len(after["accuracy"]) == BLOCK - 1
    # every row of the block learns (held-out cross-entropy), the masks as well as the first
    drops = [b - a for a, b in zip(after["loss"], before["loss"])]
    assert min(drops) > 0.2 and np.mean(drops) > 0.5, (before["loss"], after["loss"])
    # and the trained drafter's drafts are accepted where an untrained one's are not
    untrained = HeadSet("dflash", DFlashNet(**{k: v for k, v in heads.config.items() if k in (
        "hidden", "width", "heads", "mlp", "slots", "n_layers", "block")}), heads.vocab_ids, heads.config)
    accepted = {}
    for name, h in (("untrained", untrained), ("trained", heads)):
        attach_heads(pair, h)
        events = list(generate(pair, "def fibonacci(n):", method="dflash", k=BLOCK - 1, max_new_tokens=40))
        accepted[name] = metrics.fold(events).accepted
    assert accepted["trained"] >= max(3, 2 * accepted["untrained"]), accepted
    with pytest.raises(InputError, match=f"at most {BLOCK - 1}"):
        list(generate(pair, "x", method="dflash", k=BLOCK, max_new_tokens=4))


@pytest.mark.parametrize("anchor_state", [False, True, "llama"], ids=["kv-only", "anchor-state", "llama-layout"])
def test_drafting_at_inference_is_what_training_trained(anchor_state):
    """Each block the training batch holds (several per window, under one mask) equals the block
    the drafter computes at inference from the context before its anchor, fed step by step as the
    engine hands it over (the context cached in pieces, the block run alone). A mask that let a
    block see the context at or after its anchor, or another block, fails here."""
    torch.manual_seed(0)
    d, n, block = 16, 24, 5
    embed = torch.nn.Embedding(50, d)
    if anchor_state == "llama":  # llama.cpp's layout: the target's width, its mask token's embedding
        net = DFlashLlamaNet(d, heads=2, kv_heads=1, mlp=32, slots=3, n_layers=2, block=block, mask_token=7).eval()
        net.set_mask(embed(torch.tensor([7])))
    else:
        net = DFlashNet(d, width=16, heads=2, mlp=32, slots=4, n_layers=2, block=block, anchor_state=anchor_state).eval()
    f = torch.randn(n, 4, d)
    tokens = torch.randint(0, 50, (n,))
    trainer = _Trainer.__new__(_Trainer)
    trainer.embeddings = lambda t: embed(t).float()
    trainer.data = type("D", (), {"rows": staticmethod(lambda w: (f, tokens, None))})()
    anchors = np.array([1, 4, 5, 11, n - block])
    with torch.no_grad():
        trained = trainer.dflash_blocks(net, np.arange(n), anchors)
        for i, a in enumerate(anchors):
            cut = [0, a // 2, a]  # the context arrives in two pieces, as after two steps
            kv = None
            for lo, hi in zip(cut, cut[1:]):
                if hi > lo:
                    ctx = net.context(f[lo:hi])
                    new = net.context_kv(ctx, torch.arange(lo, hi))
                    kv = new if kv is None else [(torch.cat([k0, k1], 1), torch.cat([v0, v1], 1))
                                                 for (k0, v0), (k1, v1) in zip(kv, new)]
            x = net.block(embed(tokens[a:a + 1]).float(), block, ctx[-1:])  # the last piece's last row
            out = net(x, torch.arange(a, a + block), kv)
            assert torch.allclose(out, trained[i], atol=1e-5), a
        # the mask is doing something: a block that saw its own anchor's state would differ
        a = anchors[2]
        ctx = net.context(f[:a + 1])
        leaky = net.context_kv(ctx, torch.arange(a + 1))
        out = net(net.block(embed(tokens[a:a + 1]).float(), block, ctx[a - 1:a]), torch.arange(a, a + block), leaky)
        assert not torch.allclose(out, trained[2], atol=1e-3)


def test_the_drafter_fed_step_by_step_drafts_what_training_computes(tiny_dflash):
    """DFlashDrafter itself, fed the target's states in pieces as the engine hands them over (the
    context cached across steps, its positions counted by the drafter): every block's q equals
    the one training's batched blocks give for the same anchor in the same sequence."""
    pair, features, heads, _ = tiny_dflash
    data = _Data(features, torch.device("cpu"), torch.float32)
    start, n, _ = max(features.segments, key=lambda seg: seg[1])
    assert n >= 3 * BLOCK
    window = np.arange(start, start + n)
    f, tokens, _ = data.rows(window)
    trainer = _Trainer(TrainConfig("dflash", block=BLOCK), pair, data, heads.vocab_ids)
    anchors = np.array([3, 4, 9, n - BLOCK])  # three states handed over, then one, then five, then the rest
    warp = Warp()
    with torch.no_grad():
        trained = trainer.dflash_blocks(heads.net, window, anchors)
        drafter = DFlashDrafter(heads.bind(pair.target), chain_k=BLOCK - 1)
        drafter.want, drafter.forwards = BLOCK - 1, 0  # as propose() sets them each step
        committed = tokens.tolist()
        drafter.start(committed[:anchors[0] + 1])
        fed = 0
        for i, a in enumerate(anchors):
            drafter.see_features(f[fed:a])  # the states of the tokens committed since the last step
            fed = a
            drafter._root(committed[:a + 1], warp)
            expected = sampling.warp(drafter.heads.logits(trained[i, 1:]), warp)
            assert torch.allclose(drafter.per_depth, expected, atol=1e-5), a
        assert drafter.fed == anchors[-1] and drafter.forwards == len(anchors)


def test_in_llama_cpps_layout_it_trains_drafts_losslessly_and_keeps_the_targets_mask_row(tiny_dflash, tmp_path,
                                                                                        monkeypatch):
    """`--layout llama` (head_nets.DFlashLlamaNet, what llama.cpp's draft-dflash runs) trains on the
    same data, its masks are the target's embedding of the mask token (set by the trainer and by
    the bound copy, never stored: the file holds the layers only), and in specviz's engine its
    greedy text is the target's with a whole block drafted in one forward."""
    from specviz.training import trainer as trainer_module

    _, features, _, _ = tiny_dflash
    pair = build_tiny_pair()
    monkeypatch.setattr(trainer_module, "mask_token_of", lambda _pair: 3)  # the tiny vocabulary has no <|fim_pad|>
    cfg = TrainConfig("dflash", epochs=6, batch=256, window=64, eval_every=10_000, draft_vocab=60, lr=3e-3, mlp=64,
                      block=4, depths=3, eval_stride=1, layout="llama", draft_layers=1)
    heads, report = train_heads(pair, features, cfg, tmp_path / "work", progress=False)
    assert isinstance(heads.net, DFlashLlamaNet) and heads.config["mask_token"] == 3 and heads.config["slots"] == 3
    row = pair.target.get_input_embeddings()(torch.tensor([3]))[0]
    assert torch.equal(heads.net.mask, row.float())
    before, after = report["curve"][0], report["curve"][-1]
    assert min(b - a for a, b in zip(after["loss"], before["loss"])) > 0.2, (before["loss"], after["loss"])
    save_heads(heads, tmp_path / "heads", head_fingerprint(pair.target))
    assert not any("mask" in k for k in load_heads("dflash", pair, tmp_path / "heads").net.state_dict())
    attach_heads(pair, load_heads("dflash", pair, tmp_path / "heads"))
    for prompt in ("def fibonacci(n):", "Hello, world! "):
        ar = list(generate(pair, prompt, method="ar", max_new_tokens=40))[-1]
        events = list(generate(pair, prompt, method="dflash", k=3, max_new_tokens=40))
        assert events[-1].token_ids == ar.token_ids
        steps = [e for e in events if e.kind == "step_finished" and e.drafted]
        assert len(steps) > 3 and all(e.draft_forwards == 1 for e in steps)
    bound = pair._heads[("dflash", None)].bind(pair.target)
    assert torch.equal(bound.net.mask, row.to(bound.net.mask))


def test_saved_and_loaded_it_drafts_the_same(tiny_dflash, tmp_path):
    pair, _, heads, _ = tiny_dflash
    save_heads(heads, tmp_path, head_fingerprint(pair.target))
    loaded = load_heads("dflash", pair, tmp_path)
    assert loaded.feature_layers == heads.feature_layers and loaded.net.block_size == BLOCK
    rounded = copy.deepcopy(heads)  # the file holds bfloat16 weights
    rounded.net.load_state_dict({k: v.to(torch.bfloat16).float() for k, v in heads.net.state_dict().items()})
    drafts = []
    for h in (rounded, loaded):
        attach_heads(pair, h)
        events = generate(pair, "def f(x):", method="dflash", k=4, max_new_tokens=16)
        drafts.append([(e.token_id, round(e.q, 5)) for e in events if e.kind == "draft_proposed"])
    assert drafts[0] and drafts[0] == drafts[1]
    attach_heads(pair, heads)


# ---------------------------------------------------------------------------------------------
# sampling on exact toy models: the toy target's "hidden state" is its logits row

def _toy_dflash(pair, seed=0):
    v = pair.target.vocab_size
    torch.manual_seed(seed)
    net = DFlashNet(v, width=8, heads=2, mlp=8, slots=4, n_layers=1, block=4)
    attach_heads(pair, HeadSet("dflash", net, None, {"hidden": v, "vocab_size": v, "width": 8, "heads": 2, "mlp": 8,
                                                     "slots": 4, "n_layers": 1, "block": 4}))


def test_sampling_follows_the_target(toy):  # noqa: F811
    _toy_dflash(toy)
    warp = Warp(1.0)
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, method="dflash", k=3)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) > 1e-4
    assert sum(e.kind == "token_rejected" for events in runs for e in events) > RUNS // 20


def test_as_a_tree_sampling_follows_the_target(toy):  # noqa: F811
    _toy_dflash(toy)
    warp = Warp(1.0)
    counts, runs = _first_tokens(toy, warp, runs=RUNS // 2, method="dflash-tree", tree_budget=6, tree_depth=2,
                                 tree_width=2)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) > 1e-4
    assert sum(e.kind == "token_rejected" for events in runs for e in events) > RUNS // 10  # siblings judged too


def test_as_a_tree_a_broken_multi_draft_rule_fails(toy):  # noqa: F811
    _toy_dflash(toy)
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, method="dflash-tree", tree_budget=6, tree_depth=2,
                              tree_width=2, verifier=ResampleFromTargetAfterSibling())
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4


def test_a_broken_rule_fails_with_it_too(toy):  # noqa: F811
    _toy_dflash(toy)
    warp = Warp(1.0)
    counts, _ = _first_tokens(toy, warp, runs=RUNS // 2, verifier=ResampleFromTarget(), method="dflash", k=2)
    assert _p_value(counts, _target_joint(toy, warp), RUNS // 2) < 1e-4
