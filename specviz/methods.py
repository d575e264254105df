"""The methods: one record each, the one place a method is declared.

A method is a `Method`: its name and help, what it drafts with, how its drafts are shaped (a
chain, a tree drafted to a shape or a budget, or lookahead's tree of candidates), where it runs
(one sequence only, or also in a batch; under k="auto" or k="load"; on llama.cpp), which trained
heads it needs, and the function that builds its drafter. Every list of methods (the config's
checks, the CLI's help, the app's menus, the batched engine, llama.cpp's lanes) is asked of this
registry, so adding a method is one record here plus one drafter module:

    register(Method("echo", "repeat the last token k times", "nothing",
                    build="mypackage.echo:build"))

where `build(pair, cfg, stop, policy)` returns a `specviz.drafters.base.Drafter` (`stop`: the tokens
that end the run; `policy`: the k policy, or None). A chain method that may run in a batch
(`batch=True`) runs there as one such drafter per row unless it names a batched drafter of its
own (`batch_build`, the same signature, returning a `specviz.drafters.base.BatchDrafter`; its
`policy` under k="auto" is one like the rows' own, read for its `stop_below`, not one of theirs).

No torch here: the app and the CLI read the registry before any model loads; a drafter's module
is imported when a run first builds it.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Optional

SHAPES = ("chain", "draft tree", "candidate tree")


@dataclass(frozen=True)
class Method:
    name: str
    help: str
    drafts_with: str  # in words, for menus and docs: "the draft model", "n-grams of the text", ...
    build: str  # "module:function" making the drafter: function(pair, cfg, stop, policy) -> Drafter
    shape: str = "chain"  # "draft tree": drafted to a shape or a budget; "candidate tree": lookahead's
    tree_forms: tuple = ()  # a draft tree's forms: "static" (tree="3,2,1"), "dynamic" (tree_budget, depth, width)
    options: tuple = ()  # (name in run_started's options, RunConfig field) of the options only it reads
    auto_k: bool = False  # k="auto" (specviz.engine.adaptive) chooses its k each step
    batch: bool = False  # runs in a batch of sequences (specviz.engine.batch): chains only
    load_k: bool = False  # k="load" (specviz.engine.load.LoadK): one k a step for the whole batch
    llamacpp: bool = False  # runs on llama.cpp's passes (chains of causal passes; heads read its states)
    heads: str = ""  # the kind of trained heads it drafts with (specviz.runtime.head_nets), or ""
    batch_build: str = ""  # "module:function" of a batched drafter; "": one `build` drafter per row

    def __post_init__(self):
        if self.shape not in SHAPES:
            raise ValueError(f"method {self.name!r}: shape must be one of {', '.join(SHAPES)}")
        if (self.shape == "draft tree") != bool(self.tree_forms) or set(self.tree_forms) - {"static", "dynamic"}:
            raise ValueError(f"method {self.name!r}: a draft tree, and only one, is 'static', 'dynamic' or both")
        if self.shape != "chain" and (self.batch or self.load_k or self.llamacpp):
            raise ValueError(f"method {self.name!r}: trees run one sequence at a time, on PyTorch")
        if self.load_k and not self.batch:
            raise ValueError(f"method {self.name!r}: k='load' is a batch's policy")

    @property
    def tree(self) -> bool:
        """Verified as a tree (tree attention): no fixed draft length k."""
        return self.shape != "chain"

    def drafter(self, pair, cfg, stop, policy=None):
        return _function(self.build)(pair, cfg, stop, policy)

    def batch_drafter(self, pair, cfg, stop, policy=None):
        return _function(self.batch_build)(pair, cfg, stop, policy) if self.batch_build else None


def _function(path: str):
    module, _, name = path.partition(":")
    return getattr(importlib.import_module(module), name)


_REGISTRY: dict = {}


def register(method: Method) -> Method:
    """Add a method (a name taken already is an error: each name is one record)."""
    if method.name in _REGISTRY:
        raise ValueError(f"a method named {method.name!r} is registered already")
    _REGISTRY[method.name] = method
    return method


def unregister(name: str) -> None:
    _REGISTRY.pop(name, None)


def get(name: str) -> Method:
    """The method's record; KeyError for a name that is none (config.RunConfig says so to users)."""
    return _REGISTRY[name]


def find(name) -> Optional[Method]:
    """The method's record, or None for anything that names none (a view reading an old trace,
    a menu value it did not offer)."""
    return _REGISTRY.get(name) if isinstance(name, str) else None


def known(name) -> bool:
    return find(name) is not None


def names(**where) -> tuple:
    """The methods' names in registration order, those whose fields (or `tree`) equal `where`:
    names(), names(batch=True), names(tree=False, auto_k=True)."""
    return tuple(m.name for m in _REGISTRY.values() if all(getattr(m, key) == value for key, value in where.items()))


def help_of(name: str) -> str:
    method = find(name)
    return method.help if method else ""


def setting(started: dict) -> str:
    """A run's method with its settings, in words, from its run_started event (a dict), e.g.
    'tree (shape 3,2,1): ...': the race lane's subtitle in the app and the static site."""
    method = started.get("method", "spec")
    record = find(method)
    opts = started.get("options") or {}
    parts = []
    chain = record is not None and method != "ar" and not record.tree
    if chain:
        k = started.get("k")
        parts.append(f"k auto, {opts.get('auto_rule', '')} rule" if k == "auto" else f"k = {k}")
    if chain and "ngram" in opts:
        parts.append(f"n-gram ≤ {opts['ngram']}")
    if record is not None and record.tree_forms:
        shape = opts.get("tree", "dynamic")
        budget = opts.get("tree_budget")
        parts.append(("dynamic, sized to this machine" if budget == "auto" else f"dynamic, budget {budget}")
                     if shape == "dynamic" else f"shape {shape}")
    if started.get("lossless") is False:
        parts.append(f"{started.get('rule', 'typical')} acceptance")
    if started.get("draft_quant", "none") != "none":
        parts.append(f"{started['draft_quant']} draft")
    help_text = help_of(method) or "draft, then verify in one target pass"
    return f"{method}" + (f" ({', '.join(parts)})" if parts else "") + f": {help_text}"


_D = "specviz.drafters"
for _method in (
    Method("ar", "autoregressive: one target forward per token (the baseline)", "nothing",
           f"{_D}.base:no_drafter", batch=True, llamacpp=True, batch_build=f"{_D}.base:no_batch_drafter"),
    Method("spec", "draft model proposes k tokens, the target verifies them in one pass", "the draft model",
           f"{_D}.model:build", auto_k=True, batch=True, load_k=True, llamacpp=True,
           batch_build=f"{_D}.model:batch_build"),
    Method("tree", "draft model proposes a tree of continuations, verified in one pass with tree attention",
           "the draft model", f"{_D}.model_tree:build", shape="draft tree", tree_forms=("static", "dynamic")),
    Method("pld", "prompt lookup: copy the continuation of an earlier n-gram, no draft model",
           "n-grams of the text so far", f"{_D}.lookup:build_pld", batch=True, load_k=True, llamacpp=True,
           options=(("ngram", "ngram"),)),
    Method("lookahead", "lookahead (greedy): Jacobi window + n-gram pool verified in one pass, no draft model",
           "the target's own refinements of a window", f"{_D}.lookahead:build", shape="candidate tree",
           options=(("ngram", "ngram"), ("window", "lookahead_window"), ("pool", "lookahead_pool"))),
    Method("cascade", "n-gram -> draft model -> target: prompt lookup speeds up the draft model",
           "the draft model, sped up by prompt lookup", f"{_D}.lookup:build_cascade", auto_k=True, llamacpp=True,
           options=(("ngram", "ngram"),)),
    Method("medusa", "Medusa heads on the target's last hidden state draft k tokens at once (trained here)",
           "Medusa heads on the target", f"{_D}.heads:build", batch=True, load_k=True, llamacpp=True, heads="medusa"),
    Method("medusa-tree", "Medusa heads' top candidates as a static tree, verified with tree attention",
           "Medusa heads on the target", f"{_D}.heads:build", shape="draft tree", tree_forms=("static",),
           heads="medusa"),
    Method("eagle", "EAGLE: a one-layer draft at the target's feature level drafts k tokens (trained here)",
           "an EAGLE layer on the target", f"{_D}.heads:build", batch=True, load_k=True, llamacpp=True, heads="eagle"),
    Method("eagle-tree", "EAGLE-2: a dynamic tree from the EAGLE layer, by cumulative draft probability",
           "an EAGLE layer on the target", f"{_D}.heads:build", shape="draft tree", tree_forms=("dynamic",),
           heads="eagle"),
    Method("eagle3", "EAGLE-3: the EAGLE layer reads the target's low, middle and high layers, drafts k tokens",
           "an EAGLE-3 layer on the target", f"{_D}.heads:build", batch=True, load_k=True, llamacpp=True, heads="eagle3"),
    Method("eagle3-tree", "EAGLE-3 with EAGLE-2's dynamic tree", "an EAGLE-3 layer on the target",
           f"{_D}.heads:build", shape="draft tree", tree_forms=("dynamic",), heads="eagle3"),
    Method("peagle", "P-EAGLE: parallel drafting, all k tokens from one forward of an EAGLE-3 layer (placeholders)",
           "a P-EAGLE layer on the target", f"{_D}.heads:build", batch=True, load_k=True, llamacpp=True, heads="peagle"),
    Method("suffix", "suffix decoding: the most frequent continuation of the text's ending in the session's "
           "earlier outputs and the prompt, no draft model", "suffix trees of the session's outputs and the prompt",
           f"{_D}.suffix:build", batch=True, load_k=True, llamacpp=True, options=(("min_prob", "suffix_min_prob"),)),
    Method("suffix-tree", "suffix decoding as a tree: the frequent continuations of the text's ending, verified "
           "with tree attention", "suffix trees of the session's outputs and the prompt", f"{_D}.suffix:build",
           shape="candidate tree", options=(("min_prob", "suffix_min_prob"),)),
    Method("dflash", "DFlash: a block of masks filled in one forward of a small drafter on the target's states "
           "(block diffusion, trained here)", "a DFlash block drafter on the target", f"{_D}.heads:build",
           batch=True, load_k=True, llamacpp=True, heads="dflash"),
    Method("dflash-tree", "DFlash's block as a dynamic tree: every depth's top candidates from the one block forward, "
           "the likeliest paths kept (EAGLE-2's growth), verified with tree attention", "a DFlash block drafter on the target",
           f"{_D}.heads:build", shape="draft tree", tree_forms=("dynamic",), heads="dflash"),
    Method("ssd", "speculative speculative decoding: while the target verifies, the draft model prepares the "
           "next draft for the likely outcomes; a hit's draft is ready at once", "the draft model, ahead of the verdict",
           f"{_D}.ssd:build", options=(("fanout", "ssd_fanout"), ("prepare", "ssd_prepare"), ("threads", "ssd_threads"))),
):
    register(_method)
