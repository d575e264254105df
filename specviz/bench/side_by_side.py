"""Where speculation pays on a laptop CPU: llama.cpp's own loop and specviz's lanes over llama.cpp,
side by side, on held-out code and chat, against llama.cpp's own greedy decoding of the shipped file.

One process, one sitting, qwen-coder's shipped Q4_K_M target, greedy, `--tokens` per prompt,
`--repeats` interleaved rounds (each lane and prompt keeps its fastest):

  llama-server   greedy (every ratio's denominator); draft-simple (the 0.5B, k drafts a step);
                 ngram-mod (llama.cpp's own settings); draft-eagle3 with specviz's EAGLE-3 in
                 llama.cpp's layout (exported by specviz.runtime.llamacpp.drafter), always k
                 drafts (p-min 0) and with llama.cpp's default confidence cut; draft-dflash with
                 specviz's DFlash in llama.cpp's layout (a block of k + 1, p-min 0)
  specviz        its loop over llama.cpp's passes (specviz.runtime.llamacpp.runner): ar, spec
                 (k, and k chosen each step by the cost rule), pld, suffix, eagle3 and dflash
                 (specviz's own layers), eagle3-llama and dflash-llama (the very drafters
                 llama-server runs, in specviz's engine)
  costs          V(n), the target's pass over n tokens in one-token passes; c, the 0.5B's
                 one-token pass; each heads lane's draft cost per forward (from the pilot).
                 Measured apart from the lanes three times (before them, after code's, after
                 chat's); each pass keeps its best (engines.best_cost)
  predictions    each specviz lane's speedup over specviz's AR, from the pilot's alpha and those
                 costs, measured apart from the lanes it predicts
  divergences    where a specviz lane's text parts from its AR on the 4-bit file: the one-token
                 pass's margin there and how far a pass over several tokens moves those logits (a
                 near tie flipped, or a bug), after every timing

The held-out rule, fixed before the run: the code prompts are specviz.bench.engines.PROMPTS and
the chat prompts CHAT below; neither is in the drafters' training bank
(specviz.training.prompt_bank), a pilot or a test; `held_out_problems()` checks it and the run
refuses to start otherwise. The pilot's prompts (PILOT_CODE, PILOT_CHAT) are others again.

A last section, "what a drafter would need here", asks the theory alone (specviz.analysis.theory)
what acceptance rate each drafter must reach, at its measured cost and this machine's V(n), to
match plain decoding and to reach 1.3x: the answer to "could a better-trained drafter pay here?".

Usage: python -m specviz.bench.side_by_side [--tokens 64] [--repeats 2] [--out docs/benchmarks/llamacpp-side-by-side]
       python -m specviz.bench.side_by_side --render   (the summary and Markdown again from the JSON)
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import specviz
from specviz import files
from specviz.analysis import theory
from specviz.argparsing import Parser
from specviz.bench import engines
from specviz.errors import InputError, run_command
from specviz.runtime.llamacpp import server as llamacpp_server

LLAMA_KINDS = llamacpp_server.SPECVIZ_DRAFTERS  # specviz's drafters in llama.cpp's layout: eagle3, dflash

K = 3  # drafts a step, llama-server's and specviz's alike (llama.cpp's default n-max for a draft model)
CHAT = (  # chat, through the target's chat template; written for this report only
    "What is the difference between a list and a tuple in Python? Answer in two short paragraphs.",
    "Explain what a race condition is, with a small example in words.",
    "Give three tips for writing clear commit messages, one sentence each.",
)
PILOT_CODE = (
    "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "def flatten(items):\n    \"\"\"Flatten a nested list of lists into one list.\"\"\"\n",
)
PILOT_CHAT = ("Why do programmers write unit tests? Answer briefly.",)
KINDS = ("code", "chat")
COST_TOKENS = (1, 2, 3, 4, 5, 6, 8)


def specviz_lanes(llama_heads: dict) -> dict:
    """name -> generate() options of specviz's lanes; `llama_heads`: kind -> the folder of its heads
    in llama.cpp's layout (eagle3-llama and dflash-llama only where those exist)."""
    lanes = {"ar": {"method": "ar"}, "spec": {"method": "spec", "k": K},
             "spec-auto": {"method": "spec", "k": "auto", "auto_rule": "cost"},
             "pld": {"method": "pld", "k": K}, "suffix": {"method": "suffix", "k": K},
             "eagle3": {"method": "eagle3", "k": K}, "dflash": {"method": "dflash", "k": K}}
    for kind, folder in llama_heads.items():
        lanes[f"{kind}-llama"] = {"method": kind, "k": K, "heads": str(folder)}
    return lanes


SERVER_LANES = {  # name -> llamacpp_server.Server options
    "greedy": {},
    "draft-simple": {"drafter": "draft-model", "draft_max": K},
    "ngram-mod": {"drafter": "ngram-mod", "draft_max": K},
    "draft-eagle3": {"drafter": "eagle3", "draft_max": K, "p_min": 0.0},
    "draft-eagle3-pmin": {"drafter": "eagle3", "draft_max": K},
    "draft-dflash": {"drafter": "dflash", "draft_max": K, "p_min": 0.0},
}


def say(text: str) -> None:
    print(f"[side-by-side] {text}", file=sys.stderr, flush=True)


def held_out_problems() -> list:
    """The report's prompts that are also training, pilot or test prompts (none, or the run stops)."""
    from specviz.prompts import PROMPTS
    from specviz.training.prompt_bank import prompt_bank

    report = set(engines.PROMPTS) | set(CHAT)
    used = {p.text for p in prompt_bank(0)} | set(PILOT_CODE) | set(PILOT_CHAT) | {p.text for p in PROMPTS.values()}
    return sorted(report & used)


def prompts_of(pair, kind: str) -> tuple:
    """(texts as specviz's generate takes them, token ids as llama-server takes them, chat)."""
    if kind == "code":
        return engines.PROMPTS, list(engines.PROMPTS), False
    return CHAT, [pair.encode(text, chat=True) for text in CHAT], True


def forget(pair) -> None:
    """Suffix decoding drafts from the session's earlier outputs: each run starts with none, so no
    round drafts from an earlier round's answer to the same prompt (held out means unseen)."""
    pair.__dict__.pop("_suffix", None)


def run_specviz(pair, lanes: dict, kind: str, tokens: int, repeats: int) -> dict:
    texts, _, chat = prompts_of(pair, kind)
    chat_lanes = {name: {**options, "chat": chat} for name, options in lanes.items()}
    return engines.lanes_section(pair, tokens, repeats, chat_lanes, texts, fresh=forget)


def fresh_server_runs(options: dict, tokens: int, repeats: int, ids: list) -> dict:
    """engines.server_runs with a new llama-server for every request: llama.cpp's n-gram drafters
    keep what every earlier request produced, so a second round would draft the first's answer."""
    per = {}
    for _ in range(repeats):
        for i, prompt in enumerate(ids):
            with llamacpp_server.Server(gguf="q4_k_m", **options) as server:
                result = server.complete(prompt, tokens)
            if i not in per or result["tokens_per_s"] > per[i]["tokens_per_s"]:
                per[i] = result
    return per


def run_server(pair, kind: str, tokens: int, repeats: int, heads: dict) -> dict:
    from specviz.runtime.llamacpp.drafter import drafter_gguf

    _, ids, _ = prompts_of(pair, kind)
    out = {}
    for name, options in SERVER_LANES.items():
        if options.get("drafter") in heads:  # specviz's drafter exported to llama.cpp
            options = {**options, "draft_model": drafter_gguf(pair, options["drafter"], heads[options["drafter"]])}
        elif options.get("drafter") in LLAMA_KINDS:
            continue
        if options.get("drafter") in llamacpp_server.NGRAM_TYPES:
            per = fresh_server_runs(options, tokens, repeats, ids)
        else:
            with llamacpp_server.Server(gguf="q4_k_m", **options) as server:
                per = engines.server_runs(server, tokens, repeats, ids)
        out[name] = engines.server_lane(per)
    return out


def pilot(pair, lanes: dict, cost: dict, tokens: int) -> dict:
    """Per kind, engines.pilot_lanes on that kind's pilot prompts."""
    return {kind: engines.pilot_lanes(pair, lanes, prompts, cost, tokens, chat=chat)
            for kind, prompts, chat in (("code", PILOT_CODE, False), ("chat", PILOT_CHAT, True))}


def summary(report: dict) -> dict:
    """Every lane over llama-server's greedy decoding, per kind; lossless lanes only are ranked
    (llama-server's draft lanes must give its greedy text; specviz's on a 4-bit file may part from
    its own AR at a near-tie of a multi-row pass, so its lanes are ranked by speed and their
    agreement is reported beside). A llama-server drafting lane that drafted nothing (llama.cpp's
    n-gram drafter on a fresh request) decoded as greedy does: its ratio is the sitting's noise, so
    it is not ranked."""
    out = {}
    for kind in report["kinds"]:
        rep = report["kinds"][kind]
        base = rep["server"]["greedy"]["decode_tokens_per_s"]
        greedy_ids = rep["server"]["greedy"]["token_ids"]
        ar_ids = rep["specviz"]["ar"]["token_ids"]
        rows = {}
        for name, lane in rep["server"].items():
            rows[f"server:{name}"] = {"over_greedy": lane["decode_tokens_per_s"] / base,
                                      "same_text": _same(lane["token_ids"], greedy_ids)}
        for name, lane in rep["specviz"].items():
            rows[f"specviz:{name}"] = {"over_greedy": lane["decode_tokens_per_s"] / base,
                                       "same_text": _same(lane["token_ids"], ar_ids)}
        idle = [f"server:{name}" for name, lane in rep["server"].items() if name != "greedy" and lane.get("draft_n") == 0]
        best = max((k for k in rows if k not in idle), key=lambda k: rows[k]["over_greedy"])
        out[kind] = {"lanes": rows, "fastest": best, "fastest_over_greedy": rows[best]["over_greedy"],
                     "drafted_nothing": idle}
    code, chat = out.get("code", {}).get("lanes", {}), out.get("chat", {}).get("lanes", {})
    eagle = [code[k]["over_greedy"] for k in ("specviz:eagle3", "specviz:eagle3-llama") if k in code]
    out["targets"] = {
        "fastest_code_at_least_1.3x": out["code"]["fastest_over_greedy"] >= 1.3 if code else None,
        "fastest_code_lane_never_below_1x_on_chat": (chat.get(out["code"]["fastest"], {}).get("over_greedy", 0) >= 1.0
                                                     if code and chat else None),
        "specviz_eagle3_at_least_1.15x_on_code": max(eagle) >= 1.15 if eagle else None,
    }
    return out


NEED_AT = (1.0, 1.3)  # speedups over plain decoding asked of a drafter: break even, and the target
NEED_K = range(1, max(COST_TOKENS))  # draft lengths whose verify pass the cost curve measured
DRAFTERS = {"spec": "the 0.5B draft model (spec)", "pld": "prompt lookup (pld)", "suffix": "suffix tree (suffix)",
            "eagle3": "EAGLE-3, specviz's layer (eagle3)", "dflash": "DFlash, specviz's layer (dflash)",
            "eagle3-llama": "EAGLE-3 in llama.cpp's layout (eagle3-llama)",
            "dflash-llama": "DFlash in llama.cpp's layout (dflash-llama)"}


def needs(report: dict) -> dict:
    """What each specviz drafter would need on this machine, from the costs measured apart (V(n),
    its c from the code pilot) and the theory alone: the best speedup with every draft accepted,
    and the acceptance rate it must reach to match plain decoding and to reach 1.3x (at the draft
    length that asks least; None: out of reach at any acceptance). Beside them, the alpha each
    lane measured on held-out code and chat."""
    curve = engines.verify_curve(report["cost"])
    lanes = specviz_lanes({kind: Path(entry["folder"]) for kind, entry in (report.get("llama_heads") or {}).items()})
    out = {}
    for name, p in report["pilot"]["code"].items():
        if name == "spec-auto" or name not in lanes:  # spec-auto: the same drafter as spec
            continue
        method = lanes[name]["method"]
        step = {k: p["c"] * engines.draft_forwards(method, k) + curve(k + 1) for k in NEED_K}
        best = max(NEED_K, key=lambda k: (k + 1) / step[k])
        row = {"c": p["c"], "forwards": "one per block" if method == "dflash" else "none" if
               method in ("pld", "suffix") else "one per draft", "best": (best + 1) / step[best], "best_k": best,
               "measured_alpha": {kind: report["kinds"][kind]["specviz"].get(name, {}).get("alpha")
                                  for kind in report["kinds"]}}
        for target in NEED_AT:
            asked = {k: theory.alpha_needed(target, k, p["c"], curve, engines.draft_forwards(method, k)) for k in NEED_K}
            reach = {k: a for k, a in asked.items() if a is not None}
            k = min(reach, key=reach.get) if reach else None
            row[f"alpha_for_{target}x"] = {"alpha": reach[k] if k else None, "k": k}
        out[name] = row
    return out


def _same(a: list, b: list) -> str:
    """"k/n": how many prompts' token ids are the same in both."""
    return f"{sum(x == y for x, y in zip(a, b))}/{len(b)}"


def main(argv=None) -> int:
    return run_command(lambda: _main(argv), "interrupted before the report was written")


def _main(argv) -> int:
    from specviz.runtime.llamacpp.drafter import has_heads, llama_heads_folder

    parser = Parser(prog="python -m specviz.bench.side_by_side", description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--out", default="docs/benchmarks/llamacpp-side-by-side", help="report path without extension")
    parser.add_argument("--render", action="store_true",
                        help="runs nothing: rewrites the report's summary, needs and Markdown from its JSON")
    args = parser.parse_args(argv)
    out = Path(args.out)
    if args.render:
        return render(out)
    if args.tokens < 8 or args.repeats < 1:
        raise InputError("--tokens must be at least 8 and --repeats at least 1.")
    clash = held_out_problems()
    if clash:
        raise InputError(f"the report's prompts must be held out, but these are training, pilot or test prompts: {clash}")
    if llamacpp_server.missing():
        raise InputError(llamacpp_server.missing())
    pair = specviz.load_pair("qwen-coder", backend="llama.cpp", progress=lambda _f, m: None)
    heads = {}
    for kind in LLAMA_KINDS:
        folder = llama_heads_folder(pair.family, kind)
        if has_heads(folder, kind):
            heads[kind] = folder
        else:
            say(f"no {kind} heads in llama.cpp's layout in {folder}: its lanes are left out")
    lanes = specviz_lanes(heads)
    started = time.time()
    report = {"machine": engines._machine(), "tokens": args.tokens, "repeats": args.repeats, "k": K,
              "prompts": {"code": list(engines.PROMPTS), "chat": list(CHAT)},
              "pilot_prompts": {"code": list(PILOT_CODE), "chat": list(PILOT_CHAT)},
              "target": pair.target.desc, "llama_heads": {}, "kinds": {}}
    for kind, folder in heads.items():
        entry = json.loads((folder / "manifest.json").read_text())[kind]
        report["llama_heads"][kind] = {"folder": str(folder), "command": entry.get("command"),
                                       "train_tokens": entry.get("train_tokens"), "held_out": entry.get("held_out")}
    sittings = [measure_cost(pair, "before the lanes", started)]
    pilots = pilot(pair, lanes, sittings[0], args.tokens)
    for kind in KINDS:
        say(f"{kind}: specviz's lanes ({time.time() - started:.0f} s so far)")
        ours = run_specviz(pair, lanes, kind, args.tokens, args.repeats)
        say(f"{kind}: llama-server's lanes ({time.time() - started:.0f} s so far)")
        theirs = run_server(pair, kind, args.tokens, args.repeats, heads)
        report["kinds"][kind] = {"specviz": ours, "server": theirs}
        sittings.append(measure_cost(pair, f"after the {kind} lanes", started))
    # the costs every prediction and need is made from: each pass's best of the three sittings
    report["cost"] = cost = engines.best_cost(sittings)
    report["pilot"] = {kind: engines.price_pilots(p, lanes, cost) for kind, p in pilots.items()}
    for kind, rep in report["kinds"].items():
        rep["predictions"] = engines.pilot_predictions(cost, report["pilot"][kind], lanes, rep["specviz"])
    for kind, rep in report["kinds"].items():  # after every timing: these passes time nothing
        rep["divergences"] = divergences(pair, kind, rep["specviz"])
    report["seconds"] = time.time() - started
    files.write_json(out.with_suffix(".json"), report)  # the measurements first: nothing below can lose them
    return render(out)


def divergences(pair, kind: str, lanes: dict) -> dict:
    """lane -> where each of its texts first parts from specviz's AR on the same prompt, with the
    one-token pass's margin there and the kernels' gap (specviz.runtime.llamacpp.runner.parting)."""
    from specviz.runtime.llamacpp.runner import parting

    texts, _, chat = prompts_of(pair, kind)
    out = {}
    for name, lane in lanes.items():
        for i, (ours, theirs) in enumerate(zip(lanes["ar"]["token_ids"], lane["token_ids"])):
            found = parting(pair.target, pair.encode(texts[i], chat=chat), ours, theirs)
            if found:
                out.setdefault(name, []).append({"prompt": i, **found})
    return out


def _parted(report: dict, kind: str, name: str) -> str:
    """Where a lane's texts part from its AR, each with its margin and the kernels' gap there."""
    found = report["kinds"][kind].get("divergences", {}).get(name) or []
    return "".join(f"; prompt {d['prompt'] + 1} parts at token {d['at'] + 1}, margin {d['margin']:.2f} "
                   f"(gap {d['gap']:.2f}{'' if d['margin'] <= d['gap'] else ', NOT a near tie'})" for d in found)


def measure_cost(pair, when: str, started: float) -> dict:
    say(f"costs {when}: V(n) and c")
    cost = engines.cost_section(pair, COST_TOKENS)
    say(f"V(4) = {cost['curve']['4']:.2f}, c = {cost['c']:.2f} ({time.time() - started:.0f} s so far)")
    return cost


def render(out: Path) -> int:
    """The summary, the needs and the Markdown, from the report's measurements (no model runs)."""
    path = out.with_suffix(".json")
    if not path.exists():
        raise InputError(f"no report at {path}: run python -m specviz.bench.side_by_side first.")
    report = json.loads(path.read_text(encoding="utf-8"))
    report["summary"], report["needs"] = summary(report), needs(report)
    files.write_json(path, report)
    text = markdown(report)
    files.write_text(out.with_suffix(".md"), text)
    print(text)
    return 0


def _sittings(report: dict) -> str:
    """Where the costs came from, and the one-token pass beside the AR lane's decoding speed on code."""
    cost = report["cost"]
    one = 1000 * cost["target_s"]["1"]
    ar = report["kinds"].get("code", {}).get("specviz", {}).get("ar", {}).get("decode_tokens_per_s")
    beside = f"; specviz's AR lane decoded code at {1000 / ar:.0f} ms a token" if ar else ""
    if len(cost.get("sittings") or []) < 2:
        return f". The one-token pass took {one:.0f} ms{beside}."
    v4 = ", ".join(f"{s['target_s']['4'] / s['target_s']['1']:.2f}" for s in cost["sittings"])
    return (f". Each pass's best of {len(cost['sittings'])} sittings (before the lanes, after each kind's), V(n) "
            f"the ratio of those bests (V(4) within each sitting: {v4}). The one-token pass took {one:.0f} ms{beside}.")


def markdown(report: dict) -> str:
    m, cv = report["machine"], report["cost"]["curve"]
    lines = [f"# Where speculation pays on a laptop CPU: llama.cpp and specviz side by side, {report['tokens']} tokens",
             "", f"Machine: {engines.machine_named(m)}, {m.get('threads', '?')} threads, {m.get('date_utc', '')} UTC. "
             f"Target: qwen-coder's shipped file ({report['target']}). Command: `python -m specviz.bench.side_by_side`. "
             f"Every lane in one process, one after another, greedy; tok/s count decoding after the prompt's pass; "
             f"every drafting lane drafts k = {report['k']} a step unless its name says otherwise. Ratios are over "
             "llama-server's own greedy decoding of the same file on the same prompts.", "",
             "Costs measured apart (a target pass over n tokens / a one-token pass): "
             + ", ".join(f"V({n}) = {cv[str(n)]:.2f}" for n in COST_TOKENS[1:])
             + f"; the 0.5B draft's one-token pass c = {report['cost']['c']:.2f} of the target's"
             + _sittings(report)]
    for kind, rep in report["kinds"].items():
        s = report["summary"][kind]["lanes"]
        preds = rep["predictions"]
        lines += ["", f"## {kind.capitalize()} (held out: {len(report['prompts'][kind])} prompts)", "",
                  "| lane | tok/s | over llama.cpp's greedy | accepted | tau | draft cost c | predicted over AR | "
                  "measured over AR | same text |", "|---|---|---|---|---|---|---|---|---|"]
        for name, lane in rep["server"].items():
            lines.append(f"| llama-server {name} | {lane['decode_tokens_per_s']:.1f} | "
                         f"{engines._x(s['server:' + name]['over_greedy'])} | "
                         f"{engines._f(lane['acceptance'])} | | | | | {s['server:' + name]['same_text']} as greedy |")
        for name, lane in rep["specviz"].items():
            p = preds.get(name, {})
            lines.append(f"| specviz {name} | {lane['decode_tokens_per_s']:.1f} | "
                         f"{engines._x(s['specviz:' + name]['over_greedy'])} | {engines._f(lane.get('accepted_per_drafted'))} | "
                         f"{engines._f(lane['tau'])} | {engines._f(p.get('c'))} | {engines._x(p.get('predicted'))} | "
                         f"{engines._x(p.get('measured'))} | {s['specviz:' + name]['same_text']} as its AR"
                         f"{_parted(report, kind, name)} |")
        idle = report["summary"][kind].get("drafted_nothing") or []
        lines += ["", f"Fastest: {report['summary'][kind]['fastest']}, "
                      f"{report['summary'][kind]['fastest_over_greedy']:.2f}x llama.cpp's greedy decoding."
                  + (f" Not ranked: {', '.join(idle)}, which drafted nothing and so decoded as greedy does." if idle else "")]
    need = report.get("needs") or needs(report)
    lines += ["", "## What a drafter would need here", "",
              "From the costs above and the theory alone (no lane's run): a step of k drafts costs V(k + 1) "
              "plus the drafter's forwards at c each, and yields (1 - α^(k+1)) / (1 - α) tokens at acceptance "
              f"rate α. Draft lengths 1 to {max(NEED_K)}; each entry at the draft length that asks least.", "",
              "| drafter | c a forward | draft forwards | every draft accepted | α to match plain decoding | "
              "α for 1.3x | α measured (code, chat) |", "|---|---|---|---|---|---|---|"]
    for name, row in need.items():
        measured = ", ".join(engines._f(row["measured_alpha"].get(kind)) for kind in report["kinds"])
        lines.append(f"| {DRAFTERS.get(name, name)} | {row['c']:.2f} | {row['forwards']} | {row['best']:.2f}x (k = {row['best_k']}) | "
                     f"{_need(row['alpha_for_1.0x'])} | {_need(row['alpha_for_1.3x'])} | {measured} |")
    t = report["summary"]["targets"]
    lines += ["", "## Against the targets", "",
              f"- fastest lane on code at least 1.3x llama.cpp's greedy: {_yes(t['fastest_code_at_least_1.3x'])}",
              f"- that lane never below 1.0x on chat: {_yes(t['fastest_code_lane_never_below_1x_on_chat'])}",
              f"- specviz's eagle3 over llama.cpp at least 1.15x on code: {_yes(t['specviz_eagle3_at_least_1.15x_on_code'])}",
              "", "Accepted: drafted tokens accepted, over drafted tokens (llama-server's counters; specviz's events), "
              "the same measure in both loops. Drafters that learn from earlier outputs (ngram-mod, suffix) start "
              "every request with none: a new llama-server per request, a new suffix session per run. Predicted: "
              "from the pilot prompts' alpha and the costs above, measured apart from the lanes. Same text: where a "
              "specviz lane parts from its AR on this 4-bit file, the token where it parts, the one-token pass's "
              "margin there (logits: AR's token over the lane's) and the gap, the largest difference between "
              "that pass's logits and one pass over the whole prefix: a margin within the gap is a near tie that "
              "a pass over several tokens may flip."]
    return "\n".join(lines) + "\n"


def _need(entry: dict) -> str:
    return "out of reach" if entry["alpha"] is None else f"{entry['alpha']:.2f} (k = {entry['k']})"


def _yes(v) -> str:
    return "not measured" if v is None else "met" if v else "not met"


if __name__ == "__main__":
    sys.exit(main())
