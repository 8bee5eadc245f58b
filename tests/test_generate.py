"""search.generate with the default model: greedy, sampled, constrained."""

from __future__ import annotations

import dataclasses
import re

import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("gguf")

import constrain  # noqa: E402
import search  # noqa: E402
from constrain.protocol import Constraint  # noqa: E402




class LiteralConstraint(Constraint):
    """A stand-in constraint: exactly the string ``text``, then EOS. States are the
    number of bytes matched (``-1`` after EOS). Records every state it is asked to
    fill a bitmask for."""

    def __init__(self, text: str, vocab):
        self.vocab = vocab
        self.target = text.encode()
        self.filled = []

    def initial_state(self):
        return 0

    def advance(self, state, token_id):
        if state == -1:
            return None
        if token_id in self.vocab.eos_token_ids:
            return -1 if state == len(self.target) else None
        if not self.vocab.grammar_token_mask[token_id]:
            return None
        b = self.vocab.token_bytes(token_id)
        if self.target.startswith(b, state):
            return state + len(b)
        return None

    def is_accepting(self, state):
        return state == len(self.target)

    def is_terminated(self, state):
        return state == -1

    def fill_bitmask(self, state, bitmask, row=0):
        self.filled.append(state)
        words = [0] * bitmask.shape[1]
        for t in range(len(self.vocab)):
            if self.advance(state, t) is not None:
                words[t // 32] |= 1 << (t % 32)
        bitmask[row] = torch.tensor([w - (1 << 32) if w >= 1 << 31 else w for w in words], dtype=torch.int32)


def test_greedy_is_deterministic(lm):
    a = search.generate(lm, "Name a color.", max_new_tokens=8)
    b = search.generate(lm, "Name a color.", max_new_tokens=8)
    assert a.token_ids == b.token_ids and a.text == b.text
    assert a.accepted is None
    assert str(a) == a.text
    assert a.stop_reason in ("eos", "max_new_tokens")
    assert len(a.token_ids) <= 8


def test_sampling_with_a_seed_is_reproducible(lm):
    runs = [search.generate(lm, "Tell me a story.", max_new_tokens=6, temperature=1.0, seed=s).token_ids
            for s in (7, 7, 8, 9)]
    assert runs[0] == runs[1]
    assert runs[0] != runs[2] or runs[0] != runs[3]


@pytest.mark.parametrize(
    "pattern, prompt",
    [
        (r"\d{3}-\d{4}", "Give me a phone number"),
        (r"(yes|no)", "Is the sky blue? Answer yes or no."),
        (r"[0-9]{4}-[0-9]{2}-[0-9]{2}", "On what date did Apollo 11 land on the moon?"),
    ],
)
def test_regex_output_fullmatches(lm, pattern, prompt):
    grammar = constrain.compile_regex(pattern, lm.vocab)
    r = search.generate(lm, prompt, constraint=grammar, max_new_tokens=40)
    assert r.stop_reason == "eos" and r.finished and r.accepted
    assert r.eos_token_id in lm.eos_token_ids
    assert re.fullmatch(pattern, r.text), r.text
    assert grammar.accepts_tokens(r.token_ids + [r.eos_token_id])


def test_sampled_regex_output_fullmatches(lm):
    grammar = constrain.compile_regex(r"(?a)\d{3}-\d{4}", lm.vocab)
    for seed in (1, 2):
        r = search.generate(lm, "Give me a phone number", constraint=grammar, max_new_tokens=20,
                            temperature=1.0, seed=seed)
        assert r.accepted and re.fullmatch(r"[0-9]{3}-[0-9]{4}", r.text), r.text


def test_eos_only_once_accepting(lm):
    """The stand-in constraint forces a reply the model would never give; EOS is
    masked until the whole text is there, and chosen right then."""
    c = LiteralConstraint("Zebra stripes", lm.vocab)
    r = search.generate(lm, "Say hi", constraint=c, max_new_tokens=20)
    assert r.text == "Zebra stripes" and r.stop_reason == "eos" and r.accepted
    # one bitmask per step; EOS allowed only in the last (accepting) one
    assert c.filled[-1] == len(c.target)
    assert all(s < len(c.target) for s in c.filled[:-1])
    assert len(c.filled) == len(r.token_ids) + 1


def test_cut_off_before_accepting_is_reported(lm):
    grammar = constrain.compile_regex(r"[0-9]{12}", lm.vocab)
    r = search.generate(lm, "Give me a phone number", constraint=grammar, max_new_tokens=3)
    assert r.stop_reason == "max_new_tokens" and not r.finished
    assert r.accepted is False
    assert len(r.token_ids) == 3 and r.text.isdigit()


def test_plain_prompt_and_token_prompt(lm):
    ids = lm.encode("The capital of France is")
    a = search.generate(lm, "The capital of France is", max_new_tokens=3, chat_template=False)
    b = search.generate(lm, ids, max_new_tokens=3)
    assert a.prompt_token_ids == ids and a.token_ids == b.token_ids
    assert search.generate(lm, "x", max_new_tokens=0).token_ids == []


def test_bad_arguments(lm):
    with pytest.raises(ValueError):
        search.generate(lm, "x", temperature=-1)
    small = constrain.Vocabulary.from_tokens([b"a", b"b", b"</s>"], eos_token_ids=[2])
    with pytest.raises(constrain.VocabularyError):
        search.generate(lm, "x", constraint=constrain.compile_regex("a+", small), max_new_tokens=2)


def test_old_call_forms_warn_and_give_the_same_result(lm):
    """The README's ``search.generate(lm, prompt, constraint)`` (a positional
    constraint, and positional decoding settings) keeps working for one release,
    with a DeprecationWarning, and means what the keyword form means."""
    phone = constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", lm.vocab)
    new = search.generate(lm, "Give me a phone number", constraint=phone, max_new_tokens=12)
    assert isinstance(new, search.SearchResult) and str(new) == new.text
    with pytest.warns(DeprecationWarning, match=r"pass constraint, max_new_tokens by keyword"):
        old = search.generate(lm, "Give me a phone number", phone, 12)
    untimed = lambda r: dataclasses.replace(r, seconds=0.0, prefill_seconds=0.0)  # noqa: E731
    assert untimed(old) == untimed(new)
    with pytest.warns(DeprecationWarning, match=r"write lm= for model="):
        assert search.generate(model=lm, prompt="Give me a phone number", constraint=phone,
                               max_new_tokens=12).token_ids == new.token_ids
    with pytest.raises(TypeError, match="multiple values"):
        search.generate(lm, "x", phone, constraint=phone)
