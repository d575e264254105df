"""The banner of a notebook's load cell (specviz.render.notebook.show_pair): a load whose target
is not the last load's, or is int8 because memory ran short, says so with what, why, what it
changes and what to do; a load like the last one shows only the pair, as print(pair) did.

No real pair is loaded: the tiny pair stands in, the cache is a temporary folder, and the
memory shortage is planted (memory_choice as specviz.runtime.memory.plan_memory writes it).
"""

import json

import pytest

from specviz.render import notebook
from specviz.runtime import models, tiny_pair

SHORT = {"mode": "low", "reason": "the bfloat16 pair needs about 4.3 GiB and 2.1 GiB is available",
         "need_bytes": int(4.3 * 2**30), "available_bytes": int(2.1 * 2**30)}


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path))
    monkeypatch.delenv("SPECVIZ_LAST_LOADS", raising=False)  # the record in this cache, as a user's is
    monkeypatch.delenv("SPECVIZ_MEMORY", raising=False)
    return tmp_path


def short_of_memory(monkeypatch):
    """The next default load of "tiny" comes out int8 for want of memory, as memory="auto" loads
    the real pair when its float weights would not fit."""
    build = tiny_pair.build_tiny_pair
    monkeypatch.setattr(models, "build_tiny_pair",
                        lambda device=None, dtype=None: tiny_pair.int8_pair(build(device, dtype), SHORT))


def test_a_load_like_the_last_one_shows_the_pair_and_no_banner(cache):
    first = models.load_pair("tiny")
    assert first.last_load == {"now": {"device": "cpu", "dtype": "float32", "weights": "float"}, "before": None,
                               "changed": False}
    assert json.loads((cache / models.LAST_LOADS / "tiny.json").read_text()) == first.last_load["now"]
    again = models.load_pair("tiny")
    assert again.last_load["before"] == again.last_load["now"]
    for pair in (first, again):
        view = notebook.show_pair(pair)
        assert view.banner is None and repr(view) == repr(pair)  # what print(pair) gave, nothing more
        assert "⚠" not in view._repr_html_() and "Pair('tiny'" in view._repr_html_()


def test_int8_for_want_of_memory_shows_what_why_what_it_changes_and_what_to_do(cache):
    models.load_pair("tiny")  # the float pair, remembered
    with pytest.MonkeyPatch.context() as short:
        short_of_memory(short)
        pair = models.load_pair("tiny")
    assert pair.target_quant == "int8" and pair.last_load["before"]["weights"] == "float"
    view = notebook.show_pair(pair)
    assert view.banner["level"] == "warn"
    text = repr(view)
    assert text.startswith(repr(pair) + "\n⚠ The target is int8, not the float pair: memory ran short\n")
    assert ("What: tiny loaded with int8 weights (float parts in float32) on cpu; the last load of tiny had "
            "float32 weights on cpu.") in text
    assert f"Why: memory ran short at this load: {SHORT['reason']}." in text
    assert "What it changes: the int8 target is the model being decoded" in text
    assert ("What to do: shut down the other notebooks' kernels (in each: Kernel > Shut Down Kernel), "
            "then re-run this cell") in text
    html = view._repr_html_()
    assert "role='alert'" in html and "#fef3c7" in html and "Kernel &gt; Shut Down Kernel" in html

    # memory is back: the float pair again, a change from the int8 one
    back = notebook.show_pair(models.load_pair("tiny"))
    assert back.banner["level"] == "info" and "this time the float pair fitted" in back.banner["why"]
    assert "the last load of tiny had int8 weights" in back.banner["what"]
    assert notebook.show_pair(models.load_pair("tiny")).banner is None  # and unchanged from then on


def test_int8_for_want_of_memory_shows_even_when_the_last_load_was_int8_too(cache, monkeypatch):
    short_of_memory(monkeypatch)
    models.load_pair("tiny")
    pair = models.load_pair("tiny")
    assert pair.last_load["before"] == pair.last_load["now"]
    assert notebook.show_pair(pair).banner["title"] == "The target is int8, not the float pair: memory ran short"


def test_a_changed_dtype_is_shown_and_explicit_loads_are_not_compared(cache):
    stored = cache / models.LAST_LOADS / "tiny.json"
    stored.parent.mkdir(parents=True)
    stored.write_text(json.dumps({"device": "cpu", "dtype": "bfloat16", "weights": "float"}))
    pair = models.load_pair("tiny")
    banner = notebook.show_pair(pair).banner
    assert banner["level"] == "info" and "the last load of tiny had bfloat16 weights on cpu" in banner["what"]
    explicit = models.load_pair("tiny", dtype="bfloat16")  # asked for: no trap, nothing compared or stored
    assert explicit.last_load is None and notebook.show_pair(explicit).banner is None
    assert json.loads(stored.read_text())["dtype"] == "float32"


def test_a_cache_that_cannot_be_written_is_no_load_error(tmp_path, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("SPECVIZ_CACHE", str(blocker))
    monkeypatch.delenv("SPECVIZ_LAST_LOADS", raising=False)
    pair = models.load_pair("tiny")
    assert pair.last_load["before"] is None and notebook.show_pair(pair).banner is None


def test_the_record_can_live_elsewhere(tmp_path, monkeypatch):
    """$SPECVIZ_LAST_LOADS moves the record out of the cache (the test suite keeps its fake loads
    out of a user's cache this way)."""
    monkeypatch.setenv("SPECVIZ_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SPECVIZ_LAST_LOADS", str(tmp_path / "elsewhere"))
    models.load_pair("tiny")
    assert (tmp_path / "elsewhere" / "tiny.json").exists() and not (tmp_path / "cache" / models.LAST_LOADS).exists()
