"""`python -m specviz watch`: serving engines' speculative counters read as acceptance, tokens
per step and implied speedup; against exposition texts with known numbers, and against a real
llama-server (llama.cpp's own speculation) started here, where llama.cpp is built."""

import json

import pytest

from specviz.bench import watch
from specviz.runtime.llamacpp import runner as llamacpp, server as llamacpp_server

VLLM = """# HELP vllm:spec_decode_num_drafts Number of spec decoding drafts.
# TYPE vllm:spec_decode_num_drafts counter
vllm:spec_decode_num_drafts_total{engine="0",model_name="m"} 100.0
vllm:spec_decode_num_drafts_total{engine="1",model_name="m"} 60.0
vllm:spec_decode_num_draft_tokens_total{engine="0",model_name="m"} 400.0
vllm:spec_decode_num_draft_tokens_total{engine="1",model_name="m"} 240.0
vllm:spec_decode_num_accepted_tokens_total{engine="0",model_name="m"} 250.0
vllm:spec_decode_num_accepted_tokens_total{engine="1",model_name="m"} 150.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="0"} 90.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="1"} 70.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="2"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="0",model_name="m",position="3"} 40.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="0"} 50.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="1"} 40.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="2"} 30.0
vllm:spec_decode_num_accepted_tokens_per_pos_total{engine="1",model_name="m",position="3"} 30.0
vllm:generation_tokens_total{model_name="m"} 5.6e+02
"""
LLAMACPP = """# HELP llamacpp:spec_decode_num_draft_tokens_total Speculative: Total draft tokens generated
# TYPE llamacpp:spec_decode_num_draft_tokens_total counter
llamacpp:spec_decode_num_draft_tokens_total 56
llamacpp:spec_decode_num_accepted_tokens_total 48
llamacpp:spec_decode_num_drafts_total 14
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="0"} 14
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="1"} 13
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="2"} 11
llamacpp:spec_decode_num_accepted_tokens_per_pos_total{position="3"} 10
"""


def test_vllm_counters_are_summed_over_engines_and_read_as_acceptance():
    counters = watch.parse(VLLM)
    assert (counters.drafts, counters.draft_tokens, counters.accepted) == (160, 640, 400)
    assert counters.per_position == [140, 110, 80, 70] and counters.prefix == "vllm"
    r = watch.read(counters, c=0.1, verify=1.2)
    assert r.acceptance_rate == pytest.approx(400 / 640)
    assert r.mean_accepted_length == pytest.approx(1 + 400 / 160)  # 3.5 tokens per verification
    assert r.mean_draft_length == pytest.approx(4.0)
    assert r.position_acceptance == pytest.approx([140 / 160, 110 / 160, 80 / 160, 70 / 160])
    assert r.implied_speedup == pytest.approx(3.5 / (1.2 + 4 * 0.1))


def test_a_second_read_covers_only_the_tokens_since_the_first():
    before, after = watch.parse(LLAMACPP), watch.parse(VLLM)
    delta = after.minus(before)
    assert (delta.drafts, delta.draft_tokens, delta.accepted) == (146, 584, 352)
    assert delta.per_position == [126, 97, 69, 60]
    r = watch.read(watch.Counters())
    assert r.drafts == 0 and r.acceptance_rate is None and watch.line(r, "t").endswith("no drafts since the last read")


def test_the_line_draws_acceptance_by_position():
    text = watch.line(watch.read(watch.parse(LLAMACPP)), "12:00:00")
    assert "acceptance 0.86" in text and "tokens/step 4.43 (k 4.0)" in text
    assert "[1.00 0.93 0.79 0.71]" in text and "█" in text and "implied speedup 4.43x" in text


def test_text_without_speculative_counters_is_refused_in_words():
    with pytest.raises(ValueError, match="no speculative decoding counters"):
        watch.parse("llamacpp:tokens_predicted_total 12\n")


def test_an_unreachable_server_is_one_line_and_status_2(capsys):
    from specviz.cli import main

    port = llamacpp_server.free_port()  # nothing listens there
    assert main(["watch", f"http://127.0.0.1:{port}", "--count", "1"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: cannot read http://127.0.0.1:{port}")


MISSING = llamacpp.available() or llamacpp_server.missing()


@pytest.mark.skipif(MISSING is not None, reason=str(MISSING))
def test_watching_a_real_llama_server_reads_its_own_speculation(capsys):
    """llama-server with the draft model (its own speculation): what the watcher reads from
    /metrics adds up to what its two answers said they drafted and accepted."""
    from specviz.cli import main

    with llamacpp_server.Server(draft_max=4) as server:
        answers = [server.complete(p, 24) for p in ("def add(a, b):\n", "for i in range(10):\n")]
        assert main(["watch", server.url, "--count", "1", "--jsonl"]) == 0
        metrics = watch.parse(server.metrics_text())
    reading = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    drafted, accepted = sum(a["draft_n"] for a in answers), sum(a["draft_accepted"] for a in answers)
    assert drafted > 0 and reading["engine"] == "llamacpp"
    assert reading["draft_tokens"] == drafted == metrics.draft_tokens
    assert reading["accepted"] == accepted == sum(metrics.per_position)
    assert reading["mean_accepted_length"] == pytest.approx(1 + accepted / metrics.drafts)
    assert 0 < reading["acceptance_rate"] <= 1 and len(reading["position_acceptance"]) == 4


@pytest.mark.parametrize("argv,starts", [
    (["watch", "http://127.0.0.1:9", "--interval", "0"], "error: --interval and --verify must be positive"),
    (["watch"], "error: the following arguments are required: url"),
    (["llamacpp"], "error: the following arguments are required: action"),
    (["llamacpp", "build"], "error: argument action: invalid choice: 'build'"),
])
def test_bad_command_lines_are_one_line_and_status_2(capsys, argv, starts):
    from specviz.cli import main

    try:
        status = main(argv)
    except SystemExit as exc:  # a usage mistake exits from the parser itself (specviz.argparsing)
        status = exc.code
    err = capsys.readouterr().err.strip().splitlines()
    assert status == 2 and len(err) == 1 and err[0].startswith(starts)
