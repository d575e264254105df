"""Paired ratios against a noise floor measured in the same run (specviz.bench.batched reports).

Two lanes timed minutes apart differ by more than either lane's own repeat-to-repeat spread on a
shared CPU; two lanes timed back to back in rounds, the order rotating, can be compared round by
round. The floor below which a difference is not a finding comes from a comparison that is 1 in
expectation: the same decoding timed twice. No torch: it reads JSON.
"""

from __future__ import annotations

from typing import Optional


def paired(report: dict) -> Optional[dict]:
    """Spec over AR from the policy section's rounds (ar, spec and load back to back, the order
    rotating): each round's ratio, their range, and a verdict against the noise floor, the
    largest distance from 1 of a comparison that is 1 in expectation (load over ar at a B where
    load never speculated: the same decoding timed twice). Inside the floor is "no measurable
    difference". None without a policy section."""
    policy, lanes = report.get("policy"), report.get("lanes", {})
    if not policy:
        return None
    same = [abs(x["load"] / x["ar"] - 1) for b, e in policy.items() for x in e["rounds"]
            if lanes.get(b, {}).get("load", {}).get("k_mean") == 0 and x["load"] and x["ar"]]
    floor = max(same) if same else None
    rows = []
    for b, entry in sorted(policy.items(), key=lambda kv: int(kv[0])):
        ratios = [x["spec"] / x["ar"] for x in entry["rounds"] if x["spec"] and x["ar"]]
        low, high = min(ratios), max(ratios)
        margin = floor or 0.0
        verdict = ("faster" if low > 1 + margin else "slower" if high < 1 - margin else "no measurable difference")
        rows.append({"batch": int(b), "ratios": ratios, "median": sorted(ratios)[len(ratios) // 2], "low": low,
                     "high": high, "verdict": verdict})
    stops = next((r["batch"] for r in rows if r["verdict"] == "slower"), None)
    return {"noise_floor": floor, "floor_from": len(same), "rows": rows, "stops_paying_at": stops}
