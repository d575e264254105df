"""Renderers: pure functions from events (objects or dicts) to HTML and Plotly figures.

Shared by the Gradio app and the notebooks. HTML renders return `Rendered` (`.html` for a page,
`_repr_html_` for a notebook); figures are `plotly.graph_objects.Figure`. No torch, no
transformers, no engine internals: every number shown is read from the events.

    steps.build(events)                 -> RunView: the events grouped into steps (view model)
    chips.run_text(run, upto, selected) -> the text as status-coloured token chips
    chips.legend()                      -> the colour key
    panel.step_panel(run, n)            -> one step as draft / verify / emit rows and a sentence
    panel.stats(run, metrics)           -> counters
    inspector.inspector_figure(run, n, i) -> p, q, min(p, q) and the residual at one position
    charts.speedup_figure(history), charts.tau_histogram(events), charts.position_figure(events)
    race.Lane, race.race, race.lane_html, race.verdict -> the fair race
    tree.tree_view(step), tree.mask_figure(step) -> a tree step's draft tree (SVG) and attention mask
    tree.tree_html(nodes, status)       -> the tree from raw tree_built nodes
"""
