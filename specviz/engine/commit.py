"""What happens to a sequence after its drafts were scored: one piece of code for both engines.

The single-sequence engine (`specviz.engine.sequence`) and the batched one (`specviz.engine.batch`) differ in how
they draft and score (one sequence's pass, or B rows in one padded pass); from the verifier on
they do the same for every sequence, and do it here, so that a fix reaches both:

    verify -> commit the accepted path and the target's token -> crop the target's cache ->
    hand the drafter the kept features -> let the drafter observe -> the stop rule ->
    the step's record -> the k policy learns

and the room a step may draft into, the run's end (run_finished) and the clock that does not
count the time a consumer holds an event.
"""

from __future__ import annotations

from typing import Callable, Iterator, Optional

from specviz import events as ev
from specviz.analysis import metrics
from specviz.engine.record import StepRecord


def room_left(max_new_tokens: int, committed: list, prompt_len: int) -> int:
    """How many drafts a step may add: a step emits its drafts and one token of the target's,
    and never goes past max_new_tokens."""
    return max_new_tokens - (len(committed) - prompt_len) - 1


def finish_reason(emitted: list, committed: list, prompt_len: int, max_new_tokens: int, eos) -> Optional[str]:
    """The stop rule: "eos" when the step emitted an end of text, "length" at max_new_tokens."""
    if any(t in eos for t in emitted):
        return "eos"
    return "length" if len(committed) - prompt_len >= max_new_tokens else None


def commit(*, step: int, k, why: dict, proposal, target_probs, verify_time: float, fed: int, cached: int,
           states, verifier, generator, eos, committed: list, prompt_len: int, max_new_tokens: int,
           keep: Callable, see_features: Callable, observe: Callable, step_info: Callable, clock,
           policy=None) -> StepRecord:
    """Verify one sequence's proposal against its scored pass and commit the result in place
    (`committed` grows). `keep(base, path)` crops the target's cache to what was kept;
    `see_features(rows)` and `observe(committed, proposal, path, target_probs)` are the
    drafter's; `states` holds the hidden state of each of the `fed` tokens when the drafter
    reads them (else None). Returns the step's record (its events are written from it)."""
    tree, base = proposal.tree, len(committed)
    verdict = verifier.verify(tree, proposal.dists, target_probs, generator, eos)
    emitted = [tree.tokens[n] for n in verdict.path]
    emitted += [] if verdict.next_token is None else [verdict.next_token]
    committed.extend(emitted)
    keep(base, verdict.path)
    if states is not None:  # the features of the tokens the target's cache kept, in order
        pending = fed - len(tree)
        see_features(states[list(range(pending)) + [pending + n for n in verdict.path]])
    observe(committed, proposal, verdict.path, target_probs)
    finish = finish_reason(emitted, committed, prompt_len, max_new_tokens, eos)
    record = StepRecord(step=step, base=base, k=k, proposal=proposal, cached=cached, fed=fed,
                        target_probs=target_probs, verify_time=verify_time, verdict=verdict, emitted=emitted,
                        finish=finish, elapsed=clock.elapsed(), cpu_elapsed=clock.cpu(), why=why,
                        drafter_info=step_info())
    if policy is not None:
        policy.update(len(proposal), verdict.accepted, len(verdict.decisions), proposal.seconds,
                      proposal.forwards, None if record.prefill else verify_time)
    return record


def run_finished(pair, committed: list, prompt_len: int, finish: str, started, finished: list,
                 row: Optional[int] = None) -> ev.RunFinished:
    """A sequence's last event: its text, tokens, why it ended and the metrics of its steps."""
    generated = committed[prompt_len:]
    return ev.RunFinished(text=pair.decode(generated), token_ids=generated, finish_reason=finish,
                          metrics=metrics.fold([started, *finished]).to_dict(), row=row)


def hand_out(events, clock) -> Iterator:
    """Yield `events` with the run's clock paused while the consumer holds each: rendering,
    sending, another engine's turn in a race is not decoding."""
    for event in events:
        paused = clock.pause()
        yield event
        clock.resume(paused)
