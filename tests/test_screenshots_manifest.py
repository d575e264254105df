"""The docs' screenshots and GIF (docs/screenshots) are built by take.py, never edited: its
manifest.json names each picture and the stamp of the app code and presets they show
(specviz.bench.provenance.app_version); pictures older than that code fail here."""

import importlib.util
import json
import shutil
from pathlib import Path

from specviz.bench import provenance

ROOT = Path(__file__).resolve().parents[1]
SHOTS = ROOT / "docs" / "screenshots"
_spec = importlib.util.spec_from_file_location("take_screenshots", SHOTS / "take.py")
take = importlib.util.module_from_spec(_spec)  # docs/screenshots/take.py (a script, not a package)
_spec.loader.exec_module(take)


def _taken(folder: Path) -> Path:
    """A folder with every picture (empty files) and the manifest take.py writes."""
    folder.mkdir(exist_ok=True)
    paths = [folder / name for name in take.expected()]
    for path in paths:
        path.write_bytes(b"")
    take.write_manifest(folder, paths)
    return folder


def test_the_committed_pictures_are_of_the_code_now():
    """Until `python docs/screenshots/take.py` takes them again, pictures of older code fail here."""
    assert take.problems(SHOTS) == []


def test_fresh_pictures_pass_and_name_what_they_show(tmp_path):
    folder = _taken(tmp_path / "shots")
    assert take.problems(folder) == []
    manifest = json.loads((folder / take.MANIFEST).read_text())
    assert manifest["code"] == provenance.app_version() and "steps.gif" in manifest["shots"]
    assert {"app.py", "webapp/step.py", "specviz/render/chips.py", provenance.PRESETS_MANIFEST} <= set(manifest["files"])


def test_pictures_of_older_code_or_missing_ones_fail(tmp_path):
    folder = _taken(tmp_path / "shots")
    manifest = json.loads((folder / take.MANIFEST).read_text())
    manifest["code"] = "0123456789ab"
    (folder / take.MANIFEST).write_text(json.dumps(manifest))
    (folder / "tree.png").unlink()
    assert take.problems(folder) == [
        "tree.png is missing",
        f"the pictures show code stamp 0123456789ab, the code now is {provenance.app_version()}: "
        "python docs/screenshots/take.py"]
    (folder / take.MANIFEST).unlink()
    assert take.problems(folder) == ["manifest.json is missing: python docs/screenshots/take.py"]


def test_a_changed_view_or_preset_changes_the_stamp_and_a_comment_does_not(tmp_path):
    root = tmp_path / "repo"
    shutil.copytree(provenance.PACKAGE, root / "specviz", ignore=shutil.ignore_patterns("__pycache__", "heads", "serving"))
    shutil.copytree(ROOT / "webapp", root / "webapp", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "app.py", root / "app.py")
    before = provenance.app_version(root)
    assert before == provenance.app_version()
    step = root / "webapp" / "step.py"
    step.write_text(step.read_text() + "\n# a comment\n")
    assert provenance.app_version(root) == before
    chips = root / "specviz" / "render" / "chips.py"
    chips.write_text(chips.read_text() + "\nCHANGED = 1\n")
    assert provenance.app_version(root) != before
    chips.write_text(chips.read_text().replace("\nCHANGED = 1\n", ""))
    assert provenance.app_version(root) == before
    manifest = root / provenance.PRESETS_MANIFEST
    manifest.write_text(manifest.read_text().replace("qwen-coder", "another-pair", 1))  # presets recorded again
    assert provenance.app_version(root) != before
