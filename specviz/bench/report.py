"""The suite's report as Markdown tables, plus its Plotly figures written as .html and, when
kaleido can render them, one PNG sheet of them all that the Markdown shows. Reads the JSON report
only, so `python -m specviz.bench.report REPORT.json` redraws a report's Markdown and figures
without running a model. The figures themselves are drawn by specviz.render.bench_figures:
plotting stays on the render side of the seam.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from specviz import files
from specviz.argparsing import Parser
from specviz.errors import InputError, run_command


def _f(value, fmt: str = ".2f", unit: str = "") -> str:
    if value is None:
        return "–"
    return f"{value:{fmt}}{unit}"


def _ms(value) -> str:
    """Milliseconds: whole ones from 20 ms up, two decimals below (the tiny pair's forwards)."""
    if value is None:
        return "–"
    ms = value * 1000
    return f"{ms:.0f}" if ms >= 20 else f"{ms:.2f}"


def _mb(value) -> str:
    return f"{value / 1e6:.0f} MB" if value >= 1e7 else f"{value / 1e6:.2f} MB"


def header(report: dict) -> list:
    env, plan = report["environment"], report["plan"]
    temps = ", ".join(f"{t:g}" for t in plan["temperatures"])
    return [
        f"# specviz benchmark suite: `{env['pair']}`, {plan['mode']} mode"
        + ("" if env.get("cpu_linear") != "gemv" else ", gemv kernels (chosen for this CPU)"
           if env.get("cpu_choice") else ", `--cpu-linear gemv`"), "",
        *([f"Command: `{env['command']}`", ""] if env.get("command") else []),
        f"Device **{env['device']}** ({env['device_name']}), dtype **{env['dtype']}**, "
        f"**{env['threads']} torch threads** ({env['cpu_count']} CPUs visible), torch {env['torch']}, "
        f"transformers {env['transformers']}; {env['date_utc']} UTC; 1-minute load average "
        f"{_f(env.get('loadavg_start'))} at the start, {_f(env.get('loadavg_end'))} at the end. Suite wall time "
        f"**{report['wall_time_s']:.0f} s** (" + ", ".join(f"{name} {sec:.0f} s" for name, sec in
                                                  report.get("section_s", {}).items()) + ")."
        + (f" CPU default chosen by measurement: {env['cpu_choice']['note']}." if env.get("cpu_choice") else "")
        + (" specviz's forwards replay **CUDA graphs** over a static KV cache (`--cuda-graphs`, "
           "specviz.runtime.lm.GraphLM); transformers' lanes run eagerly, as its users run `generate()`."
           if env.get("cuda_graphs") else ""), "",
        f"{plan['tokens']} new tokens per run" + "".join(
            f" ({p}: {n})" for p, n in plan.get("prompt_tokens") or ()) + f", k = {plan['k']} (pld: {plan['pld_k']}), "
        f"{plan['repeats']} repeat(s), methods interleaved (order rotated per group and repeat); "
        f"greedy on {', '.join(plan['prompts'])}; temperature {temps} on "
        f"{', '.join(plan['sampled_prompts'])}. specviz runs stream their events with top-10 slices "
        "(as the app does). Speedup = tokens/s / AR tokens/s in the same group, end to end "
        "(prefill included). `hf*` = transformers' own `generate()` on the same prompt ids. "
        "`*-int8` = the same method with the draft model's linear weights in int8 (weight-only, per "
        f"channel; `specviz.runtime.quant`): the target is the same {env['dtype']} model, so the output is still exactly "
        "the target's (greedy: AR's tokens); only the draft's cost c and its q change.", "",
    ]


def targets_table(report: dict) -> list:
    lines = ["## Targets", "", "Speedups are judged end to end (prefill included); decode = the same ratio "
             "after the first update.", "",
             "| target | measured | decode | threshold | met |", "|---|---|---|---|---|"]
    for t in report["targets"]:
        aim = f" (aim {t['aim']:g})" if t.get("aim") else ""
        sign = "≤" if t["lower_is_better"] else "≥"
        met = {True: "yes", False: "**no**", None: "–"}[t["met"]]
        if not t["applies"]:
            met += f" (not judged: {t.get('why') or 'set for qwen-coder on CPU'})"
        lines.append(_row(t["name"], _f(t["value"]), _f(t.get("decode_value")), f"{sign} {t['threshold']:g}{aim}", met))
    check = report.get("ranking_check")
    if check:
        verdict = "yes" if check["ok"] else f"**no** ({check['swaps']} swapped pairs)"
        lines.append(_row(f"ranking reproducible vs `{check.get('against', 'previous')}` (no decided pair swapped, "
                          f"tolerance {check['tolerance']:.0%})", f"{check['swaps']} swaps", "", "0", verdict))
    return lines + [""]


def speedup_table(report: dict) -> list:
    res = report["results"]
    groups = list(res)
    methods = []
    for g in groups:
        methods += [m for m in res[g] if m not in methods]
    lines = ["## Speedup over AR (tokens/s ratio, end to end)", "",
             "| method | " + " | ".join(groups) + " |", "|---|" + "---|" * len(groups)]
    for m in methods:
        cells = []
        for g in groups:
            row = res[g].get(m)
            if row is None:
                cells.append("")
                continue
            mark = " ≠AR" if row.get("same_as_ar") is False and g.endswith("@greedy") else ""
            if row.get("forced"):
                mark += f" ({row['forced']} held)"
            cells.append(f"{_f(row['speedup'])}x{mark}")
        lines.append(f"| {m} | " + " | ".join(cells) + " |")
    if any(row.get("forced") is not None for g in groups for row in res[g].values()):
        lines += ["", "Greedy groups held to AR's text (`--hold-to-ar`, specviz.bench.held): every specviz lane "
                  "drafts, verifies and is timed as in a real run, but where the bf16 verify pass's argmax "
                  "differs from AR's token (a near-tie flipped), AR's token is committed, so that every "
                  "drafter is judged on the same text. `(n held)`: n such positions (the most in any repeat; "
                  "none: the real run, token for token). transformers' lanes are not held."]
    if any(row.get("same_as_ar") is False for g in groups if g.endswith("@greedy") for row in res[g].values()):
        lines += ["", "`≠AR`: greedy output differs from AR's (in bf16 a multi-token forward can flip an "
                  "argmax near-tie of the one-token forward; the methods are lossless in exact arithmetic)."]
    return lines + [""]


def group_tables(report: dict) -> list:
    lines = ["## Per group", "",
             "tok/s end to end; decode tok/s after the first update; TTFT = first update; ITL = per "
             "emitted token (step duration / tokens emitted), gap = per visible update, jitter = mean "
             "|difference of consecutive gaps| (ms); tau = tokens per target forward; alpha = accepted / "
             "evaluated (analytic: mean beta); acc/dr = accepted / drafted; c = draft forward / AR "
             "target forward; fwd/tok = target forwards per token.", ""]
    cols = ("tok/s", "decode tok/s", "speedup", "TTFT ms", "ITL p50", "ITL p95", "gap p50", "gap p95",
            "jitter", "tau", "alpha", "alpha an.", "acc/dr", "c", "fwd/tok", "per-position acceptance")
    for g, rows in report["results"].items():
        lines += [f"### {g}", "", "| method | " + " | ".join(cols) + " |", "|---|" + "---|" * len(cols)]
        for m, r in rows.items():
            pos = " ".join(f"{a:.2f}" for a in r["position_acceptance"][:8])
            cells = [_f(r["tokens_per_s"]), _f(r["decode_tokens_per_s"]), _f(r["speedup"]), _ms(r["ttft"]),
                     _ms(r["itl_p50"]), _ms(r["itl_p95"]), _ms(r["gap_p50"]), _ms(r["gap_p95"]),
                     _ms(r["jitter"]), _f(r["tau"]), _f(r["alpha_empirical"]), _f(r["alpha_analytic"]),
                     _f(r["accepted_per_drafted"]), _f(r["c_vs_ar"]), _f(r["target_forwards_per_token"]), pos]
            lines.append(f"| {m} | " + " | ".join(cells) + " |")
        lines.append("")
    return lines


def ratio_tables(report: dict) -> list:
    ratios = report["ratios"]
    pairs = {name: by_group for name, by_group in ratios.get("engine_vs_transformers", {}).items() if by_group}
    pairs = pairs or {"spec/hf-assisted": ratios["engine_efficiency"]}
    groups = list(dict.fromkeys(g for by_group in pairs.values() for g in by_group))
    lines = ["## Engine efficiency: specviz / transformers, same algorithm and k", "",
             "tokens/s ratios: `ar/hf` = autoregressive, `spec/hf-assisted` = draft model at k, "
             "`spec-int8/hf-assisted-int8` = the same with the int8 draft in both engines, "
             "`pld/hf-pld` = prompt lookup. " + _kernel_note(report), "",
             "| group | " + " | ".join(pairs) + " |", "|---|" + "---|" * len(pairs)]
    lines += [f"| {g} | " + " | ".join(_f(by_group.get(g)) for by_group in pairs.values()) + " |" for g in groups]
    lines += ["", "## Model fit: measured speedup / theory", "",
              "Theory: `speedup_with_cost(alpha, k, c, verify_cost)` = E[tokens] / (c k + verify_cost(k+1)) "
              "with this run's alpha (empirical) and c, and the measured verify-cost curve; measured = "
              "decode speedup (the theory models decoding steps, not the shared prefill).", "",
              "| group | alpha | c | verify cost(k+1) | tau measured | tau predicted | decode speedup | "
              "predicted | ratio |", "|---|---|---|---|---|---|---|---|---|"]
    for g, f in ratios["model_fit"].items():
        lines.append(f"| {g} | {_f(f['alpha'])} | {_f(f['c'])} | {_f(f['verify_cost'])} | "
                     f"{_f(f['tau_measured'])} | {_f(f['tau_predicted'])} | {_f(f['measured_speedup'])} | "
                     f"{_f(f['predicted_speedup'])} | {_f(f['ratio'])} |")
    return lines + [""] + roofline_table(ratios["roofline"])


def _kernel_note(report: dict) -> str:
    if report.get("environment", {}).get("cpu_linear", "aten") != "gemv":
        return "Both engines run PyTorch's stock `nn.Linear` layers."
    return ("transformers runs PyTorch's stock `nn.Linear`, as its users do; specviz its `gemv` kernels "
            "(specviz.runtime.kernels), so `spec/hf-assisted` measures kernels and loop together. "
            "`spec/hf-assisted-gemv` (full plan) gives transformers the same kernels: what is left is "
            "the two loops.")


def roofline_table(roof: dict) -> list:
    bw = roof["bandwidth_bytes_per_s"]
    lines = ["## Memory-bandwidth limit of decoding", "",
             f"Measured bandwidth {bw / 1e9:.1f} GB/s ({roof['bandwidth_method']}). Limit = bandwidth / "
             "weight bytes read per token (all weights but the input embedding table).", "",
             "| model | weight bytes/token | limit tok/s | one-token forward tok/s | forward / limit |",
             "|---|---|---|---|---|"]
    for role in ("target", "draft"):
        r = roof[role]
        lines.append(f"| {role} | {_mb(r['weight_bytes_per_token'])} | {_f(r['limit_tokens_per_s'])} | "
                     f"{_f(r['forward_tokens_per_s'])} | {_f(r['forward_vs_limit'])} |")
    lines += ["", f"AR decode (specviz engine, events on): {_f(roof['ar_decode_tokens_per_s'])} tok/s = "
              f"{_f(roof['ar_vs_limit'])} of the limit; transformers plain generate: "
              f"{_f(roof.get('hf_decode_tokens_per_s'))} tok/s = {_f(roof.get('hf_vs_limit'))} "
              "of the limit.", ""]
    return lines


def cost_tables(report: dict) -> list:
    curve = report["cost_curve"]
    t, d = curve["target"], curve["draft"]
    base = t[_key(t, 1)]
    lines = ["## Verify-cost curve (one forward over n new tokens after a 64-token context)", "",
             "| n | target ms | target / 1 token | draft ms |", "|---|---|---|---|"]
    for n in t:
        lines.append(f"| {n} | {_ms(t[n])} | {_f(t[n] / base)} | {_ms(d.get(n))} |")
    if "batch" in report:
        return lines + batch_table(report["batch"])
    bp = report["batch_proxy"]  # reports before the batched engine: the proxy from forward costs
    k = bp["k"]
    lines += ["", "## Batch-size effect (proxy)", "", bp["note"] + f" (alpha = {_f(bp['alpha'])}, k = {k})", "",
              f"| batch | target 1-token ms | target {k + 1}-token ms | verify cost | c | "
              "AR tok/s (all rows) | predicted spec speedup |", "|---|---|---|---|---|---|---|"]
    for r in bp["rows"]:
        lines.append(_row(r["batch"], _ms(r["target_1_s"]), _ms(r[f"target_{k + 1}_s"]), _f(r["verify_cost"]),
                          _f(r["c"]), _f(r["ar_tokens_per_s"]), _f(r["predicted_speedup"])))
    return lines + [""]


def batch_table(batch: dict) -> list:
    k = batch["k"]
    lines = ["", "## Batch size: B users decoded together", "", batch["note"] + f" (k = {k}, {batch['tokens']} new "
             "tokens per user)", "",
             f"| batch | target 1-token ms | target {k + 1}-token ms | verify cost | c | alpha | AR tok/s | "
             "spec tok/s | measured speedup | predicted | rows equal AR |", "|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in batch["rows"]:
        lines.append(_row(r["batch"], _ms(r["target_1_s"]), _ms(r[f"target_{k + 1}_s"]), _f(r["verify_cost"]),
                          _f(r["c"]), _f(r["alpha"]), _f(r["ar_tokens_per_s"]), _f(r["spec_tokens_per_s"]),
                          _f(r["measured_speedup"]), _f(r["predicted_speedup"]), "yes" if r["greedy_equal_ar"] else "NO"))
    return lines + [""]


def _row(*cells) -> str:
    """One row of a Markdown table; an empty cell stays one space wide."""
    return " ".join(f"| {cell}" if cell != "" else "|" for cell in cells) + " |"


def _key(d: dict, n: int):
    return n if n in d else str(n)


def controlled_table(report: dict) -> list:
    c = report["controlled"]
    lines = ["## Controlled acceptance (speedup against alpha on real timings)", "",
             f"Prompt `{c['prompt']}`, greedy, k = {c['k']}: the drafter runs the draft model for its real "
             "cost but proposes the target's greedy continuation, each token corrupted with probability "
             "1 - a_set.", "",
             "| a_set | alpha measured | tau | speedup | decode speedup | theory | decode / theory | c | "
             "off-script | =AR |", "|---|---|---|---|---|---|---|---|---|---|"]
    for p in c["points"]:
        lines.append(f"| {p['a_set']:g} | {_f(p['alpha'])} | {_f(p['tau'])} | {_f(p['speedup'])} | "
                     f"{_f(p['decode_speedup'])} | "
                     f"{_f(p['predicted_speedup'])} | {_f(p['ratio'])} | {_f(p['c'])} | {p['off_script']} | "
                     f"{'yes' if p['same_as_ar'] else 'no'} |")
    return lines + [""]


def ranking_lines(report: dict) -> list:
    lines = ["## Ranking (fastest first)", ""]
    lines += [f"- {g}: " + " > ".join(ms) for g, ms in report["ranking"].items()]
    check = report.get("ranking_check")
    if check:
        lines += ["", f"Against `{check.get('against', 'previous')}`: {check['swaps']} swapped pairs "
                  f"(pairs both runs separate by more than {check['tolerance']:.0%} and order oppositely)."]
        for g, r in check["groups"].items():
            tau = _f(r["kendall_tau"])
            swapped = "; ".join(f"{s['methods'][0]} vs {s['methods'][1]} ({s['previous_ratio']:.2f} -> "
                                f"{s['current_ratio']:.2f})" for s in r["swapped"])
            lines.append(f"- {g}: Kendall tau {tau}" + (f"; swapped: {swapped}" if swapped else ""))
        if check.get("note"):  # e.g. how the run compares with other runs than the one checked
            lines += ["", check["note"]]
    return lines + [""]


def markdown(report: dict, figures: Optional[dict] = None) -> str:
    lines = header(report) + targets_table(report) + speedup_table(report) + ratio_tables(report)
    lines += controlled_table(report) + cost_tables(report) + ranking_lines(report) + group_tables(report)
    if figures:
        lines += ["## Figures", ""]
        for name, path in figures.items():
            lines.append(f"![{name}]({path})" if path.endswith(".png") else f"- [{name}]({path})")
        lines.append("")
    return "\n".join(lines)


# ---------------------------------------------------------------------------------------------
# files

def write(report: dict, prefix: Path, png: bool = True, with_figures: bool = True) -> dict:
    """Write PREFIX.json, PREFIX.md, PREFIX-<figure>.html and (when a browser can draw them)
    PREFIX-figures.png, every figure on one sheet; returns {kind: path}."""
    import json

    prefix.parent.mkdir(parents=True, exist_ok=True)
    written, links = {"json": prefix.with_name(prefix.name + ".json")}, {}
    if with_figures:
        from specviz.render.bench_figures import figures  # Plotly: only a report drawn with its figures

        drawn = figures(report)
        for name, fig in drawn.items():
            html = prefix.with_name(f"{prefix.name}-{name}.html")
            with files.new_file(html) as tmp:
                fig.write_html(tmp, include_plotlyjs="cdn")
            written[name] = html
            links[name] = html.name
        sheet = prefix.with_name(f"{prefix.name}-figures.png")
        if png and _write_sheet(list(drawn.values()), sheet):
            written["figures"], links = sheet, {"figures": sheet.name}
    files.write_text(written["json"], json.dumps(report, indent=1) + "\n")
    written["md"] = prefix.with_name(prefix.name + ".md")
    files.write_text(written["md"], markdown(report, links))
    return written


def _write_sheet(figs: list, path: Path, columns: int = 2) -> bool:
    """Every figure's PNG on one sheet, COLUMNS across, in the order given: one picture a reader
    scrolls through instead of four files. False (and nothing written) when a figure cannot be
    drawn, so the Markdown links the interactive HTML figures instead."""
    import io

    from PIL import Image

    pngs = [_png(fig) for fig in figs]
    if not pngs or any(png is None for png in pngs):
        return False
    images = [Image.open(io.BytesIO(png)).convert("RGB") for png in pngs]
    width, height = max(i.width for i in images), max(i.height for i in images)
    rows = -(-len(images) // columns)
    sheet = Image.new("RGB", (width * min(columns, len(images)), height * rows), "white")
    for n, image in enumerate(images):
        sheet.paste(image, ((n % columns) * width, (n // columns) * height))
    out = io.BytesIO()
    sheet.save(out, format="PNG", optimize=True)
    files.write_bytes(path, out.getvalue())
    return True


def _png(fig) -> Optional[bytes]:
    """Through the notebook renderer, which never waits for a browser that cannot answer; None
    without one."""
    from specviz.render.notebook import figure_png  # Plotly and Kaleido, as above

    return figure_png(fig)


def main(argv=None) -> int:
    """Redraw reports' Markdown and figures from their JSON (after a change to the tables or the
    figures), running no model."""
    import json

    parser = Parser(prog="python -m specviz.bench.report", description=main.__doc__)
    parser.add_argument("reports", nargs="+", metavar="REPORT.json", help="suite reports (python -m specviz bench)")
    parser.add_argument("--no-png", action="store_true", help="figures as HTML only (no browser)")
    args = parser.parse_args(argv)

    def body() -> int:
        for name in args.reports:
            path = Path(name)
            try:
                report = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, ValueError) as exc:
                raise InputError(f"{path}: not a readable JSON report ({exc})") from None
            if not isinstance(report, dict) or "results" not in report or "environment" not in report:
                raise InputError(f"{path}: not a suite report (python -m specviz bench writes them)")
            written = write(report, path.with_suffix(""), png=not args.no_png)
            print("wrote " + ", ".join(str(p) for p in written.values()))
        return 0

    return run_command(body, "interrupted; the reports already redrawn are written, the rest unchanged")


if __name__ == "__main__":
    raise SystemExit(main())
