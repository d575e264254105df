"""Training the drafters that read the target's hidden states (Medusa, EAGLE, EAGLE-3, P-EAGLE).

    train        `python -m specviz train KIND`: the whole recipe, resumable
    data         the target's answers, the corpus and the target's features, cached
    trainer      the training loop, its evaluations, and the measurements that explain a set
    selfgen      `python -m specviz selfgen`: the target's own generations with EAGLE-3's features
    prompt_bank  the prompts selfgen's target answers; corpus: the text of a run, batch by batch
    progress     what long work says while it runs
"""
