"""specviz: speculative decoding you can watch. See README.md.

`load_pair`, `list_pairs`, `Pair` and `generate` are loaded on first use, so that importing the
renderers (`specviz.render`) or the event schema does not import torch. What is supported, and
for how long, is in docs/architecture.md ("What is stable") and CHANGELOG.md.
"""

from specviz import deprecated

__all__ = ["Pair", "SpecvizError", "generate", "list_pairs", "load_pair"]
__version__ = "0.2.0"  # the one place it is written: pyproject.toml reads it

_LAZY = {"Pair": "specviz.runtime.pair", "list_pairs": "specviz.runtime.models", "load_pair": "specviz.runtime.models",
         "generate": "specviz.engine.sequence", "SpecvizError": "specviz.errors"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'specviz' has no attribute {name!r}")


deprecated.install()  # 0.1.0's module paths, with a warning, until 0.3.0
