"""The load policy (k="load") judged where it was not tuned: simulated batches on synthetic cost tables.

`LoadK`'s constants were tuned on the two measured sweeps of specviz.bench.batched (the qwen-coder
pair in bfloat16 and in float32 on two CPUs). Here the same policy code the batched engine calls
(`LoadK.prepare`, `choose`, `update`) decodes simulated batches whose pass costs come from families
of cost tables that tuning never saw, and is compared with fixed draft lengths on the same rows:

  costs      a pass of r rows of w tokens (n = r w tokens) costs T(n) = (1 + (n / knee)^p) / (1 + knee^-p)
             one-token passes ("power"; knee and p drawn per setting), or that times a factor per
             shape ("jagged": a CPU's kernels make some shapes slow); the draft's passes are c times
             the same curve with a knee m times deeper (a smaller model stays memory-bound longer)
  rows       B users, each with its own acceptance rate alpha_i ~ Beta(mean kappa, (1 - mean) kappa),
             a prompt and a budget of new tokens; a row's step with k drafts accepts each draft with
             probability alpha_i until the first rejection
  seconds    every pass costs what the table's function says (no timing, no model); the draft's
             first forward after plain steps feeds every token it missed (its catch-up)
  lanes      load, and fixed k = 0 (AR) to 5; each lane's expected tokens per second is the mean
             over REPLICATES runs, every lane drawing the same acceptance stream per row and run
  summary    per setting load / AR and load / the best fixed k (an oracle: chosen after the fact);
             over settings the mean with a seeded bootstrap 95% interval, and the share of settings
             where load trails AR by more than 1%

The measured tables themselves are simulated too, for reference: the float32 one only informed the
probe's margin, the bfloat16 one the rest of the constants.

Usage: python -m specviz.bench.load_heldout [--settings 400] [--real-settings 100] [--seed 0]
       [--out docs/benchmarks/load-heldout]
"""

from __future__ import annotations

import json
import math
import random
import statistics
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable

from specviz import files
from specviz.argparsing import Parser
from specviz.bench import run_resumable
from specviz.engine.load import LOAD_K_MAX, ROW_GRID, CostTable, LoadK
from specviz.errors import InputError

FIXED_K = (0, 1, 2, 3, 4, 5)  # the fixed lanes (0: AR)
REPLICATES = 3  # runs per lane and setting, averaged into its expected tokens/s
DRAWS = 2000  # bootstrap resamples
LOSS = 0.99  # load "loses to AR" below this share of AR's tokens/s
FAMILIES = ("power", "jagged")
MEASURED = {"fp32": "docs/benchmarks/batched-qwen-coder-fp32.json",
            "bf16": "docs/benchmarks/batched-qwen-coder-bf16.json"}


# ---------------------------------------------------------------------------------------------
# the settings: what a pass costs, and the rows

@dataclass(frozen=True)
class Costs:
    """Seconds of a pass of `rows` rows of `width` tokens, target's and draft's, at any shape."""
    target: Callable[[int, int], float]
    draft: Callable[[int, int], float]


@dataclass
class Setting:
    family: str
    rows: int
    tokens: int  # new tokens per row
    prompt: int  # prompt tokens per row
    alphas: list  # each row's acceptance rate
    params: dict = field(default_factory=dict)  # the cost family's parameters
    acceptance: dict = field(default_factory=dict)  # the Beta law the alphas were drawn from

    def costs(self) -> Costs:
        if self.family in MEASURED:
            return measured_costs(self.family)
        return power_costs(**self.params)


def power_curve(knee: float, p: float) -> Callable[[float], float]:
    """T(n) in one-token passes: 1 at n = 1, flat while n << knee, growing as n^p past it."""
    base = 1.0 + knee ** -p
    return lambda n: (1.0 + (n / knee) ** p) / base


def power_costs(knee: float, p: float, c: float, m: float, jitter: float = 0.0, seed: int = 0) -> Costs:
    target, draft = power_curve(knee, p), power_curve(knee * m, p)

    def shape_factor(rows: int, width: int) -> float:  # the same shape is always as slow
        return math.exp(jitter * random.Random(f"{seed}:{rows}:{width}").gauss(0.0, 1.0)) if jitter else 1.0

    return Costs(lambda r, w: target(r * w) * shape_factor(r, w), lambda r, w: c * draft(r * w))


def extend(table: CostTable) -> Callable[[int, int], float]:
    """A measured table at any shape: rows as CostTable interpolates them; a width it lacks
    linearly between measured widths, and past the widest in proportion to the width."""
    widths = sorted({w for _, w in table.points})

    def seconds(rows: int, width: int) -> float:
        if width in widths:
            return table(rows, width)
        if width > widths[-1]:
            return table(rows, widths[-1]) * width / widths[-1]
        a = max(w for w in widths if w < width)
        b = min(w for w in widths if w > width)
        return table(rows, a) + (width - a) * (table(rows, b) - table(rows, a)) / (b - a)

    return seconds


def measured_costs(name: str) -> Costs:
    cost = json.loads(Path(MEASURED[name]).read_text(encoding="utf-8"))["cost"]
    return Costs(extend(CostTable(None).load(cost["target"])), extend(CostTable(None).load(cost["draft"])))


def draw_setting(rng: random.Random, family: str, max_rows: int = 64) -> Setting:
    """One setting: its rows, budgets and acceptance, and (synthetic families) its cost curve."""
    rows = max(1, min(max_rows, round(2 ** rng.uniform(0, math.log2(max_rows)))))
    mean, kappa = rng.uniform(0.3, 0.95), 2 ** rng.uniform(1, 6)
    alphas = [rng.betavariate(mean * kappa, (1 - mean) * kappa) for _ in range(rows)]
    params = {}
    if family in FAMILIES:
        params = {"knee": 2 ** rng.uniform(0, 8), "p": rng.uniform(0.5, 1.5), "c": rng.uniform(0.05, 0.4),
                  "m": 2 ** rng.uniform(0, 3), "jitter": 0.15 if family == "jagged" else 0.0,
                  "seed": rng.randrange(2 ** 31)}
    return Setting(family, rows, rng.choice((32, 64, 128)), rng.randint(8, 64), alphas, params,
                   {"mean": mean, "kappa": kappa})


# ---------------------------------------------------------------------------------------------
# one simulated batch

class SimTable(CostTable):
    """A cost table whose measurement reads a function (no model, no clock): `need` records the
    same shapes a CostTable measures, and everything the policy reads is CostTable's own."""

    def __init__(self, seconds: Callable[[int, int], float]):
        super().__init__(None, say=lambda message: None)
        self.seconds = seconds

    def need(self, rows: int, widths) -> list:
        todo = [(r, w) for r in sorted({g for g in ROW_GRID if g <= rows} | {rows}) for w in widths
                if (r, w) not in self.points]
        self.points.update({shape: self.seconds(*shape) for shape in todo})
        return todo


def make_load(costs: Costs, rows: int) -> LoadK:
    """The policy as the batched engine builds it for `spec`, its tables measured from `costs`."""
    policy = LoadK(SimTable(costs.target), SimTable(costs.draft), LOAD_K_MAX)
    policy.prepare(rows)
    return policy


def accept(stream: random.Random, alpha: float, k: int) -> int:
    """Drafts accepted of k: each with probability alpha, up to the first rejection."""
    j = 0
    while j < k and stream.random() < alpha:
        j += 1
    return j


def simulate(setting: Setting, costs: Costs, lane, seed) -> dict:
    """One batch decoded by `lane` (a fixed k, or "load"): {"tokens", "seconds", "ks"}."""
    policy = make_load(costs, setting.rows) if lane == "load" else None
    streams = [random.Random(f"{seed}:{i}") for i in range(setting.rows)]
    done, unseen = [0] * setting.rows, [setting.prompt - 1] * setting.rows  # unseen: the draft's backlog
    live, seconds, step, ks_chosen = list(range(setting.rows)), 0.0, 0, []
    while live:
        rooms = [setting.tokens - done[i] - 1 for i in live]
        k = lane if policy is None else policy.choose(len(live), statistics.fmean(unseen[i] for i in live),
                                                      rooms=rooms)[0]
        ks = [max(0, min(k, room)) for room in rooms]
        ks_chosen.append(max(ks))
        verify, draft = pass_seconds(costs, setting, live, ks, unseen, step)
        accepted = [accept(streams[i], setting.alphas[i], kk) for i, kk in zip(live, ks)]
        for i, kk, j in zip(live, ks, accepted):
            done[i] += j + 1
            unseen[i] = (1 if j == kk else 0) if kk else unseen[i] + 1
        if policy is not None:
            judged = sum(j + (j < kk) for kk, j in zip(ks, accepted))
            policy.update(max(ks), sum(accepted), judged, len(live), max(ks) + 1, verify, draft, sum(ks),
                          prefill=step == 0, emitted=sum(accepted) + len(live))
        seconds += verify + draft
        live = [i for i in live if done[i] < setting.tokens]
        step += 1
    return {"tokens": setting.rows * setting.tokens, "seconds": seconds, "ks": ks_chosen}


def pass_seconds(costs: Costs, setting: Setting, live: list, ks: list, unseen: list, step: int) -> tuple:
    """(target, draft) seconds of one step: the target's pass over the live rows at the widest
    chain (the prompts too, on the first step); the draft's k forwards over the live rows, the
    first feeding what each row's draft has not seen and its last token."""
    rows, k = len(live), max(ks)
    verify = costs.target(rows, k + 1 + (setting.prompt if step == 0 else 0))
    if not k:
        return verify, 0.0
    first = 1 + max(unseen[i] for i, kk in zip(live, ks) if kk)
    return verify, costs.draft(rows, first) + (k - 1) * costs.draft(rows, 1)


def evaluate(setting: Setting, seed, replicates: int = REPLICATES) -> dict:
    """Every lane's expected tokens/s on one setting (the mean over replicate runs, each run's
    acceptance streams shared by the lanes), and load's mean k per step."""
    costs = setting.costs()
    rates, mean_k = {}, []
    for lane in ("load",) + FIXED_K:
        runs = [simulate(setting, costs, lane, f"{seed}:{r}") for r in range(replicates)]
        rates[str(lane)] = statistics.fmean(run["tokens"] / run["seconds"] for run in runs)
        if lane == "load":
            mean_k = statistics.fmean(statistics.fmean(run["ks"]) for run in runs)
    best = max(FIXED_K, key=lambda k: rates[str(k)])
    return {"rates": rates, "best_k": best, "load_k": mean_k,
            "vs_best": rates["load"] / rates[str(best)], "vs_ar": rates["load"] / rates["0"]}


# ---------------------------------------------------------------------------------------------
# the summary

def interval(values: list, seed: int, draws: int = DRAWS) -> list:
    """The middle 95% of the mean of `values` resampled `draws` times (seeded)."""
    rng = random.Random(seed)
    means = sorted(statistics.fmean(rng.choices(values, k=len(values))) for _ in range(draws))
    return [means[int(0.025 * draws)], means[int(0.975 * draws) - 1]]


def summarise(results: list, seed: int, draws: int = DRAWS) -> dict:
    """Load over the best fixed k and over AR across settings (mean, bootstrap 95% interval), the
    share of settings where load trails AR by more than 1%, and how often each k was best."""
    vs_best, vs_ar = [r["vs_best"] for r in results], [r["vs_ar"] for r in results]
    return {"settings": len(results),
            "vs_best": statistics.fmean(vs_best), "vs_best_ci95": interval(vs_best, seed, draws),
            "vs_ar": statistics.fmean(vs_ar), "vs_ar_ci95": interval(vs_ar, seed + 1, draws),
            "loses_to_ar": sum(x < LOSS for x in vs_ar) / len(vs_ar),
            "worst_vs_ar": min(vs_ar), "worst_vs_best": min(vs_best),
            "best_k": {str(k): sum(r["best_k"] == k for r in results) for k in FIXED_K}}


def by_rows(results: list, seed: int) -> dict:
    """The summary per band of batch sizes."""
    bands = {"1-2": (1, 2), "3-8": (3, 8), "9-32": (9, 32), "33-64": (33, 64)}
    out = {}
    for name, (lo, hi) in bands.items():
        band = [r for r in results if lo <= r["setting"]["rows"] <= hi]
        if band:
            out[name] = summarise(band, seed)
    return out


def run(settings: int, real_settings: int, seed: int, say: Callable[[str], None]) -> dict:
    """Draw and evaluate the settings of every family (seeded), and summarise each family."""
    rng = random.Random(seed)
    plan = [(family, settings // len(FAMILIES)) for family in FAMILIES] + \
        [(name, real_settings) for name in MEASURED if real_settings]
    report = {"seed": seed, "replicates": REPLICATES, "fixed_k": list(FIXED_K), "families": {}}
    start, total, n = time.perf_counter(), sum(count for _, count in plan), 0
    for family, count in plan:
        results = []
        for i in range(count):
            setting = draw_setting(rng, family, max_rows=32 if family in MEASURED else 64)
            alphas = setting.alphas  # drawn again from the seed; the JSON keeps their spread
            record = {**asdict(setting), "alphas": [round(min(alphas), 3), round(statistics.fmean(alphas), 3),
                                                     round(max(alphas), 3)]}
            results.append({"setting": record, **evaluate(setting, seed=f"{seed}:{family}:{i}")})
            n += 1
            if n % 20 == 0:
                eta = (time.perf_counter() - start) / n * (total - n)
                say(f"{n}/{total} settings; ETA {eta:.0f} s")
        report["families"][family] = {"summary": summarise(results, seed), "by_rows": by_rows(results, seed),
                                      "results": results}
    return report


# ---------------------------------------------------------------------------------------------
# the report

TITLES = {"power": "synthetic, power curve", "jagged": "synthetic, power curve with jagged shapes",
          "fp32": "measured fp32 table (informed the probe's margin)",
          "bf16": "measured bf16 table (the constants were tuned on it)"}


def _ci(low_high: list) -> str:
    return f"{low_high[0]:.3f}-{low_high[1]:.3f}"


def _row(name: str, s: dict) -> str:
    return (f"| {name} | {s['settings']} | {s['vs_best']:.3f} ({_ci(s['vs_best_ci95'])}) | "
            f"{s['vs_ar']:.3f} ({_ci(s['vs_ar_ci95'])}) | {s['loses_to_ar']:.0%} | {s['worst_vs_ar']:.3f} |")


def markdown(report: dict) -> str:
    head = ("| setting | settings | load / best fixed k, mean (95% CI) | load / AR, mean (95% CI) | "
            "load < 0.99 AR | worst load / AR |\n|---|---:|---|---|---:|---:|")
    fams = report["families"]
    lines = ["# The load policy on cost tables held out from its tuning (simulation)", "",
             "A **simulation** (`python -m specviz.bench.load_heldout`, seed "
             f"{report['seed']}): no model runs and nothing is timed. The load policy's own code (`LoadK.prepare`, "
             "`choose`, `update`, as the batched engine calls them) decodes simulated batches whose pass costs "
             "come from synthetic cost tables that its tuning never saw; each setting also runs fixed k = 0 (AR) "
             f"to {FIXED_K[-1]} on the same rows and acceptance draws, {report['replicates']} runs per lane.", "",
             "- **Families (held out):** a pass of n = rows x width tokens costs T(n) = (1 + (n / knee)^p) / "
             "(1 + knee^-p) one-token passes, knee 1 to 256 tokens and p 0.5 to 1.5 drawn per setting "
             "(\"power\"); the same times a fixed factor per shape, e^(0.15 z) (\"jagged\", as a CPU's kernels "
             "make some shapes slow). The draft's pass is c = 0.05 to 0.4 times the same curve with a knee 1 to "
             "8 times deeper.",
             "- **Rows:** B = 1 to 64 users (log-uniform), 32, 64 or 128 new tokens each, prompts of 8 to 64 "
             "tokens; each row's acceptance rate drawn from a Beta law with mean 0.3 to 0.95 and "
             "concentration 2 to 64.",
             "- **Scores:** per setting, load's expected tokens/s over the best fixed k's (an oracle that "
             "knows the setting) and over AR's; across settings the mean with a bootstrap 95% interval "
             "(2000 resamples, seeded), and the share of settings where load falls more than 1% below AR.",
             "", head]
    lines += [_row(TITLES[name], fam["summary"]) for name, fam in fams.items()]
    lines += ["", "By batch size (both synthetic families together):", "", head.replace("| setting |", "| B |")]
    together = fams["power"]["results"] + fams["jagged"]["results"]
    lines += [_row(band, s) for band, s in by_rows(together, report["seed"]).items()]
    best = summarise(together, report["seed"])["best_k"]
    lines += ["", "The best fixed k over the synthetic settings: " +
              ", ".join(f"k = {k} in {n}" for k, n in best.items()) + ".", "",
              "The measured tables' rows are their own sweeps' (B up to 32); a width they lack is taken "
              "linearly between measured widths and in proportion past the widest (the prompt's pass, the "
              "draft's catch-up). Every setting and score is in the JSON beside this file (the rows' alphas as "
              "their lowest, mean and highest; the seed draws them again).", ""]
    return "\n".join(lines)


def main(argv=None) -> int:
    parser = Parser(prog="python -m specviz.bench.load_heldout", description=__doc__.splitlines()[0])
    parser.add_argument("--settings", type=int, default=400, help="synthetic settings, split between the families")
    parser.add_argument("--real-settings", type=int, default=100, help="settings on each measured table")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="docs/benchmarks/load-heldout", help="OUT.json and OUT.md")
    parser.add_argument("--quiet", action="store_true")
    args = parser.parse_args(argv)
    return run_resumable(args, _run, "interrupted; nothing was written")


def _run(args, say) -> int:
    if args.settings < len(FAMILIES) or args.real_settings < 0:
        raise InputError(f"--settings must be at least {len(FAMILIES)} and --real-settings at least 0")
    report = run(args.settings, args.real_settings, args.seed, say)
    prefix = Path(args.out)
    prefix.parent.mkdir(parents=True, exist_ok=True)
    files.write_json(prefix.with_name(prefix.name + ".json"), report, indent=None)
    files.write_text(prefix.with_name(prefix.name + ".md"), markdown(report))
    say(f"wrote {prefix}.json and {prefix}.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
