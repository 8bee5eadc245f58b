"""The plain decoding loop: greedy or sampled, with an optional constraint.

Example::

    import constrain, search
    lm = search.load_default_model()
    phone = constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", lm.vocab)
    result = search.generate(lm, "Give me a phone number", constraint=phone)
    print(result.text, result.stop_reason, result.accepted)

Each step masks the model's logits with the constraint's bitmask (one bitmask is
allocated per call and refilled every step), picks a token (argmax at temperature 0,
else a draw from a seeded ``torch.Generator``), advances the constraint state and
feeds the token back through the KV cache. Generation stops at an EOS token — which
the constraint allows only once its input is a complete string of its language — or
after ``max_new_tokens``; in the latter case ``result.accepted`` tells whether the
text is complete anyway.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from search.legacy import accepts_old_call_forms
from search.lm.protocol import as_constraint, constraint_eos_ids, output_value
from search.autoregressive.logits_controls import SamplingControls, StopStrings
from search.results import SearchResult

__all__ = ["GenerationResult", "generate", "stream"]

#: the values of :attr:`GenerationResult.stop_reason`
STOP_EOS = "eos"
STOP_MAX_TOKENS = "max_new_tokens"
STOP_NO_TOKEN = "no_allowed_token"
STOP_STRING = "stop"


@dataclass(frozen=True)
class GenerationResult(SearchResult):
    """What :func:`generate` produced. ``str(result)`` is the text.

    Attributes:
        text: the generated text (EOS excluded), decoded from the tokens' exact bytes.
        token_ids: the generated token ids, EOS excluded.
        stop_reason: ``"eos"`` (the model ended the text), ``"max_new_tokens"``
            (cut off), ``"stop"`` (a stop string; the text is cut before it) or
            ``"no_allowed_token"`` (the constraint allowed nothing; a bug in a
            constraint).
        accepted: with a constraint, whether ``text`` is a complete string of its
            language (always true when ``stop_reason == "eos"``); ``None`` without one.
        prompt_token_ids: the ids the model was conditioned on.
        eos_token_id: the EOS id that ended generation, if one did.
        seconds: wall time of the whole call (prefill included).
        prefill_seconds: wall time of the prompt's forward pass.
        value: with a constraint given as a Python type (or compiled by
            :func:`constrain.compile_type`), the validated object the text
            stands for; ``None`` when the text is not complete (cut off) or
            did not validate (then ``value_error`` says why).
        value_error: why ``value`` is ``None`` although an object was asked for.
    """

    text: str
    token_ids: list[int]
    stop_reason: str
    accepted: bool | None
    prompt_token_ids: list[int] = field(repr=False, default_factory=list)
    eos_token_id: int | None = None
    seconds: float = 0.0
    prefill_seconds: float = 0.0
    value: object = None
    value_error: str | None = field(default=None, repr=False)

    def __str__(self) -> str:
        return self.text

    @property
    def finished(self) -> bool:
        """Whether the model ended the text itself (EOS) rather than being cut off."""
        return self.stop_reason == STOP_EOS

    @property
    def num_steps(self) -> int:
        """Decoding steps taken: generated tokens plus the final EOS, if any."""
        return len(self.token_ids) + (self.eos_token_id is not None)

    @property
    def tokens_per_second(self) -> float:
        """Decoding steps per second of wall time, prefill excluded."""
        dt = self.seconds - self.prefill_seconds
        return self.num_steps / dt if dt > 0 else float("inf")


def _check_tokens(constraint, lm) -> None:
    """Raise ``VocabularyError`` unless the constraint's tokens are the model's."""
    from constrain import VocabularyError

    cv = constraint.vocab
    mv = lm.vocab
    if cv is mv or cv == mv:
        return
    n = len(cv)
    if mv.tokens[:n] != cv.tokens[:n]:
        raise VocabularyError(
            f"the constraint was compiled against vocabulary {cv.name!r}, whose tokens differ "
            f"from {lm.name}'s; compile it with lm.vocab"
        )


@accepts_old_call_forms(("prompt", "constraint", "max_new_tokens", "temperature", "seed"),
                        renamed={"model": "lm"})
def generate(
    lm,
    prompt,
    *,
    constraint=None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int | None = None,
    system: str | None = None,
    chat_template: bool | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop=None,
) -> GenerationResult:
    """Generate a continuation of ``prompt`` with ``lm``, optionally constrained.

    Args:
        lm: a :class:`search.lm.transformers.TransformersLM` (e.g. from
            :func:`search.load_default_model`).
        prompt: a string, or a sequence of token ids used as they are.
        constraint: a compiled grammar (:mod:`constrain.protocol`), compiled against
            ``lm.vocab``; or a Python type (a Pydantic model, a dataclass, a
            ``TypedDict``, ``Literal[...]``, ``list[int]``...: compiled by
            :func:`constrain.compile_type`, objects closed, and the result's
            ``value`` is the validated object); ``None`` for free generation.
            (Passed positionally, as before, it still works for one release,
            with a ``DeprecationWarning``.)
        max_new_tokens: the most tokens to generate (EOS included).
        temperature: 0 for greedy decoding, else the softmax temperature to sample at.
        seed: seeds the sampler (same seed, same model, same device: same output);
            ``None`` draws a fresh seed.
        system: a system message for the chat template.
        chat_template: wrap a string prompt in the model's chat template; ``None``
            (default) does so for chat models.
        top_k, top_p, min_p: filters of the sampling distribution (see
            :class:`~search.autoregressive.logits_controls.SamplingControls`),
            applied after the constraint's mask; they matter only when sampling.
        repetition_penalty: CTRL's penalty on tokens already in the prompt or the
            output (1: none); greedy decoding too.
        stop: a string or strings; generation ends where the text first contains
            one, the text cut before it (``stop_reason == "stop"``; the token ids
            include the tokens that spelled it).

    Returns:
        a :class:`GenerationResult`; check ``result.accepted`` when it may have been
        cut off by ``max_new_tokens``.
    """
    steps = _decode(lm, prompt, constraint, max_new_tokens, temperature, seed, system,
                    chat_template, SamplingControls(top_k, top_p, min_p, repetition_penalty),
                    StopStrings(stop))
    while True:
        try:
            next(steps)
        except StopIteration as done:
            return done.value


def stream(
    lm,
    prompt,
    *,
    constraint=None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed: int | None = None,
    system: str | None = None,
    chat_template: bool | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop=None,
):
    """:func:`generate`, yielding the text as tokens are accepted.

    Each piece is whole UTF-8 characters (bytes of a character split across
    tokens wait for its last byte), so that the pieces joined are exactly the
    final ``result.text``. The generator's return value (``StopIteration.value``,
    or ``yield from``) is the :class:`GenerationResult`; a consumer that stops
    early stops the generation. Arguments as for :func:`generate`.
    """
    import codecs

    stops = StopStrings(stop)
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    steps = _decode(lm, prompt, constraint, max_new_tokens, temperature, seed, system,
                    chat_template, SamplingControls(top_k, top_p, min_p, repetition_penalty),
                    stops)
    vocab = lm.vocab
    grammar = vocab.grammar_token_list
    text, sent = "", 0  # with stop strings, the last characters wait: they may start one
    while True:
        try:
            tok = next(steps)
        except StopIteration as done:
            result = done.value
            if len(result.text) > sent:
                yield result.text[sent:]
            return result
        if grammar[tok]:  # EOS, special and padding ids print nothing (as lm.decode)
            text += decoder.decode(vocab.token_bytes(tok))
            ready = len(text) - stops.holdback if stops else len(text)
            if ready > sent:
                yield text[sent:ready]
                sent = ready


def _decode(lm, prompt, constraint, max_new_tokens, temperature, seed, system, chat_template,
            controls: SamplingControls, stops: StopStrings):
    """The decoding loop: yields each generated token id (EOS excluded) as it is
    chosen, but not one that completes a stop string; returns the
    :class:`GenerationResult`."""
    import torch

    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if max_new_tokens < 0:
        raise ValueError(f"max_new_tokens must be >= 0, got {max_new_tokens}")
    t0 = time.perf_counter()
    prompt_ids = lm.prompt_ids(prompt, chat_template=chat_template, system=system)
    if not prompt_ids:
        raise ValueError("the prompt is empty")

    constraint = as_constraint(constraint, lm.vocab)
    device = lm.device
    eos_ids = constraint_eos_ids(lm, constraint)
    if constraint is not None:
        from constrain import allocate_bitmask, apply_bitmask

        _check_tokens(constraint, lm)
        state = constraint.initial_state()
        bitmask = allocate_bitmask(1, len(constraint.vocab))
    else:
        state = None
    generator = None
    if temperature > 0:
        generator = torch.Generator(device=device)
        if seed is None:
            generator.seed()
        else:
            generator.manual_seed(int(seed))

    out: list[int] = []
    stop, eos_hit = STOP_MAX_TOKENS, None
    logits, past = (None, None)
    prefill = 0.0
    if max_new_tokens > 0:
        logits, past = lm.forward(prompt_ids)
        prefill = time.perf_counter() - t0
    penalize = controls.repetition_penalty != 1.0
    seen = set(prompt_ids)
    seen_ids = torch.tensor(sorted(seen), dtype=torch.long, device=device) if penalize else None
    text = None
    if stops:  # the text so far, decoded as it grows (a stop string is looked for in its tail)
        import codecs

        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        grammar = lm.vocab.grammar_token_list
        so_far = ""
    for step in range(max_new_tokens):
        scores = logits.unsqueeze(0)  # (1, V) float32, a fresh tensor each step
        if constraint is not None:
            constraint.fill_bitmask(state, bitmask, 0)
            apply_bitmask(scores, bitmask)  # moves the bitmask to the logits' device
            if not bool(torch.isfinite(scores).any()):
                stop = STOP_NO_TOKEN
                break
        if penalize:
            controls.penalize(scores[0], seen_ids)
        if generator is None:
            tok = int(torch.argmax(scores[0]))
        else:
            probs = controls.probabilities(scores[0], temperature)
            tok = int(torch.multinomial(probs, 1, generator=generator))
        if penalize and tok not in seen:
            seen_ids = torch.cat([seen_ids, seen_ids.new_tensor([tok])])
        seen.add(tok)
        if constraint is not None:
            nxt = constraint.advance(state, tok)
            if nxt is None:  # the bitmask and advance disagree: a constraint bug
                raise RuntimeError(
                    f"constraint refused token {tok} that its bitmask allowed (state {state!r})"
                )
            state = nxt
        if tok in eos_ids:
            stop, eos_hit = STOP_EOS, tok
            break
        out.append(tok)
        if stops and grammar[tok]:
            start = max(0, len(so_far) - stops.holdback)
            so_far += decoder.decode(lm.vocab.token_bytes(tok))
            cut = stops.find(so_far, start)
            if cut is not None:
                stop, text = STOP_STRING, so_far[:cut]
                break
        yield tok
        if step + 1 < max_new_tokens:
            logits, past = lm.forward([tok], past)

    if constraint is None:
        accepted = None
    else:
        accepted = bool(constraint.is_terminated(state) or constraint.is_accepting(state))
    if text is None:
        text = lm.decode(out)
    value, value_error = output_value(constraint, text, accepted)
    return GenerationResult(
        text=text,
        value=value,
        value_error=value_error,
        token_ids=out,
        stop_reason=stop,
        accepted=accepted,
        prompt_token_ids=list(prompt_ids),
        eos_token_id=eos_hit,
        seconds=time.perf_counter() - t0,
        prefill_seconds=prefill,
    )
