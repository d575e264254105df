"""The one style sheet of the renderers (class names start with `sv-`).

Colours are explicit (dark text on light fills) so chips read the same in light and dark page
themes and on a projector; every status also differs by border or strike-through, not by hue
alone.
"""

CSS = r"""
.sv-root { font-family: ui-sans-serif, system-ui, sans-serif; line-height: 1.5; }
.sv-text { font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 18px;
  line-height: 2.1; white-space: normal; word-break: break-word; padding: 6px 2px; }
.sv-prompt { color: #64748b; white-space: pre-wrap; margin-right: 4px; }
.sv-chip { position: relative; display: inline-block; font-family: ui-monospace, SFMono-Regular,
  Menlo, Consolas, monospace; font-size: 18px; line-height: 1.25; padding: 1px 4px; margin: 1px 1px;
  border-radius: 5px; border: 2px solid transparent; cursor: pointer; white-space: pre;
  color: #0f172a; min-width: 0.9em; text-align: center; }
.sv-chip:focus { outline: 3px solid #0f172a; outline-offset: 1px; }
.sv-draft    { background: #ede9fe; border: 2px dashed #7c3aed; color: #3b0764; }
.sv-accepted { background: #bbf7d0; border-color: #16a34a; color: #052e16; }
.sv-rejected { background: #fecaca; border-color: #dc2626; color: #450a0a;
  text-decoration: line-through 2px #b91c1c; }
.sv-wasted   { background: #e5e7eb; border: 2px dashed #9ca3af; color: #4b5563;
  text-decoration: line-through 2px #6b7280; }
.sv-residual { background: #fed7aa; border-color: #ea580c; color: #431407;
  box-shadow: inset 0 -3px 0 #ea580c; }
.sv-bonus    { background: #bfdbfe; border-color: #2563eb; color: #172554; font-weight: 700; }
.sv-target   { background: #f1f5f9; border-color: #94a3b8; color: #0f172a; }
.sv-chip[data-tip]:hover::after, .sv-chip[data-tip]:focus::after {
  content: attr(data-tip); position: absolute; left: 0; top: calc(100% + 6px); z-index: 50;
  white-space: pre; text-align: left; text-decoration: none; font-weight: 400;
  font-family: ui-monospace, SFMono-Regular, Menlo, Consolas, monospace; font-size: 14px;
  line-height: 1.4; color: #f8fafc; background: #0f172a; padding: 8px 10px; border-radius: 6px;
  box-shadow: 0 4px 14px rgba(0,0,0,.35); pointer-events: none; }
.sv-step { border-radius: 6px; padding: 2px 0; }
.sv-step.sv-cur { background: rgba(250, 204, 21, .28); box-shadow: 0 0 0 2px #ca8a04; }
.sv-sep { display: inline-block; width: 2px; height: 1.1em; background: #cbd5e1;
  vertical-align: middle; margin: 0 3px; }
.sv-legend { display: flex; flex-wrap: wrap; gap: 6px 16px; align-items: center; font-size: 15px;
  margin: 4px 0; }
.sv-legend .sv-item { display: inline-flex; align-items: center; gap: 6px; }
.sv-legend .sv-chip { cursor: default; }
.sv-panel { border: 1px solid #cbd5e1; border-radius: 8px; padding: 10px 12px; }
.sv-row { display: flex; flex-wrap: wrap; align-items: flex-end; gap: 4px; margin: 6px 0; }
.sv-rowlabel { width: 15em; font-size: 15px; color: #475569; align-self: center; }
.sv-cell { display: inline-flex; flex-direction: column; align-items: center; }
.sv-cell small { font-size: 12px; color: #475569; font-family: ui-monospace, monospace; }
.sv-explain { font-size: 16px; margin: 8px 0 0 0; }
.sv-stats { display: flex; flex-wrap: wrap; gap: 6px 22px; font-size: 16px; }
.sv-stats b { font-size: 20px; }
.sv-muted { color: #64748b; }
.sv-warn { color: #b45309; font-weight: 600; }
.sv-lane { border: 2px solid #cbd5e1; border-radius: 10px; padding: 10px 12px; min-height: 220px; }
.sv-lane h3 { margin: 0 0 6px 0; font-size: 20px; }
.sv-lane.sv-done { border-color: #16a34a; }
.sv-counters { display: grid; grid-template-columns: repeat(4, 1fr); gap: 6px; margin-bottom: 8px; }
.sv-counter { background: rgba(148,163,184,.15); border-radius: 8px; padding: 4px 8px; }
.sv-counter b { display: block; font-size: 26px; font-variant-numeric: tabular-nums; }
.sv-counter span { font-size: 13px; color: #64748b; }
.sv-bar { height: 6px; background: #e2e8f0; border-radius: 3px; margin: 4px 0 8px 0; }
.sv-bar > div { height: 6px; background: #2563eb; border-radius: 3px; }
.sv-verdict { font-size: 22px; font-weight: 700; padding: 8px 0; }
.sv-verdict.sv-win { color: #15803d; }
.sv-verdict.sv-lose { color: #b91c1c; }
.sv-lossy { border: 2px solid #b45309; background: #fef3c7; color: #78350f; border-radius: 8px;
  padding: 4px 10px; margin: 2px 0 6px 0; font-family: ui-sans-serif, system-ui, sans-serif; font-size: 15px;
  font-weight: 600; line-height: 1.4; }
.sv-note { font-size: 15px; margin: 4px 0 0 0; color: #334155; }
.sv-treesum { font-size: 15px; color: #334155; align-self: center; }
.sv-treehead { font-size: 16px; margin: 2px 0 4px 0; }
.sv-tree { overflow-x: auto; padding: 4px 0; }
.sv-tree svg { display: block; }
.sv-node { cursor: default; }
.sv-node[data-step] { cursor: pointer; }
.sv-node:focus { outline: none; }
.sv-node:hover rect, .sv-node:focus rect { filter: brightness(0.92); }
.sv-node:focus rect { stroke: #0f172a; }
.sv-n-rejected .sv-svgtok { text-decoration: line-through; }
.sv-batch { overflow-x: auto; max-height: 640px; overflow-y: auto; }
.sv-batch table { border-collapse: collapse; font-size: 14px; font-variant-numeric: tabular-nums; }
.sv-batch th, .sv-batch td { border: 1px solid #e2e8f0; padding: 2px 6px; text-align: center; white-space: nowrap; }
.sv-batch th { background: rgba(148,163,184,.15); font-weight: 600; position: sticky; top: 0; }
.sv-batch td.sv-user { text-align: left; max-width: 22em; overflow: hidden; text-overflow: ellipsis; }
.sv-batch td.sv-gone { color: #cbd5e1; }
.sv-serving { display: grid; grid-template-columns: 1fr 1fr; gap: 10px; }
"""
