"""specviz.runtime.lm.GraphLM on a GPU: every method, with CUDA graphs, reproduces greedy AR token for
token (float32, random weights of the 0.5B shape for both models), and two runs interleaved on
the same models (the app's race) each get their own static cache. Skipped without CUDA; `make gpu-check`
runs them with every other CUDA-only test (specviz.bench.gpu_check)."""

import pytest
import torch

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")

PROMPT = "def is_prime(n: int) -> bool:\n    "
SETTINGS = [dict(method="spec", k=4), dict(method="spec", k="auto"), dict(method="tree"),
            dict(method="tree", tree="dynamic"), dict(method="pld"), dict(method="lookahead"),
            dict(method="cascade", k=4), dict(method="ssd", k=4)]  # ssd: the draft's graphs beside its second stream


@pytest.fixture(scope="module")
def pairs():
    from specviz.bench.synthetic import random_pair
    from specviz.runtime.lm import use_cuda_graphs

    eager = random_pair("random:0.5b/0.5b", device="cuda", dtype="float32")
    graphs = random_pair("random:0.5b/0.5b", device="cuda", dtype="float32")
    for model in (graphs.target, graphs.draft):
        use_cuda_graphs(model, max_len=512)
    return eager, graphs


def tokens(pair, **kw):
    from specviz import generate

    events = list(generate(pair, PROMPT, max_new_tokens=40, **kw))
    assert events[0].cuda_graphs is (getattr(pair.target, "_specviz_graph_len", None) is not None)
    return events[-1].token_ids


def test_graph_runner_replays_what_eager_decoding_computes(pairs):
    from specviz.runtime.lm import GraphLM, runner_for

    eager, graphs = pairs
    assert isinstance(runner_for(graphs.target), GraphLM)
    assert tokens(graphs, method="ar") == tokens(eager, method="ar")


@pytest.mark.parametrize("settings", SETTINGS, ids=lambda s: "-".join(str(v) for v in s.values()))
def test_every_method_with_graphs_equals_ar(pairs, settings):
    eager, graphs = pairs
    reference = tokens(eager, method="ar")
    assert tokens(graphs, **settings) == reference
    assert tokens(graphs, **settings) == reference  # again, on the captured graphs


def test_two_interleaved_runs_get_their_own_caches(pairs):
    from specviz import generate

    eager, graphs = pairs
    reference = tokens(eager, method="ar")
    a = generate(graphs, PROMPT, method="ar", max_new_tokens=40)
    b = generate(graphs, PROMPT, method="spec", k=4, max_new_tokens=40)
    done = {}
    while len(done) < 2:  # one event of each in turn, as the race handler does
        for name, run in (("a", a), ("b", b)):
            if name not in done:
                event = next(run, None)
                if event is not None and event.kind == "run_finished":
                    done[name] = event.token_ids
    assert done["a"] == reference and done["b"] == reference
    states = graphs.target.__dict__["_specviz_graph_states"]
    assert len(states) >= 2  # the second run did not share the first one's cache


def test_sampling_with_graphs_follows_the_seed(pairs):
    eager, graphs = pairs
    one = tokens(graphs, method="spec", k=4, temperature=1.0, seed=3)
    two = tokens(graphs, method="spec", k=4, temperature=1.0, seed=3)
    assert one == two and len(one) > 0


def test_graphs_chosen_by_measurement_keep_the_output():
    """load_pair on CUDA times a one-token forward eagerly and as a graph, keeps graphs where
    they were faster, says so, and decoding still equals AR token for token."""
    from specviz.bench.synthetic import random_pair
    from specviz.runtime.lm import AUTO_GRAPH_LEN, choose_cuda_graphs

    pair = random_pair("random:0.5b/0.5b", device="cuda", dtype="float32")
    notes = [choose_cuda_graphs(model) for model in (pair.target, pair.draft)]
    for model, note in zip((pair.target, pair.draft), notes):
        on = getattr(model, "_specviz_graph_len", None) == AUTO_GRAPH_LEN
        assert note.startswith("CUDA graphs on" if on else "CUDA graphs off") and " ms " in note
    assert tokens(pair, method="spec", k=4) == tokens(pair, method="ar")
