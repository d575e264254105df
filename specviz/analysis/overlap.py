"""When each side worked: the draft's and the target's lanes of a run, step by step, from its events.

Every run has the two lanes. Plain speculation drafts, then the target verifies: one after the
other. Speculative speculative decoding (SSD, specviz.drafters.ssd) drafts the next step *while*
the target verifies, and its steps say when (`info["ssd"]`). `timeline(events)` turns either into
the segments the timeline view draws (specviz.render.timeline); `ssd_summary(events)` counts what
SSD's overlap bought: how often the real outcome was one prepared (the hit rate), and how much
of the drafting ran hidden behind the target's pass.

Plain data in, plain data out (event objects or their dicts): no torch, no models.
"""

from __future__ import annotations

from typing import Optional

LANES = ("draft", "target")


def run_steps(events) -> tuple:
    """(run_started, [step_finished, ...]) of one single-sequence run, as dicts (from event
    objects or their dicts)."""
    events = [e if isinstance(e, dict) else e.to_dict() for e in events]
    started = next((e for e in events if e.get("kind") == "run_started"), {})
    return started, [e for e in events if e.get("kind") == "step_finished"]


def timeline(events) -> dict:
    """The run's lanes as segments (seconds on the run's clock):

        {"method", "k", "steps": n, "segments": [{"step", "lane", "kind", "start", "end"}],
         "outcomes": [{"step", "time", "hit"}]}   (SSD only: each verdict, and whether it was prepared for)

    kinds: "draft" (drafting on the critical path), "verify" (the target's pass), "prepare"
    (SSD's drafting while the target verifies), "wait" (SSD: the target's pass is over, the
    preparing forward under way is finished before the verdict is used)."""
    started, steps = run_steps(events)
    out = {"method": started.get("method"), "k": started.get("k"), "steps": len(steps), "segments": [],
           "outcomes": []}
    begin = 0.0
    for step in steps:
        ssd = (step.get("info") or {}).get("ssd")
        segs = _ssd_segments(ssd, begin) if ssd and "verify" in ssd else _plain_segments(step, begin)
        out["segments"] += [{"step": step["step"], **s} for s in segs]
        if ssd and "verify" in ssd and ssd.get("prepared"):  # a verdict it had prepared for, or missed
            out["outcomes"].append({"step": step["step"], "time": begin + ssd["verify"]["end"],
                                    "hit": bool(ssd["hit"]), "prepared": len(ssd["prepared"])})
        begin = step["elapsed"]
    return out


def _plain_segments(step: dict, begin: float) -> list:
    draft_end = begin + step.get("draft_time", 0.0)
    out = [{"lane": "draft", "kind": "draft", "start": begin, "end": draft_end}] if step.get("drafted") else []
    return out + [{"lane": "target", "kind": "verify", "start": draft_end, "end": draft_end + step["verify_time"]}]


def _ssd_segments(ssd: dict, begin: float) -> list:
    out = []
    draft = ssd.get("draft") or {}
    if draft.get("end", 0.0) > draft.get("start", 0.0):
        out.append({"lane": "draft", "kind": "draft", "start": begin + draft["start"], "end": begin + draft["end"]})
    out.append({"lane": "target", "kind": "verify", "start": begin + ssd["verify"]["start"],
                "end": begin + ssd["verify"]["end"]})
    ahead = ssd.get("ahead")
    if ahead and ahead.get("levels"):
        out.append({"lane": "draft", "kind": "prepare", "start": begin + ahead["start"], "end": begin + ahead["end"]})
    wait = ssd.get("wait")
    if wait and wait["end"] > wait["start"]:
        out.append({"lane": "target", "kind": "wait", "start": begin + wait["start"], "end": begin + wait["end"]})
    return out


def _overlap(a: tuple, b: tuple) -> float:
    return max(0.0, min(a[1], b[1]) - max(a[0], b[0]))


def ssd_summary(events) -> Optional[dict]:
    """What an SSD run's overlap bought (None for a run that is not SSD's):

        steps, verdicts (steps whose outcome was prepared for), hits, hit_rate (hits / verdicts),
        depth_on_hit (mean drafts ready on a hit), alpha (the outcome model's last estimate),
        draft_s (all drafting: exposed + preparing), hidden_s (preparing while the target's pass
        ran), hidden_share (hidden_s / draft_s), exposed_s (drafting on the critical path),
        wait_s (after the pass, for the preparing forward under way), verify_s (the target's
        passes), per step: draft_per_step, verify_per_step, wait_per_step, exposed_per_step."""
    _, steps = run_steps(events)
    infos = [(s.get("info") or {}).get("ssd") for s in steps]
    if not steps or not all(infos):
        return None
    verdicts = [i for i in infos if i.get("prepared")]
    hits = [i for i in verdicts if i.get("hit")]
    drafted = [i["draft"] for i in infos[1:] if i["draft"]["from"] == "prepared"]
    exposed = sum(i["draft"]["end"] - i["draft"]["start"] for i in infos)
    preparing = sum(i["ahead"]["end"] - i["ahead"]["start"] for i in infos if i.get("ahead"))
    hidden = sum(_overlap((i["ahead"]["start"], i["ahead"]["end"]), (i["verify"]["start"], i["verify"]["end"]))
                 for i in infos if i.get("ahead"))
    wait = sum(i["wait"]["end"] - i["wait"]["start"] for i in infos if i.get("wait"))
    verify = sum(i["verify"]["end"] - i["verify"]["start"] for i in infos)
    n = len(infos)
    draft_s = exposed + preparing
    return {"steps": n, "verdicts": len(verdicts), "hits": len(hits),
            "hit_rate": len(hits) / len(verdicts) if verdicts else None,
            "depth_on_hit": sum(d["prepared"] for d in drafted) / len(drafted) if drafted else None,
            "alpha": infos[-1].get("alpha"), "draft_s": draft_s, "hidden_s": hidden,
            "hidden_share": hidden / draft_s if draft_s else None, "exposed_s": exposed, "wait_s": wait,
            "verify_s": verify, "draft_per_step": draft_s / n, "verify_per_step": verify / n,
            "wait_per_step": wait / n, "exposed_per_step": exposed / n}


def decode_costs(events) -> dict:
    """The sums the SSD theory reads from one run's decoding steps (the first step, which also
    reads the prompt, left out): steps, tokens, seconds, draft seconds and forwards, the target's
    passes, SSD's wait, the rest of the steps, and for SSD the steps whose draft was prepared and
    how many drafts were ready in them."""
    _, steps = run_steps(events)
    decode = steps[1:]
    seconds = sum(b["elapsed"] - a["elapsed"] for a, b in zip(steps, decode))
    out = {"steps": len(decode), "tokens": sum(len(s["emitted_ids"]) for s in decode), "seconds": seconds,
           "draft_s": sum(s["draft_time"] for s in decode), "draft_forwards": sum(s["draft_forwards"] for s in decode),
           "verify_s": sum(s["verify_time"] for s in decode), "wait_s": 0.0, "ready_steps": 0, "ready_drafts": 0}
    for s in decode:
        ssd = (s.get("info") or {}).get("ssd") or {}
        if ssd.get("wait"):
            out["wait_s"] += ssd["wait"]["end"] - ssd["wait"]["start"]
        if (ssd.get("draft") or {}).get("from") == "prepared":
            out["ready_steps"] += 1
            out["ready_drafts"] += ssd["draft"]["prepared"]
    out["other_s"] = seconds - out["draft_s"] - out["verify_s"] - out["wait_s"]
    return out


def theory_inputs(spec: list, ssd: list) -> Optional[dict]:
    """specviz.analysis.theory.ssd_speedup's inputs, in target passes, from `decode_costs` of plain
    speculation's runs and SSD's at the same k (pooled): c (a draft forward), slowdown (SSD's
    pass beside the preparing drafter, over the pass alone), wait, overhead and ssd_overhead (the
    rest of a step of each: SSD's includes planning and keeping its branches), hit (the share of SSD's steps whose draft was prepared), ready (drafts ready on such a step);
    and `measured`, SSD's decoding tokens/s over spec's. None when either has no decoding step."""
    def total(runs, key):
        return sum(r[key] for r in runs)

    steps, ssd_steps = total(spec, "steps"), total(ssd, "steps")
    if not steps or not ssd_steps or not total(spec, "draft_forwards"):
        return None
    v = total(spec, "verify_s") / steps
    ready_steps = total(ssd, "ready_steps")
    return {"c": total(spec, "draft_s") / total(spec, "draft_forwards") / v,
            "slowdown": total(ssd, "verify_s") / ssd_steps / v, "wait": total(ssd, "wait_s") / ssd_steps / v,
            "overhead": total(spec, "other_s") / steps / v, "ssd_overhead": total(ssd, "other_s") / ssd_steps / v,
            "hit": ready_steps / ssd_steps,
            "ready": total(ssd, "ready_drafts") / ready_steps if ready_steps else 0.0,
            "measured": (total(ssd, "tokens") / total(ssd, "seconds")) / (total(spec, "tokens") / total(spec, "seconds"))}
