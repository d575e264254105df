"""The gallery's recorder (specviz.bench.gallery) on the tiny pair: every method of the registry has
its rows, each entry keeps both lanes with their own clocks and the code that decided them, a
recording cut short goes on where it stopped, and one made on another machine is not mixed in."""

import json

import pytest

from specviz import methods
from specviz.bench import gallery, provenance
from specviz.errors import InputError


def test_every_registered_method_has_its_rows():
    rows = gallery.entries()
    by_variant = {}
    for e in rows:
        by_variant.setdefault(e.variant.name, set()).add((e.prompt, e.temperature))
    for name in methods.names():
        if name == "ar":
            assert name not in by_variant  # the baseline lane of every entry
            continue
        temps = (0.0,) if name == "lookahead" else (0.0, gallery.SAMPLED)  # lookahead is greedy-only
        assert by_variant[name] == {(p, t) for p in gallery.PROMPTS for t in temps}, name
    assert by_variant["typical"] == {(p, gallery.SAMPLED) for p in gallery.PROMPTS}  # lossy only where it differs
    assert by_variant["spec-load"] == {("all", 0.0), ("all", gallery.SAMPLED)}
    assert len({e.key for e in rows}) == len(rows)


def test_entries_race_as_the_app_races():
    entry = next(e for e in gallery.entries() if e.key == "spec.chat.t0.7")
    cfg, ar = entry.config(), entry.ar_config()
    assert cfg.ignore_eos and ar.ignore_eos and cfg.chat and cfg.max_new_tokens == ar.max_new_tokens  # equal length
    assert ar.method == "ar" and ar.temperature == cfg.temperature and ar.seed == cfg.seed
    greedy = next(e for e in gallery.entries() if e.key == "pld.code.t0").config()
    assert not greedy.ignore_eos and not greedy.chat


ONLY = ("spec", "suffix-again", "spec-load")


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    folder = tmp_path_factory.mktemp("gallery")
    lines = []
    info = gallery.record("tiny", folder=folder, tokens=6, say=lines.append, only=ONLY)
    return folder, info, lines


def test_each_entry_keeps_its_lanes_clocks_and_code(recorded):
    folder, info, lines = recorded
    assert sorted(info["entries"]) == sorted(e.key for e in gallery.entries(6) if e.variant.name in ONLY)
    assert any("ETA" in line for line in lines)
    for key, entry in info["entries"].items():
        run, ar = gallery.lanes(key, folder)
        assert entry["run"]["tokens"] == entry["ar"]["tokens"]  # each beside its AR lane of equal length
        assert entry["code"] == provenance.code_version("spec" if "spec" in key else "suffix",
                                                        "load" if key.startswith("spec-load") else 4,
                                                        key.startswith("spec-load"))
        for lane, events in (("run", run), ("ar", ar)):
            clock = entry[lane]["clock"]
            assert [seconds for _, seconds in clock] == sorted(seconds for _, seconds in clock)
            assert clock[-1][1] == pytest.approx(entry[lane]["busy"], abs=1e-3) or key.startswith("spec-load")
        assert entry["speedup"] > 0 and info["recorded"]["specviz"] and info["recorded"]["pair"] == "tiny"
    assert json.loads((folder / gallery.MANIFEST).read_text()) == info


def test_suffix_again_drafts_from_the_session_that_saw_the_answer(recorded):
    folder, info, _ = recorded
    run, _ = gallery.lanes("suffix-again.code.t0", folder)
    sources = [e["source"]["tree"] for e in run if e["kind"] == "draft_proposed" and e.get("source")]
    assert "session" in sources  # the recorded run's drafts came from the first run's output


def test_a_recording_goes_on_where_it_stopped(recorded):
    folder, info, _ = recorded
    lines = []
    again = gallery.record("tiny", folder=folder, tokens=6, say=lines.append, only=ONLY)
    assert again["entries"] == info["entries"] and "0 of" in lines[0]
    redo = gallery.record("tiny", folder=folder, tokens=6, say=lines.append, only=("spec",), again=True)
    assert redo["entries"]["spec.code.t0"]["date_utc"] and redo["entries"]["spec-load.all.t0"] == info["entries"][
        "spec-load.all.t0"]


def test_another_machine_or_length_is_not_mixed_in(recorded):
    folder, _, _ = recorded
    with pytest.raises(InputError, match="another tokens.*--fresh"):
        gallery.record("tiny", folder=folder, tokens=7, say=lambda line: None, only=ONLY)


def test_an_unknown_variant_is_one_line(capsys):
    with pytest.raises(SystemExit) as exc:
        gallery.main(["record", "--only", "spec,nonsense"])
    assert exc.value.code == 2 and "no gallery variant nonsense" in capsys.readouterr().err


def test_every_committed_recording_reads_back_through_the_schema():
    """What the site and the app read: every lane of every entry (read_trace checks the schema)."""
    for key in gallery.manifest()["entries"]:
        run, ar = gallery.lanes(key)
        assert run[-1]["kind"] in ("run_finished", "batch_finished") and ar[-1]["kind"] == run[-1]["kind"], key
