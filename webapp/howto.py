"""How it works: one step of speculative decoding, the numbers, every method, and batching."""

from __future__ import annotations

import gradio as gr

from specviz.render import chips

HOW_IT_WORKS = """
### One step of speculative decoding (Leviathan et al. 2023, Chen et al. 2023)
1. **Draft.** The small draft model proposes k tokens one by one, sampling each from its
   distribution **q** (dashed violet chips).
2. **Verify.** The big target model scores all k drafts *and* the position after them in **one
   forward pass**, giving its distribution **p** at each position.
3. **Accept or reject, left to right.** Draft x is kept with probability min(1, p(x)/q(x)): a
   uniform draw **u** is compared with it (u < min(1, p/q): green *accepted*). Under greedy decoding
   (temperature 0) the rule is simply "keep x if it is the target's top token".
4. **First rejection** (red, struck): stop there. The drafts after it are *wasted* (grey, struck):
   never judged. The replacement is drawn from the **residual** norm(max(p − q, 0)) (orange): the
   part of p that q under-covered. This correction makes the output distributed exactly as the
   target alone would sample it: speculative decoding is lossless.
5. **All accepted?** The target's pass already computed p at the next position, so one **bonus**
   token (blue) comes for free.

### The numbers
- **β = Σ min(p, q)** at a position: the exact probability that a draft from q is accepted there
  (the overlap bars in the inspector). **α** is its average: measured as accepted / judged.
- **τ = tokens per target forward** = accepted + 1 per step. Each step costs one target forward
  plus k draft forwards; **c** = draft forward time / target forward time, measured.
- Theory: speedup = (1 − α^(k+1)) / ((1 − α)(c·k + 1)). Speculation wins when drafts are easy to
  guess (code, rewrites: high α) and the draft is cheap (small c); it loses when α is low or c is
  large (the tiny demo pair: draft and target are the same size, so c is about 1).
- Where α is low depends on the drafter, not only on the text. With *this* pair on a CPU (a
  0.5B draft of the same family, c ≈ 0.4-0.5), open-ended chat and creative writing lose at a
  fixed k = 4 (reference benchmark, greedy: α 0.62 and 0.35, 0.89× and 0.59×). That is this pair,
  not a law: drafters trained on the target's own features reach high α on chat too (EAGLE
  reports 2.7-3.5× on MT-bench chat, LLaMA2-Chat 70B on a GPU).
- **accepted / drafted is not α**: wasted drafts count as drafted but were never judged.
- **Latency is not only tokens/s.** A speculative step shows several tokens at once, then nothing
  until the next step: per token it is faster, but the wait between updates is longer, and the
  first token comes no sooner (the prompt's prefill is the same, and the first step drafts before
  the target's pass over the prompt checks anything). The strip in each race lane draws those waits.

### Other methods (Method in the settings; the race runs any of them against autoregressive)
- **tree**: the draft proposes several candidates per position (a tree, e.g. 3,2,1 children per
  depth, or a dynamic tree grown from its likeliest nodes). One target pass scores every node with a
  **tree attention mask**: each node sees the committed text, its ancestors and itself, never a
  sibling branch. The target then walks the tree from the root and keeps at most one path; siblings
  are judged in the order they were drawn, each against the residual left by the ones rejected
  before it (or, greedy, against the target's top token). The tree and its mask are drawn under
  the step panel.
- **pld** (prompt lookup): no draft model; the draft copies what followed an earlier occurrence of
  the last n tokens (hover a draft to see the span it was copied from).
- **lookahead** (Jacobi decoding, Fu et al. 2024; greedy only): no draft model either. The target
  itself keeps guesses for the next few positions and refines them with every pass (a Jacobi
  iteration); the n-grams those guesses trace out go into a pool. Each step, the window's guesses
  and the pool's n-grams that follow the last token are verified together as one tree, in the one
  target pass. Exact: a kept token is always the target's own greedy choice.
- **cascade**: prompt lookup speeds up the draft model, which then drafts for the target.
- **medusa** / **medusa-tree** (Cai et al. 2024): no draft model. Small heads read the target's own
  last hidden state, from its verification pass: head k guesses the token k places after the one
  the target itself just chose. One tiny forward drafts k tokens (a chain) or a static tree of the
  heads' top candidates. The heads were trained here, on the target's own outputs.
- **eagle** / **eagle-tree** (Li et al. 2024): a one-layer draft network at the target's *feature*
  level: from the target's hidden state and the next token it predicts the next hidden state, and
  the target's output head reads a token from it; one small forward per depth. eagle-tree grows a
  dynamic tree from its likeliest nodes (EAGLE-2). Both methods read only the target's most
  frequent tokens; a rarer token the target wants is a rejection, never a wrong output.
- **eagle3** / **eagle3-tree** (Li et al. 2025) read the target's low, middle and high layers
  instead of its last one, trained on the target's own answers; **peagle** (parallel drafting)
  drafts all k tokens in one small forward: each depth after the first is a placeholder that
  cannot see the tokens drafted before it. The menu marks a method whose heads the pair lacks
  (train them with `python -m specviz train eagle3`).
- **dflash** (block diffusion drafting): a small drafter of a few layers fills a whole block of
  mask tokens (the last token, then the shipped drafter's 7 masks) in one forward, the masks attending to each
  other and every layer reading the target's low, middle, high and last states. The step panel
  says how big the block was; each draft's q is its own row of the block. **dflash-tree** grows a
  dynamic tree from the same one forward: a row's q does not depend on the tokens above it, so
  every node at depth d gets row d's top candidates, and the likeliest paths are kept.
- **suffix** / **suffix-tree** (SuffixDecoding, Oliaro et al. 2025; no model): every token this
  session has produced, and this prompt, are kept in suffix trees with counts. The text's longest
  ending seen before is matched, and what followed it most often is drafted, as a chain or a tree;
  a longer match earns a longer draft, an unlikely continuation none. Ask the same task again and
  it drafts from your earlier answer (your own session's only). The panel names the match; hover
  a draft for its counts.
- **ssd** (speculative speculative decoding, Kumar, Dao and May 2026): while the target checks
  this step's guesses, the draft model guesses how the check will end, its outcome (how many
  kept, which token the target adds), and drafts the next step for the likeliest few outcomes.
  When the real outcome is one of them (a hit) the next guesses are ready at once. The step
  panel lists the outcomes prepared and marks the hit or the miss; the timeline under the charts shows both
  sides at work, with a plain spec run on the same prompt beside it.
- **auto k**: k is chosen every step by a rule (heuristic, confidence or cost); the step panel says why.
- **typical acceptance** keeps a draft when the target finds it typical enough. It is **LOSSY**:
  the output no longer follows the target's distribution, and every view says so.
- The race keeps the comparison fair on a small machine: only one engine computes at a time, and
  each lane's clock counts only its own compute.

### Serving many users: batching kills speculation
A server decodes a batch of B users together: one target pass per step for all of them. Plain
decoding feeds the pass B tokens, speculation B × (k + 1). While the pass is bound by reading the
weights (few tokens) those extra tokens cost almost nothing; past the knee of the cost curve each
one costs arithmetic, and every rejected draft is paid for in full. So the speedup falls as B
grows, and at some batch size speculation loses: the crossover. Serving engines switch it off
there (vLLM: a fixed batch size) or choose k from acceptance and load; `k = load` does the latter
here. The Serving tab shows it on the real pair, one row per user, one column per shared pass.

### The same files in llama.cpp: why speculation there can lose
On laptops these models run in llama.cpp (Ollama, LM Studio), straight from the Q4_K_M GGUF files.
Its quantised kernels unpack every block of weights for each row they multiply, so on a small CPU a
pass over 5 tokens costs about **twice** a one-token pass, where PyTorch's bfloat16 pass on a CPU that
multiplies bf16 natively costs about the same as one token. A step of k = 4 then costs about
V(5) + 4c ≈ 2 + 4 × 0.5 = 4 one-token passes, and even five accepted tokens gain little.
The pair **qwen-coder-llamacpp** (where llama.cpp is built) runs specviz's algorithm over
llama.cpp's passes; its race also runs llama.cpp's own program, with and without its own
speculation, on the same file. Verifying k + 1 tokens must cost about one pass for speculation to
pay: the kernel decides, not the model.
"""


def build() -> None:
    gr.HTML(chips.legend().html)
    gr.Markdown(HOW_IT_WORKS)
