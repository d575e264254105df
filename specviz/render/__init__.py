"""Renderers: pure functions from events (objects or dicts) to HTML and Plotly figures.

Shared by the Gradio app and the notebooks. HTML renders return `Rendered` (`.html` for a page,
`_repr_html_` for a notebook); figures are `plotly.graph_objects.Figure`. No torch, no
transformers, no engine internals: every number shown is read from the events.

    steps       events -> the view model: `steps.build(events)` groups a stream into steps
    chips       the text as status-coloured token chips, and the colour key
    panel       one step as draft / verify / emit rows and a sentence; the run's counters
    inspector   p, q, min(p, q) and the residual at one draft position
    tree        a tree step's draft tree (SVG) and its attention mask
    charts      speedup against acceptance, tokens per pass, acceptance by position
    race        autoregressive against a method, each lane on its own clock: the race and its lanes
    serving     a batch of users sharing one target pass: speedup against batch size
    widgets     the notebooks' widgets (token stream, step inspector, tree view, race, batch)
    lessons     the teaching notebooks' own figures and tables
    notebook    notebook set-up: interactive figures that leave a static image (Kaleido, Chromium)
    bench_figures, training_report   a benchmark report's figures; a training report's PNG
    html, style the shared plumbing: `Rendered`, escaping, number formats, the one style sheet
"""


def __getattr__(name):  # what 0.1.0's __init__ re-exported, with a warning, until 0.3.0
    from specviz import deprecated

    return deprecated.package_name(__name__, name)
