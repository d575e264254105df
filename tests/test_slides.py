"""The lecture's slides (docs/slides): built by Jupyter's own slideshow export from a notebook
that replays the presets' recordings, with reveal.js kept beside the deck so a projector needs no
network; the committed deck is the current build of the current recordings, stamped with the code
that drew it (a deck of an older renderer or an older lecture.ipynb fails)."""

import importlib.util
import json
import re
import shutil
from pathlib import Path

import pytest

from specviz.bench import provenance
from specviz.render.notebook import keep_static_images

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

ROOT = Path(__file__).resolve().parents[1]
SLIDES = ROOT / "docs" / "slides"
_spec = importlib.util.spec_from_file_location("slides_build", SLIDES / "build.py")
build = importlib.util.module_from_spec(_spec)  # docs/slides/build.py (a script, not a package)
_spec.loader.exec_module(build)


def headings(nb) -> list:
    return [c.source.splitlines()[0].lstrip("# ").strip() for c in nb.cells
            if c.cell_type == "markdown" and c.source.startswith("#")]


@pytest.fixture(scope="module")
def deck():
    """A fresh build (images where a browser is found; interactive JSON kept where not)."""
    nb = build.execute()
    keep_static_images(nb)
    return nb, build.export(nb)


def test_the_deck_has_a_slide_per_heading_and_no_error(deck):
    nb, html = deck
    titles = headings(nbformat.read(build.SOURCE, as_version=4))
    assert len(titles) >= 12 and len(re.findall(r"<section", html)) >= len(titles)
    for title in titles:
        assert title.replace("&", "&amp;") in html or title in html, title
    outputs = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs]
    assert not [o for o in outputs if o.output_type == "error"]
    assert "<pre" not in html.split("Speculative decoding, step by step")[1][:200]  # code is hidden


def test_the_deck_runs_offline(deck):
    """reveal.js, require.js and the MathJax stand-in come from vendor/, beside the deck."""
    _, html = deck
    for key, path in build.VENDOR.items():
        assert f'"{path}' in html or f"'{path}" in html or f"{path}/" in html, key
    for part in ("reveal.js/dist/reveal.js", "reveal.js/dist/reveal.css", "reveal.js/dist/theme/simple.css",
                 "reveal.js/plugin/notes/notes.js", "require.js", "no-mathjax.js"):
        assert (SLIDES / "vendor" / part).is_file(), part
    assert "unpkg.com/reveal.js" not in html
    # nothing fetched from a CDN: nbconvert's jQuery and mermaid (templates/offline), the theme's web fonts
    assert not re.search(r"""(?:src=|import |url\()["']?https?://""", html)
    assert "fonts.googleapis" not in (SLIDES / "vendor" / "reveal.js/dist/theme/simple.css").read_text()


def test_the_committed_deck_is_built_from_the_current_recordings():
    """Re-recording the presets changes the numbers on the slides: `make slides` builds it again."""
    from specviz.bench.guide import preset_rows

    committed = (SLIDES / build.DECK).read_text(encoding="utf-8")
    for row in preset_rows():  # the preset's own row of the deck's table carries its speedup
        found = re.search(r"<tr>(?:(?!</tr>).)*?" + re.escape(row["label"]) + r"(?:(?!</tr>).)*?</tr>", committed, re.S)
        assert found and f">{row['speedup']:.2f}<" in found[0], (row["label"], row["speedup"])
    for title in headings(nbformat.read(build.SOURCE, as_version=4)):
        assert title in committed or title.replace("&", "&amp;") in committed, title


# --- the lecture in the order of the idea, and the run sheet (issue 63, item 3) ---------------------

from specviz.bench import guide, lecture  # noqa: E402
from specviz.bench import recordings as recorded  # noqa: E402
from specviz.errors import SpecvizError  # noqa: E402


def _at(titles: list, start: str) -> int:
    found = [i for i, t in enumerate(titles) if t.startswith(start)]
    assert found, f"no slide begins {start!r}; the slides are {titles}"
    return found[0]


def test_the_slides_follow_the_idea():
    """Why decoding is slow, then one pass, the greedy rule and its bonus, the caches' rollback (after
    rejection is defined), the sampling rule, β seen in the inspector, then the proof, the curve, the losses, the variants, the lab."""
    titles = headings(nbformat.read(build.SOURCE, as_version=4))
    order = ["Speculative decoding", "The race: a best case", "The words first", "Why decoding is slow: the memory wall",
             "So a pass over 5 tokens", "One pass, k + 1 answers", "The greedy rule", "The bonus token",
             "Both KV caches, and the rollback", "The sampling rule", "The inspector", "Why it is exact",
             "τ and the speedup curve", "Every preset", "When it loses: hot sampling", "When it loses: batches",
             "Variants", "Typical acceptance (LOSSY)", "Your turn: the lab"]
    assert [_at(titles, start) for start in order] == list(range(len(order)))
    assert len(titles) <= 20


def test_the_run_sheet_has_a_row_per_slide_in_the_decks_order():
    titles = headings(nbformat.read(build.SOURCE, as_version=4))
    sheet = [row[1] for row in lecture.RUN_SHEET]
    assert sheet[:len(titles)] == titles and sheet[len(titles):] == ["(lab)", "(wrap-up)"]
    minutes = [row[0] for row in lecture.RUN_SHEET]
    assert minutes == sorted(minutes) and minutes[-2:] == [45, 80]  # lecture 45, lab 35, wrap-up 10
    assert all(key is None or key in lecture.facts() for *_, key in lecture.RUN_SHEET)


def test_the_guides_run_sheet_is_built_from_the_current_sources():
    """docs/teaching.md's run sheet sits under the contents, before the plan, and is what python -m specviz.bench.lecture writes."""
    text = guide.GUIDE.read_text(encoding="utf-8")
    assert lecture.render(text) == text, "run python -m specviz.bench.lecture"
    assert text.index("Contents:") < text.index("## Run sheet") < text.index("## The 90-minute plan")
    stale = lecture.BLOCK.sub(lambda m: m[1] + m[2].replace("|", "| 9.99× |", 1) + m[3], text)
    assert lecture.render(stale) == text and lecture.main(["--check"], say=lambda _: None) == 0
    with pytest.raises(SpecvizError, match="no run sheet block"):
        lecture.render("# a guide without its run sheet\n")


def test_the_greedy_slide_shows_a_rejection_after_accepted_guesses():
    """The rewrite preset's step with the most guesses accepted before a rejection; the hook (every guess
    accepted) has no rejection to show, so it is refused."""
    rewrite = recorded.recording(lecture.preset(guide.preset_rows(), lecture.REWRITE)["label"])
    step = next(e for e in rewrite.run if e["kind"] == "step_finished" and e["step"] == lecture.rejection_step(rewrite.run))
    assert 0 < step["accepted"] < step["drafted"]
    full = next(e for e in rewrite.run if e["kind"] == "step_finished" and e["step"] == lecture.full_step(rewrite.run))
    assert full["accepted"] == full["drafted"] and len(full["emitted_ids"]) == full["drafted"] + 1
    with pytest.raises(SpecvizError, match="rejection"):
        lecture.rejection_step(recorded.recording(recorded.LABELS[0]).run)


def test_the_built_slides_say_the_rules_and_the_proof(deck):
    _, html = deck
    greedy = html.split("The greedy rule")[1].split("The bonus token")[0]
    assert "takes its place" in greedy and "Code rewrite, k = 6" in greedy and "resampled" not in greedy
    assert "min(p, q) + max(p − q, 0) = p" in html
    proof = html.split("Why it is exact")[1].split("The inspector")[0]
    numbers = lecture.proof_numbers(*_chat_residual())
    assert f"{numbers['sum']:.3f}" in proof and f"{numbers['p']:.3f}" in proof
    batching = html.split("When it loses: batches of users")[1].split("Variants")[0]
    for row in lecture.batching()["rows"]:
        assert f">{row['batch']}<" in batching and f">{row['median']:.2f}<" in batching


def _chat_residual() -> tuple:
    chat = recorded.recording(lecture.preset(guide.preset_rows(), lecture.CHAT)["label"])
    return chat.run, lecture.residual_step(chat.run)


def test_the_proof_adds_up_on_the_recorded_step():
    """min(p, q) + (1 − β) · residual(x) = p(x) on the engine's own numbers; a residual that forgot to
    rescale by 1 − β would miss p by a share of it."""
    numbers = lecture.proof_numbers(*_chat_residual())
    assert numbers["sum"] == pytest.approx(numbers["p"], abs=1e-4)
    assert numbers["residual"] + numbers["accept"] != pytest.approx(numbers["p"], abs=1e-3)


def test_the_memory_wall_is_the_reports_arithmetic():
    rep = guide.report(guide.NATIVE)
    roof = rep["ratios"]["roofline"]
    native = lecture.memory_wall()[0]
    assert native["read_ms"] == pytest.approx(1e3 * roof["target"]["weight_bytes_per_token"] / roof["bandwidth_bytes_per_s"])
    assert native["pass_ms"] == pytest.approx(1e3 * rep["cost_curve"]["target"]["1"])
    assert native["gflop"] == pytest.approx(roof["target"]["weight_bytes_per_token"] / 1e9)  # bf16: 2 bytes, 2 FLOP a weight
    assert native["pass_ms"] > native["read_ms"]  # no pass beats reading its weights once


def test_losses_and_lossy_speak_only_as_far_as_their_numbers_go(tmp_path):
    one = {"speedup": 0.9}
    assert lecture.spread(one) == "one run" and lecture.verdict(one) == "loses in this run"
    straddle = {"speedup": 0.95, "speedup_lo": 0.9, "speedup_hi": 1.05, "repeats": 5}
    assert lecture.verdict(straddle).startswith("break-even") and lecture.spread(straddle) == "0.90–1.05× over 5 repeats"
    assert lecture.verdict({**straddle, "speedup_hi": 0.99}) == "loses in every repeat"
    rows = guide.preset_rows()
    assert [r["preset"] for r in lecture.losses(rows)] == sorted(
        (lecture.preset(rows, lecture.HOT)["label"], lecture.preset(rows, lecture.CHAT)["label"]),
        key=lambda label: next(r["speedup"] for r in rows if r["label"] == label))

    def seeds(diff_lo: float, verdict: str) -> dict:
        stat = lambda mean, lo, hi: {"mean": mean, "lo": lo, "hi": hi}  # noqa: E731
        summary = {"runs": 16,  # the two rules' intervals overlap: only the paired difference can tell them apart
                   "exact": {"alpha": stat(0.6, 0.5, 0.7), "tau": stat(2, 1.8, 2.2), "speedup": stat(0.95, 0.9, 1.0)},
                   "typical": {"alpha": stat(0.7, 0.6, 0.8), "tau": stat(2.3, 2, 2.6), "speedup": stat(1.0, 0.95, 1.05)},
                   "typical_minus_exact": {"speedup": stat(diff_lo + 0.05, diff_lo, diff_lo + 0.1), "verdict": verdict}}
        (tmp_path / f"{lecture.TYPICAL}.json").write_text(json.dumps({"summary": summary}))
        return lecture.typical(rows, tmp_path)

    assert lecture.typical_sentence(seeds(-0.05, "no measurable difference")).startswith("Lossy is not the same as faster")
    assert lecture.typical_sentence(seeds(0.01, "faster")).startswith("Faster, paired by seed and prompt")
    assert lecture.typical_sentence(seeds(-0.12, "slower")).startswith("Slower")
    assert "+0.06 (95% interval +0.01 to +0.11)" in lecture.typical_sentence(seeds(0.01, "faster"))
    single = lecture.typical(rows, tmp_path / "none")
    assert not single["seeds"] and lecture.typical_sentence(single).startswith("Single runs")

def test_the_committed_deck_is_drawn_by_the_code_now():
    """Until `python docs/slides/build.py` builds it again, a deck older than its code fails here."""
    assert build.problems((SLIDES / build.DECK).read_text(encoding="utf-8")) == []


def test_a_fresh_deck_is_of_the_code_now(deck):
    _, html = deck
    assert build.STAMP.search(html)[1] == provenance.deck_version(build.SOURCE)
    assert build.problems(html) == []


def test_a_deck_built_by_an_older_renderer_fails(deck, tmp_path):
    """The deck's stamp, had it been drawn by an older chips renderer, is not the code's now."""
    _, html = deck
    root = tmp_path / "repo"
    shutil.copytree(provenance.PACKAGE, root / "specviz", ignore=shutil.ignore_patterns("__pycache__", "heads", "serving"))
    chips = root / "specviz" / "render" / "chips.py"
    drawn = provenance.deck_files(build.SOURCE, root)
    assert "specviz/render/chips.py" in drawn and any(f.startswith("specviz/bench/") for f in drawn)
    chips.write_text(chips.read_text() + "\n# a comment changes nothing\n")
    assert provenance.deck_version(build.SOURCE, root) == provenance.deck_version(build.SOURCE)
    chips.write_text(chips.read_text() + "\nOLDER = True\n")
    older = provenance.deck_version(build.SOURCE, root)
    stale = build.STAMP.sub(f'<meta name="specviz-code" content="{older}">', html)
    assert build.problems(stale) == [f"the deck was drawn by code stamp {older}, the code now is "
                                     f"{provenance.deck_version(build.SOURCE)}: python docs/slides/build.py"]
    assert len(build.problems(html.replace('<meta name="specviz-code"', '<meta name="other"'))) == 1  # no stamp


def test_a_changed_lecture_makes_the_deck_stale(deck, tmp_path):
    _, html = deck
    lecture = nbformat.read(build.SOURCE, as_version=4)
    lecture.cells[-1].source += "\nOne more sentence."
    changed = tmp_path / "lecture.ipynb"
    nbformat.write(lecture, changed)
    assert build.problems(html, changed) and not build.problems(html, build.SOURCE)
