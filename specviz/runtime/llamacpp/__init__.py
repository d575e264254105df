"""llama.cpp beside PyTorch: the same GGUF files run by the kernels laptops use.

    runner   the pair's GGUF files under specviz's engine (through llama.cpp's C API)
    build    `python -m specviz llamacpp install`: llama.cpp built from source for this CPU
    server   llama.cpp's own llama-server on the pair, for its own speculative decoding
"""
