"""`python -m specviz check` on one screen: the result of specviz.bench.check as at most 25 lines of
text, the verdict last ("Ready for the lab" or "Not ready: ..."). Pure: a dict in, lines out."""

from __future__ import annotations

GiB = 2**30
WHAT_TO_DO = ("cut MAX_NEW_TOKENS and SEEDS in the notebooks' parameters cells, follow the executed copies "
              "in docs/notebooks/, or pair with a neighbour")


def lines(result: dict) -> list:
    """The screen: pair, memory, race, lab, needs, then the verdict."""
    out = ["specviz check: is this machine ready for the lab?"]
    out += _pair(result["pair"]) + _memory(result["memory"]) + _race(result["race"]) + _lab(result["lab"])
    out += _needs(result["needs"])
    problems = result["problems"]
    out.append("Not ready: " + "; ".join(problems) if problems else "Ready for the lab")
    return out


def _gib(value) -> str:
    return "?" if value is None else f"{value / GiB:.1f} GiB"


def _pair(p: dict) -> list:
    held = "int8 weights, float parts in " if p["int8"] else ""
    out = [f"Pair      {p['name']} on {p['device']} in {held}{p['dtype']}, loaded in {p['load_s']:.0f} s",
           f"          why: {p['why']}"]
    if p["int8"]:
        out.append("          red flag: the int8 target is not the class's model; its numbers will differ")
    if p["name"] == "tiny":
        out.append("          the tiny pair checks the install only: run `python -m specviz check` for the real one")
    if not p["device"].startswith("cpu"):
        out.append("          not a CPU: the lab's numbers are CPU numbers; on a GPU this small pair may lose")
    before = (p.get("last_load") or {}).get("before")
    if (p.get("last_load") or {}).get("changed"):
        out.append(f"          the last load gave {before.get('dtype')} ({before.get('weights')} weights): "
                   "this one differs")
    return out + [f"Cores     {p['threads']} threads on {p['cores']} cores"]


def _memory(m: dict) -> list:
    headroom = m["headroom_bytes"]
    room = "unknown" if headroom is None else (_gib(headroom) if headroom >= 0 else f"{_gib(-headroom)} SHORT")
    return [f"Memory    {_gib(m['total_bytes'])} total, {_gib(m['available_bytes'])} available before the load",
            f"          this process peaked at {_gib(m['peak_bytes'])} (load and race), holds "
            f"{_gib(m['resident_after_bytes'])} after",
            f"          headroom beside a browser and Jupyter ({_gib(m['beside_bytes'])}): {room}"]


def _race(r: dict) -> list:
    head = (f"Race      greedy code prompt, {r['tokens']} tokens, speculative (k = {r['k']}) and autoregressive, "
            f"{r['repeats']} runs each")
    same = "yes" if r["same_text"] else "NO (look for a near-tie in p)"
    if r["busy"]:
        share = f" (the decoding thread ran {r['cpu_share']:.0%} of the time)" if r["cpu_share"] is not None else ""
        return [head, f"          no verdict on speed: the cores were busy{share}; close other programs and run again",
                f"          for the record only: {r['speedup']:.2f}x, autoregressive {r['ar_tokens_per_s']:.1f} tokens/s"]
    word = "faster" if r["speedup"] >= 1 else "slower"
    factor = r["speedup"] if r["speedup"] >= 1 else 1 / r["speedup"]
    return [head, f"          speculative {factor:.2f}x {word} (tau {r['tau']:.2f}); autoregressive "
                  f"{r['ar_tokens_per_s']:.1f} tokens/s; same text: {same}"]


def _lab(lab: dict) -> list:
    if "minutes" not in lab:
        return [f"Lab       no prediction: {lab['skipped']}"]
    over = lab["minutes"] - lab["slot_minutes"]
    verdict = f"fits, {-over:.0f} min to spare" if over <= 0 else f"does NOT fit, {over:.0f} min over"
    busy = " (timed on a busy machine: likely too long)" if lab["busy"] else ""
    each = " assumed" if lab["exercises_assumed"] else ""
    out = [f"Lab       would take about {lab['minutes']:.0f} min here; it has {lab['slot_minutes']}: {verdict}{busy}",
           f"          this machine computes at {lab['scale']:.2f}x the reference's time ({lab['report']}): "
           f"{lab['compute_min']:.1f} min of compute, read beside {lab['reading_min']:.1f} min of reading, "
           f"then {lab['exercise_min']:.0f} min of exercises{each}"]
    return out + ([f"          what to do: {WHAT_TO_DO}"] if over > 0 and not lab["busy"] else [])


def _needs(n: dict) -> list:
    found = [label for label, ok in n["libraries"].items() if ok]
    missing = [label for label, ok in n["libraries"].items() if not ok]
    optional = ", ".join(f"{label} {'found' if ok else 'absent'}" for label, ok in n["optional"].items())
    parts = [f"Python {n['python']}{'' if n['python_ok'] else ' (too old)'}"]
    parts += [", ".join(found) + ": found"] if found else []
    parts += [", ".join(missing) + ": MISSING"] if missing else []
    return [f"Needs     {'; '.join(parts)}; optional: {optional}",
            f"Disk      {_gib(n['disk_free_bytes'])} free where the cache is ({n['cache']})"]
