"""Recordings carry the version of the code that decided them (specviz.bench.provenance): a
changed rule or policy changes it, a comment or docstring does not; the committed presets and
serving runs are of the code now (else: record them again); the app says when a recording was
made by earlier code."""

import json
import shutil

from specviz.bench import provenance
from specviz.bench import recordings as recorded


def _copy(tmp_path):
    root = tmp_path / "specviz"
    shutil.copytree(provenance.PACKAGE, root, ignore=shutil.ignore_patterns("data", "__pycache__"))
    return root


def test_a_changed_policy_changes_the_version_and_a_comment_does_not(tmp_path):
    root = _copy(tmp_path)
    load = root / "engine" / "load.py"
    before = {lane: provenance.code_version("spec", k, True, root) for lane, k in (("spec", 4), ("load", "load"))}
    text = load.read_text()
    load.write_text(text.replace('"""', '"""A reworded docstring. ', 1) + "\n# a comment\n")
    assert provenance.code_version("spec", "load", True, root) == before["load"]
    load.write_text(text + "\nTUNED = 0.5\n")  # a changed constant of the policy
    assert provenance.code_version("spec", "load", True, root) != before["load"]
    assert provenance.code_version("spec", 4, True, root) == before["spec"]  # fixed k never reads the policy


def test_a_changed_rule_changes_every_methods_version(tmp_path):
    root = _copy(tmp_path)
    before = {m: provenance.code_version(m, 4, False, root) for m in ("spec", "tree", "pld")}
    exact = root / "verifiers" / "exact.py"
    exact.write_text(exact.read_text() + "\nSTRICTER = True\n")  # any change of the rule's code
    assert all(provenance.code_version(m, 4, False, root) != v for m, v in before.items())


def test_each_method_hashes_its_own_drafter():
    assert "drafters/model.py" in provenance.files_for("spec", 4)
    assert "drafters/lookup.py" in provenance.files_for("pld", 6)
    assert "drafters/ssd.py" not in provenance.files_for("spec", 4)  # SSD's code does not decide a spec preset
    assert "engine/load.py" in provenance.files_for("spec", "load", batched=True)


def test_the_committed_presets_are_of_the_code_now():
    for label in recorded.LABELS:
        assert recorded.recording(label).earlier_code == "", f"{label}: python -m specviz.bench.recordings record"


def test_the_committed_serving_runs_are_of_the_code_now():
    manifest = recorded.serving_manifest()
    for key, entry in manifest["runs"].items():
        assert recorded.serving_earlier_code(entry["batch"], entry["lane"]) == "", (
            f"{key}: python -m specviz.bench.recordings record-serving")


def test_the_app_says_when_a_recording_was_made_by_earlier_code(tmp_path):
    from webapp import presets

    folder = tmp_path / "serving"
    shutil.copytree(recorded.SERVING, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["runs"]["32-load"]["code"] = "0123456789ab"
    (folder / "manifest.json").write_text(json.dumps(manifest))
    sentence = recorded.serving_earlier_code(32, "load", folder)
    assert sentence.startswith("Recorded by earlier code (0123456789ab)") and "record-serving" in sentence
    note = presets.recorded_note("recorded on X", "Recorded by earlier code (0123456789ab): <b>")
    assert 'data-earlier-code="1"' in note and "&lt;b&gt;" in note
    assert 'data-earlier-code' not in presets.recorded_note("recorded on X")
