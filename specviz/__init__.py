"""specviz: speculative decoding you can watch. See README.md."""

from specviz.errors import SpecvizError
from specviz.models import Pair, list_pairs, load_pair

__all__ = ["Pair", "SpecvizError", "generate", "list_pairs", "load_pair"]
__version__ = "0.1.0"


def generate(*args, **kwargs):
    """Stream the events of one run; see `specviz.engine.generate`."""
    from specviz.engine import generate as _generate

    return _generate(*args, **kwargs)
