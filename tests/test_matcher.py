"""constrain.Matcher, the stateful wrapper of serving engines: accept, validate,
roll back, fork, reset, draft bitmasks for speculative decoding, and
jump-forward decoding, on real grammars over SmolLM2's vocabulary."""

from __future__ import annotations

import numpy as np
import pytest

from constrain import (BitmaskError, ConstraintError, InvalidStateError, Matcher, Vocabulary,
                       allocate_bitmask, compile_grammar, compile_json_schema, compile_regex)

PERSON = {"type": "object",
          "properties": {"customer_identification_number": {"type": "integer"},
                         "shipping_address_line": {"type": "string"},
                         "is_priority_customer": {"type": "boolean"}},
          "required": ["customer_identification_number", "shipping_address_line",
                       "is_priority_customer"],
          "additionalProperties": False}
INSTANCE = ('{"customer_identification_number":1234,"shipping_address_line":"5 Main St",'
            '"is_priority_customer":true}')


@pytest.fixture(scope="module")
def person(smollm2_vocab):
    return compile_json_schema(PERSON, smollm2_vocab)


@pytest.fixture(scope="module")
def instance_ids(smollm2_tokenizer):
    return smollm2_tokenizer.encode(INSTANCE, add_special_tokens=False)


def _mask(m: Matcher, vocab) -> bytes:
    bm = allocate_bitmask(1, len(vocab), backend="numpy")
    m.fill_next_token_bitmask(bm, 0)
    return bm[0].tobytes()


def test_accept_tokens_is_all_or_nothing(person, instance_ids, smollm2_vocab):
    m = Matcher(person)
    assert m.accept_tokens(instance_ids[:3]) and m.num_accepted == 3
    before = (m.state, m.num_accepted)
    bad = instance_ids[3:6] + [instance_ids[0]] + instance_ids[6:8]  # '{"' is refused there
    assert not m.accept_tokens(bad)
    assert (m.state, m.num_accepted) == before
    with pytest.raises(InvalidStateError):  # an id past the vocabulary, half-way
        m.accept_tokens(instance_ids[3:5] + [len(smollm2_vocab) + 7])
    assert (m.state, m.num_accepted) == before
    assert m.accept_tokens(instance_ids[3:]) and m.is_accepting()
    assert m.accept_token(smollm2_vocab.eos_token_ids[0]) and m.is_terminated()
    assert not m.accept_token(instance_ids[0])


def test_validate_tokens_counts_the_accepted_prefix_and_changes_nothing(person, instance_ids):
    m = Matcher(person)
    assert m.validate_tokens(instance_ids) == len(instance_ids)
    assert m.num_accepted == 0 and m.state == person.initial_state()
    broken = instance_ids[:5] + instance_ids[:2] + instance_ids[5:]
    assert m.validate_tokens(broken) == 5
    assert m.validate_tokens([]) == 0


def test_rollback_any_depth_and_its_bounds(person, instance_ids, smollm2_vocab):
    m = Matcher(person)
    masks = [_mask(m, smollm2_vocab)]
    for t in instance_ids:
        assert m.accept_token(t)
        masks.append(_mask(m, smollm2_vocab))
    for n in (1, 5, len(instance_ids) - 6):
        m.rollback(n)
        assert _mask(m, smollm2_vocab) == masks[m.num_accepted]
    m.rollback(m.num_accepted)
    assert m.state == person.initial_state()
    with pytest.raises(ConstraintError, match="only 0 can be undone"):
        m.rollback(1)
    with pytest.raises(ConstraintError):
        m.rollback(-1)
    kept = Matcher(person, max_rollback=4)
    assert kept.accept_tokens(instance_ids[:10])
    assert kept.num_accepted == 4
    kept.rollback(4)
    assert _mask(kept, smollm2_vocab) == masks[6]
    with pytest.raises(ConstraintError):
        kept.rollback(1)
    with pytest.raises(ConstraintError):
        Matcher(person, max_rollback=-1)


def test_fork_is_independent_and_reset_restarts(person, instance_ids, smollm2_vocab):
    m = Matcher(person)
    m.accept_tokens(instance_ids[:8])
    f = m.fork()
    assert f.state == m.state and f.num_accepted == 8
    assert f.accept_tokens(instance_ids[8:12])
    assert m.num_accepted == 8 and f.num_accepted == 12
    f.rollback(12)
    assert m.num_accepted == 8
    m.reset()
    assert m.num_accepted == 0 and m.state == person.initial_state()
    assert not m.is_accepting() and not m.is_terminated()


def test_draft_bitmasks_are_the_masks_along_the_draft(person, instance_ids, smollm2_vocab):
    m = Matcher(person)
    m.accept_tokens(instance_ids[:4])
    draft = instance_ids[4:9]
    bm = allocate_bitmask(len(draft) + 3, len(smollm2_vocab), backend="numpy")
    assert m.fill_draft_bitmasks(draft, bm, start_row=1) == len(draft)
    assert m.num_accepted == 4
    walker = m.fork()
    for i in range(len(draft) + 1):
        assert bm[1 + i].tobytes() == _mask(walker, smollm2_vocab), i
        if i < len(draft):
            walker.accept_token(draft[i])
    assert (bm[0] == -1).all() and (bm[len(draft) + 2] == -1).all()  # rows outside: untouched
    # a draft refused at its third token: rows up to it filled, the rest left
    bad = draft[:2] + [instance_ids[0]] + draft[3:]
    bm2 = allocate_bitmask(len(bad) + 1, len(smollm2_vocab), backend="numpy")
    assert m.fill_draft_bitmasks(bad, bm2) == 2
    assert bm2[2].tobytes() == bm[3].tobytes()
    assert (bm2[3:] == -1).all()
    with pytest.raises(BitmaskError, match="needs rows"):
        m.fill_draft_bitmasks(draft, allocate_bitmask(len(draft), len(smollm2_vocab)))
    # a bad id anywhere is refused before any row is written
    bm3 = allocate_bitmask(len(draft) + 1, len(smollm2_vocab), backend="numpy")
    for bad_id in (len(smollm2_vocab), -1, 1.5):
        with pytest.raises(InvalidStateError):
            m.fill_draft_bitmasks(draft[:3] + [bad_id], bm3)
        assert (bm3 == -1).all()
    assert m.fill_draft_bitmasks([], bm2, 0) == 0 and bm2[0].tobytes() == _mask(m, smollm2_vocab)


def test_accept_tokens_takes_any_iterable(person, instance_ids):
    m = Matcher(person)
    assert m.accept_tokens(iter(instance_ids[:3])) and m.num_accepted == 3
    assert m.validate_tokens(t for t in instance_ids[3:6]) == 3 and m.num_accepted == 3


def test_allowed_bytes_agree_with_advance_bytes(person, smollm2_vocab, instance_ids):
    """Along a walk, for every byte: allowed_bytes says yes iff advance_bytes goes
    on; and a token's bytes, advanced byte by byte, give the token's state."""
    lark = compile_grammar('start: "SELECT " NAME ("," NAME)*\nNAME: /[a-z]+/', smollm2_vocab)
    regex = compile_regex(r"[0-9]{2,4}-(ab|cd)x", smollm2_vocab)
    walks = [(person, instance_ids[:12]),
             (lark, smollm2_vocab.encoder("SELECT ab,cd")),
             (regex, smollm2_vocab.encoder("123-ab"))]
    for g, ids in walks:
        state = g.initial_state()
        for t in ids:
            allowed = g.allowed_bytes(state)
            for b in range(256):
                assert allowed[b] == (g.advance_bytes(state, bytes([b])) is not None), (g, b)
            nxt = g.advance(state, t)
            assert nxt is not None
            by_bytes = g.advance_bytes(state, smollm2_vocab.token_bytes(t))
            assert g.allowed_token_ids(by_bytes).tobytes() == g.allowed_token_ids(nxt).tobytes()
            state = nxt


def test_jump_forward_string_on_fixed_keys(person, smollm2_tokenizer, smollm2_vocab):
    m = Matcher(person)
    assert m.find_jump_forward_string() == '{"customer_identification_number":'
    m.accept_tokens(smollm2_tokenizer.encode('{"customer_identification_number":12',
                                             add_special_tokens=False))
    assert m.find_jump_forward_string() == ""  # digits, a comma or the end may follow
    m.accept_tokens(smollm2_tokenizer.encode(',', add_special_tokens=False))
    assert m.find_jump_forward_string() == '"shipping_address_line":"'
    assert Matcher(compile_regex("abc[0-9]", smollm2_vocab)).find_jump_forward_bytes() == b"abc"
    # an accepting state forces nothing: EOS may come
    done = Matcher(compile_regex("abc(de)?", smollm2_vocab))
    done.accept_tokens(smollm2_tokenizer.encode("abc", add_special_tokens=False))
    assert done.find_jump_forward_string() == ""


def test_jump_forward_string_keeps_whole_characters(smollm2_vocab):
    m = Matcher(compile_regex("é[a-z]", smollm2_vocab))
    assert m.find_jump_forward_bytes() == "é".encode()
    # one byte of a two-byte character is no string yet
    assert m.find_jump_forward_bytes(max_bytes=1) == b"\xc3"
    assert m.find_jump_forward_string(max_bytes=1) == ""


@pytest.mark.parametrize("pattern,text", [
    (r"x  [0-9]", "x  7"),
    (r"Answer:\n\n[A-Z][a-z]{0,8}", "Answer:\n\nYes"),
    (r"## Summary\n\n[A-Z][a-z ]{0,20}\n\n## Score\n\n[0-9]", "## Summary\n\nAll good\n\n## Score\n\n7"),
])
def test_jump_forward_leaves_a_final_whitespace_run_to_the_model(smollm2_tokenizer, smollm2_vocab,
                                                                 pattern, text):
    """SmolLM2's pre-tokenizer splits a run of whitespace by what follows it
    ('\n\nYes' is '\n' '\n' 'Yes', though '\n\n' is one token): forced
    text ending in such a run was jumped as '\n\n', a split the tokenizer
    never makes. Along the tokenizer's own encoding of a valid output, every
    jump is a prefix of the tokenizer's encoding of the rest."""
    m = Matcher(compile_regex(pattern, smollm2_vocab))
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
    for k, t in enumerate(ids):
        jump = m.jump_forward_tokens(smollm2_tokenizer)
        assert jump == ids[k:k + len(jump)], (k, jump, ids[k:])
        assert m.accept_token(t)
    whole = Matcher(compile_regex("x  5", smollm2_vocab))  # nothing may follow: kept whole
    assert whole.jump_forward_tokens(smollm2_tokenizer) == smollm2_tokenizer.encode(
        "x  5", add_special_tokens=False)


def test_jump_forward_tokens_are_the_tokenizers_own(person, smollm2_tokenizer, smollm2_vocab):
    """Along a whole generation: wherever bytes are forced, the tokens are the
    tokenizer's encoding of their bytes, a prefix of its encoding of the forced
    text, and the dropped tail could have merged with what follows."""
    m = Matcher(person)
    forced_total = 0
    steps = 0
    for t in smollm2_tokenizer.encode(INSTANCE, add_special_tokens=False):
        jump = m.jump_forward_tokens(smollm2_tokenizer)
        assert jump == m.jump_forward_tokens(smollm2_vocab)  # the vocabulary's encoder
        text = m.find_jump_forward_string()
        if jump:
            data = b"".join(smollm2_vocab.token_bytes(i) for i in jump)
            assert text.encode().startswith(data)
            assert smollm2_tokenizer.encode(data.decode(), add_special_tokens=False) == jump
            assert jump == smollm2_tokenizer.encode(text, add_special_tokens=False)[:len(jump)]
            forced_total += len(jump)
            assert m.validate_tokens(jump) == len(jump)
        assert m.accept_token(t)
        steps += 1
    assert forced_total > 10  # the long keys are forced
    # a vocabulary not read from a tokenizer cannot encode
    plain = Vocabulary.from_tokens([b"a", b"b", b"<e>"], eos_token_ids=[2])
    with pytest.raises(ConstraintError, match="pass the tokenizer"):
        Matcher(compile_regex("ab", plain)).jump_forward_tokens(plain)


def test_jump_forward_drops_a_token_a_longer_one_could_extend(smollm2_tokenizer, smollm2_vocab):
    """'":' is forced after a key, but '":"' is a token too: a string value's
    quote could merge with it, so it is not emitted."""
    g = compile_json_schema(PERSON, smollm2_vocab)
    m = Matcher(g)
    m.accept_tokens(smollm2_tokenizer.encode('{"customer_identification_number',
                                             add_special_tokens=False))
    assert m.find_jump_forward_string() == '":'
    assert m.jump_forward_tokens(smollm2_tokenizer) == []
    vocab_tokens = {smollm2_vocab.token_bytes(i) for i in range(len(smollm2_vocab))}
    assert b'":"' in vocab_tokens


def _jump_forward_decode(g, text: str, tok) -> list[int]:
    """The tokens of ``text`` decoded with jump-forward: forced tokens where
    offered, else the first token of the tokenizer's encoding of the rest."""
    m = Matcher(g)
    data, out = text.encode(), []
    while len(b"".join(g.vocab.token_bytes(i) for i in out)) < len(data):
        at = len(b"".join(g.vocab.token_bytes(i) for i in out))
        jump = m.jump_forward_tokens(tok)
        if not jump:
            jump = tok.encode(data[at:].decode(), add_special_tokens=False)[:1]
        assert m.accept_tokens(jump)
        out += jump
    return out


@pytest.mark.parametrize("schema, text", [
    (PERSON, INSTANCE),
    # the tokenizer writes '":' '".' for '":"./': a token starting inside the
    # forced '":"' runs past it (forced whole, the output was not canonical)
    ({"type": "object", "properties": {"path": {"type": "string"}, "n": {"type": "integer"}},
      "additionalProperties": False}, '{"path":"./templates/ghost.html","n":7}'),
])
def test_jump_forward_decoding_is_the_tokenizers_encoding(schema, text, smollm2_tokenizer,
                                                          smollm2_vocab):
    g = compile_json_schema(schema, smollm2_vocab)
    assert _jump_forward_decode(g, text, smollm2_tokenizer) == smollm2_tokenizer.encode(
        text, add_special_tokens=False)


def test_jump_forward_keeps_a_token_nothing_allowed_could_extend(smollm2_tokenizer,
                                                                 smollm2_vocab):
    """'":' after a boolean's or a non-negative integer's key: '":"' and ':-'
    are tokens, but neither '"' nor '-' may follow the colon there, so '":' is
    forced (it was held back: the vocabulary alone was asked)."""
    schema = {"type": "object", "additionalProperties": False,
              "properties": {"is_priority_customer": {"type": "boolean"},
                             "n": {"type": "integer", "minimum": 0}}}
    for key in ("is_priority_customer", "n"):
        m = Matcher(compile_json_schema(schema, smollm2_vocab))
        m.accept_tokens(smollm2_tokenizer.encode('{"' + key, add_special_tokens=False))
        assert [smollm2_vocab.token_bytes(i)
                for i in m.jump_forward_tokens(smollm2_tokenizer)] == [b'":'], key


def test_matcher_refuses_what_is_not_a_constraint():
    with pytest.raises(ConstraintError, match="compiled constraint"):
        Matcher(object())


def test_eos_state_masks_nothing(person, instance_ids, smollm2_vocab):
    m = Matcher(person)
    m.accept_tokens(instance_ids)
    m.accept_token(smollm2_vocab.eos_token_ids[0])
    row = np.frombuffer(_mask(m, smollm2_vocab), dtype=np.int32)
    assert not row.any() and m.allowed_token_ids().size == 0
    assert m.find_jump_forward_string() == ""
