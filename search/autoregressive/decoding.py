"""The decoding loop behind :func:`search.generate`, :func:`search.stream` and
:func:`search.generate_batch`: rows of a batch decoded in lock-step, one forward
pass per step for every row still going, each row with its own constraint,
sampler and stop test.

Prompts of different lengths are left-padded: the padding is masked out of
attention and each row's positions count from its first real token, so a row
sees what it would see alone (up to the floating-point order of a batched
matrix product). A row that ends (EOS, a stop string, no allowed token) leaves
the batch: its rows of the KV cache are dropped, not computed on.

One constrained row fills its mask itself; more go through one
:class:`constrain.BatchMatcher` call per step, which fills the cached rows on
this thread and the first visits on its pool, outside the GIL.
"""

from __future__ import annotations

import codecs
import time
import warnings
from concurrent.futures import ThreadPoolExecutor

from search.autoregressive.closing import CLOSING_WINDOW, completion_tokens, shortest_completion
from search.autoregressive.logits_controls import SamplingControls, StopStrings
from search.lm.protocol import constraint_eos_ids, output_value

#: the values of :attr:`GenerationResult.stop_reason`
STOP_EOS = "eos"
STOP_MAX_TOKENS = "max_new_tokens"
STOP_NO_TOKEN = "no_allowed_token"
STOP_STRING = "stop"
#: Row._completion_ids: no completion was found within the search's bound
_NO_COMPLETION = object()


class Row:
    """One prompt's generation: its constraint's matcher, sampler, the
    tokens it has seen (for the repetition penalty) and its stop-string test.

    Args:
        lm: the model (for its vocabulary and EOS ids).
        prompt_ids: the ids the row is conditioned on (not empty).
        constraint: a compiled constraint over ``lm.vocab``, or ``None``.
        generator: a seeded ``torch.Generator`` (sampling), or ``None`` (greedy).
        stops: the call's :class:`StopStrings`.
        penalize: whether the repetition penalty applies.
    """

    def __init__(self, lm, prompt_ids: list[int], constraint, generator, stops: StopStrings,
                 penalize: bool, close: bool = False):
        import torch

        self.prompt_ids = prompt_ids
        self.constraint = constraint
        self.eos_ids = constraint_eos_ids(lm, constraint)
        self.matcher = None
        if constraint is not None:
            from constrain import Matcher

            self.matcher = Matcher(constraint, max_rollback=0)
        self.generator = generator
        #: close the output before the budget runs out (see search.autoregressive.closing)
        self.close = close and self.matcher is not None
        #: the tokens of the completion being written, once closing has begun
        self.forced: list[int] | None = None
        #: the completion that fits, while the step's token is free (closing_guard)
        self._fits: list[int] | None = None
        #: (state, its completion's tokens) last looked up (_completion_ids)
        self._completion = None
        self.out: list[int] = []
        self.stop = STOP_MAX_TOKENS
        self.eos_hit = None
        self.text = None
        self.seconds = 0.0
        self.seen = set(prompt_ids)
        self.seen_ids = (torch.tensor(sorted(self.seen), dtype=torch.long, device=lm.device)
                         if penalize else None)
        self.stops = stops
        if stops:  # the text so far, decoded as it grows (stops are looked for in its tail)
            self.decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            self.so_far = ""

    def closing_token(self, lm, left: int) -> int | None:
        """The next token of the closing completion, once ``left`` tokens
        (this one included) are no more than it and EOS need; else ``None``
        (a free token, for :meth:`closing_guard` to check)."""
        self._fits = None
        if self.forced is None:
            if left > CLOSING_WINDOW:
                return None
            ids = self._completion_ids(lm, self.matcher.state)
            if ids is _NO_COMPLETION:
                # no completion within the search's bound: the search would
                # cost as much every step, so closing gives up
                self.close = False
                return None
            if ids is None:  # no spelling the constraint allows: no closing here
                return None
            if len(ids) + 1 < left:
                self._fits = ids
                return None
            if len(ids) + 1 > left:
                # a budget below the completion from the start: the output
                # ends cut, or complete without its EOS
                warnings.warn(f"close=True: the shortest completion needs {len(ids)} tokens and "
                              f"EOS, but {left} are left: the output may end cut (check "
                              f"result.accepted)", stacklevel=2)
            self.forced = ids + [min(self.constraint.vocab.eos_token_ids)]
        return self.forced.pop(0) if self.forced else None

    def closing_guard(self, lm, tok: int, left: int) -> int:
        """``tok``, the free token chosen with ``left`` tokens left (after
        :meth:`closing_token` gave none); or, when a completion and EOS would no
        longer fit in the ``left - 1`` tokens after ``tok`` (a token that
        lengthens the completion by more than one), the first token of the
        current completion, which fits: closing begins now instead."""
        ids = self._fits
        if ids is None or tok in self.eos_ids:
            return tok
        after = self.constraint.advance(self.matcher.state, tok)
        if after is None:  # a token the mask refused: accept() reports it
            return tok
        nxt = self._completion_ids(lm, after)
        if nxt is not None and nxt is not _NO_COMPLETION and len(nxt) + 1 < left:
            return tok
        self.forced = ids + [min(self.constraint.vocab.eos_token_ids)]
        return self.forced.pop(0)

    def _completion_ids(self, lm, state):
        """The tokens of a shortest completion from ``state``; ``None`` when
        the constraint allows no spelling of it, :data:`_NO_COMPLETION` when
        none was found. The last state's answer is kept: a free token's check
        is the next step's look-up."""
        last = self._completion
        if last is not None and last[0] == state:
            return last[1]
        completion = shortest_completion(self.constraint, state)
        ids = (_NO_COMPLETION if completion is None
               else completion_tokens(lm, self.constraint, state, completion))
        self._completion = (state, ids)
        return ids

    def saw(self, tok: int) -> None:
        """Note ``tok`` for the repetition penalty."""
        if self.seen_ids is not None and tok not in self.seen:
            import torch

            self.seen_ids = torch.cat([self.seen_ids, self.seen_ids.new_tensor([tok])])
        self.seen.add(tok)

    def accept(self, tok: int, vocab) -> bool:
        """Take ``tok``; ``False`` when the row ends with it (EOS, or a stop
        string now in the text, in which case ``tok`` is kept in the ids but
        not to be shown)."""
        if self.matcher is not None and not self.matcher.accept_token(tok):
            # the bitmask and advance disagree: a constraint bug
            raise RuntimeError(f"constraint refused token {tok} that its bitmask allowed "
                               f"(state {self.matcher.state!r})")
        if tok in self.eos_ids:
            self.stop, self.eos_hit = STOP_EOS, tok
            return False
        self.out.append(tok)
        if self.stops and vocab.grammar_token_list[tok]:
            start = max(0, len(self.so_far) - self.stops.holdback)
            self.so_far += self.decoder.decode(vocab.token_bytes(tok))
            cut = self.stops.find(self.so_far, start)
            if cut is not None:
                self.stop, self.text = STOP_STRING, self.so_far[:cut]
                return False
        return True

    def _accepted_before_stop(self, vocab) -> bool:
        """Whether the text shown, cut before its stop string, is a complete
        string of the language: the tokens before the cut replayed, then the
        bytes of the one it falls in. (The matcher's own state is after the
        stop string: ``(yes|no)\\.`` with ``stop="."`` said "no" was accepted.)"""
        c = self.constraint
        target = self.text.encode("utf-8")
        state, done = c.initial_state(), 0
        for tok in self.out:
            if vocab.grammar_token_list[tok]:
                data = vocab.token_bytes(tok)
                if done + len(data) > len(target):
                    rest = target[done:]
                    if rest:
                        state = c.advance_bytes(state, rest)
                    break
                done += len(data)
            state = c.advance(state, tok)  # a special token shows no text
            if state is None:
                return False
        return state is not None and bool(c.is_accepting(state))

    def result(self, lm, prefill: float):
        """The row's :class:`~search.autoregressive.sampling.GenerationResult`."""
        from search.autoregressive.sampling import GenerationResult

        if self.matcher is None:
            accepted = None
        elif self.stop == STOP_STRING:
            accepted = self._accepted_before_stop(lm.vocab)
        else:
            accepted = bool(self.matcher.is_terminated() or self.matcher.is_accepting())
        text = lm.decode(self.out) if self.text is None else self.text
        value, value_error = output_value(self.constraint, text, accepted)
        return GenerationResult(
            text=text, value=value, value_error=value_error, token_ids=self.out,
            stop_reason=self.stop, accepted=accepted, prompt_token_ids=list(self.prompt_ids),
            eos_token_id=self.eos_hit, seconds=self.seconds, prefill_seconds=prefill,
        )


def make_generator(lm, temperature: float, seed):
    """A ``torch.Generator`` seeded with ``seed`` (``None``: a fresh seed) when
    sampling, ``None`` for greedy decoding."""
    # an integer torch takes, checked even when greedy ("abc", 1.5 and 2**64 were
    # a raw error, silently 1, torch's overflow)
    if seed is not None and (isinstance(seed, bool) or not hasattr(seed, "__index__")
                             or not -2**63 <= int(seed) < 2**64):
        raise ValueError(f"seed must be an integer (or None), got {seed!r}")
    if temperature <= 0:
        return None
    import torch

    generator = torch.Generator(device=lm.device)
    if seed is None:
        generator.seed()
    else:
        generator.manual_seed(int(seed))
    return generator


def bitmask_words(vocab_size: int) -> int:
    """The int32 words of a bitmask row over ``vocab_size`` tokens."""
    return (vocab_size + 31) // 32


def _left_padded(lm, prompts: list[list[int]]):
    """``(ids, attention_mask, position_ids)`` of the prompts left-padded to
    one length; ``None`` masks when they are all that long already (the
    model's own causal path: one row alone decodes exactly as ever)."""
    import torch

    width = max(len(p) for p in prompts)
    if all(len(p) == width for p in prompts):
        return prompts, None, None
    pad = getattr(lm.tokenizer, "pad_token_id", None)
    if pad is None:
        pad = lm.eos_token_ids[0]
    ids = [[pad] * (width - len(p)) + p for p in prompts]
    mask = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts], dtype=torch.long)
    positions = (mask.cumsum(-1) - 1).clamp(min=0)
    return ids, mask, positions


def _fill_masks(rows: list[Row], live: list[int], bitmask, words: int, batch_matcher) -> None:
    """Fill the first ``len(live)`` rows of ``bitmask`` for the rows behind the
    batch rows ``live``: a constrained row's allowed tokens (the rest of a
    narrower vocabulary's words zero), every token for an unconstrained one."""
    held = [k for k, i in enumerate(live) if rows[i].matcher is not None]
    if not held:
        return
    if len(held) == 1:
        k = held[0]
        rows[live[k]].matcher.fill_next_token_bitmask(bitmask, k)
    else:
        batch_matcher.fill_next_token_bitmask([rows[live[k]].matcher for k in held],
                                              bitmask, indices=held)
    for k, i in enumerate(live):
        if rows[i].matcher is None:
            bitmask[k] = -1
        elif bitmask_words(len(rows[i].constraint.vocab)) < words:
            bitmask[k, bitmask_words(len(rows[i].constraint.vocab)):] = 0


def decode(lm, rows: list[Row], max_new_tokens: int, temperature: float,
           controls: SamplingControls, batch_matcher=None, t0: float | None = None):
    """Decode ``rows`` in lock-step. Yields ``(row_index, token_id)`` for each
    token a row keeps and shows (not EOS, not one that completes a stop
    string), in row order within a step; returns the rows'
    :class:`GenerationResult` list.

    Args:
        batch_matcher: a :class:`constrain.BatchMatcher`, needed when more
            than one row is constrained.
        t0: the ``perf_counter`` the call's timing starts from (default: now).
    """
    import torch

    from constrain import allocate_bitmask, apply_bitmask

    if t0 is None:
        t0 = time.perf_counter()
    vocab = lm.vocab
    prefill = 0.0
    live = list(range(len(rows)))  # the row behind each batch row of the cache
    words = max((bitmask_words(len(r.constraint.vocab)) for r in rows if r.matcher is not None),
                default=0)
    if words and any(r.matcher is None for r in rows):
        # an unconstrained row's -1 reaches every logit (the columns past a
        # constraint's narrower vocabulary were masked for it too)
        words = max(words, bitmask_words(int(lm.vocab_size)))
    bitmask = allocate_bitmask(len(rows), 32 * words) if words else None
    # The next step's masks depend only on the tokens taken so far, so they are
    # filled on a worker thread while the model computes the step's logits: the
    # forward pass runs in torch with the GIL released, the fills mostly in numba
    # kernels that release it too, so a first visit to a grammar state (up to
    # milliseconds) hides behind the model instead of adding to the step.
    masks = ThreadPoolExecutor(1, thread_name_prefix="trellis-masks") if words else None
    pending = None
    try:
        if max_new_tokens > 0 and rows:
            ids, mask, positions = _left_padded(lm, [r.prompt_ids for r in rows])
            if masks is not None:
                pending = masks.submit(_fill_masks, rows, live, bitmask, words, batch_matcher)
            logits, past = lm.forward_batch(ids, attention_mask=mask, position_ids=positions)
            if positions is not None:
                positions = positions[:, -1:]
            prefill = time.perf_counter() - t0
        penalize = controls.repetition_penalty != 1.0
        for step in range(max_new_tokens):
            scores = logits.float()  # (live, V), a fresh tensor each step
            if pending is not None:
                pending, done = None, pending
                done.result()  # re-raises a fill's error here, in the caller's thread
                apply_bitmask(scores, bitmask[:len(live)])
                alive = torch.isfinite(scores).any(dim=1).tolist()
            else:
                alive = [True] * len(live)
            if penalize:
                # every row before the one argmax over the batch below (it ran at
                # the first greedy row, before the later rows were penalised)
                for k, i in enumerate(live):
                    if alive[k]:
                        controls.penalize(scores[k], rows[i].seen_ids)
            greedy = None
            going: list[int] = []  # batch rows that go on to the next step
            tokens: list[int] = []
            for k, i in enumerate(live):
                row = rows[i]
                if not alive[k]:
                    row.stop = STOP_NO_TOKEN
                    row.seconds = time.perf_counter() - t0
                    continue
                forced = row.closing_token(lm, max_new_tokens - step) if row.close else None
                if forced is not None:
                    tok = forced
                elif row.generator is None:
                    if greedy is None:  # one argmax over the batch
                        greedy = torch.argmax(scores, dim=1).tolist()
                    tok = greedy[k]
                else:
                    probs = controls.probabilities(scores[k], temperature)
                    tok = int(torch.multinomial(probs, 1, generator=row.generator))
                if row.close and forced is None:
                    tok = row.closing_guard(lm, tok, max_new_tokens - step)
                row.saw(tok)
                if row.accept(tok, vocab):
                    yield i, tok
                    going.append(k)
                    tokens.append(tok)
                else:
                    row.seconds = time.perf_counter() - t0
            if not going or step + 1 == max_new_tokens:
                live = [live[k] for k in going]
                break
            if len(going) < len(live):
                keep = torch.tensor(going, dtype=torch.long)
                past.batch_select_indices(keep.to(lm.device))
                if mask is not None:
                    mask, positions = mask[keep], positions[keep]
            live = [live[k] for k in going]
            if mask is not None:
                mask = torch.cat([mask, mask.new_ones((len(live), 1))], dim=1)
                positions = positions + 1
            if masks is not None and any(rows[i].matcher is not None for i in live):
                pending = masks.submit(_fill_masks, rows, live, bitmask, words, batch_matcher)
            logits, past = lm.forward_batch([[t] for t in tokens], past, attention_mask=mask,
                                            position_ids=positions)
    finally:
        if masks is not None:
            # a caller that stops early (a closed stream) must not find its
            # matchers still being read
            masks.shutdown(wait=True)
    end = time.perf_counter() - t0
    for i in live:
        rows[i].seconds = end
    if max_new_tokens == 0:
        for row in rows:
            row.seconds = end
    return [row.result(lm, prefill) for row in rows]
