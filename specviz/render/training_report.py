"""The training report of Medusa heads / EAGLE (specviz.training.train) as a PNG, drawn with Pillow.

Pillow rather than Plotly + kaleido: training runs in terminals and on servers where no browser
exists, and its report must be written there. Three panels from the report's JSON: training loss,
held-out top-1 accuracy per depth (head) against training tokens, and the tokens a greedy chain
accepts per step (held-out estimate, and measured on the real pair when the report has it).
"""

from __future__ import annotations

from pathlib import Path

from specviz import files

COLORS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2"]
W, H, PAD = 520, 420, 60


def _font(size: int):
    from PIL import ImageFont

    try:
        return ImageFont.load_default(size=size)
    except TypeError:  # Pillow < 10.1
        return ImageFont.load_default()


def _ticks(lo: float, hi: float, n: int = 5) -> list:
    if hi <= lo:
        hi = lo + 1.0
    return [lo + (hi - lo) * i / (n - 1) for i in range(n)]


def _fmt(x: float) -> str:
    if abs(x) >= 1e6:
        return f"{x / 1e6:.1f}M"
    if abs(x) >= 1e3:
        return f"{x / 1e3:.0f}k"
    return f"{x:.2f}" if abs(x) < 10 else f"{x:.0f}"


def _panel(draw, x0: int, title: str, xlabel: str, series: list, ylim=None) -> None:
    """series: [(label, [(x, y)], color, dots)] drawn in the panel whose left edge is x0."""
    font, small = _font(15), _font(12)
    left, right, top, bottom = x0 + PAD, x0 + W - 20, 40, H - 50
    points = [p for _, pts, _, _ in series for p in pts]
    draw.text((x0 + W // 2, 12), title, fill="black", font=font, anchor="mt")
    draw.rectangle([left, top, right, bottom], outline="#888")
    if not points:
        draw.text(((left + right) // 2, (top + bottom) // 2), "no data", fill="#888", font=small, anchor="mm")
        return
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    x_lo, x_hi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    y_lo, y_hi = ylim or (min(ys), max(ys) if max(ys) > min(ys) else min(ys) + 1)

    def at(x, y):
        return (left + (x - x_lo) / (x_hi - x_lo) * (right - left),
                bottom - (min(max(y, y_lo), y_hi) - y_lo) / (y_hi - y_lo) * (bottom - top))

    for t in _ticks(y_lo, y_hi):
        _, y = at(x_lo, t)
        draw.line([left - 4, y, left, y], fill="#888")
        draw.text((left - 6, y), _fmt(t), fill="black", font=small, anchor="rm")
    for t in _ticks(x_lo, x_hi):
        x, _ = at(t, y_lo)
        draw.line([x, bottom, x, bottom + 4], fill="#888")
        draw.text((x, bottom + 6), _fmt(t), fill="black", font=small, anchor="mt")
    draw.text(((left + right) // 2, H - 18), xlabel, fill="black", font=small, anchor="mm")
    for i, (label, pts, color, dots) in enumerate(series):
        coords = [at(x, y) for x, y in sorted(pts)]
        if len(coords) > 1 and not dots:
            draw.line(coords, fill=color, width=2)
        for x, y in coords if dots or len(coords) == 1 else []:
            draw.ellipse([x - 4, y - 4, x + 4, y + 4], fill=color)
        draw.text((left + 8, top + 6 + 16 * i), label, fill=color, font=small)


def _smooth(points: list, n: int = 25) -> list:
    out = []
    for i in range(len(points)):
        window = points[max(0, i - n + 1):i + 1]
        out.append((points[i][0], sum(y for _, y in window) / len(window)))
    return out[::max(1, len(out) // 400)]


def report_png(report: dict, path) -> Path:
    """Write the report's three panels to `path` (PNG)."""
    from PIL import Image, ImageDraw

    image = Image.new("RGB", (3 * W, H), "white")
    draw = ImageDraw.Draw(image)
    per_step = report.get("tokens_per_step", 1)
    loss = [(step * per_step, value) for step, value in report.get("loss", [])]
    _panel(draw, 0, f"{report['kind']}: training loss", "training tokens seen",
           [("loss (moving mean)", _smooth(loss), COLORS[0], False)])
    curve = report.get("curve", [])
    depths = max((len(c["accuracy"]) for c in curve), default=0)
    word = "head" if report["kind"] == "medusa" else "depth"
    _panel(draw, W, "held-out top-1 = target's argmax", "training tokens seen",
           [(f"{word} {d + 1}", [(c["tokens"], c["accuracy"][d]) for c in curve if len(c["accuracy"]) > d],
             COLORS[d % len(COLORS)], False) for d in range(depths)], ylim=(0.0, 1.0))
    accepted = [("held-out: E[tokens accepted]", [(c["tokens"], c["accepted"]) for c in curve], COLORS[0], False)]
    for i, run in enumerate(report.get("engine", [])):
        accepted.append((f"real pair, {run['prompt']}: accepted/step", [(run["tokens"], run["accepted_per_step"])],
                         COLORS[(i + 1) % len(COLORS)], True))
    _panel(draw, 2 * W, "greedy chain: accepted tokens per step", "training tokens seen", accepted)
    path = Path(path)
    with files.new_file(path) as tmp:
        image.save(tmp, format="PNG")
    return path
