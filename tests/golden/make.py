"""Regenerate the golden traces of the renderer tests (tiny pair, CPU, fixed seeds):

    PYTHONPATH=. python tests/golden/make.py

tiny_spec_t1.jsonl   spec, k=4, temperature 1.0, seed 0: accepts, rejects, wasted drafts,
                     residual resamples, bonus tokens and a newline token.
tiny_spec_greedy.jsonl  spec, k=4, greedy.
tiny_ar.jsonl        autoregressive, greedy.
Timings inside differ from run to run; tests never compare them.
"""

from pathlib import Path

import specviz
from specviz import trace

HERE = Path(__file__).parent
PROMPT = "def add(a, b):\n    return"
RUNS = {
    "tiny_spec_t1.jsonl": dict(method="spec", k=4, temperature=1.0, max_new_tokens=24, seed=0),
    "tiny_spec_greedy.jsonl": dict(method="spec", k=4, temperature=0.0, max_new_tokens=16, seed=0),
    "tiny_ar.jsonl": dict(method="ar", temperature=0.0, max_new_tokens=8, seed=0),
}

if __name__ == "__main__":
    pair = specviz.load_pair("tiny")
    for name, options in RUNS.items():
        n = trace.save(specviz.generate(pair, PROMPT, record_topk=8, **options), HERE / name)
        print(f"{name}: {n} events")
