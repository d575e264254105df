"""The links lead somewhere: every glossary anchor a notebook, the slides or a doc links exists in
docs/glossary.md, and every relative link and image in README.md, docs/ and the notebooks' README
names a file that is in the repository."""

import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GLOSSARY = ROOT / "docs" / "glossary.md"
LINK = re.compile(r"\]\(([^)\s]+)\)")


def anchors(page: Path = GLOSSARY) -> set:
    """A Markdown page's explicit anchors and its headings' (as GitHub makes them: lower case,
    spaces to hyphens, punctuation dropped; code fences' comment lines are no headings)."""
    text = re.sub(r"^```.*?^```", "", page.read_text(encoding="utf-8"), flags=re.S | re.M)
    headings = {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-")
                for h in re.findall(r"^#+ (.+)$", text, re.M)}
    return set(re.findall(r'<a id="([^"]+)"></a>', text)) | headings


def texts() -> dict:
    """path -> the text a reader reads there (a notebook's cell sources)."""
    out = {p: p.read_text(encoding="utf-8") for p in (ROOT / "docs").glob("*.md")}
    out[ROOT / "README.md"] = (ROOT / "README.md").read_text(encoding="utf-8")
    for path in [*(ROOT / "notebooks").glob("*.ipynb"), ROOT / "docs" / "slides" / "lecture.ipynb"]:
        out[path] = "\n".join("".join(c["source"]) for c in json.loads(path.read_text(encoding="utf-8"))["cells"])
    return out


def test_every_glossary_anchor_that_is_linked_exists():
    known, missing = anchors(), []
    for path, text in texts().items():
        for target in LINK.findall(text):
            if "glossary.md#" in target and target.split("#", 1)[1] not in known:
                missing.append(f"{path.relative_to(ROOT)}: {target}")
    assert not missing, missing


def test_a_planted_broken_anchor_is_found():
    assert "no-such-term" not in anchors()
    text = "see [τ](../docs/glossary.md#no-such-term)"
    assert [t for t in LINK.findall(text) if t.split("#", 1)[1] not in anchors()]


PAGES = sorted([ROOT / "README.md", ROOT / "notebooks" / "README.md", *(ROOT / "docs").rglob("*.md")])


def broken_links(page: Path, text: str) -> list:
    """Relative links and images (`[..](x)`, `![..](x)`) whose file is not there, and links to a
    section (`x.md#part`, `#part`) of a Markdown page that has no such section."""
    out = []
    for target in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue
        name, _, part = target.partition("#")
        path = page.parent / name if name else page
        if not path.exists():
            out.append(target)
        elif part and path.suffix == ".md" and part not in anchors(path):
            out.append(target)
    return out


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_and_images_resolve(page):
    assert not broken_links(page, page.read_text(encoding="utf-8"))


def test_a_planted_broken_image_and_section_are_found():
    page = ROOT / "README.md"
    planted = page.read_text(encoding="utf-8") + "\n![a view](docs/screenshots/no-such-view.png)\n"
    assert broken_links(page, planted) == ["docs/screenshots/no-such-view.png"]
    planted = page.read_text(encoding="utf-8") + "\n[a part](docs/models.md#no-such-part) [here](#no-such-part)\n"
    assert broken_links(page, planted) == ["docs/models.md#no-such-part", "#no-such-part"]


BENCH = ROOT / "docs" / "benchmarks"


def bench_rows() -> dict:
    """docs/benchmarks/README.md's tables: {linked report file: its command (unquoted)}."""
    rows = {}
    for line in (BENCH / "README.md").read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 4 and LINK.search(cells[0]) and cells[2].startswith("`"):
            rows[LINK.search(cells[0]).group(1)] = cells[2].strip("`")
    return rows


def stale_bench_files(names: set, rows: dict) -> list:
    """Files in docs/benchmarks that no row of its README keeps: a report is its linked .md (or a
    lone .json), the .json beside it and the figure sheet its .md shows."""
    kept = {"README.md", "suite.md"}
    for linked in rows:
        stem = linked.rsplit(".", 1)[0]
        kept |= {linked, f"{stem}.json", f"{stem}.md"}
        md = BENCH / f"{stem}.md"
        if md.exists():
            kept |= {t for t in LINK.findall(md.read_text(encoding="utf-8")) if t.endswith(".png")}
    return sorted(names - kept)


def test_every_benchmark_file_belongs_to_a_current_report_with_its_command():
    """What docs/benchmarks holds is what its README lists (nothing superseded left behind), and
    a suite report's own header names the command its README row gives."""
    rows = bench_rows()
    assert len(rows) >= 10
    assert not stale_bench_files({p.name for p in BENCH.iterdir()}, rows)
    for linked, command in rows.items():
        assert command.startswith("python -m specviz"), linked
        if linked.startswith("suite-"):
            report = json.loads((BENCH / linked.replace(".md", ".json")).read_text(encoding="utf-8"))
            assert report["environment"]["command"] == command, linked


def test_a_stale_benchmark_file_is_found():
    rows = bench_rows()
    names = {p.name for p in BENCH.iterdir()}
    assert stale_bench_files(names | {"suite-qwen-coder-old.md", "suite-qwen-coder-full-speedup.png"}, rows) == [
        "suite-qwen-coder-full-speedup.png", "suite-qwen-coder-old.md"]
