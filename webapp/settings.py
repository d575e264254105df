"""The sidebar (pair, method and the controls it uses, sampling) and the prompt with its presets.
Shared by the step view and the race; the serving view has its own controls (webapp.serving)."""

from __future__ import annotations

import gradio as gr

from specviz import methods
from specviz.bench import recordings as recorded
from specviz.config import AUTO_RULES
from webapp.common import ALLOW_CUSTOM, DEFAULT_PAIR, DRAFT_WEIGHTS, MAX_TOKENS, PRESET_PAIRS, ui

# Presets: what gr.Examples fills in the sidebar; each was also recorded once on the real pair
# (specviz.bench.recordings) and clicking one replays that recording at once, without the engine.
PRESETS = [preset.example() for preset in recorded.PRESETS]
PRESET_LABELS = recorded.LABELS
ACCEPTANCE_CHOICES = [("exact (lossless)", "exact"), ("typical (LOSSY)", "typical")]


def build_sidebar() -> None:
    with gr.Sidebar(open=True, width=330, label="Settings"):
        gr.Markdown("### Settings")
        ui.pair = gr.Dropdown(sorted(set(PRESET_PAIRS) | {DEFAULT_PAIR}), value=DEFAULT_PAIR, label="Model pair",
                              allow_custom_value=ALLOW_CUSTOM)
        ui.method_dd = gr.Dropdown(method_choices(DEFAULT_PAIR), value="spec", label="Method (the race runs it against ar)",
                                   info=method_help("spec"))
        ui.k = gr.Slider(1, 16, value=4, step=1, label="k: draft tokens per step")
        with gr.Row():
            ui.auto_k_box = gr.Checkbox(False, label="auto k", scale=1, min_width=80)
            ui.auto_rule_dd = gr.Dropdown(list(AUTO_RULES), value="cost", label="rule choosing k", visible=False,
                                          scale=2, min_width=120)
        ui.confidence_sl = gr.Slider(0.05, 0.95, value=0.4, step=0.05, visible=False,
                                     label="confidence: stop drafting when q(x) <")
        ui.ngram_sl = gr.Slider(1, 8, value=3, step=1, visible=False, label="n-gram size (prompt lookup)")
        with gr.Group(visible=False) as ui.tree_box:
            ui.tree_shape_tb = gr.Textbox("3,2,1", label="Tree shape: children per node at each depth")
            ui.tree_dynamic_cb = gr.Checkbox(False, label="dynamic tree (EAGLE-2: grow the likeliest nodes)")
            ui.tree_budget_sl = gr.Slider(0, 64, value=16, step=1, visible=False,
                                          label="dynamic tree budget (nodes; 0: sized to this machine each step)")
        ui.acceptance_radio = gr.Radio(ACCEPTANCE_CHOICES, value="exact", label="Acceptance rule",
                                       info="typical (Medusa) keeps a guess the target finds plausible enough, "
                                            "without comparing with the draft: LOSSY, the output no longer "
                                            "follows the target's distribution")
        ui.draft_radio = gr.Radio(list(DRAFT_WEIGHTS), value="none", label="Draft weights",
                                  info="int8: the draft model's linear weights in int8 (CPU). Cheaper drafts, "
                                       "the same output: only the draft's q changes, the target is untouched")
        ui.temperature = gr.Slider(0.0, 2.0, value=0.0, step=0.05, label="Temperature (0 = greedy)")
        ui.top_p = gr.Slider(0.05, 1.0, value=1.0, step=0.05, label="Top-p")
        ui.max_new_tokens = gr.Slider(1, MAX_TOKENS, value=min(64, MAX_TOKENS), step=1, label="Max new tokens")
        ui.seed = gr.Number(0, precision=0, minimum=0, label="Seed")
        ui.chat = gr.Checkbox(False, label="Chat template")


def build_prompt() -> None:
    ui.prompt = gr.Textbox(PRESETS[0][0], lines=3, max_lines=12, label="Prompt")
    ui.examples = gr.Examples(PRESETS, [ui.prompt, ui.method_dd, ui.k, ui.temperature, ui.chat, ui.acceptance_radio],
                              example_labels=PRESET_LABELS,
                              label="Presets: a recorded run at once (Run or Race computes it live)")


def run_inputs() -> list:
    """The settings every live run (Run, Race) reads, in the handlers' argument order."""
    return [ui.prompt, ui.pair, ui.method_dd, ui.k, ui.temperature, ui.top_p, ui.max_new_tokens, ui.seed, ui.chat,
            ui.auto_k_box, ui.auto_rule_dd, ui.confidence_sl, ui.acceptance_radio, ui.ngram_sl, ui.tree_shape_tb,
            ui.tree_dynamic_cb, ui.tree_budget_sl, ui.draft_radio, ui.history_state]


def method_choices(pair_name: str) -> list:
    """The menu's (label, method) pairs: every method, those that read trained heads the pair does
    not have (shipped, or trained with `python -m specviz train`) labelled so before a visitor picks
    one (run anyway, such a method answers with the command that trains its heads), and on the
    llama.cpp pair those that need PyTorch (run anyway, they answer with the methods it runs)."""
    from specviz.runtime.head_nets import HeadsError, check_heads_file
    from specviz.runtime.llamacpp.runner import states_problem
    from specviz.runtime.models import FAMILY, LLAMACPP_PAIR

    out = []
    for method in methods.names():
        label, record = method, methods.get(method)
        if pair_name == LLAMACPP_PAIR and not record.llamacpp:
            label = f"{method} (PyTorch only)"
        elif record.heads:
            try:
                check_heads_file(record.heads, FAMILY.get(pair_name, pair_name))  # llama.cpp's pair reads qwen-coder's
                if pair_name == LLAMACPP_PAIR and states_problem():
                    label = f"{method} (needs `make llamacpp` again)"
            except HeadsError:
                label = f"{method} (no trained heads for {pair_name})"
        out.append((label, method))
    return out


def method_help(method: str) -> str:
    return methods.help_of(method)


def on_method(method, auto_k, auto_rule, dynamic=False):
    """Show the controls the chosen method uses (every option a run's error can name for it), and
    what the method does. Trees: the draft model's may be static or dynamic, Medusa's are static
    (a shape), EAGLE-2's dynamic (a budget)."""
    record = methods.find(method) or methods.get("ar")
    auto_ok = record.auto_k
    auto = bool(auto_k) and auto_ok
    forms = record.tree_forms
    tree = bool(forms)
    both = len(forms) == 2  # the draft model's: static or dynamic, as the checkbox says
    dynamic = forms == ("dynamic",) or (both and bool(dynamic))
    chain = method != "ar" and not record.tree
    return {ui.method_dd: gr.Dropdown(info=method_help(method)),
            ui.k: gr.Slider(visible=chain, interactive=not auto),
            ui.auto_k_box: gr.Checkbox(visible=auto_ok),
            ui.auto_rule_dd: gr.Dropdown(visible=auto),
            ui.confidence_sl: gr.Slider(visible=auto and auto_rule == "confidence"),
            ui.ngram_sl: gr.Slider(visible=("ngram", "ngram") in record.options),  # lookahead's too: its errors name it
            ui.tree_box: gr.Group(visible=tree),
            ui.tree_dynamic_cb: gr.Checkbox(visible=both),
            ui.tree_shape_tb: gr.Textbox(visible="static" in forms, interactive=not dynamic),
            ui.tree_budget_sl: gr.Slider(visible=tree and dynamic),
            ui.acceptance_radio: gr.Radio(visible=chain)}


def on_tree_kind(dynamic):
    return {ui.tree_shape_tb: gr.Textbox(interactive=not dynamic), ui.tree_budget_sl: gr.Slider(visible=bool(dynamic))}


def wire() -> None:
    private = dict(api_visibility="private", show_progress="hidden")
    method_controls = [ui.method_dd, ui.k, ui.auto_k_box, ui.auto_rule_dd, ui.confidence_sl, ui.ngram_sl, ui.tree_box,
                       ui.tree_dynamic_cb, ui.tree_shape_tb, ui.tree_budget_sl, ui.acceptance_radio]
    for control in (ui.method_dd, ui.auto_k_box, ui.auto_rule_dd):
        control.change(on_method, [ui.method_dd, ui.auto_k_box, ui.auto_rule_dd, ui.tree_dynamic_cb], method_controls,
                       **private)
    ui.tree_dynamic_cb.change(on_tree_kind, ui.tree_dynamic_cb, [ui.tree_shape_tb, ui.tree_budget_sl], **private)
    ui.pair.change(on_pair, ui.pair, ui.method_dd, **private)


def on_pair(pair_name):
    """The method menu labels what the chosen pair cannot run (heads it lacks, PyTorch-only methods on llama.cpp)."""
    return gr.Dropdown(choices=method_choices(pair_name))
