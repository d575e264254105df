"""RunConfig checks itself, and generate() takes one: a config with overrides runs exactly the
run the same keywords ask for."""

import pickle

import pytest

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
