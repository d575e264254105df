"""The static site (`python -m specviz site OUT`), without a browser: the codec rebuilds every frame
exactly, the frames are the renderers' own output at each step, the gallery holds every method of
the registry, the build is deterministic and within its budget, nothing in a page asks the
network, and a gallery that lacks a method is refused. tests/test_site_browser.py plays it in
Chromium."""

import hashlib
import json
import re
import shutil
from pathlib import Path

import pytest

from specviz import methods
from specviz.bench import gallery, recordings
from specviz.errors import InputError
from specviz.render import chips, panel, race as race_render, steps as st
from specviz.site import build as site, codec, views

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def built(site_built):
    return site_built  # conftest.py: one build for this file and test_site_browser.py


def unpacked(out: Path, key: str) -> dict:
    text = (out / "data" / f"{key}.js").read_text(encoding="utf-8")
    found = re.fullmatch(r'SV\.got\("([^"]+)","([A-Za-z0-9+/=]+)"\);\n', text)
    assert found and found[1] == key
    return codec.unpack(found[2])


# ---------------------------------------------------------------------------------------------
# the codec


FRAMES = ['<div class="a">x</div>', '<div class="a">x<span>y</span></div>', '<div class="b">x<span>y</span>,z</div>',
          "", '{"data":[1,2,3],"layout":{"title":"t"}}', '{"data":[1,2,4],"layout":{"title":"t"}}', "<<<,,,{{[[",
          "plain text with no tags at all"]


def test_delta_rebuilds_every_frame_exactly():
    encoded = codec.delta(FRAMES)
    assert codec.undelta(encoded) == FRAMES
    assert codec.undelta(codec.delta(list(reversed(FRAMES)))) == list(reversed(FRAMES))


def test_delta_stores_a_growing_text_once():
    chip = '<span class="sv-chip" data-tip="p = 0.9 q = 0.8">tok</span>'
    frames = ["<div>" + chip * n + "</div>" for n in range(1, 60)]
    encoded = codec.delta(frames)
    assert codec.undelta(encoded) == frames
    assert len(json.dumps(encoded)) < len("".join(frames)) / 10  # copies, not a quadratic pile of text


def test_pack_is_deterministic_and_round_trips():
    data = {"b": [1, 2], "a": "é <\\/script>"}
    assert codec.pack(data) == codec.pack(dict(reversed(data.items())))
    assert codec.unpack(codec.pack(data)) == data


# ---------------------------------------------------------------------------------------------
# the frames are the renderers' output


def test_step_frames_are_the_step_views_at_every_step():
    rec = recordings.recording(recordings.LABELS[1])  # sampled: rejections, residuals, bonus tokens
    seconds = views.own_clock(rec.run, rec.run_busy)
    view = views.step_view(rec.run, seconds)
    run = st.build(rec.run)
    texts, panels = codec.undelta(view["text"]), codec.undelta(view["panel"])
    assert view["steps"] == len(run.steps) and len(texts) == len(run.steps) + 1
    for c in (-1, 0, 3, len(run.steps) - 1):
        assert texts[c + 1] == chips.run_text(run, upto=c, selected=c).html
        assert panels[c + 1] == panel.step_panel(run, c).html
    assert any("sv-residual" in p for p in panels) and any("sv-bonus" in p for p in panels)
    inspector = json.loads(codec.undelta(view["inspector"])[-1])
    assert inspector["data"] and "template" not in inspector["layout"]


def test_the_race_replays_each_lane_on_its_own_clock():
    info = gallery.manifest()
    entry = info["entries"]["spec.code.t0"]
    run, ar = gallery.lanes("spec.code.t0")
    run_s = views.own_clock(run, entry["run"]["busy"], entry["run"]["clock"])
    ar_s = views.own_clock(ar, entry["ar"]["busy"], entry["ar"]["clock"])
    assert run_s[-1] == entry["run"]["busy"] and ar_s[-1] == entry["ar"]["busy"]
    assert run_s == sorted(run_s) and len(ar_s) == sum(e["kind"] == "step_finished" for e in ar)
    view = views.race_view(run, ar, run_s, ar_s)
    lanes = {name: codec.undelta(lane["frames"]) for name, lane in view["lanes"].items()}
    assert lanes["ar"][-1] == race_render.lane_html(ar, ar_s[-1], "Autoregressive", "target only: one forward per token",
                                                    True, race_render.gap_scale(ar, run)).html
    assert f"{entry['speedup']:.2f}×" in view["verdict"]
    assert view["speedup"] == pytest.approx(entry["speedup"], abs=5e-4)


def test_a_recording_without_clocks_shares_its_total_by_work():
    events = [{"kind": "step_finished", "draft_time": 1.0, "verify_time": 1.0},
              {"kind": "step_finished", "draft_time": 0.0, "verify_time": 2.0}]
    assert views.own_clock(events, 8.0) == [4.0, 8.0]
    assert views.own_clock(events, 8.0, [[3, 1.5], [9, 7.0]]) == [1.5, 7.0]


# ---------------------------------------------------------------------------------------------
# the built site


def test_the_gallery_holds_every_method_on_every_text(built):
    out, info = built
    manifest = gallery.manifest()
    recorded = {(e["variant"], e["prompt"], e["temperature"]) for e in manifest["entries"].values()}
    for name in methods.names():
        if name == "ar":
            continue  # every entry's baseline lane
        for prompt in gallery.PROMPTS:
            assert (name, prompt, 0.0) in recorded, (name, prompt)
            if name != "lookahead":  # greedy-only
                assert (name, prompt, gallery.SAMPLED) in recorded, (name, prompt)
    assert info["methods"] == list(methods.names())
    for key in manifest["entries"]:
        assert (out / "data" / f"{key}.js").is_file(), key
    assert {"typical", "spec-auto", "suffix-again", "spec-load"} <= {e["variant"] for e in manifest["entries"].values()}


def test_gallery_recordings_carry_their_version_and_machine():
    manifest = gallery.manifest()
    where = manifest["recorded"]
    assert where["pair"] == "qwen-coder" and where["specviz"] and where["device_name"] and where["date"]
    for key, entry in manifest["entries"].items():
        variant = next(v for v in gallery.variants() if v.name == entry["variant"])
        assert entry["code"] == gallery.provenance.code_version(variant.method, entry["settings"]["k"], variant.batch), (
            f"{key} was decided by earlier code: python -m specviz.bench.gallery record --only {variant.name} --again")


def test_the_lossy_entry_says_so_everywhere(built):
    out, _ = built
    data = unpacked(out, "typical.chat.t0.7")
    assert "LOSSY" in codec.undelta(data["step"]["stats"])[-1] and "LOSSY" in data["race"]["verdict"]
    assert "LOSSY" in (out / "gallery.html").read_text(encoding="utf-8")


def test_the_site_is_within_its_budget_and_says_what_takes_the_room(built):
    out, info = built
    on_disk = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert on_disk == info["bytes"] <= site.BUDGET
    assert json.loads((out / "site.json").read_text())["sizes"]["assets/plotly.js"] > 1e6


def test_no_page_asks_the_network(built):
    out, _ = built
    pages = [p for p in out.rglob("*.html")]
    assert len(pages) >= 20
    loads = re.compile(r'<(?:script|img|link|iframe|source)[^>]*\b(?:src|href)="(https?:)?//', re.I)
    for page in pages:
        text = page.read_text(encoding="utf-8")
        assert not loads.search(text), f"{page.relative_to(out)} loads {loads.search(text)[0]}"
        assert "import(" not in text or "mermaid" not in text, page


def test_every_link_inside_the_site_arrives(built):
    out, _ = built
    missing = []
    for page in out.rglob("*.html"):
        for href in re.findall(r'(?:href|src)="([^"#:?]+)(?:#([^"]*))?"', page.read_text(encoding="utf-8")):
            target = (page.parent / href[0]).resolve()
            if not target.exists():
                missing.append(f"{page.relative_to(out)} -> {href[0]}")
    assert not missing, missing[:10]
    glossary = (out / "glossary.html").read_text(encoding="utf-8")
    for term in set(re.findall(r'href="(?:\.\./)?glossary\.html#([^"]+)"', "".join(
            p.read_text(encoding="utf-8") for p in out.rglob("*.html")))):
        assert f'id="{term}"' in glossary, term


def test_the_build_is_deterministic_and_held_to_its_recordings(built, tmp_path):
    out, info = built
    again = site.build(tmp_path / "again", say=lambda line: None)

    def digest(folder):
        return {str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest()
                for p in sorted(folder.rglob("*")) if p.is_file()}

    assert digest(out) == digest(tmp_path / "again") and again == info
    assert info["sources"]["gallery"] == site._digest(gallery.DATA)  # the site says which recordings made it


def test_a_gallery_that_lacks_a_method_is_refused(tmp_path):
    folder = tmp_path / "gallery"
    shutil.copytree(gallery.DATA, folder)
    manifest = json.loads((folder / gallery.MANIFEST).read_text())
    del manifest["entries"]["pld.chat.t0"]
    (folder / gallery.MANIFEST).write_text(json.dumps(manifest))
    with pytest.raises(InputError, match="lacks 1 recording.*pld.chat.t0.*gallery record"):
        site.build(tmp_path / "out", say=lambda line: None, gallery_folder=folder)
    with pytest.raises(InputError, match="no gallery recordings"):
        site.build(tmp_path / "out", say=lambda line: None, gallery_folder=tmp_path / "none")


def test_a_folder_of_other_files_is_not_replaced(tmp_path):
    (tmp_path / "mine.txt").write_text("keep me")
    with pytest.raises(InputError, match="other files"):
        site.build(tmp_path, say=lambda line: None)
    assert (tmp_path / "mine.txt").read_text() == "keep me"


def test_the_cli_answers_an_unwritable_folder_in_one_line(tmp_path, capsys):
    from specviz.cli import main

    (tmp_path / "mine.txt").write_text("x")
    assert main(["site", str(tmp_path / "mine.txt" / "site")]) == 2  # a folder under a file
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error:") and "mine.txt" in err[0]


def test_the_static_space_front_matter(built):
    out, _ = built
    readme = (out / "README.md").read_text(encoding="utf-8")
    front = readme.split("---")[1]
    assert "sdk: static" in front and "app_file: index.html" in front
    assert (out / ".nojekyll").exists() and (out / "index.html").exists()


def test_a_presets_spread_is_the_guides(built):
    """The site, the guide, README and the answer key quote the same median and range of a preset's races."""
    from specviz.bench.guide import preset_rows

    out, _ = built
    for number, row in enumerate(preset_rows(), 1):
        spread = unpacked(out, f"preset-{number:02d}")["spread"]
        assert (f"median {row['speedup_median']:.2f}×, range {row['speedup_lo']:.2f}–{row['speedup_hi']:.2f}×"
                in spread), (row["label"], spread)
        assert f"first of {row['repeats']} races of this preset ({row['speedup']:.2f}×)" in spread
