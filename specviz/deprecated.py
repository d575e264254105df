"""Import paths that 0.1.0 documented and 0.2.0 moved: each still works until 0.3.0, with a
DeprecationWarning that names the new path.

0.2.0 put the modules in folders by layer (docs/architecture.md). An old module path
(`specviz.metrics`, ...) has no file: `import specviz` appends a finder to sys.meta_path that
serves the paths in MODULES (only where no real module answers) as a module whose names are
fetched from their new home on first use; `python -m` on an old path runs the new one. A name an
old package `__init__` re-exported (`specviz.verifiers.RejectionVerifier`) comes through that
package's `__getattr__`, which calls `package_name`. Nothing is imported before a name is used, so
importing a package stays as cheap as before. Nothing inside specviz imports through these paths
(tests/test_seams.py); CHANGELOG.md lists them.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import runpy
import sys
import warnings

REMOVED_IN = "0.3.0"

# old module -> (where most of it went, {another new module: "the names that went there"}).
# "old=new" in a list is a name that was also renamed.
MODULES = {
    "specviz.adaptive": ("specviz.engine.adaptive", {"specviz.config": "RULES=AUTO_RULES"}),
    "specviz.batch": ("specviz.engine.batch", {
        "specviz.drafters.base": "BatchDrafter NoBatchDrafter RowDrafters no_batch_drafter",
        "specviz.drafters.model": "BatchModelDrafter model_batch_drafter=batch_build",
        "specviz.runtime.batch_lm": "BatchLM LoopBatchLM RowCache batch_runner_for",
        "specviz.engine.load": "CostTable LOAD_K_MAX LoadK ROW_GRID Running measure_pass table_key",
        "specviz.events": "batch_events split_rows",
    }),
    "specviz.bench.analysis": ("specviz.bench.ratios", {}),
    "specviz.bench.machine": ("specviz.runtime.machine", {}),
    "specviz.bench.prompts": ("specviz.prompts", {}),
    "specviz.commit": ("specviz.engine.commit", {}),
    "specviz.cpu": ("specviz.runtime.cpu", {}),
    "specviz.drafters.tree": ("specviz.drafters.model_tree", {}),
    "specviz.exercises": ("specviz.teaching.exercises", {
        "specviz.teaching.exercises.checking": "NOT_WRITTEN RIGHT WRONG",
        "specviz.teaching.exercises.nb00": "check_caches_after engine_caches_after",
        "specviz.teaching.exercises.nb01": "check_cost_ratio check_speedup_by_hand",
        "specviz.teaching.exercises.nb02": "check_cascade check_cascade_by_hand check_max_tokens engine_cascade",
        "specviz.teaching.exercises.nb03": "SECTION_1_P SECTION_1_Q check_beta_by_hand check_broken_rule "
                                           "check_residual",
        "specviz.teaching.exercises.nb04": "check_accepted_per_drafted check_alpha_tau check_best_k",
        "specviz.teaching.exercises.nb05": "CAT_DOG_PARENTS check_node_sees check_q2 check_tree_mask",
        "specviz.teaching.exercises.nb06": "check_lookup check_lookup_by_hand",
        "specviz.teaching.exercises.nb07": "K_MAX break_even check_break_even check_next_k engine_next_k",
        "specviz.teaching.exercises.nb08": "check_paper_speedup",
        "specviz.teaching.exercises.nb09": "check_amortised_itl check_cost check_cost_by_hand check_half_width "
                                           "check_share_at_depth check_stream_waits check_survival "
                                           "engine_stream_waits engine_survival t_half_width",
        "specviz.teaching.exercises.nb10": "check_chain_acceptance engine_chain_acceptance",
        "specviz.teaching.exercises.nb11": "check_compute_bound_ratio check_crossover engine_crossover",
    }),
    "specviz.heads": ("specviz.runtime.head_nets", {}),
    "specviz.kernels": ("specviz.runtime.kernels", {}),
    "specviz.llamacpp": ("specviz.runtime.llamacpp.runner", {}),
    "specviz.llamacpp_build": ("specviz.runtime.llamacpp.build", {}),
    "specviz.llamacpp_server": ("specviz.runtime.llamacpp.server", {}),
    "specviz.lm": ("specviz.runtime.lm", {}),
    "specviz.metrics": ("specviz.analysis.metrics", {}),
    "specviz.models": ("specviz.runtime.models", {
        "specviz.files": "cache_dir",
        "specviz.runtime.pair": "INSTALL_HINT MODELS_REQUIREMENTS PackagedModel Pair Progress QWEN_DRAFT QWEN_TARGET",
        "specviz.runtime.memory": "INT8_BYTES LOW_FLOAT_DTYPE MEMORY_MODES RUNTIME_BYTES available_memory "
                                  "check_memory check_memory_mode need_bytes plan_memory resolve_device "
                                  "resolve_dtype",
        "specviz.runtime.weights": "SafetensorsRows check_same_tokenizer eos_ids",
        "specviz.runtime.tiny_pair": "TINY_CHARS TINY_CHAT_TEMPLATE TINY_DRAFT_NOISE TINY_SEED TINY_SPECIALS "
                                     "build_tiny_pair int8_pair tiny_config tiny_tokenizer",
        "specviz.runtime.packaged": "CONVERTED_FORMAT CONVERTED_RECORD CONVERT_SPARE_BYTES GGUF_RECORD "
                                    "NOT_CONVERTED assemble_gguf convert_packaged converted_problem "
                                    "ensure_converted ensure_gguf gguf_copy_path gguf_file gguf_path matches "
                                    "packaged_tokenizer part_files",
    }),
    "specviz.presets": ("specviz.bench.recordings", {}),
    "specviz.quant": ("specviz.runtime.quant", {}),
    "specviz.record": ("specviz.engine.record", {}),
    "specviz.render.training": ("specviz.render.training_report", {}),
    "specviz.run": ("specviz.engine.setup", {}),
    "specviz.sampling": ("specviz.verifiers.sampling", {"specviz.config": "Warp"}),
    "specviz.selfgen": ("specviz.training.selfgen", {
        "specviz.training.prompt_bank": "BankPrompt CHAT_TEMPLATES GENERAL_TEMPLATES GENERAL_TEMPLATES_MORE "
                                        "GENERAL_TOPICS GENERAL_TOPICS_MORE HELD_OUT_EVERY PROMPT_KINDS "
                                        "REWRITE_TEMPLATES TOPICS held_out prompt_bank stdlib_files",
        "specviz.training.corpus": "CORPUS_FIELDS CORPUS_KEYS Schedule bank_fingerprint bank_prefix "
                                   "checkout_corpus corpus_batch_path corpus_batches corpus_differs corpus_meta "
                                   "open_corpus read_corpus_batch write_corpus_batch write_corpus_meta",
        "specviz.training.progress": "progress_bar say",
    }),
    "specviz.theory": ("specviz.analysis.theory", {}),
    "specviz.timing": ("specviz.analysis.timing", {}),
    "specviz.toy": ("specviz.teaching.toy", {}),
    "specviz.trace": ("specviz.analysis.trace", {}),
    "specviz.train": ("specviz.training.trainer", {
        "specviz.training.data": "Corpus Features HELD_OUT_EVERY MAX_SEGMENTS_PER_FILE PROMPTS_FILE SEGMENT "
                                 "build_corpus extract_features load_features prepare selfgen_features "
                                 "target_responses training_prompts work_dir",
        "specviz.training.train": "ENGINE_PROMPTS engine_check train",
        "specviz.training.selfgen": "DEFAULT_BATCH",
        "specviz.training.prompt_bank": "stdlib_files",
    }),
    "specviz.tree": ("specviz.verifiers.draft_tree", {"specviz.config": "parse_shape"}),
    "specviz.treesize": ("specviz.drafters.tree_budget", {}),
    "specviz.watch": ("specviz.bench.watch", {}),
}

# names a package's __init__ re-exported in 0.1.0 -> the module that owns each now
PACKAGES = {
    "specviz.drafters": {
        "specviz.drafters.base": "Drafter NoDrafter Proposal",
        "specviz.drafters.lookahead": "LookaheadDrafter",
        "specviz.drafters.lookup": "CascadeDrafter PromptLookupDrafter",
        "specviz.drafters.model": "ModelDrafter",
        "specviz.drafters.scripted": "ScriptedDrafter",
        "specviz.drafters.model_tree": "TreeDrafter",
    },
    "specviz.verifiers": {
        "specviz.verifiers.base": "Decision Verdict Verifier",
        "specviz.verifiers.exact": "GreedyVerifier RejectionVerifier default_verifier",
        "specviz.verifiers.typical": "TypicalVerifier",
    },
    "specviz.render": {"specviz.render.html": "CSS Rendered"},
    # specviz.engine was one module (engine.py); what it defined is in engine/sequence.py now
    "specviz.engine": {"specviz.engine.sequence": "generate check_options",
                       "specviz.engine.batch": "generate_batch"},
    # a module that stayed, whose measuring function moved to the runtime layer
    "specviz.bench.forward": {"specviz.runtime.costs": "batch_cost"},
}


def _names(table: dict) -> dict:
    """{old name: (new module, new name)} from one {new module: "names"} table."""
    out = {}
    for module, names in table.items():
        for entry in names.split():
            old, _, new = entry.partition("=")
            out[old] = (module, new or old)
    return out


def _resolve(module: str, name: str):
    return getattr(importlib.import_module(module), name)


class _OldPath(importlib.abc.Loader):
    """Finds and loads the old module paths of MODULES; consulted after every real finder."""

    def find_spec(self, fullname, path=None, target=None):
        return importlib.util.spec_from_loader(fullname, self) if fullname in MODULES else None

    def exec_module(self, module):
        old = module.__spec__.name
        home = MODULES[old][0]
        # stacklevel 2: the line that imported the old path (warnings skips the import machinery's
        # frames in between)
        warnings.warn(f"{old} is deprecated: import {home} instead (the old path goes in {REMOVED_IN}).",
                      DeprecationWarning, stacklevel=2)
        module.__doc__ = f"Deprecated since 0.2.0: {old} is {home} (and see CHANGELOG.md)."
        module.__getattr__ = _module_getattr(old)

    def get_code(self, fullname):
        """What `python -m OLD` runs: a line on stderr, then the new module as __main__."""
        return compile(f"import specviz.deprecated\nspecviz.deprecated.run_moved({fullname!r})\n",
                       f"<{fullname}, moved>", "exec")


def install() -> None:
    """Called by `import specviz`; once per process."""
    if not any(isinstance(finder, _OldPath) for finder in sys.meta_path):
        sys.meta_path.append(_OldPath())


def run_moved(old: str) -> None:
    home = MODULES[old][0]
    print(f"note: python -m {old} is deprecated; use python -m {home} (the old name goes in {REMOVED_IN}).",
          file=sys.stderr)
    runpy.run_module(home, run_name="__main__", alter_sys=True)


def _module_getattr(old: str):
    """An old module's `__getattr__`: each name from its new home; a name that went to another
    module than most warns again, naming its own."""
    home, elsewhere = MODULES[old]
    moved = _names(elsewhere)

    def __getattr__(name):
        if name in moved:
            module, new = moved[name]
            warnings.warn(f"{old}.{name} is deprecated: it is {module}.{new} now (the old path goes in "
                          f"{REMOVED_IN}).", DeprecationWarning, stacklevel=2)
            return _resolve(module, new)
        if name.startswith("__"):  # keeps dunder probes (copy, pickle, inspect) from importing `home`
            raise AttributeError(f"module {old!r} has no attribute {name!r}")
        return _resolve(home, name)
    return __getattr__


def package_name(package: str, name: str):
    """A name `package`'s __init__ re-exported in 0.1.0, with a warning naming the module that owns
    it; AttributeError for any other name (so `from package import submodule` still imports it)."""
    moved = _names(PACKAGES[package])
    if name not in moved:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    module, new = moved[name]
    # stacklevel 3: past this function and the package's __getattr__, to the line that asked
    warnings.warn(f"{package}.{name} is deprecated: import it from {module} (the old path goes in "
                  f"{REMOVED_IN}).", DeprecationWarning, stacklevel=3)
    return _resolve(module, new)
