"""The selected step taken apart (draft -> verify -> emit), and the run's counters.

The step panel shows the three phases of one verification round as rows of chips: what the
draft proposed (with q), what the target decided (with p/q and u) and what was emitted, then
one sentence that tells the step in words. Every number is read from the events.
"""

from __future__ import annotations

from typing import Optional

from specviz.render import steps as st
from specviz.render.chips import TYPICAL_THRESHOLD, chip
from specviz.render.html import Rendered, attr, ms, num, quoted, text


def step_panel(run: st.RunView, number: Optional[int] = None) -> Rendered:
    """Step `number` (default: the last) as draft / verify / emit rows and a sentence."""
    if number is None:
        number = len(run.steps) - 1
    step = run.step(min(number, len(run.steps) - 1))
    if step is None:
        what = "the prompt alone; press Next or Play" if run.steps else "press Run"
        return Rendered(f'<div class="sv-panel sv-muted">Before the first step: {what}.</div>')
    rows = []
    if step.is_tree and step.nodes:
        rows += _tree_rows(step, run.greedy)
    elif step.drafted:
        drafts = [st.TokenView(**{**t.__dict__, "status": "draft"}) for t in step.drafted]
        rows.append(_row("1 · draft proposes, q", [chip(t, run.greedy, _draft_detail(t)) for t in drafts]))
        verdicts = [chip(t, run.greedy, _verify_detail(t, run.greedy)) for t in step.drafted]
        if step.next is not None:
            verdicts.append(chip(step.next, run.greedy, _next_detail(step.next, run.greedy)))
        rows.append(_row("2 · target verifies in 1 pass", verdicts))
    emitted = [chip(t, run.greedy) for t in step.emitted]
    rows.append(_row(("3 · " if step.drafted or step.nodes else "") + "emitted", emitted))
    title = f"Step {step.step + 1} of {len(run.steps)}"
    lossy = ' <span class="sv-warn">· LOSSY (typical acceptance)</span>' if not run.lossless else ""
    notes = "".join(f'<p class="sv-note">{text(line)}</p>' for line in step_notes(step, run.texts()))
    return Rendered(f'<div class="sv-panel" data-step="{attr(step.step)}"><b>{text(title)}</b>{lossy}{"".join(rows)}'
                    f'<p class="sv-explain">{text(sentence(step, run.greedy))}</p>{notes}</div>')


def _tree_rows(step: st.StepView, greedy: bool) -> list:
    """A tree step: what was drafted (the tree, drawn below the panel), then the walk's decisions
    in the order it made them, then the closing token."""
    s = step.tree or {}
    levels = max((n.depth for n in step.nodes), default=0)
    width = [sum(n.depth == d for n in step.nodes) for d in range(1, levels + 1)]
    summary = (f"{len(step.nodes)} nodes in {levels} level(s) ({' + '.join(map(str, width))}), "
               f"{s.get('shape', 'tree')}, {s.get('draft_forwards', '?')} draft forward(s)")
    rows = [_row("1 · draft builds a tree", [f'<span class="sv-treesum">{text(summary)}</span>'])]
    verdicts = [chip(t, greedy, f"d{t.index + 1} · {_verify_detail(t, greedy)}") for t in step.drafted]
    if step.next is not None:
        verdicts.append(chip(step.next, greedy, _next_detail(step.next, greedy)))
    rows.append(_row("2 · target walks it, 1 pass", verdicts))
    return rows


def _row(label: str, cells: list) -> str:
    return f'<div class="sv-row"><span class="sv-rowlabel">{text(label)}</span>{"".join(cells)}</div>'


def _draft_detail(token: st.TokenView) -> str:
    source = token.source or {}
    if source.get("kind") == "ngram" and "copied_from" in source:
        return f"copy of @{source['copied_from']}"
    if source.get("kind") == "ngram":
        return f"n-gram q {num(token.q, 2)}"
    return f"q {num(token.q, 2)}"


def _verify_detail(token: st.TokenView, greedy: bool) -> str:
    if token.status == "wasted":
        return "unjudged"
    if token.status == "draft":
        return "…"
    if greedy or token.u is None:
        return f"p {num(token.p, 2)}"
    return f"p/q {num(token.ratio, 2)} u {num(token.u, 2)}"


def _ordinal(n: int) -> str:
    return {1: "1st", 2: "2nd", 3: "3rd"}.get(n, f"{n}th")


def ssd_words(ssd: dict, emitted: list) -> list:
    """SSD's step in words: where this step's draft came from, what was prepared during the check
    and how the check ended (specviz.drafters.ssd's info)."""
    draft, lines = ssd.get("draft") or {}, []
    if draft.get("from") == "prepared":
        lines.append(f"SSD: this step's draft was ready: {draft.get('prepared')} draft(s) prepared during the last "
                     f"check" + (f", {draft.get('forwards')} more drafted now" if draft.get("forwards") else ""))
    elif draft.get("forwards"):
        lines.append("SSD: this step's draft was drafted now, waited for (the last check ended in an outcome not "
                     "prepared for, or it is the first step)")
    prepared, outcome = ssd.get("prepared") or [], ssd.get("outcome") or {}
    if prepared:
        guesses = ", ".join(f"{p['accepted']} kept, then the draft's {_ordinal(p['rank'] + 1)} candidate"
                            for p in prepared)
        lines.append(f"while the target checked, {len(prepared)} outcome(s) were prepared: {guesses}")
    if outcome and prepared:
        b = emitted[-1] if emitted else ""
        verdict = ("a hit: the next step's draft is ready" if ssd.get("hit")
                   else "a miss: the next step drafts from scratch")
        lines.append(f"the check ended: {outcome.get('accepted')} kept, then {quoted(b)}: {verdict}")
    return lines


def step_notes(step: st.StepView, texts: Optional[list] = None) -> list:
    """Method-specific lines for a step: why k was chosen (k = auto), the cascade's n-gram counters,
    where prompt-lookup copies came from, what suffix decoding matched, DFlash's block. `texts`:
    the run's token texts by position (RunView.texts())."""
    info, notes = step.info, []
    if "k_chosen" in info:
        drafted = (step.summary or {}).get("drafted")
        notes.append(f"k = {info['k_chosen']} chosen by the {info.get('k_rule', 'auto')} rule"
                     + (f" ({drafted} drafted)" if drafted is not None and drafted != info["k_chosen"] else "")
                     + f": {info.get('why', '')}")
    size = info.get("tree_size") or {}
    if "next_budget" in size:
        notes.append(f"tree sized to this machine: {size.get('nodes')} node(s) drawn under a budget of "
                     f"{size.get('budget')} fixed before the draws (sampling: a cut by the drawn tokens' own q "
                     f"would bias the output); the next step's budget: {size['next_budget']}")
    elif size.get("drafted"):
        why = ("the most tokens per second for this step" if size.get("rule") == "ratio"
               else f"each kept node worth more than the time it adds at the run's {num(size.get('run_rate'), 1)} "
                    "tokens/s")
        notes.append(f"tree sized to this machine: kept the {size.get('nodes')} likeliest of {size.get('drafted')} "
                     f"drafted nodes ({why}): {num(size['expected'], 2)} tokens expected (1 + their cumulative q, each scaled by "
                     f"how often nodes of its rank were accepted: {num(size.get('calibration'), 2)} overall) from a pass over "
                     f"{(size.get('nodes') or 0) + 1} tokens priced at {ms(size.get('verify_s'))} (measured curve × "
                     f"{num(size.get('pass_scale'), 2)}, what this run's passes took against it), after "
                     f"{ms(size.get('draft_s'))} of drafting")
    counters = info.get("counters") or {}
    if counters:
        notes.append("cascade: " + _counter_words(counters))
    suffix = info.get("suffix")
    if suffix is not None:
        start, end = (suffix.get("match") or [0, 0])[:2]
        notes.append(suffix_words(suffix, "".join((texts or [])[start:end])))
    if info.get("block"):
        drafted = (step.summary or {}).get("drafted") or 0
        notes.append(f"DFlash: one forward of a {info['block']}-position block (the last token, then "
                     f"{info['block'] - 1} masks, attending to each other and to the target's states) "
                     f"filled {drafted} draft{'s' if drafted != 1 else ''} at once")
    if info.get("ssd"):
        notes += ssd_words(info["ssd"], (step.summary or {}).get("emitted_texts") or [])
    copies = [t for t in step.drafted if (t.source or {}).get("copied_from") is not None]
    if copies:
        notes.append(f"prompt lookup: {copies[0].source_note}" + (f" (and the next {len(copies) - 1})"
                                                                   if len(copies) > 1 else ""))
    return notes


def _outputs(n: int) -> str:
    return f"{n} output{'s' if n != 1 else ''}"


def suffix_words(info: dict, match_text: str) -> str:
    """Suffix decoding's step in words: which ending of the text matched where, and what it earned."""
    if not info.get("tree"):
        return ("suffix decoding: no ending of the text was seen before with a continuation (or none likely "
                "enough): nothing drafted, a plain target step")
    where = "this prompt and answer" if info["tree"] == "prompt" else \
        f"the session's {_outputs(info.get('outputs', 0))} (this answer so far among them)"
    return (f"suffix decoding: the text's last {info['match_len']} token{'s' if info['match_len'] != 1 else ''} "
            f"{quoted(match_text)} matched in {where}; {info.get('drafted', 0)} drafted (at most "
            f"{info.get('limit', '?')}: twice the match's length plus two, or k if less), "
            f"{num(info.get('expected'), 2)} expected accepted by their counts")


def _counter_words(counters: dict) -> str:
    parts = []
    if "ngram_proposed" in counters:
        parts.append(f"n-gram guesses kept by the draft model {counters.get('ngram_accepted', 0)}/"
                     f"{counters['ngram_proposed']}")
    if "draft_forwards" in counters:
        parts.append(f"draft forwards {counters['draft_forwards']}")
    parts += [f"{k.replace('_', ' ')} {v}" for k, v in counters.items()
              if k not in ("ngram_proposed", "ngram_accepted", "draft_forwards")]
    return ", ".join(parts)


def _next_detail(token: st.TokenView, greedy: bool = False) -> str:
    if token.status == "residual" and not greedy:  # greedy: the target's top token, shown with its p
        return f"r {num(token.residual_prob, 2)}"
    return f"p {num(token.p, 2)}"


def sentence(step: st.StepView, greedy: bool = False) -> str:
    """The step in words: drafted, accepted, why the rejection, what replaced it, the cost."""
    s = step.summary
    if step.is_tree and step.nodes:
        words = _tree_sentence(step, greedy)
    elif not step.drafted and step.next is not None:
        words = f"One target forward, one token: {quoted(step.next.text)} sampled from p."
    else:
        accepted = sum(t.status == "accepted" for t in step.drafted)
        words = f"Drafted {len(step.drafted)}, accepted {accepted}"
        rejected = step.rejected
        if rejected is not None:
            words += f"; rejected {quoted(rejected.text)} as draft {rejected.index + 1} because {_why(rejected, greedy)}"
        if step.next is not None and step.next.status == "residual" and str(step.next.rule).startswith("typical"):
            words += f"; drew {quoted(step.next.text)} from p there instead (typical acceptance, lossy)"
        elif step.next is not None and step.next.status == "residual" and greedy:
            words += f"; the target's top token {quoted(step.next.text)} takes its place"
        elif step.next is not None and step.next.status == "residual":
            words += f"; resampled {quoted(step.next.text)} from the residual norm(max(p − q, 0))"
        elif step.next is not None:
            words += f"; all accepted, so bonus {quoted(step.next.text)} from p"
        if step.wasted:
            words += f"; {len(step.wasted)} draft(s) wasted"
        words += "."
    if s is not None:
        words += (f" 1 target forward → {len(s['emitted_ids'])} token(s)"
                  f" (draft {ms(s['draft_time'])}, verify {ms(s['verify_time'])}).")
        if s.get("finish_reason"):
            words += f" Run ends: {s['finish_reason']}."
    return words


def _why(rejected: st.TokenView, greedy: bool) -> str:
    if str(rejected.rule or "").startswith("typical"):
        return f"p = {num(rejected.p, 2)} is below the typical threshold {TYPICAL_THRESHOLD}"
    if greedy or rejected.u is None:
        return "it is not the target's top token"
    return f"u = {num(rejected.u, 2)} ≥ min(1, p/q) = {num(rejected.accept_prob, 2)}"


def _tree_sentence(step: st.StepView, greedy: bool) -> str:
    s = step.tree or {}
    words = (f"Drafted a tree of {len(step.nodes)} nodes ({s.get('shape', 'tree')}); the target scored every "
             "node in one pass with tree attention and walked it from the root")
    path = [t for t in step.drafted if t.status == "accepted"]
    if path:
        words += ", accepting " + " → ".join(quoted(t.text) for t in path) + f" (depth {len(path)})"
    else:
        words += ", accepting no node"
    rejected = [t for t in step.drafted if t.status == "rejected"]
    if rejected:
        first = rejected[0]
        words += (f"; it rejected {len(rejected)} node(s), e.g. {quoted(first.text)} at depth {first.index + 1} "
                  f"because {_why(first, greedy)}")
        if len(rejected) > 1 and not greedy:
            words += ", and each later sibling was judged against the residual of the ones before"
    if step.next is not None and step.next.status == "residual":
        words += (f"; every child of the last accepted node was rejected, so {quoted(step.next.text)} was drawn "
                  + ("as the target's top token" if greedy else "from the residual"))
    elif step.next is not None:
        words += f"; the path reached a leaf, so bonus {quoted(step.next.text)} from p"
    unjudged = sum(n.status == "wasted" for n in step.nodes)
    if unjudged:
        words += f"; {unjudged} node(s) were never judged (off the walked path)"
    return words + "."


def stats(run: st.RunView, metrics: dict, compute_s: Optional[float] = None) -> Rendered:
    """Counters of the run so far: tokens, steps, target forwards, tau, alpha, speed, c.

    `compute_s` is the run's own compute time when the caller measured it (time spent inside the
    engine's iterator); otherwise the engine's elapsed clock is used.
    """
    seconds = compute_s if compute_s is not None else metrics.get("wall_time") or 0.0
    tokens = metrics.get("new_tokens", 0)
    items = [("tokens", str(tokens)), ("steps", str(metrics.get("steps", 0))),
             ("target forwards", str(metrics.get("target_forwards", 0))),
             ("τ tokens/forward", num(metrics.get("tau"), 2))]
    if run.method != "ar":
        items += [("α accepted/judged", num(metrics.get("alpha_empirical"), 2)),
                  ("c draft/target cost", num(metrics.get("c"), 2))]
    if run.method == "tree":
        items.append(("tree nodes drafted", str(metrics.get("drafted", 0))))
    k_chosen = metrics.get("k_chosen") or []
    if k_chosen:
        items.append((f"k auto ({(run.started or {}).get('options', {}).get('auto_rule', 'rule')}): last · mean",
                      f"{k_chosen[-1]} · {sum(k_chosen) / len(k_chosen):.1f}"))
    counters = metrics.get("counters") or {}
    if "ngram_proposed" in counters:
        items.append(("n-gram guesses kept", f"{counters.get('ngram_accepted', 0)}/{counters['ngram_proposed']}"))
    if counters.get("draft_forwards") is not None:
        items.append(("draft forwards", str(counters["draft_forwards"])))
    items += [("seconds", num(seconds, 2)), ("tokens/s", num(tokens / seconds if seconds else None, 1))]
    cells = "".join(f'<span><b>{text(v)}</b> <span class="sv-muted">{text(k)}</span></span>'
                    for k, v in items)
    state = ""
    if run.finished:
        state = f'<span class="sv-muted">finished ({text(run.finished["finish_reason"])})</span>'
    elif run.started:
        state = '<span class="sv-muted">running…</span>'
    lossy = ""
    if run.started and not run.lossless:
        lossy = (f'<span class="sv-warn" data-lossy="1">LOSSY: {text(run.rule)} — the output does not follow the '
                 "target's distribution</span>")
    return Rendered(f'<div class="sv-stats" data-finished="{int(run.finished is not None)}">'
                    f'{cells}{state}{lossy}</div>')
