"""Regenerate the golden traces of the renderer tests (tiny pair, CPU, fixed seeds):

    PYTHONPATH=. python tests/golden/make.py [NAME ...]     (all when no name is given)

tiny_spec_t1.jsonl      spec, k=4, temperature 1.0, seed 0: accepts, rejects, wasted drafts,
                        residual resamples, bonus tokens and a newline token.
tiny_spec_greedy.jsonl  spec, k=4, greedy.
tiny_ar.jsonl           autoregressive, greedy.
tiny_tree_t1.jsonl      tree, static 3,2,1, temperature 1.0, seed 0: siblings rejected before one
                        is accepted at the same depth, residuals and bonus tokens after a path.
tiny_typical_t1.jsonl   spec, k=4, typical acceptance (LOSSY), temperature 1.0, seed 1.
tiny_pld.jsonl          prompt lookup on a prompt that repeats itself: copied spans.
tiny_cascade_auto.jsonl cascade, k="auto" (heuristic rule), greedy: why k, n-gram counters.
Timings inside differ from run to run; tests never compare them.
"""

import sys
from pathlib import Path

import specviz
from specviz.analysis import trace

HERE = Path(__file__).parent
PROMPT = "def add(a, b):\n    return"
REPEAT = "def add(a, b):\n    return a + b\n\ndef add(a, b):\n    return"
RUNS = {
    "tiny_spec_t1.jsonl": dict(method="spec", k=4, temperature=1.0, max_new_tokens=24, seed=0),
    "tiny_spec_greedy.jsonl": dict(method="spec", k=4, temperature=0.0, max_new_tokens=16, seed=0),
    "tiny_ar.jsonl": dict(method="ar", temperature=0.0, max_new_tokens=8, seed=0),
    "tiny_tree_t1.jsonl": dict(method="tree", tree="3,2,1", temperature=1.0, max_new_tokens=24, seed=0),
    "tiny_typical_t1.jsonl": dict(method="spec", k=4, acceptance="typical", temperature=1.0, max_new_tokens=24,
                                  seed=1),
    "tiny_pld.jsonl": dict(prompt=REPEAT, method="pld", k=4, ngram=3, temperature=0.0, max_new_tokens=12, seed=0),
    "tiny_cascade_auto.jsonl": dict(prompt=REPEAT, method="cascade", k="auto", auto_rule="heuristic", ngram=3,
                                    temperature=0.0, max_new_tokens=12, seed=0),
}

if __name__ == "__main__":
    pair = specviz.load_pair("tiny")
    for name in sys.argv[1:] or RUNS:
        options = dict(RUNS[name])
        prompt = options.pop("prompt", PROMPT)
        n = trace.save(specviz.generate(pair, prompt, record_topk=8, **options), HERE / name)
        print(f"{name}: {n} events")
