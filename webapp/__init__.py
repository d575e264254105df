"""The specviz app's views, one module each; `app.py` (beside this folder) is the entry point a
Hugging Face Space and `python -m specviz app` run, and builds the page from them (`webapp.page`).

    common    limits, the pairs loaded once per process, the engine's line, the page's components
    settings  the sidebar: pair, method and its controls, sampling; the presets under the prompt
    step      the step view: chips, replay, step panel, draft tree, inspector, opening a trace
    traces    reading an uploaded trace safely
    race      autoregressive against any method, each lane on its own clock
    serving   a batch of users sharing one target pass: speedup against batch size
    charts    speedup against acceptance, tokens per pass, acceptance by position
    presets   recorded runs replayed from memory, never queued behind the engine
    howto     how it works

Gradio wiring only: every handler is a small generator over the engine's events and yields
what `specviz.render` draws from them. Nothing here imports torch or transformers.
"""
