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

from search.arguments import count, finite
from search.legacy import accepts_old_call_forms
from search.lm.protocol import as_constraint
from search.autoregressive.decoding import STOP_EOS, Row, decode, make_generator
from search.autoregressive.logits_controls import SamplingControls, StopStrings
from search.results import SearchResult

__all__ = ["GenerationResult", "generate", "generate_batch", "stream"]


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
    close: bool = False,
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
        close: with a constraint, end the output complete rather than cut off:
            once the tokens left are no more than a shortest completion of the
            output (and EOS) need, the rest is that completion
            (:mod:`search.autoregressive.closing`); ``result.stop_reason`` is
            then ``"eos"``. Looked for in the last 64 tokens of the budget; there,
            a token after which the completion and EOS would no longer fit is
            replaced by the completion's first token. A ``max_new_tokens`` below
            the shortest complete output leaves the output cut, or complete
            without EOS (``stop_reason == "max_new_tokens"``), with a warning;
            check ``result.accepted``.

    Returns:
        a :class:`GenerationResult`; check ``result.accepted`` when it may have been
        cut off by ``max_new_tokens``.
    """
    steps = _decode_one(lm, prompt, constraint, max_new_tokens, temperature, seed, system,
                        chat_template, SamplingControls(top_k, top_p, min_p, repetition_penalty),
                        StopStrings(stop), close)
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
    close: bool = False,
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
    steps = _decode_one(lm, prompt, constraint, max_new_tokens, temperature, seed, system,
                        chat_template, SamplingControls(top_k, top_p, min_p, repetition_penalty),
                        stops, close)
    vocab = lm.vocab
    grammar = vocab.grammar_token_list
    text, sent = "", 0  # with stop strings, the last characters wait: they may start one
    while True:
        try:
            _, tok = next(steps)
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


def _check_call(temperature: float, max_new_tokens: int) -> None:
    # (None, "8", 2.5 were raw TypeErrors; True ran as 1)
    finite("temperature", temperature, at_least=0)
    count("max_new_tokens", max_new_tokens)


def _prompt_ids(lm, prompt, chat_template, system, where: str = "") -> list[int]:
    ids = lm.prompt_ids(prompt, chat_template=chat_template, system=system)
    if not ids:
        raise ValueError(f"the prompt{where} is empty")
    return ids


def _decode_one(lm, prompt, constraint, max_new_tokens, temperature, seed, system, chat_template,
                controls: SamplingControls, stops: StopStrings, close: bool = False):
    """One row of :func:`search.autoregressive.decoding.decode`: yields
    ``(0, token_id)`` per shown token, returns the :class:`GenerationResult`."""
    _check_call(temperature, max_new_tokens)
    t0 = time.perf_counter()
    prompt_ids = _prompt_ids(lm, prompt, chat_template, system)
    row = Row(lm, prompt_ids, as_constraint(constraint, lm.vocab),
              make_generator(lm, temperature, seed), stops, controls.repetition_penalty != 1.0,
              close)
    results = yield from decode(lm, [row], max_new_tokens, temperature, controls, t0=t0)
    return results[0]


def generate_batch(
    lm,
    prompts,
    *,
    constraints=None,
    max_new_tokens: int = 256,
    temperature: float = 0.0,
    seed=None,
    system: str | None = None,
    chat_template: bool | None = None,
    top_k: int | None = None,
    top_p: float | None = None,
    min_p: float | None = None,
    repetition_penalty: float = 1.0,
    stop=None,
    close: bool = False,
    batch_size: int | None = None,
    threads: int | None = None,
    constraint=None,
    batch_matcher=None,
) -> list[GenerationResult]:
    """:func:`generate` for many prompts at once: one padded batch, one
    forward pass per step for the rows still going, each row masked by its own
    constraint.

    Row ``i`` gives what ``generate(lm, prompts[i], constraint=constraints[i],
    seed=seeds[i], ...)`` gives, up to the floating-point order of batched
    matrix products (on the default model on CPU, greedy texts have matched in
    every test; a near-tie between two tokens could in principle break the
    other way). Masks are filled by one :class:`constrain.BatchMatcher` call
    per step.

    Args:
        lm: a :class:`search.lm.transformers.TransformersLM`.
        prompts: strings or sequences of token ids.
        constraints: ``None`` (free generation), one constraint or Python type
            for every row, or a sequence of them (``None`` entries allowed), one
            per prompt.
        constraint: one constraint or Python type for every row, as
            :func:`generate` names it (``constraints=`` with a single one does
            the same; passing both is a ``TypeError``).
        seed: ``None`` (fresh seeds), one int for every row (each row's sampler
            is seeded with it, as its own :func:`generate` call would be), or a
            sequence of ints, one per prompt.
        batch_size: the most rows decoded at once (``None``: all); more
            prompts are decoded in consecutive batches.
        threads: the :class:`constrain.BatchMatcher`'s threads (default: its own).
        batch_matcher: a :class:`constrain.BatchMatcher` to fill the masks
            with, left open: a caller that generates batch after batch keeps
            its thread pool and the thread count it has timed best (each call
            otherwise makes its own, which times its counts again). Not with
            ``threads``.
        Other arguments as for :func:`generate`, the same for every row.

    Returns:
        one :class:`GenerationResult` per prompt, in order. ``seconds`` is the
        time from the start of the row's batch to the row's end, and
        ``prefill_seconds`` the batch's prefill.
    """
    from constrain import BatchMatcher

    _check_call(temperature, max_new_tokens)
    if isinstance(prompts, str):
        raise TypeError("prompts must be a list of prompts; for one prompt, call search.generate")
    prompts = list(prompts)
    n = len(prompts)
    if constraint is not None:
        if constraints is not None:
            raise TypeError("pass constraint= (one for every row) or constraints= (one per "
                            "prompt), not both")
        if isinstance(constraint, (list, tuple)):
            raise TypeError("constraint= is one constraint for every row; pass a list of them, "
                            "one per prompt, as constraints=")
        constraints = constraint
    constraints = _per_row("constraints", constraints, n, single=lambda c: not isinstance(c, (list, tuple)))
    seeds = _per_row("seed", seed, n, single=lambda s: s is None or hasattr(s, "__index__"))
    if batch_size is not None and (isinstance(batch_size, bool) or not isinstance(batch_size, int)
                                   or batch_size < 1):
        raise ValueError(f"batch_size must be a positive integer or None, got {batch_size!r}")
    if batch_matcher is not None:
        if threads is not None:
            raise TypeError("pass threads= (for a BatchMatcher made for this call) or "
                            "batch_matcher=, not both")
        if not isinstance(batch_matcher, BatchMatcher):
            raise TypeError(f"batch_matcher must be a constrain.BatchMatcher, not "
                            f"{type(batch_matcher).__name__}")
    controls = SamplingControls(top_k, top_p, min_p, repetition_penalty)
    stops = StopStrings(stop)
    vocab = lm.vocab
    compiled = [as_constraint(c, vocab) for c in constraints]
    ids = [_prompt_ids(lm, p, chat_template, system, f" at index {i}") for i, p in enumerate(prompts)]
    results: list[GenerationResult] = []
    size = batch_size or max(n, 1)
    if batch_matcher is None:
        with BatchMatcher(threads) as own:
            _decode_batches(lm, ids, compiled, seeds, size, max_new_tokens, temperature,
                            controls, stops, close, own, results)
    else:
        _decode_batches(lm, ids, compiled, seeds, size, max_new_tokens, temperature,
                        controls, stops, close, batch_matcher, results)
    return results


def _decode_batches(lm, ids, compiled, seeds, size, max_new_tokens, temperature, controls,
                    stops, close, batch_matcher, results) -> None:
    """Decode the prompts ``ids`` in batches of ``size`` rows, appending each
    row's :class:`GenerationResult` to ``results`` in order."""
    for lo in range(0, len(ids), size):
        t0 = time.perf_counter()
        rows = [Row(lm, ids[i], compiled[i], make_generator(lm, temperature, seeds[i]), stops,
                    controls.repetition_penalty != 1.0, close)
                for i in range(lo, min(len(ids), lo + size))]
        steps = decode(lm, rows, max_new_tokens, temperature, controls, batch_matcher, t0=t0)
        while True:
            try:
                next(steps)
            except StopIteration as done:
                results.extend(done.value)
                break


def _per_row(name: str, value, n: int, single) -> list:
    """``value`` for each of ``n`` rows: repeated when ``single(value)``, else
    a sequence of exactly ``n``."""
    if single(value):
        return [value] * n
    value = list(value)
    if len(value) != n:
        raise ValueError(f"{name} has {len(value)} entries for {n} prompts")
    return value
