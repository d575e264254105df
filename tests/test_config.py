"""RunConfig checks itself, and generate() takes one: a config with overrides runs exactly the
run the same keywords ask for. Its messages name options a user can set: the command line's
flags there, the Python arguments elsewhere."""

import ast
import pickle
import re
from pathlib import Path

import pytest

from specviz import config
from specviz import events as ev
from specviz import generate
from specviz.config import RunConfig
from specviz.errors import InputError


def test_a_config_is_checked_when_made():
    with pytest.raises(InputError, match=r"k \(draft length\) must be a whole number from 1 to 32"):
        RunConfig(k=0)
    with pytest.raises(InputError, match="tree must be 'dynamic' or children per depth"):
        RunConfig(method="tree", tree="3,x")
    with pytest.raises(InputError, match="lookahead decoding is greedy-only"):
        RunConfig(method="spec").replace(method="lookahead", temperature=0.5)
    with pytest.raises(InputError, match="Unknown option 'metod'"):
        RunConfig.of(metod="spec")


def test_replace_gives_a_checked_copy_and_leaves_the_original():
    base = RunConfig(method="tree", tree=" 3, 2 ")
    hot = base.replace(temperature=1)
    assert base.tree == hot.tree == "3,2" and base.temperature == 0.0
    assert hot.temperature == 1.0 and hot.warp.temperature == 1.0 and not hot.warp.greedy
    assert RunConfig(**hot.to_dict()) == hot and pickle.loads(pickle.dumps(hot)) == hot
    assert base.replace() is base


def test_what_a_run_records_as_k():
    assert RunConfig(method="ar").draft_k == 0
    assert RunConfig(method="tree").draft_k is None and RunConfig(method="lookahead").draft_k is None
    assert RunConfig(method="spec", k="auto").draft_k == "auto"


@pytest.mark.parametrize("keywords", [
    dict(method="spec", k=3, temperature=1.0, seed=5, max_new_tokens=12),
    dict(method="tree", tree="2,2", temperature=0.0, max_new_tokens=12),
])
def test_generate_with_a_config_equals_the_keyword_form(tiny, keywords):
    def stripped(stream):
        return [ev.without_timings(e.to_dict()) for e in stream]

    by_keywords = stripped(generate(tiny, "def f(x):", **keywords))
    config = RunConfig(**{**keywords, "max_new_tokens": 64})
    assert stripped(generate(tiny, "def f(x):", config, max_new_tokens=keywords["max_new_tokens"])) == by_keywords
    assert stripped(generate(tiny, "def f(x):", RunConfig.of(**keywords))) == by_keywords
    with pytest.raises(InputError, match="config must be a specviz.config.RunConfig"):
        generate(tiny, "def f(x):", keywords)


# ---------------------------------------------------------------------------------------------
# every message names an option a user can set: by its flag from the command line, by its Python
# argument otherwise

# (options that fail one check, the option its message must name; None: the message names a value)
BAD = [
    (dict(method="beam"), None), (dict(method="ar", k="auto"), "k"), (dict(method="tree", k="load"), "k"),
    (dict(k=0), "k"), (dict(batch=0), "batch"), (dict(method="tree", batch=2), None),
    (dict(spec_off_batch=-1), "spec_off_batch"), (dict(acceptance="loose"), "acceptance"),
    (dict(auto_rule="x"), "auto_rule"), (dict(confidence=1.5), "confidence"), (dict(ngram=0), "ngram"),
    (dict(temperature=-1.0), "temperature"), (dict(top_k=-1), "top_k"), (dict(top_p=0.0), "top_p"),
    (dict(max_new_tokens=0), "max_new_tokens"), (dict(seed=2**64), "seed"), (dict(seed=-1), "seed"),
    (dict(record_topk=101), "record_topk"), (dict(method="tree", acceptance="typical"), "acceptance"),
    (dict(method="medusa-tree", tree="dynamic"), "tree"), (dict(method="tree", tree="3,x"), "tree"),
    (dict(method="eagle-tree", tree_budget=0), "tree_budget"), (dict(method="eagle-tree", tree_depth=0), "tree_depth"),
    (dict(method="dflash-tree", tree_width=17), "tree_width"), (dict(heads=3), "heads"),
    (dict(method="lookahead", temperature=1.0), "temperature"),
    (dict(method="lookahead", acceptance="typical"), "acceptance"), (dict(method="lookahead", ngram=1), "ngram"),
    (dict(method="lookahead", lookahead_window=0), "lookahead_window"),
    (dict(method="lookahead", lookahead_pool=17), "lookahead_pool"),
    (dict(method="lookahead", ngram=8, lookahead_window=16, lookahead_pool=16), "lookahead_pool"),
    (dict(suffix_min_prob=0.0), "suffix_min_prob"), (dict(suffix_session="x" * 200), "suffix_session"),
    (dict(method="ssd", ssd_fanout=0), "ssd_fanout"), (dict(ssd_prepare="half"), "ssd_prepare"),
    (dict(ssd_threads=0), "ssd_threads"), (dict(method="suffix-tree", acceptance="typical"), "acceptance"),
]


def generate_flags() -> set:
    from specviz.cli import build_parser

    sub = next(a for a in build_parser()._actions if a.dest == "command")
    return set(sub.choices["generate"]._option_string_actions)


def test_every_option_has_a_flag_or_is_a_python_argument_only():
    flags = generate_flags()
    named = {name: config.flag(name) for name in sorted(config.FIELDS | set(config.LOAD_OPTIONS))}
    assert {name for name, f in named.items() if f is None} == {"suffix_session"}
    assert {name: f for name, f in named.items() if f is not None and f not in flags} == {}


def test_the_command_lines_defaults_are_the_configs():
    from specviz.cli import build_parser, run_options

    args = build_parser().parse_args(["generate", "--prompt", "x"])
    assert RunConfig.of(**{**run_options(args), "batch": 1}) == RunConfig()


def failure(options: dict, flags: bool) -> tuple:
    """(message, line of the raise in config.py) of the InputError these options raise."""
    with pytest.raises(InputError) as exc:
        if flags:
            with config.as_flags():
                RunConfig.of(**options)
        else:
            RunConfig.of(**options)
    frames = [tb for tb in _frames(exc.value.__traceback__) if tb.tb_frame.f_code.co_filename == config.__file__]
    return str(exc.value), frames[-1].tb_lineno


def _frames(tb):
    while tb is not None:
        yield tb
        tb = tb.tb_next


def raise_lines() -> set:
    """The lines of config.py's checks (the _check functions) that raise an InputError."""
    tree = ast.parse(Path(config.__file__).read_text(encoding="utf-8"))
    checks = [f for f in tree.body if isinstance(f, ast.FunctionDef) and f.name.startswith("_check")]
    return {node.lineno for f in checks for node in ast.walk(f) if isinstance(node, ast.Raise)}


@pytest.mark.parametrize("options, name", BAD, ids=[repr(o) for o, _ in BAD])
def test_a_message_names_the_flag_on_the_command_line_and_the_argument_in_python(options, name):
    python, _ = failure(options, flags=False)
    cli, _ = failure(options, flags=True)
    assert "--" not in python
    assert set(re.findall(r"--[a-z][a-z-]*", cli)) <= generate_flags(), cli
    if name is not None:
        assert re.search(rf"\b{name}\b", python), python
        assert (config.flag(name) or name) in cli, cli
    python_only = {n for n in config.FIELDS if "_" in n and config.flag(n)}  # not English words too
    assert not {n for n in python_only if re.search(rf"\b{n}\b", cli)}, cli


def test_every_check_has_a_bad_input_above():
    hit = {failure(options, flags=False)[1] for options, _ in BAD}
    assert hit == raise_lines()


def test_the_app_refuses_a_seed_torch_cannot_take_with_gr_error():
    gr = pytest.importorskip("gradio")
    with pytest.raises(gr.Error) as exc:
        app_options("spec", seed=float(2**64))
    assert exc.value.message == "seed must be a whole number from 0 to 2**63 - 1, got 18446744073709551616."


def test_the_app_shows_the_n_gram_control_to_every_method_whose_errors_name_it():
    gr = pytest.importorskip("gradio")
    from specviz import methods
    from webapp import settings
    from webapp.common import ui

    with gr.Blocks():
        settings.build_sidebar()
    shown = {name for name in methods.names() if settings.on_method(name, False, "cost")[ui.ngram_sl].visible}
    assert shown == {"pld", "lookahead", "cascade"}
    with pytest.raises(gr.Error, match=r"lookahead needs an n-gram size from 2 to 8 \(ngram\), got 1"):
        app_options("lookahead", ngram=1.0)


def app_options(method, seed=0.0, **controls):
    """The run the app's controls ask for (webapp.common.options), sliders' floats and all."""
    from webapp.common import options

    return options(method, 4, 0.0, 1.0, 32.0, seed, False, **controls)
