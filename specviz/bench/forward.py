"""The verify-cost curve: time of one target forward over n new tokens after a fixed prefix.

This is the "memory wall" measurement behind speculative decoding: at batch 1 a forward over a
few tokens costs about as much as over one, because reading the weights dominates.
`batch_cost` measures the same at batch B (the engine decodes batch 1 only, so the suite uses it
as the proxy for the batch-size effect: as B grows, forwards become compute-bound and verifying
k + 1 tokens stops being nearly free).
Usage: python -m specviz.bench.forward --pair qwen-coder --dtype bfloat16 --tokens 1 2 4 8 16
       [--kernels gemv aten]   (specviz's CPU linear kernels against PyTorch's nn.Linear)
"""

from __future__ import annotations

import json
import time

import torch

from specviz.argparsing import Parser
from specviz.errors import run_command
from specviz.lm import runner_for, synchronize


def forward_cost(model, n_tokens: list, prefix: int = 64, repeats: int = 5, vocab: int = 1000) -> dict:
    """{n: seconds} of a forward over n tokens on top of a cached `prefix`-token context: the best
    of `repeats` rounds, each round timing every n once (interleaved), after one warm-up round.

    Best of, because on a shared machine other work only ever adds time; interleaved, so that a
    burst of it cannot bias one n against the others.
    """
    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(10, vocab, (prefix + max(n_tokens),), generator=gen).tolist()
    runner = runner_for(model)
    runner.reset()
    runner.forward(ids[:prefix], last_only=True)
    best = {n: float("inf") for n in n_tokens}
    for r in range(repeats + 1):  # round 0 warms up every shape
        for n in n_tokens:
            synchronize(runner.device)
            start = time.perf_counter()
            runner.forward(ids[prefix:prefix + n])
            synchronize(runner.device)
            if r:
                best[n] = min(best[n], time.perf_counter() - start)
            runner.crop(prefix)
    return best


@torch.inference_mode()
def batch_cost(model, batches: list, n_tokens: list, prefix: int = 64, repeats: int = 3,
               vocab: int = 1000) -> dict:
    """{batch: {n: seconds}} of one forward over n new tokens per row, on top of a cached
    `prefix`-token context in each of `batch` rows: best of `repeats` interleaved rounds, as
    forward_cost."""
    from transformers import DynamicCache

    gen = torch.Generator().manual_seed(0)
    caches, ids = {}, {}
    for b in batches:
        ids[b] = torch.randint(10, vocab, (b, prefix + max(n_tokens)), generator=gen).to(model.device)  # (B, T)
        caches[b] = DynamicCache(config=model.config)
        model(input_ids=ids[b][:, :prefix], past_key_values=caches[b], use_cache=True, logits_to_keep=1)
    best = {b: {n: float("inf") for n in n_tokens} for b in batches}
    for r in range(repeats + 1):  # round 0 warms up every shape
        for b in batches:
            for n in n_tokens:
                synchronize(model.device)
                start = time.perf_counter()
                model(input_ids=ids[b][:, prefix:prefix + n], past_key_values=caches[b], use_cache=True)
                synchronize(model.device)
                if r:
                    best[b][n] = min(best[b][n], time.perf_counter() - start)
                caches[b].crop(-n)  # this transformers takes a negative count of tokens to drop
    return best


def main(argv=None) -> int:
    return run_command(lambda: _main(argv), "interrupted")


def _main(argv) -> int:
    from specviz.models import load_pair, use_kernel

    parser = Parser(prog="python -m specviz.bench.forward", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 4, 5, 8, 16, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", nargs="+", default=["pair"], choices=["pair", "gemv", "aten"],
                        help="linear kernels to time: the pair's own (default), gemv, aten (specviz.kernels)")
    args = parser.parse_args(argv)
    report = {}
    for dtype in args.dtype:
        pair = load_pair(args.pair, dtype=dtype)
        for kernel in args.kernels:
            if kernel != "pair":
                use_kernel(pair, kernel)
            for role in ("target", "draft"):
                model = getattr(pair, role)
                cost = forward_cost(model, args.tokens, repeats=args.repeats,
                                    vocab=min(model.config.vocab_size, 1000))
                report[f"{role}/{dtype}/{pair.cpu_linear}"] = cost
                print(f"{role:6s} {dtype:9s} {pair.cpu_linear:5s} "
                      + "  ".join(f"{n}:{t * 1000:.0f}ms" for n, t in cost.items()), flush=True)
        del pair
    print(json.dumps({"device": str(torch.device('cuda' if torch.cuda.is_available() else 'cpu')),
                      "threads": torch.get_num_threads(), "seconds": report}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
