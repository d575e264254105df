"""One method is one record: the registry (specviz.methods) is where every list of methods comes
from. A throwaway method, added as a contributor would add one (a record plus one drafter
module, tests/throwaway_drafter.py), runs through the engine, the batched engine and its load
policy, the CLI and the app's menus, exactly (greedy: token for token autoregressive decoding)."""

import pytest

from specviz import generate, methods
from specviz.config import RunConfig
from specviz.errors import InputError

PROMPTS = ["def add(a, b):\n    return a + b\n\ndef add", "aaaa"]


@pytest.fixture
def echo():
    record = methods.register(methods.Method(
        "echo", "repeat the last token k times", "the last token", build="throwaway_drafter:build",
        batch=True, load_k=True))
    try:
        yield record
    finally:
        methods.unregister("echo")
    assert not methods.known("echo")


def tokens(events, row=None):
    done = [e for e in events if e.kind == "run_finished" and getattr(e, "row", None) == row]
    return done[-1].token_ids


def test_every_list_of_methods_is_the_registrys():
    assert methods.names() == ("ar", "spec", "tree", "pld", "lookahead", "cascade", "medusa", "medusa-tree", "eagle",
                               "eagle-tree", "eagle3", "eagle3-tree", "peagle", "suffix", "suffix-tree", "dflash", "dflash-tree",
                               "ssd")
    assert methods.names(batch=True) == ("ar", "spec", "pld", "medusa", "eagle", "eagle3", "peagle", "suffix", "dflash")
    assert methods.names(load_k=True) == ("spec", "pld", "medusa", "eagle", "eagle3", "peagle", "suffix", "dflash")
    assert methods.names(auto_k=True) == ("spec", "cascade")
    assert methods.names(llamacpp=True) == ("ar", "spec", "pld", "cascade", "medusa", "eagle", "eagle3", "peagle", "suffix",
                                            "dflash")
    assert methods.names(tree=True) == ("tree", "lookahead", "medusa-tree", "eagle-tree", "eagle3-tree", "suffix-tree",
                                        "dflash-tree")
    assert {m: methods.get(m).heads for m in methods.names() if methods.get(m).heads} == {
        "medusa": "medusa", "medusa-tree": "medusa", "eagle": "eagle", "eagle-tree": "eagle", "eagle3": "eagle3",
        "eagle3-tree": "eagle3", "peagle": "peagle", "dflash": "dflash", "dflash-tree": "dflash"}


def test_a_record_that_contradicts_itself_is_refused():
    with pytest.raises(ValueError, match="trees run one sequence at a time"):
        methods.Method("x", "", "", "m:f", shape="draft tree", tree_forms=("static",), batch=True)
    with pytest.raises(ValueError, match="k='load' is a batch's policy"):
        methods.Method("x", "", "", "m:f", load_k=True)
    with pytest.raises(ValueError, match="is registered already"):
        methods.register(methods.get("spec"))


def test_a_throwaway_method_runs_in_the_engine_exactly(tiny, echo):
    for prompt in PROMPTS:
        ar = tokens(generate(tiny, prompt, method="ar", max_new_tokens=16))
        events = list(generate(tiny, prompt, method="echo", k=3, max_new_tokens=16))
        assert tokens(events) == ar
        assert events[0].method == "echo" and events[0].drafter == "echo" and events[0].k == 3
        assert any(e.kind == "token_accepted" for e in events) or prompt != "aaaa"  # it drafts, and is kept
    with pytest.raises(InputError, match="k='auto' works with spec, cascade"):  # its record says no
        RunConfig(method="echo", k="auto")


def test_a_throwaway_method_runs_in_a_batch_and_under_the_load_policy(tiny, echo):
    ar = [tokens(generate(tiny, p, method="ar", max_new_tokens=12)) for p in PROMPTS]
    for k in (3, "load"):
        events = list(generate(tiny, PROMPTS, method="echo", k=k, max_new_tokens=12))
        assert [tokens(events, row) for row in range(len(PROMPTS))] == ar
        assert any(e.kind == "batch_step" for e in events)


def test_a_throwaway_method_runs_from_the_cli(echo, capsys):
    from specviz.cli import main

    assert main(["generate", "--pair", "tiny", "--method", "echo", "--k", "2", "--prompt", "aaaa",
                 "--max-new-tokens", "6", "--jsonl"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert '"method": "echo"' in lines[0] and '"kind": "run_finished"' in lines[-1]


def test_a_throwaway_method_is_on_the_apps_menus(echo):
    pytest.importorskip("gradio")
    from webapp.serving import method_choices as serving_choices
    from webapp.settings import method_choices, method_help

    assert ("echo", "echo") in method_choices("tiny") and method_help("echo") == "repeat the last token k times"
    assert ("echo: the last token, fixed k", "echo") in serving_choices()
