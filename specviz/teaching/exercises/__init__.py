"""Checks for the teaching notebooks' exercises: one module per notebook (nb02 for notebook 2,
and so on; a notebook imports its own, `from specviz.teaching.exercises import nb03 as exercises`),
and their shared machinery (`checking`).

Two kinds of exercise:

* **coded**: the student writes a piece of the engine (the greedy cascade rule, the residual, α
  and τ from the events, a tree's attention mask, a prompt-lookup match, the +2/-1 k rule, the
  waits a reader sees, the acceptance survival curve, the cost per million tokens, the batch size
  where speculation stops paying) and
  `check_<piece>(fn)` runs it on fixed-seed random and edge inputs against the engine's own
  implementation (`specviz.verifiers`, `specviz.verifiers.sampling.residual`, `specviz.analysis.metrics.fold`,
  `DraftTree.mask`, `specviz.drafters.lookup.lookup`, `specviz.engine.adaptive.AdaptiveK`). Several
  also take the events of a run the notebook made, and replay every step of it with the
  student's function.
* **by hand**: a number or a short list; `check_<question>(answer)` compares it with what the
  engine's own code computes, so no notebook cell shows the answer. The form is read before the
  value, and every equivalent form counts: a number may be an int, a float, a numpy or torch
  scalar or a 0-d array or tensor, and is right within the tolerance its check states; a list
  of numbers may be a list, a tuple, a range or a 1-d array or tensor (a sorted list of node ids
  may come in any order, or as a set); a letter may have any case and surrounding whitespace.
  Tokens are compared exactly (case and spaces are part of a token). Nothing is converted
  between numbers and strings: "0.5" for a number, 2 for the token "2", a set or a dict where a
  list in order is needed, a nested list, a list of the wrong length where the question gives
  the length, a list where one number is needed: each gets a line saying only the answer's form
  is off ("✗ Check the answer's form: the value may be right, but it should be a flat list of 3
  numbers, in order, not a list holding a number in quotes (a string)."), which names the form
  expected and the form received, never the value, and does not ask to work the value out again;
  the check returns False (an answer in the wrong form is an answer, not a blank: None stays
  "not answered yet").

Every check prints one line (two for a two-part answer) and returns True (right), False (wrong)
or None (not written or not answered yet). A wrong answer is described by the kind of input it
fails on and the property it breaks ("the result does not sum to 1", "the mask lets a node see
its sibling"), never by the expected values. A student function that still raises
NotImplementedError is reported as "not written yet", so a notebook runs top to bottom before
any exercise is done. Solutions: teacher/solutions/nbXX.py.
"""
