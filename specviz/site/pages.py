"""The site's pages: a start page, the gallery, the speedup explorer, the serving view, the lab
without laptops, the glossary and the course's index. Each is a small HTML shell; what it shows of
a run comes from data files drawn by the renderers (specviz.site.views), and the pages only say
what to look at and where a term is explained (the glossary, the notebook that teaches it).
"""

from __future__ import annotations

import json
import re
from html import escape
from pathlib import Path

from specviz import files
from specviz.bench import gallery, guide
from specviz.bench.provenance import REPO
from specviz.site import views

NAV = (("index.html", "Start"), ("slides/lecture.slides.html", "Lecture"), ("lab.html", "Lab"),
       ("gallery.html", "Gallery"), ("explorer.html", "Speedup explorer"), ("serving.html", "Batches"),
       ("glossary.html", "Glossary"), ("course.html", "Notebooks"))
TEMPERATURES = {0.0: "greedy", gallery.SAMPLED: f"T = {gallery.SAMPLED:g}"}
REPOSITORY = "https://github.com/specviz/specviz/blob/main/"  # the Colab badges' repository: links, never loads


def glossary(term: str, words: str) -> str:
    return f'<a class="sv-term" href="glossary.html#{term}">{escape(words)}</a>'


def layout(title: str, body: str, scripts: tuple = (), here: str = "", data: str = "", tail: str = "") -> str:
    """A page: the site's navigation, `body`, then `data` (an inline script setting SV.*), the
    `scripts` and `tail` (an inline script that uses them)."""
    current = ' aria-current="page"'
    nav = "".join(f'<a href="{href}"{current if href == here else ""}>{escape(name)}</a>' for href, name in NAV)
    tags = "".join(f'<script src="{src}"></script>' for src in scripts)
    return ("<!doctype html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{escape(title)} · specviz</title><link rel=\"stylesheet\" href=\"assets/views.css\">"
            "<link rel=\"stylesheet\" href=\"assets/site.css\"></head>\n"
            f"<body class=\"sv-root\"><a class=\"sv-skip\" href=\"#main\">Skip to the content</a>"
            f"<header><nav aria-label=\"site\">{nav}</nav></header>\n<main id=\"main\">{body}</main>\n"
            "<footer>specviz: speculative decoding you can watch. Every run here was recorded on real models and "
            "is replayed from its events; nothing is simulated.</footer>"
            f"{_inline(data)}{tags}{_inline(tail)}</body></html>\n")


def _inline(code: str) -> str:
    return f"<script>window.SV = window.SV || {{}};\n{code}</script>" if code else ""


def write_all(out: Path, entries: list, presets: list, serving: dict, manifest: dict) -> None:
    files.write_text(out / "index.html", index_page(presets))
    files.write_text(out / "gallery.html", gallery_page(entries, presets, manifest))
    files.write_text(out / "explorer.html", explorer_page(entries, presets))
    files.write_text(out / "serving.html", serving_page(serving))
    files.write_text(out / "lab.html", lab_page())
    files.write_text(out / "glossary.html", glossary_page())
    files.write_text(out / "course.html", course_page())
    files.write_text(out / "README.md", readme(manifest))
    files.write_text(out / ".nojekyll", "")


def _json(data) -> str:
    """Data for a page's script, safe inside <script> (no '</' can end it early)."""
    return json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")).replace("</", "<\\/")


# ---------------------------------------------------------------------------------------------
# the start page


INTRO = (
    "A large language model writes one token per pass over all of its weights, and reading those weights from "
    "memory, not the arithmetic, is what takes the time.",
    f"Speculative decoding lets a cheap {{draft}} guess the next few tokens and has the large model, the "
    f"{{target}}, check every guess in one pass: it keeps the guesses it agrees with and adds one token of its own.",
    "The text is the target's own (greedy: token for token), and it comes sooner when the guesses are good.",
)


def index_page(presets: list) -> str:
    first = presets[0]
    intro = " ".join(INTRO).format(draft=glossary("draft-model", "drafter"), target=glossary("target", "target"))
    body = (f'<h1>Speculative decoding, step by step, on real models</h1><p class="sv-lead">{intro}</p>'
            '<div class="sv-ways">'
            '<a class="sv-way" href="slides/lecture.slides.html"><b>Give the lecture</b><span>the slides, the ideas in '
            'order, each shown on a recorded run</span></a>'
            '<a class="sv-way" href="lab.html"><b>Run the lab without laptops</b><span>the worksheet questions this '
            'site answers, each with where to look</span></a>'
            '<a class="sv-way" href="gallery.html"><b>Open the gallery</b><span>every method on the same three texts; '
            'any two side by side</span></a></div>'
            f'<h2>Watch one run: {escape(first["label"])}</h2>'
            '<p>The draft model proposes a few tokens (dashed), the target checks them all in one pass: '
            'green were accepted, red was rejected and replaced (orange), blue is the bonus token a pass adds when '
            'every guess was right. Press Play, or step with ← and →. Hover or focus a token for its p, q and the '
            'draw u.</p><div id="sv-first" class="sv-stepview" data-key="' + escape(first["key"]) + '"></div>'
            '<p class="sv-muted" id="sv-first-where"></p>'
            '<p>Next: <a href="gallery.html#k=preset-01&amp;view=race">this run raced against plain decoding</a>, '
            '<a href="gallery.html#k=preset-02">a sampled run with its rejections</a>, or '
            '<a href="gallery.html">every method on the same texts</a>.</p>')
    tail = ("SV.load('" + first["key"] + "').then((d) => { SV.stepView(document.getElementById('sv-first'), "
            "d.step, {inspector: false}); document.getElementById('sv-first-where').textContent = d.where + "
            "': a replay, no model ran.'; }).catch((e) => SV.fail(document.getElementById('sv-first'), e));")
    return layout("Speculative decoding", body, ("assets/player.js", "data/" + first["key"] + ".js"), "index.html",
                  tail=tail)


# ---------------------------------------------------------------------------------------------
# the gallery


def _fmt(value, pattern: str = "{:.2f}") -> str:
    return "—" if value is None else pattern.format(value)


def overview_table(rows: list) -> str:
    """Every method on one text: tokens per target pass, acceptance, passes, this race's speedup."""
    head = ("<tr><th>method</th><th title=\"tokens per target pass\">τ</th><th title=\"accepted / judged\">α</th>"
            "<th>target passes (plain: 1 per token)</th><th>this race's speedup</th></tr>")
    body = []
    for r in rows:
        mark = ' <span class="sv-lossy-tag">LOSSY</span>' if r["lossy"] else ""
        busy = ' <span class="sv-muted" title="timed while other programs held the cores">(busy)</span>' if r["busy"] else ""
        passes = f'{r["forwards"]} <span class="sv-muted">of {r["ar_forwards"]}</span>' if "forwards" in r else "—"
        speed = _fmt(r["speedup"], "{:.2f}×") if r.get("speedup") is not None else "—"
        body.append(f'<tr data-key="{escape(r["key"])}"><td><a href="#k={escape(r["key"])}">{escape(r["label"])}</a>'
                    f'{mark}</td><td>{_fmt(r.get("tau"))}</td><td>{_fmt(r.get("alpha"))}</td><td>{passes}</td>'
                    f'<td>{speed}{busy}</td></tr>')
    return f'<table class="sv-table"><thead>{head}</thead><tbody>{"".join(body)}</tbody></table>'


def gallery_page(entries: list, presets: list, manifest: dict) -> str:
    prompts = manifest["prompts"]
    tables = []
    for prompt in prompts:
        for temperature in (0.0, gallery.SAMPLED):
            rows = [e for e in entries if e["prompt"] == prompt and e["temperature"] == temperature]
            tables.append(f'<div class="sv-overview" data-prompt="{prompt}" data-t="{temperature:g}" hidden>'
                          f'{overview_table(rows)}</div>')
    batch = [e for e in entries if e["batch"]]
    index = {"entries": [{k: e.get(k) for k in ("key", "variant", "label", "method", "prompt", "temperature", "lossy",
                                                "note", "batch", "earlier", "tau", "alpha", "c", "speedup", "forwards",
                                                "ar_forwards")} for e in entries],
             "presets": [{k: p[k] for k in ("key", "label", "method", "spread")} for p in presets],
             "prompts": prompts, "temperatures": [0, gallery.SAMPLED]}
    where = views_where(manifest)
    body = (
        "<h1>Gallery: every method on the same texts</h1>"
        f"<p>Each method of specviz, on the same {len(prompts)} texts, {where}. Each ran beside plain "
        f"{glossary('autoregressive', 'autoregressive')} decoding with the same prompt and sampling, "
        "for the same number of tokens. Pick a text, a sampling and a method; pick a second method to see them "
        f"side by side. τ is the tokens one {glossary('target', 'target')} pass produced "
        f"({glossary('tau', 'τ')}), α the share of judged guesses accepted ({glossary('alpha', 'α')}). "
        f"A speedup here is one race's, which may sit anywhere in its spread: the benchmarks' "
        f"{glossary('held-out', 'held-out')} means and their intervals are in the notebooks (notebook 9) and the "
        "reports.</p>"
        '<form class="sv-picker" onsubmit="return false"><fieldset><legend>Text</legend>'
        + "".join(f'<label><input type="radio" name="prompt" value="{p}"> {escape(v["label"])}</label>'
                  for p, v in prompts.items())
        + '<label><input type="radio" name="prompt" value="presets"> the lecture\'s presets</label></fieldset>'
        '<fieldset class="sv-temps"><legend>Sampling</legend>'
        + "".join(f'<label><input type="radio" name="t" value="{t:g}"> {escape(TEMPERATURES[t])}</label>'
                  for t in (0.0, gallery.SAMPLED))
        + '</fieldset><label class="sv-pick">Method <select name="k" id="sv-pick-a"></select></label>'
        '<label class="sv-pick">Side by side with <select name="vs" id="sv-pick-b"></select></label></form>'
        '<p class="sv-prompttext" id="sv-prompt-text"></p>'
        f'<details class="sv-all" open><summary>All methods on this text</summary>{"".join(tables)}'
        f'<div class="sv-overview" data-prompt="presets" hidden>{presets_table(presets)}</div></details>'
        '<div class="sv-tabs" role="tablist" aria-label="view">'
        '<button role="tab" data-view="step">Step view</button><button role="tab" data-view="race">Race</button>'
        '<button role="tab" data-view="timeline">SSD timeline</button><button role="tab" data-view="batch">'
        'A batch of users</button></div>'
        + view_help() +
        '<div id="sv-compare"></div><div class="sv-cols"><section class="sv-col" id="sv-a" aria-live="polite"></section>'
        '<section class="sv-col" id="sv-b"></section></div>'
        f'<p class="sv-muted">{len(entries)} recordings of {len({e["variant"] for e in entries})} ways of decoding, '
        f'{len(presets)} presets, {len(batch)} batches.</p>')
    return layout("Gallery", body, ("assets/template.js", "assets/player.js",
                                     "assets/gallery.js"), "gallery.html", data=f"SV.gallery = {_json(index)};")


def _nb(name: str, words: str) -> str:
    return f'<a href="notebooks/{name}.html">{escape(words)}</a>'


def view_help() -> str:
    """What each view shows, its terms linked to the glossary and the notebook that teaches it."""
    helps = {
        "step": f"Each {glossary('step', 'step')}: the drafter proposes guesses, sampled from its distribution "
                f"{glossary('p-q', 'q')}; the target scores them all in one pass ({glossary('p-q', 'p')}) and keeps each "
                f"while the draw {glossary('u', 'u')} is below min(1, p/q); at the first rejection it draws from the "
                f"{glossary('residual', 'residual')} norm(max(p − q, 0)) instead, and when every guess was kept it adds a "
                f"{glossary('bonus-token', 'bonus token')}. Play, or step with ← and →; hover or focus a token for its "
                f"numbers. The inspector shows p, q and the residual at the step's most telling position "
                f"({_nb('02_draft_and_verify', 'notebook 2')}, {_nb('03_speculative_sampling', 'notebook 3')}; trees: "
                f"{_nb('05_trees', 'notebook 5')}; no draft model: {_nb('06_no_draft_model', 'notebook 6')}).",
        "race": f"Both lanes replayed at the pace they were computed, each on its own clock: the same prompt, sampling "
                f"and length, plain {glossary('autoregressive', 'autoregressive')} decoding against the method. The strip "
                f"in each lane is how a reader sees the stream: one bar per update, as tall as the wait before it "
                f"({_nb('04_speedup_vs_acceptance', 'notebook 4')}; one race is one run: "
                f"{_nb('09_latency_and_serving', 'notebook 9')} repeats them).",
        "timeline": f"Who works when. {glossary('ssd', 'SSD')} drafts the next step while the target checks this one "
                    "(shaded: the drafting hidden behind the target's pass), here beside plain speculation on the same "
                    f"text ({_nb('08_landscape', 'notebook 8')}).",
        "batch": "Three users decoded together, one target pass per step for all of them: plain decoding against "
                 f"speculation with {glossary('k', 'k')} chosen each step from the batch's load. The table gives each "
                 f"user's tokens per shared pass ({_nb('11_batching_kills_speculation', 'notebook 11')}; more users: "
                 '<a href="serving.html">Batches</a>).',
    }
    return "".join(f'<p class="sv-viewhelp" data-view="{view}" hidden>{text}</p>' for view, text in helps.items())


def views_where(manifest: dict) -> str:
    rec = manifest["recorded"]
    return (f"recorded in one sitting on {escape(str(rec.get('device_name')))} ({escape(str(rec.get('device')))}, "
            f"{rec.get('threads')} threads, {escape(str(rec.get('dtype')))}) on {rec.get('date')} with specviz "
            f"{escape(str(rec.get('specviz')))}, {rec.get('tokens')} new tokens each (the lecture's presets, recorded "
            "for the app, run to their own lengths)")


def presets_table(presets: list) -> str:
    body = "".join(f'<tr data-key="{p["key"]}"><td><a href="#k={p["key"]}">{escape(p["label"])}</a></td>'
                   f'<td>{_fmt(p["record"]["tau"])}</td><td>{_fmt(p["record"]["alpha"])}</td>'
                   f'<td>{escape(p["spread"]) or "—"}</td></tr>' for p in presets)
    return ('<table class="sv-table"><thead><tr><th>preset (the lecture\'s runs)</th><th>τ</th><th>α</th>'
            f"<th>speedup over its repeated races</th></tr></thead><tbody>{body}</tbody></table>")


# ---------------------------------------------------------------------------------------------
# the speedup explorer


EXPLORER_TOP = 4.0  # the explorer's y axis: the theory's curves fill it; faster runs are listed under it


def _prompt_name(record: dict) -> str:
    for name, (label, prompt, _) in gallery.PROMPTS.items():
        if record.get("prompt") and prompt.strip().startswith(record["prompt"].strip()[:40]):
            return label
    return "its prompt"


def explorer_page(entries: list, presets: list) -> str:
    records = [e["record"] for e in entries if e.get("record") and e["key"] != "spec.code.t0"]
    reference = next(e["record"] for e in entries if e["key"] == "spec.code.t0")
    fig = views.explorer_figure(records + [reference])  # the curves at the last run's c: spec on code, greedy
    c0 = reference["c"]
    fig["layout"].setdefault("yaxis", {})["range"] = [0, EXPLORER_TOP]  # the curves' height; runs above are listed
    above = sorted((r for r in records + [reference] if (r.get("speedup") or 0) > EXPLORER_TOP),
                   key=lambda r: -r["speedup"])
    off = ("" if not above else f"<p>Off the top of the chart ({len(above)} runs above {EXPLORER_TOP:g}×): "
           + "; ".join(f"{escape(r['label'].removeprefix('race: '))} on {escape(_prompt_name(r))}, "
                       f"{r['speedup']:.2f}×" for r in above) + ".</p>")
    body = (
        "<h1>Speedup against acceptance</h1>"
        f"<p>If each guess is accepted with probability {glossary('alpha', 'α')}, a step of k guesses yields "
        f"τ = (1 − α<sup>k+1</sup>) / (1 − α) tokens on average ({glossary('tau', 'τ')}). It costs k draft passes "
        f"at {glossary('c', 'c')} (a draft pass's cost in target passes) each, and one target pass over k + 1 "
        f"tokens, {glossary('verify-cost', 'V(k + 1)')} times the cost of a one-token pass. So the speedup over "
        "plain decoding is τ / (c·k + V(k + 1)). Move the sliders: the curves are computed in this page. The "
        f"points are the gallery's {len(records) + 1} recorded races (hover for the method and text); a hollow "
        "circle is the theory at a run's own α, k and c (V = 1).</p>"
        '<form class="sv-sliders" onsubmit="return false">'
        f'<label>α <input type="range" id="sv-alpha" min="0" max="0.99" step="0.01" value="0.7"><output></output></label>'
        '<label>k <input type="range" id="sv-k" min="1" max="12" step="1" value="4"><output></output></label>'
        f'<label>c <input type="range" id="sv-c" min="0" max="1" step="0.01" value="{c0:.2f}"><output></output></label>'
        '<label>V(k + 1) <input type="range" id="sv-v" min="0.5" max="3" step="0.05" value="1"><output></output>'
        '</label></form><p class="sv-readout" id="sv-readout" aria-live="polite"></p>'
        '<div id="sv-explorer" class="sv-figure"></div>' + off +
        "<p>Reading it: the cheaper a draft pass (small c) and the closer a pass over k + 1 tokens costs to a pass "
        "over one (V near 1), the lower the α at which speculation pays; where V grows (a batch of users, a busy "
        'GPU) the same α pays less (<a href="serving.html">batches</a>; '
        '<a href="notebooks/04_speedup_vs_acceptance.html">notebook 4</a> measures c and V on a laptop).</p>')
    return layout("Speedup explorer", body, ("assets/template.js", "assets/player.js",
                                              "assets/gallery.js"), "explorer.html",
                  data=f"SV.explorer = {{figure: {_json(fig)}, c: {c0:.4f}}};")


# ---------------------------------------------------------------------------------------------
# batches


def serving_page(serving: dict) -> str:
    options = "".join(f'<option value="{k["key"]}">B = {k["batch"]}, {"k = load" if k["lane"] == "load" else "k = 4"}'
                      "</option>" for k in serving["keys"])
    body = (
        "<h1>Batches: when speculation stops paying</h1>"
        f"<p>A server decodes many users at once: one {glossary('target', 'target')} pass serves every row of the "
        "batch. Speculation widens that pass to k + 1 tokens per row, which is nearly free for one user and not "
        "for thirty-two: the pass becomes compute-bound and its cost grows with the tokens it carries "
        f"({glossary('verify-cost', 'V(k + 1)')}). Each recorded batch below is plain decoding and speculation "
        "with the same users, greedy; k = load chooses k each step from the batch's measured pass cost "
        f"({glossary('k', 'k = load')}). {escape(serving['where'][:1].upper() + serving['where'][1:])}.</p>"
        f'<label class="sv-pick">Recorded batch <select id="sv-batch">{options}</select></label>'
        '<div id="sv-serving"></div><div class="sv-passes" id="sv-passes"><div class="sv-controls">'
        '<input type="range" aria-label="Shared pass"><span class="sv-where"></span></div>'
        '<div class="sv-rows-slot"></div></div><div id="sv-batch-figure" class="sv-figure"></div>'
        '<p><a href="notebooks/11_batching_kills_speculation.html">Notebook 11</a> measures the same on your machine.</p>')
    return layout("Batches", body, ("assets/template.js", "assets/player.js",
                                     "assets/gallery.js"), "serving.html", data=f"SV.serving = {{figure: {_json(serving['figure'])}}};")


# ---------------------------------------------------------------------------------------------
# the lab without laptops, the glossary, the course


def worksheet_items() -> dict:
    """The student worksheet's questions as HTML, by number (docs/worksheet.md)."""
    import mistune

    text = (REPO / "docs" / "worksheet.md").read_text(encoding="utf-8")
    items = re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |^\S|\Z)", text, re.M | re.S)
    render = mistune.create_markdown(escape=True)
    out = {}
    for number, body in items:
        html = render(re.sub(r"\s*\n\s*", " ", body.strip()))
        out[int(number)] = re.sub(r'href="glossary\.md', 'href="glossary.html', html)
    return out


def lab_page() -> str:
    where = {q: (href, link, what) for q, href, link, what in guide.SITE_LAB}
    rows = []
    for q, question in sorted(worksheet_items().items()):
        if q in where:
            href, link, what = where[q]
            answer = f'<p class="sv-where-answer">On this site: <a href="{href}">{escape(link)}</a>. {escape(what)}</p>'
        else:
            answer = ('<p class="sv-where-answer sv-muted">Needs a laptop: the question asks the student to write or run '
                      "code in a notebook.</p>")
        rows.append(f'<li value="{q}">{question}{answer}</li>')
    rows = "".join(rows)
    body = ("<h1>The lab without laptops</h1><p>The student worksheet's questions, each with where this site "
            f"answers it: {len(guide.SITE_LAB)} of {guide.worksheet_questions()} are read off its recordings, slides "
            "and executed notebooks; the others need a notebook run on a laptop. Project the view a question names, "
            "let the room read the numbers off it, and discuss. (The brackets are the worksheet's own pointers, for a "
            "class with laptops and the app.)</p>"
            f'<ol class="sv-lab">{rows}</ol>'
            '<p>The teacher\'s guide marks the same questions (docs/teaching.md, "The lab without laptops").</p>')
    return layout("The lab without laptops", body, (), "lab.html")


def glossary_page() -> str:
    import mistune

    text = (REPO / "docs" / "glossary.md").read_text(encoding="utf-8")
    html = mistune.create_markdown(escape=False, plugins=["table"])(text)
    html = re.sub(r'href="\.\./notebooks/(\d\d_[a-z0-9_]+)\.ipynb', r'href="notebooks/\1.html', html)
    html = re.sub(r'href="(?!https?:|#|notebooks/)([^"]+)"', lambda m: f'href="{_repo_link(m[1])}"', html)
    return layout("Glossary", f'<div class="sv-prose">{html}</div>', (), "glossary.html")


def _repo_link(target: str) -> str:
    clean = target[3:] if target.startswith("../") else "docs/" + target
    return REPOSITORY + clean


def course_page() -> str:
    notebooks = sorted((REPO / "docs" / "notebooks").glob("*.html"))
    items = "".join(f'<li><a href="notebooks/{p.name}">{escape(_title(p))}</a></li>' for p in notebooks)
    body = ("<h1>The course</h1><p>The lecture's <a href=\"slides/lecture.slides.html\">slides</a> (arrow keys "
            "to move, the recorded runs in every figure), and every notebook as it ran on the real pair, with its "
            "outputs: read them here, or run them on a laptop (the repository's README says how).</p>"
            f'<ol class="sv-course" start="0">{items}</ol>')
    return layout("The course", body, (), "course.html")


def _title(path: Path) -> str:
    found = re.search(r"<title>(.*?)</title>", path.read_text(encoding="utf-8"), re.S)
    return (found[1].strip() if found else path.stem).replace("&amp;", "&")


def readme(manifest: dict) -> str:
    rec = manifest["recorded"]
    return ("---\ntitle: specviz\nemoji: 🔎\ncolorFrom: indigo\ncolorTo: green\nsdk: static\napp_file: index.html\n"
            "pinned: false\nshort_description: Speculative decoding, step by step, on real models\n---\n\n"
            "# specviz: speculative decoding you can watch\n\n"
            "A static site: open `index.html` (from disk, a USB stick or any static host). It needs no server and "
            "no network. Every run was recorded on real models "
            f"({rec.get('pair')}, on {rec.get('device_name')}, {rec.get('date')}) and is replayed from its events.\n\n"
            "Built by `python -m specviz site OUT` from the specviz repository.\n")
