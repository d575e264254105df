"""specviz.bench.recordings: recording presets and reading them back (on the tiny pair, into a temporary
folder: the shipped recordings come from the real pair, see tests/test_app_api.py)."""

import dataclasses
import gzip
import json
import shutil

import pytest

from specviz.bench import recordings as presets


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    out = tmp_path_factory.mktemp("presets")
    lines = []
    presets.record("tiny", folder=out, say=lines.append, tries=1, presets=presets.PRESETS[:2], repeats=2)
    assert any(line.startswith("[2/") for line in lines)  # progress, preset by preset
    assert sum(line.startswith("  speedup over 3 runs: ") for line in lines) == 2
    return out


def test_a_recording_reads_back_as_the_runs_it_recorded(folder, tiny):
    import specviz

    for preset in presets.PRESETS[:2]:
        rec = presets.recording(preset.label, folder)
        fresh = [e.to_dict() for e in specviz.generate(tiny, preset.prompt, preset.race_options())]
        assert rec.run[-1]["token_ids"] == fresh[-1]["token_ids"]  # greedy, or sampled with the preset's seed
        assert rec.run[0]["method"] == preset.method and rec.ar[0]["method"] == "ar"
        assert rec.ar[0]["temperature"] == preset.temperature and rec.ar[0]["prompt"] == preset.prompt
        assert rec.run_busy > 0 and rec.ar_busy > 0
        # one workload timed twice: both lanes emit as many tokens (greedy: one text; sampled lanes
        # run to the preset's count, end of text ignored, as the race's rule says)
        assert len(rec.run[-1]["token_ids"]) == len(rec.ar[-1]["token_ids"])
        if preset.temperature > 0:
            assert len(rec.ar[-1]["token_ids"]) == preset.max_new_tokens and rec.ar[0]["options"]["ignore_eos"]
        assert rec.note.startswith("recorded on ") and rec.where["pair"] == "tiny"
        # the recorded race's speedup first, then each repeat's: every run of the race, timed
        assert len(rec.speedups) == 3 and all(x > 0 for x in rec.speedups)
        assert rec.speedups[0] == pytest.approx((len(rec.run[-1]["token_ids"]) / rec.run_busy)
                                                / (len(rec.ar[-1]["token_ids"]) / rec.ar_busy), rel=1e-2)


def test_the_presets_table_shows_each_race_over_its_runs(folder, monkeypatch):
    from specviz.bench.guide import preset_rows, presets_table

    monkeypatch.setattr(presets, "PRESETS", presets.PRESETS[:2])  # the two the fixture recorded
    for row in preset_rows(folder):
        speedups = presets.recording(row["label"], folder).speedups
        assert (row["speedup_lo"], row["speedup_hi"], row["repeats"]) == (min(speedups), max(speedups), 3)
        shown = (f"**{row['speedup_median']:.2f}×** ({row['speedup_lo']:.2f}–{row['speedup_hi']:.2f}, 3 runs)")
        assert shown in presets_table(folder)


def test_a_recording_made_before_repeats_is_refused_by_the_table(folder, tmp_path, monkeypatch):
    from specviz.bench.guide import preset_rows
    from specviz.errors import SpecvizError

    old = tmp_path / "old"
    shutil.copytree(folder, old)
    info = presets.manifest(old)
    for entry in info["presets"]:
        del entry["speedups"]
    (old / presets.MANIFEST).write_text(json.dumps(info), encoding="utf-8")
    monkeypatch.setattr(presets, "PRESETS", presets.PRESETS[:2])
    with pytest.raises(SpecvizError, match="predates them: run python -m specviz.bench.recordings record"):
        preset_rows(old)


def test_the_traces_are_gzipped_json_lines_with_a_manifest(folder):
    info = presets.manifest(folder)
    assert {"device", "device_name", "dtype", "date", "specviz", "threads", "loadavg_start"} <= set(info["recorded"])
    entry = info["presets"][0]
    with gzip.open(folder / entry["run"]["file"], "rt", encoding="utf-8") as fh:
        first = json.loads(fh.readline())
    assert first["kind"] == "run_started" and entry["settings"]["label"] == presets.PRESETS[0].label


def test_a_preset_changed_since_its_recording_is_refused(folder, monkeypatch):
    changed = dataclasses.replace(presets.PRESETS[1], k=3)
    monkeypatch.setattr(presets, "PRESETS", (presets.PRESETS[0], changed) + presets.PRESETS[2:])
    monkeypatch.setattr(presets, "_CACHE", {})
    with pytest.raises(ValueError, match="has other settings: run `python -m specviz.bench.recordings record`"):
        presets.recording(changed.label, folder)
    with pytest.raises(KeyError):
        presets.recording("no such preset", folder)


def test_list_names_every_preset_and_where_it_was_recorded(capsys):
    assert presets.main(["list"]) == 0
    shown = capsys.readouterr().out.splitlines()
    assert [line.split(": recorded on ")[0] for line in shown] == presets.LABELS


def test_the_shipped_presets_race_like_with_like_and_say_what_they_measured():
    """Every shipped recording is one workload timed twice (both lanes emit the same number of
    tokens, at least 48), and each label's claim holds over every run of its race (the recorded
    one and its repeats): a label that the numbers contradict fails here, naming the label to
    change, whoever re-records the presets on whatever machine."""
    from specviz.bench.guide import preset_rows

    rows = {row["label"]: row for row in preset_rows()}
    for preset in presets.PRESETS:
        row = rows[preset.label]
        assert row["tokens"][0] == row["tokens"][1] >= 48, (preset.label, row["tokens"])
        assert row["repeats"] >= 1 + presets.REPEATS, (preset.label, row["repeats"])
        assert presets.claim_problem(preset, presets.recording(preset.label).speedups) == ""
        if preset.claim == "":  # no claim of speed: the label names none, the table gives the range
            assert not any(word in preset.label for word in presets.CLAIMS), preset.label
        assert ("LOSSY" in preset.label) == (not row["lossless"]), preset.label


def _claiming(claim: str, label: str = "") -> presets.Preset:
    return dataclasses.replace(presets.PRESETS[1], label=label or f"Chat, T = 0.7: speculation {claim}", claim=claim)


@pytest.mark.parametrize("claim, speedups, verdict", [
    ("loses", [0.91, 0.95, 0.97], ""),
    ("loses", [0.91, 0.95, 1.0], "break-even"),  # a range that reaches 1 is no loss
    ("loses", [0.91, 1.02, 0.97], "break-even"),
    ("wins", [1.2, 1.1, 1.05], ""),
    ("wins", [1.2, 1.0, 1.05], "break-even"),
    ("wins", [0.98, 0.99], "loses"),
    ("break-even", [0.97, 1.03], ""),
    ("break-even", [1.01, 1.03], "wins"),
    ("break-even", [0.95, 0.99], "loses"),
])
def test_a_claim_must_hold_over_every_run(claim, speedups, verdict):
    problem = presets.claim_problem(_claiming(claim), speedups)
    if verdict == "":
        assert problem == ""
    else:
        assert problem.endswith(f"say {verdict!r}: change its label and claim in specviz.bench.recordings.PRESETS "
                                f"to {verdict!r}")
        assert f"over {len(speedups)} runs" in problem


def test_a_label_that_says_another_claim_than_its_own_is_named():
    problem = presets.claim_problem(_claiming("loses", "Chat: break-even"), [0.9, 0.95])
    assert problem == "'Chat: break-even' says break-even but its claim is 'loses'"


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_the_live_race_holds_its_lanes_to_one_workload(temperature):
    """The app's live race runs its two lanes by the presets' rule: sampled lanes run to the
    count whatever end of text says (the tiny pair's EOS shows up within a few dozen tokens);
    greedy lanes write one text and stop together."""
    import specviz
    from specviz.config import RunConfig
    from webapp import race as live

    tiny = specviz.load_pair("tiny")
    # sampled: a seed whose plain runs end early on end of text, the case the race's rule must change
    seed = 0 if temperature == 0 else next(seed for seed in range(50) if any(
        next(e for e in specviz.generate(tiny, "def fibonacci(n):", method=m, k=4, temperature=temperature,
                                         max_new_tokens=80, seed=seed) if e.kind == "run_finished").finish_reason == "eos"
        for m in ("ar", "spec")))
    cfg = RunConfig(method="spec", k=4, temperature=temperature, max_new_tokens=80, seed=seed)
    lanes = {}
    for update in live.stream_race("tiny", "def fibonacci(n):", cfg):
        lanes.setdefault(update["lane"], []).extend(update["events"])
    finished = {name: next(e for e in events if e["kind"] == "run_finished") for name, events in lanes.items()}
    counts = {name: len(f["token_ids"]) for name, f in finished.items()}
    assert counts["ar"] == counts["spec"]
    if temperature > 0:
        assert counts["ar"] == 80 and all(f["finish_reason"] == "length" for f in finished.values())
