"""The public surface's promise: 0.1.0's import paths work until 0.3.0 with a DeprecationWarning
that names the new path (specviz.deprecated), the version is written in one place, and a trace of
every earlier event schema still opens while a newer one is refused in one sentence.

tests/fixtures/api-0.1.0.json lists every public name of each module path 0.2.0 moved and of each
package __init__'s re-exports (and `specviz.bench.forward.batch_cost`, a name that left a module that
stayed), as 0.1.0 had them (read from the tree before 5c3a2c9, "packages by
layer"); tests/fixtures/schema-1/ holds traces the old code wrote (its README says how).
"""

import importlib
import json
import re
import subprocess
import sys
import tomllib
import warnings
from pathlib import Path

import pytest

import specviz
from specviz import deprecated
from specviz import events as ev
from specviz.analysis import metrics, trace
from specviz.errors import NewerSchemaError, SpecvizError
from specviz.render import chips, panel, serving, steps

ROOT = Path(__file__).resolve().parents[1]
SCHEMA_1 = ROOT / "tests" / "fixtures" / "schema-1"
OLD = json.loads((ROOT / "tests" / "fixtures" / "api-0.1.0.json").read_text(encoding="utf-8"))


def fresh_import(name: str):
    """Import `name` as a first `import` statement would, recording its warnings (__import__, not
    importlib.import_module, whose own frame the warning would point at)."""
    sys.modules.pop(name, None)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        __import__(name)
    return sys.modules[name], caught


def new_home(old: str, name: str, table: dict, home: str = None) -> tuple:
    """(module, name) where `old`.`name` lives in 0.2.0, from the table specviz.deprecated reads."""
    for module, names in table.items():
        for entry in names.split():
            was, _, now = entry.partition("=")
            if was == name:
                return module, now or was
    return home, name


def test_every_moved_module_of_0_1_0_is_in_the_table():
    assert sorted(OLD["modules"]) == sorted(deprecated.MODULES)
    assert sorted(OLD["packages"]) == sorted(deprecated.PACKAGES)
    assert len(OLD["modules"]) + len(OLD["packages"]) == 37  # 32 module paths, 4 packages, bench.forward


@pytest.mark.parametrize("old", sorted(OLD["modules"]))
def test_an_old_module_path_imports_with_a_warning_naming_its_new_home(old):
    home = deprecated.MODULES[old][0]
    _, caught = fresh_import(old)
    assert [str(w.message) for w in caught] == [
        f"{old} is deprecated: import {home} instead (the old path goes in 0.3.0)."]
    assert caught[0].category is DeprecationWarning
    assert caught[0].filename == __file__  # the warning points at the line that imported it


@pytest.mark.parametrize("old", sorted(OLD["modules"]))
def test_every_name_of_an_old_module_is_the_object_at_its_new_path(old):
    module, _ = fresh_import(old)
    home, elsewhere = deprecated.MODULES[old]
    for name in OLD["modules"][old]:
        new_module, new_name = new_home(old, name, elsewhere, home)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            value = getattr(module, name)
        assert value is getattr(importlib.import_module(new_module), new_name), f"{old}.{name}"
        if new_module != home:  # moved apart from the rest: its own warning names where
            assert [str(w.message) for w in caught] == [
                f"{old}.{name} is deprecated: it is {new_module}.{new_name} now (the old path goes in 0.3.0)."]


@pytest.mark.parametrize("package", sorted(OLD["packages"]))
def test_a_package_re_export_of_0_1_0_warns_and_is_the_same_object(package):
    module = importlib.import_module(package)
    for name in OLD["packages"][package]:
        new_module, new_name = new_home(package, name, deprecated.PACKAGES[package])
        with pytest.warns(DeprecationWarning, match=re.escape(f"import it from {new_module}")) as caught:
            value = getattr(module, name)
        assert value is getattr(importlib.import_module(new_module), new_name)
        assert caught[0].filename == __file__


def test_the_issue_s_example_works_and_warns():
    with pytest.warns(DeprecationWarning, match=r"specviz\.verifiers\.RejectionVerifier is deprecated: import it "
                                                r"from specviz\.verifiers\.exact"):
        from specviz.verifiers import RejectionVerifier
    from specviz.verifiers.exact import RejectionVerifier as new
    assert RejectionVerifier is new


def test_new_paths_and_unknown_names_are_untouched():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning fails
        from specviz.render import charts  # noqa: F401  a submodule, not a re-export
        from specviz.engine import sequence  # noqa: F401
        import specviz.analysis.metrics  # noqa: F401
    for package in OLD["packages"]:
        with pytest.raises(AttributeError, match="has no attribute 'nope'"):
            getattr(importlib.import_module(package), "nope")
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("specviz.nope")


def run_python(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=120)


def test_old_paths_cost_nothing_until_used_and_renderers_stay_torch_free():
    done = run_python("import sys, warnings; warnings.simplefilter('ignore')\n"
                      "import specviz.render, specviz.verifiers, specviz.drafters\n"
                      "specviz.render.CSS; from specviz.metrics import fold\n"
                      "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"


def test_python_m_on_an_old_path_runs_the_new_module_and_says_so():
    done = subprocess.run([sys.executable, "-m", "specviz.presets", "--help"], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines()[0] == ("note: python -m specviz.presets is deprecated; use python -m "
                                           "specviz.bench.recordings (the old name goes in 0.3.0).")
    assert done.stdout.startswith("usage: python -m specviz.bench.recordings")


def test_the_version_is_written_once_and_the_changelog_opens_with_it():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    assert "version" not in project["project"] and project["project"]["dynamic"] == ["version"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "specviz.__version__"}
    assert specviz.__version__ == "0.2.0"
    releases = re.findall(r"^## (\d+\.\d+\.\d+)", (ROOT / "CHANGELOG.md").read_text(encoding="utf-8"), re.M)
    assert releases[:2] == [specviz.__version__, "0.1.0"]


# -- the event schema's versions ----------------------------------------------------------------

def test_a_schema_1_trace_opens_as_schema_2_with_the_missing_fields_at_their_defaults():
    events = trace.load(SCHEMA_1 / "spec_t1.jsonl")
    raw = json.loads((SCHEMA_1 / "spec_t1.jsonl").read_text(encoding="utf-8").splitlines()[0])
    assert raw["schema_version"] == 1 and "backend" not in raw  # what the old code wrote
    started, finished = events[0], events[-1]
    assert started.schema_version == ev.SCHEMA_VERSION == 2
    assert (started.backend, started.draft_quant, started.cuda_graphs) == ("torch", "none", False)
    done = [e for e in events if e.kind == "step_finished"]
    assert [(s.prefill, s.cpu_elapsed) for s in done] == [(0, None)] * 4
    assert finished.text == "S8c[HUqK|\nv1" and len(finished.token_ids) == 12
    stats = metrics.fold(events)
    assert (stats.new_tokens, stats.tau) == (12, finished.metrics["tau"]) == (12, 3.0)


def test_a_schema_1_trace_renders():
    events = [e.to_dict() for e in trace.load(SCHEMA_1 / "spec_t1.jsonl")]
    run = steps.build(events)
    assert len(run.steps) == 4
    assert run.finished["text"] == "".join(t.text for t in run.tokens() if t.status in steps.COMMITTED)
    assert "sv-chip sv-rejected" in chips.run_text(run).html
    done = [e for e in events if e["kind"] == "step_finished"]
    assert [sum(t.status == "accepted" for t in step.drafted) for step in run.steps] == [d["accepted"] for d in done]
    rejected = next(i for i, d in enumerate(done) if d["accepted"] < d["drafted"])
    assert run.steps[rejected].next.status == "residual"
    assert "residual" in panel.step_panel(run, rejected).html


def test_a_schema_1_batch_opens_and_its_rows_render():
    events = trace.load(SCHEMA_1 / "batch_spec_greedy.jsonl")
    assert "schema_version" not in json.loads((SCHEMA_1 / "batch_spec_greedy.jsonl").read_text().splitlines()[0])
    assert events[0].kind == "batch_started" and events[0].schema_version == 2
    rows = ev.split_rows(events)
    assert sorted(rows) == [0, 1] and [rows[r][-1].text for r in (0, 1)] == ["(", 'D"YU8']
    dicts = [e.to_dict() for e in events]
    assert serving.batch_summary(dicts)["rows"] == 2
    run = steps.build([e.to_dict() for e in rows[1]])
    assert "".join(t.text for t in run.tokens() if t.status in steps.COMMITTED) == 'D"YU8'
    assert "sv-chip sv-rejected" in chips.run_text(run).html


def test_a_migrated_trace_saved_again_is_schema_2_and_reads_back_the_same(tmp_path):
    events = trace.load(SCHEMA_1 / "spec_t1.jsonl")
    trace.save(events, tmp_path / "again.jsonl")
    assert json.loads((tmp_path / "again.jsonl").read_text().splitlines()[0])["schema_version"] == 2
    assert trace.load(tmp_path / "again.jsonl") == events


@pytest.mark.parametrize("kind", ev.VERSIONED_KINDS)
def test_a_newer_schema_is_refused_in_one_sentence_before_its_new_fields(kind):
    first = trace.load(SCHEMA_1 / ("spec_t1.jsonl" if kind == "run_started" else "batch_spec_greedy.jsonl"))[0]
    newer = {**first.to_dict(), "schema_version": 3, "a_field_from_the_future": 1}
    with pytest.raises(NewerSchemaError) as caught:
        ev.from_dict(newer)
    assert str(caught.value) == ("This trace was made by a newer specviz (schema 3); this reader knows up to "
                                 "schema 2: upgrade specviz.")
    assert isinstance(caught.value, SpecvizError)  # the CLI prints it as one line


def test_the_current_schema_reads_as_it_is():
    started = trace.load(SCHEMA_1 / "spec_t1.jsonl")[0].to_dict()
    assert started["schema_version"] == 2 and ev.from_dict(started).to_dict() == started
