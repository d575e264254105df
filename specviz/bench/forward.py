"""The verify-cost curve on the command line: specviz.runtime.costs's forward_cost over a range of
token counts, per dtype and per linear kernel, as JSON.

Usage: python -m specviz.bench.forward --pair qwen-coder --dtype bfloat16 --tokens 1 2 4 8 16
       [--kernels gemv aten]   (specviz's CPU linear kernels against PyTorch's nn.Linear)
"""

from __future__ import annotations

import json

import torch

from specviz.argparsing import Parser
from specviz.errors import run_command
from specviz.runtime.costs import forward_cost
from specviz.runtime.models import load_pair, use_kernel


def __getattr__(name):  # 0.1.0 documented `from specviz.bench.forward import batch_cost`: a warning until 0.3.0
    from specviz import deprecated

    return deprecated.package_name(__name__, name)


def main(argv=None) -> int:
    return run_command(lambda: _main(argv), "interrupted")


def _main(argv) -> int:
    parser = Parser(prog="python -m specviz.bench.forward", description=__doc__.splitlines()[0])
    parser.add_argument("--pair", default="qwen-coder")
    parser.add_argument("--dtype", nargs="+", default=["bfloat16", "float32"])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1, 2, 4, 5, 8, 16, 32])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--kernels", nargs="+", default=["pair"], choices=["pair", "gemv", "aten"],
                        help="linear kernels to time: the pair's own (default), gemv, aten (specviz.runtime.kernels)")
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
