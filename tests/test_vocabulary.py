"""Tests of :class:`constrain.Vocabulary` built from real tokenizers.

The central property: for any text, the bytes of the tokens of its encoding,
joined, are the text's UTF-8 bytes (SmolLM2, GPT-2, o200k). Local tokenizers
built with the ``tokenizers`` library cover SentencePiece-style vocabularies
(``▁``, ``<0xNN>`` byte fallback), plain-text and raw-bytes vocabularies, added
tokens and the error cases.
"""

from __future__ import annotations

import gzip
import inspect

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from constrain import EmptyLanguageError, Vocabulary, VocabularyError, compile_regex

tokenizers = pytest.importorskip("tokenizers")
from tokenizers import AddedToken, Tokenizer, decoders, models, normalizers, pre_tokenizers  # noqa: E402

# -- random text -----------------------------------------------------------------

_FRAGMENTS = [
    "\r", "\n", "\r\n", "\n\r", " ", "  ", "    ", "\t", "\t\t ", " \n ", "\u00a0", "\u3000",
    "\u2028", "\u200b", "\ufeff", "\x00", "\x7f", "e\u0301", "n\u0303\u0323", "👍🏽", "👨‍👩‍👧",
    "🇺🇸", "日本語", "中文字", "한국어", "Ελληνικά", "кириллица", "عربي", "'s", "'LL", "123456",
    "3.14159", "<|endoftext|>x", "Ġ", "▁", "<0x41>", "ĊĠ", "\U0010ffff", "\ufffd",
]
_ANY = st.characters(exclude_categories=("Cs",))  # every plane, surrogates aside

TEXT = st.lists(
    st.one_of(
        st.text(_ANY, max_size=8),
        st.sampled_from(_FRAGMENTS),
        st.text(st.characters(min_codepoint=0x1F300, max_codepoint=0x1FAFF), min_size=1, max_size=4),
        st.text(st.characters(min_codepoint=0x4E00, max_codepoint=0x9FFF), min_size=1, max_size=4),
        st.text(st.characters(categories=("Mn", "Me")), min_size=1, max_size=3),
        st.text(st.characters(categories=("Cc", "Zs", "Zl", "Zp")), min_size=1, max_size=5),
        st.text(st.characters(min_codepoint=0x10000), min_size=1, max_size=4),
        st.text(st.sampled_from("abcdefXYZ .,;!?-_'\"(){}0123"), max_size=16),
    ),
    max_size=10,
).map("".join)

PROPERTY = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


# -- SmolLM2 ----------------------------------------------------------------------


def test_smollm2_sizes_and_special_tokens(smollm2_tokenizer, smollm2_vocab):
    v = smollm2_vocab
    assert len(v) == 49152 == len(smollm2_tokenizer)
    assert v.eos_token_ids == (2,)
    assert v.token_bytes(2) == b"<|im_end|>"
    assert v.token_bytes(1) == b"<|im_start|>"
    assert v.token_bytes(0) == b"<|endoftext|>"
    # ids 0..16 are the StarCoder-style control tokens; all but EOS are special.
    assert v.special_token_ids == frozenset(range(17)) - {2}
    mask = v.grammar_token_mask
    assert not mask[:17].any()
    assert mask[17:].all()
    assert v.token_bytes(17) == b"!"
    assert v.token_bytes(smollm2_tokenizer.convert_tokens_to_ids("Ġ")) == b" "
    assert v.token_bytes(smollm2_tokenizer.convert_tokens_to_ids("Ċ")) == b"\n"
    # Byte-level BPE is a bijection: no two regular tokens share their bytes.
    regular = [v.token_bytes(i) for i in np.flatnonzero(mask)]
    assert len(set(regular)) == len(regular)


def test_smollm2_every_token_matches_decode(smollm2_tokenizer, smollm2_vocab):
    backend = smollm2_tokenizer.backend_tokenizer
    ids, expected = [], []
    for i in np.flatnonzero(smollm2_vocab.grammar_token_mask).tolist():
        try:
            expected.append(smollm2_vocab.token_bytes(i).decode("utf-8"))
        except UnicodeDecodeError:
            continue  # part of a UTF-8 sequence: decode shows U+FFFD
        ids.append([i])
    assert len(ids) > 40000
    assert backend.decode_batch(ids, skip_special_tokens=False) == expected


def test_smollm2_several_eos(smollm2_tokenizer):
    v = Vocabulary.from_huggingface(smollm2_tokenizer, eos_token_ids=[0])
    assert v.eos_token_ids == (0, 2)
    assert 0 not in v.special_token_ids and 2 not in v.special_token_ids
    assert 1 in v.special_token_ids
    assert not v.grammar_token_mask[[0, 1, 2]].any()
    v2 = Vocabulary.from_huggingface(smollm2_tokenizer, eos_token_ids=2)
    assert v2.eos_token_ids == (2,)


def test_smollm2_padding(smollm2_tokenizer, smollm2_vocab):
    v = Vocabulary.from_huggingface(smollm2_tokenizer, vocab_size=49152 + 128)
    assert len(v) == 49280
    assert all(v.token_bytes(i) == b"" for i in range(49152, 49280))
    assert not v.grammar_token_mask[49152:].any()
    assert v.grammar_token_mask[:49152].tolist() == smollm2_vocab.grammar_token_mask.tolist()
    assert Vocabulary.from_huggingface(smollm2_tokenizer, vocab_size=49152) == smollm2_vocab


def _single_bytes(vocab: Vocabulary) -> set[int]:
    """The byte values that have a one-byte regular token."""
    return {
        vocab.token_bytes(i)[0]
        for i in np.flatnonzero(vocab.grammar_token_mask).tolist()
        if len(vocab.token_bytes(i)) == 1
    }


# SmolLM2's BPE was trained without the full byte alphabet: 21 byte values have
# no token at all, not even inside longer tokens. Its tokenizer silently drops
# them (no unk token), so characters U+40000..U+BFFFF (lead bytes F1, F2) and six
# C0 controls cannot be written by the model.
SMOLLM2_MISSING_BYTES = {0x04, 0x06, 0x13, 0x14, 0x16, 0x1D, 0xC0, 0xC1, 0xF1, 0xF2} | set(range(0xF5, 0x100))


def test_smollm2_missing_bytes(smollm2_tokenizer, smollm2_vocab):
    assert set(range(256)) - _single_bytes(smollm2_vocab) == SMOLLM2_MISSING_BYTES
    everywhere = set(b"".join(smollm2_vocab.tokens[17:]))
    assert everywhere.isdisjoint(SMOLLM2_MISSING_BYTES)
    ids = smollm2_tokenizer.encode("a\U00040000\x04b", add_special_tokens=False)
    assert smollm2_vocab.decode(ids) == b"a\x80\x80\x80b"


@PROPERTY
@given(text=TEXT)
def test_smollm2_encoding_bytes_are_text_bytes(smollm2_tokenizer, smollm2_vocab, text):
    ids = smollm2_tokenizer.encode(text, add_special_tokens=False)
    expected = bytes(b for b in text.encode("utf-8") if b not in SMOLLM2_MISSING_BYTES)
    assert b"".join(smollm2_vocab.token_bytes(i) for i in ids) == expected


# -- GPT-2 --------------------------------------------------------------------------


def test_gpt2_sizes_and_eos(gpt2_tokenizer, gpt2_vocab):
    v = gpt2_vocab
    assert len(v) == 50257
    assert v.eos_token_ids == (50256,)
    assert v.special_token_ids == frozenset()
    assert v.token_bytes(50256) == b"<|endoftext|>"
    assert int(v.grammar_token_mask.sum()) == 50256
    ids = gpt2_tokenizer.encode("Hello world", add_special_tokens=False).ids
    assert ids == [15496, 995]
    assert [v.token_bytes(i) for i in ids] == [b"Hello", b" world"]
    assert v.token_bytes(198) == b"\n"
    assert _single_bytes(v) == set(range(256))


def test_gpt2_every_token_matches_decode(gpt2_tokenizer, gpt2_vocab):
    ids, expected = [], []
    for i in range(50256):
        try:
            expected.append(gpt2_vocab.token_bytes(i).decode("utf-8"))
        except UnicodeDecodeError:
            continue
        ids.append([i])
    assert gpt2_tokenizer.decode_batch(ids) == expected


def test_gpt2_padding_and_too_small(gpt2_tokenizer, gpt2_vocab):
    v = Vocabulary.from_huggingface(gpt2_tokenizer, vocab_size=50304, eos_token_ids=50256)
    assert len(v) == 50304
    assert v.tokens[:50257] == gpt2_vocab.tokens
    assert not v.grammar_token_mask[50256:].any()
    assert v.decode([15496, 50300, 995, 50256]) == b"Hello world"
    with pytest.raises(VocabularyError, match=r"50000.*50257"):
        Vocabulary.from_huggingface(gpt2_tokenizer, vocab_size=50000, eos_token_ids=50256)


@PROPERTY
@given(text=TEXT)
def test_gpt2_encoding_bytes_are_text_bytes(gpt2_tokenizer, gpt2_vocab, text):
    ids = gpt2_tokenizer.encode(text, add_special_tokens=False).ids
    assert b"".join(gpt2_vocab.token_bytes(i) for i in ids) == text.encode("utf-8")


def _gpt2_copy(gpt2_tokenizer) -> Tokenizer:
    return Tokenizer.from_str(gpt2_tokenizer.to_str())


def test_added_non_special_tokens(gpt2_tokenizer):
    tok = _gpt2_copy(gpt2_tokenizer)
    tok.add_tokens(["hello world", "<tool_call>", "naïve café"])
    tok.add_special_tokens([AddedToken("<|im_start|>", special=True)])
    v = Vocabulary.from_huggingface(tok, eos_token_ids=50256)
    assert len(v) == 50261
    assert [v.token_bytes(i) for i in (50257, 50258, 50259)] == [
        b"hello world", b"<tool_call>", "naïve café".encode()
    ]
    assert v.grammar_token_mask[[50257, 50258, 50259]].all()
    assert v.special_token_ids == frozenset({50260})
    assert v.token_bytes(50260) == b"<|im_start|>"
    text = "say hello world, <tool_call> naïve café<|im_start|>"
    ids = tok.encode(text, add_special_tokens=False).ids
    assert {50257, 50258, 50259, 50260} <= set(ids)
    assert v.decode(ids) == text.replace("<|im_start|>", "").encode()
    assert v.decode(ids, skip_special=False) == text.encode()


# -- o200k ----------------------------------------------------------------------------


def test_o200k_sizes_eos_and_padding(o200k_vocab):
    v = o200k_vocab
    assert len(v) == 200019
    assert int(v.grammar_token_mask.sum()) == 199998
    assert v.grammar_token_mask[:199998].all()
    assert _single_bytes(v) == set(range(256))
    assert v.eos_token_ids == (199999,)
    assert v.special_token_ids == frozenset({200018})
    assert v.token_bytes(199999) == b"<|endoftext|>"
    assert v.token_bytes(200018) == b"<|endofprompt|>"
    padding = [199998] + list(range(200000, 200018))
    assert all(v.token_bytes(i) == b"" for i in padding)
    assert not v.grammar_token_mask[padding].any()


def test_o200k_matches_bpe_openai(o200k_vocab, o200k_encoding, o200k_encode):
    assert o200k_vocab.tokens[:199998] == o200k_encoding.token_byte_values()[:199998]
    ids = o200k_encode("Hello world <|endoftext|>")
    assert 199999 not in ids
    assert o200k_vocab.decode(ids) == b"Hello world <|endoftext|>"


def test_o200k_plain_file_and_vocab_size(o200k_path, o200k_vocab, tmp_path):
    plain = tmp_path / "o200k_base.tiktoken"
    plain.write_bytes(gzip.decompress(o200k_path.read_bytes()))
    v = Vocabulary.from_tiktoken(plain, 199999, {"<|endoftext|>": 199999, "<|endofprompt|>": 200018})
    assert v == o200k_vocab
    assert v.name == "o200k_base"
    big = Vocabulary.from_tiktoken(
        o200k_path, [199999, 200018], {"<|endoftext|>": 199999, "<|endofprompt|>": 200018},
        vocab_size=201088,
    )
    assert len(big) == 201088
    assert big.eos_token_ids == (199999, 200018)
    assert not big.grammar_token_mask[199998:].any()


@PROPERTY
@given(text=TEXT)
def test_o200k_encoding_bytes_are_text_bytes(o200k_vocab, o200k_encode, text):
    ids = o200k_encode(text)
    assert b"".join(o200k_vocab.token_bytes(i) for i in ids) == text.encode("utf-8")


# -- SentencePiece-style vocabularies, built locally ----------------------------------

_SP = "\u2581"
_WORDS = ["the", "hello", "world", "ab", "ba"]


def _byte_tokens(start: int) -> dict[str, int]:
    return {f"<0x{b:02X}>": start + b for b in range(256)}


@pytest.fixture(scope="module")
def llama_style():
    """BPE with byte fallback, a ``Prepend("▁") + Replace(" ", "▁")`` normalizer
    and a ``Replace/ByteFallback/Fuse/Strip`` decoder, as Llama 2 and Mistral."""
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update(_byte_tokens(3))
    for c in [_SP] + sorted(set("".join(_WORDS))):
        vocab[c] = len(vocab)
    merges = []
    for w in _WORDS:  # left-to-right merges of "▁word"
        cur = _SP
        for c in w:
            merges.append((cur, c))
            vocab.setdefault(cur + c, len(vocab))
            cur += c
    merges = list(dict.fromkeys(merges))
    tok = Tokenizer(models.BPE(vocab, merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend(_SP), normalizers.Replace(" ", _SP)])
    tok.decoder = decoders.Sequence(
        [decoders.Replace(_SP, " "), decoders.ByteFallback(), decoders.Fuse(), decoders.Strip(" ", 1, 0)]
    )
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<unk>", "<s>", "</s>")])
    return tok


@pytest.fixture(scope="module")
def unigram_metaspace():
    """A Unigram model with byte fallback, a ``Metaspace`` pre-tokenizer and a
    ``ByteFallback`` + ``Metaspace`` decoder (T5/ALBERT-style, plus ``<0xNN>``
    pieces)."""
    pieces = [("<unk>", 0.0), ("<pad>", 0.0), ("</s>", 0.0)]
    pieces += [(p, -30.0) for p in _byte_tokens(0)]
    pieces += [(c, -5.0) for c in [_SP] + sorted(set("".join(_WORDS)))]
    pieces += [(_SP + w, -2.0) for w in _WORDS] + [(w, -3.0) for w in _WORDS]
    tok = Tokenizer(models.Unigram(pieces, unk_id=0, byte_fallback=True))
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=_SP, prepend_scheme="always")
    tok.decoder = decoders.Sequence([decoders.ByteFallback(),
                                     decoders.Metaspace(replacement=_SP, prepend_scheme="always")])
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in ("<pad>", "</s>")])
    return tok


def test_byte_fallback_pieces_are_bytes_only_where_the_decoder_says_so(unigram_metaspace):
    # the same model with a Metaspace decoder alone decodes <0xC3> as that text:
    # so does Trellis (as bytes, é would be let through where the tokenizer
    # shows "<0xC3><0xA9>")
    tok = Tokenizer.from_str(unigram_metaspace.to_str())
    tok.decoder = decoders.Metaspace(replacement=_SP, prepend_scheme="always")
    v = Vocabulary.from_huggingface(tok, eos_token_ids=[2])
    enc = tok.encode("the ab\u00e9", add_special_tokens=False)
    assert "<0xC3>" in enc.tokens
    assert v.token_bytes(tok.token_to_id("<0xC3>")) == b"<0xC3>"
    assert v.decode(enc.ids).decode() == " " + tok.decode(enc.ids)  # the dummy prefix
    with pytest.raises(EmptyLanguageError):
        compile_regex("[a-z]*\u00e9", v)  # no token spells é in that decode


def test_tokenizer_shapes_read_as_the_tokenizer_decodes():
    # ids with a gap: the largest id + 1, not the count of entries
    gap = Tokenizer(models.BPE({"a": 0, "b": 1, "</s>": 2, "ab": 5}, [("a", "b")]))
    gap.add_special_tokens([AddedToken("</s>", special=True)])
    v = Vocabulary.from_huggingface(gap, eos_token_ids=2)
    assert len(v) == 6 and v.token_bytes(5) == b"ab" and gap.encode("ab").ids == [5]
    with pytest.raises(VocabularyError, match="smaller"):
        Vocabulary.from_huggingface(gap, eos_token_ids=2, vocab_size=4)
    # no decoder, whitespace dropped by the pre-tokenizer: no text to stand for
    words = Tokenizer(models.WordLevel({"[UNK]": 0, "hi": 1, "there": 2, "</s>": 3}, unk_token="[UNK]"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    with pytest.raises(VocabularyError, match="drops the text's whitespace"):
        Vocabulary.from_huggingface(words, eos_token_ids=3)


def test_normalized_added_token_is_read_normalized(llama_style):
    # `add_tokens` normalizes by default: the tokenizer keeps "▁<tool>" and
    # decodes it as " <tool>"
    tok = Tokenizer.from_str(llama_style.to_str())
    tok.add_tokens([AddedToken("<tool>", special=False, normalized=True)])
    i, a = tok.token_to_id("<tool>"), tok.token_to_id("a")
    v = Vocabulary.from_huggingface(tok, eos_token_ids=2)
    assert v.token_bytes(i) == b" <tool>" and tok.decode([a, i, a]) == "a <tool>a"


def test_python_tokenizers_are_checked_against_their_decode():
    transformers = pytest.importorskip("transformers")
    # ByT5's entries are chr(byte): read as text they would be wrong bytes
    with pytest.raises(VocabularyError, match="disagree with its own decode"):
        Vocabulary.from_huggingface(transformers.ByT5Tokenizer())
    canine = getattr(transformers, "CanineTokenizer", None)
    if canine is not None:  # lone surrogates among its entries
        with pytest.raises(VocabularyError, match="lone surrogate"):
            Vocabulary.from_huggingface(canine())


def test_sentencepiece_llama_style(llama_style):
    v = Vocabulary.from_huggingface(llama_style, eos_token_ids=2)
    assert len(v) == llama_style.get_vocab_size()
    assert v.eos_token_ids == (2,)
    assert v.special_token_ids == frozenset({0, 1})  # <unk> and <s>
    assert v.token_bytes(3 + 0x41) == b"A"
    assert v.token_bytes(3 + 0xFF) == b"\xff"
    assert v.token_bytes(llama_style.token_to_id(_SP)) == b" "
    assert v.token_bytes(llama_style.token_to_id(_SP + "hello")) == b" hello"
    assert v.grammar_token_mask[3:].all()
    enc = llama_style.encode("hello  world\nü", add_special_tokens=False)
    assert "<0x0A>" in enc.tokens and "<0xC3>" in enc.tokens
    # the normalizer prepends the dummy-prefix space
    assert v.decode(enc.ids) == " hello  world\nü".encode()


def test_sentencepiece_unigram_metaspace(unigram_metaspace):
    v = Vocabulary.from_huggingface(unigram_metaspace, eos_token_ids=[2])
    assert v.eos_token_ids == (2,)
    assert v.special_token_ids == frozenset({0, 1})  # <unk> (the model's unk_id) and <pad>
    assert v.token_bytes(3 + 0x20) == b" " == v.token_bytes(unigram_metaspace.token_to_id(_SP))
    assert v.token_bytes(unigram_metaspace.token_to_id(_SP + "the")) == b" the"
    enc = unigram_metaspace.encode("the ab\u00e9", add_special_tokens=False)
    assert v.decode(enc.ids) == " the ab\u00e9".encode()


# A literal "▁" in the text is indistinguishable from a space for SentencePiece.
_SP_TEXT = st.lists(
    st.one_of(
        st.sampled_from(_WORDS + [" ", "  ", "\n", "\r", "\t"]),
        st.text(st.characters(exclude_categories=("Cs",), exclude_characters=_SP), max_size=4),
    ),
    max_size=8,
).map("".join)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_SP_TEXT)
def test_sentencepiece_encoding_bytes(llama_style, unigram_metaspace, text):
    raw = text.encode()
    # The dummy prefix: the Prepend normalizer always adds a space to a non-empty
    # text; Metaspace(prepend_scheme="always") only when it does not start with one.
    llama = _sp_vocab(llama_style)
    ids = llama_style.encode(text, add_special_tokens=False).ids
    assert llama.decode(ids) == (b" " + raw if text else b"")
    unigram = _sp_vocab(unigram_metaspace)
    ids = unigram_metaspace.encode(text, add_special_tokens=False).ids
    assert unigram.decode(ids) == (b" " + raw if text and not text.startswith(" ") else raw)


_SP_VOCABS: dict[int, Vocabulary] = {}


def _sp_vocab(tok) -> Vocabulary:
    """The vocabulary of a module-scoped local tokenizer, built once."""
    if id(tok) not in _SP_VOCABS:
        _SP_VOCABS[id(tok)] = Vocabulary.from_huggingface(tok, eos_token_ids=2)
    return _SP_VOCABS[id(tok)]


def test_sentencepiece_through_transformers(llama_style):
    transformers = pytest.importorskip("transformers")
    tok = transformers.PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer.from_str(llama_style.to_str()),
        bos_token="<s>", eos_token="</s>", unk_token="<unk>",
    )
    v = Vocabulary.from_huggingface(tok, vocab_size=len(tok) + 5)
    assert v.eos_token_ids == (2,)
    assert v.special_token_ids == frozenset({0, 1})
    assert len(v) == len(tok) + 5
    assert v.tokens[: len(tok)] == _sp_vocab(llama_style).tokens


def test_full_json_fallback(monkeypatch, gpt2_tokenizer, llama_style, unigram_metaspace):
    """Without per-component JSON the whole ``to_str()`` is read, to the same end."""
    import constrain.vocab.vocabulary as vocabulary

    expected = [
        Vocabulary.from_huggingface(t, eos_token_ids=2)
        for t in (gpt2_tokenizer, llama_style, unigram_metaspace)
    ]

    def broken(obj):
        raise AttributeError("__getstate__")

    monkeypatch.setattr(vocabulary, "_component_json", broken)
    got = [
        Vocabulary.from_huggingface(t, eos_token_ids=2)
        for t in (gpt2_tokenizer, llama_style, unigram_metaspace)
    ]
    assert got == expected
    assert got[2].special_token_ids == frozenset({0, 1})


# -- plain-text and raw-bytes vocabularies ----------------------------------------------


def test_plain_text_vocabulary():
    """A BPE with no pre-tokenizer and no decoder: tokens are their own text."""
    chars = ["a", "b", " ", "é", "\n", "日", "<eos>"]
    vocab = {c: i for i, c in enumerate(chars)}
    merges = [("a", "b"), (" ", "a"), ("é", "\n")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab, merges))
    tok.add_special_tokens([AddedToken("<eos>", special=True)])
    v = Vocabulary.from_huggingface(tok, eos_token_ids=vocab["<eos>"])
    assert v.tokens == [c.encode() for c in vocab]
    assert v.eos_token_ids == (6,)
    text = "ab a日é\nb  a"
    ids = tok.encode(text).ids
    assert len(ids) < len(text)
    assert v.decode(ids) == text.encode()


def test_wordlevel_plain_text():
    tok = Tokenizer(models.WordLevel({"[UNK]": 0, "hi": 1, "there": 2, "</s>": 3}, unk_token="[UNK]"))
    v = Vocabulary.from_huggingface(tok, eos_token_ids=3)
    assert v.tokens == [b"[UNK]", b"hi", b"there", b"</s>"]
    assert v.special_token_ids == frozenset({0})  # the model's unk token matches no text


class _BytesTokenizer:
    """A tiktoken-backed tokenizer in the style of Qwen's first release:
    ``get_vocab()`` maps raw bytes to ids; special tokens are added str tokens."""

    eos_token_id = 4

    class _Added:
        def __init__(self, content, special):
            self.content, self.special = content, special

    def __init__(self):
        self._vocab = {b"a": 0, b"\xe6\x97": 1, b"\xa5": 2, b" hello": 3}
        self.added_tokens_decoder = {4: self._Added("<|endoftext|>", True), 5: self._Added("<|im_start|>", True)}

    def get_vocab(self):
        return dict(self._vocab, **{})

    def __len__(self):
        return 6


def test_raw_bytes_vocabulary():
    v = Vocabulary.from_huggingface(_BytesTokenizer(), eos_token_ids=[5, 4])
    assert v.tokens == [b"a", b"\xe6\x97", b"\xa5", b" hello", b"<|endoftext|>", b"<|im_start|>"]
    assert v.eos_token_ids == (4, 5)
    assert v.special_token_ids == frozenset()
    assert v.decode([3, 1, 2]) == " hello日".encode()


class _SlowByteLevel:
    """A slow byte-level tokenizer whose ``decode`` is given."""

    eos_token_id = 0

    def __init__(self, decode):
        self._vocab = {"<eos>": 0, "a": 1, "Ġhello": 2, "Ċ": 3, "Ã©": 4}
        self.added_tokens_decoder = {0: _BytesTokenizer._Added("<eos>", True)}
        self.decode = decode

    def get_vocab(self):
        return dict(self._vocab)


def test_slow_byte_level_and_verification():
    table = {"<eos>": "", "a": "a", "Ġhello": " hello", "Ċ": "\n", "Ã©": "é"}
    inv = {i: s for s, i in _SlowByteLevel(None)._vocab.items()}

    def good(ids, **kw):
        return "".join(table[inv[i]] for i in ids)

    v = Vocabulary.from_huggingface(_SlowByteLevel(good))
    assert v.tokens == [b"<eos>", b"a", b" hello", b"\n", "é".encode()]
    assert v.eos_token_ids == (0,)

    def bad(ids, **kw):
        return "".join(table[inv[i]].upper() for i in ids)

    with pytest.raises(VocabularyError, match="disagree with its own decode"):
        Vocabulary.from_huggingface(_SlowByteLevel(bad))
    assert Vocabulary.from_huggingface(_SlowByteLevel(bad), verify=False).tokens == v.tokens


# -- errors -----------------------------------------------------------------------------


def test_huggingface_errors(gpt2_tokenizer):
    with pytest.raises(VocabularyError, match="eos_token_ids"):
        Vocabulary.from_huggingface(gpt2_tokenizer)
    with pytest.raises(VocabularyError, match="outside the vocabulary of 50257"):
        Vocabulary.from_huggingface(gpt2_tokenizer, eos_token_ids=60000)
    with pytest.raises(VocabularyError, match="eos_token_ids"):
        Vocabulary.from_huggingface(gpt2_tokenizer, eos_token_ids="50256")
    with pytest.raises(VocabularyError, match="not a Hugging Face tokenizer"):
        Vocabulary.from_huggingface(object(), eos_token_ids=0)
    wp = Tokenizer(models.WordPiece({"[UNK]": 0, "a": 1, "##b": 2}, unk_token="[UNK]"))
    wp.decoder = decoders.WordPiece()
    with pytest.raises(VocabularyError, match="WordPiece"):
        Vocabulary.from_huggingface(wp, eos_token_ids=0)
    ctc = Tokenizer(models.BPE({"a": 0, "b": 1}, []))
    ctc.decoder = decoders.CTC()
    with pytest.raises(VocabularyError, match="CTC decoder is not supported"):
        Vocabulary.from_huggingface(ctc, eos_token_ids=0)
    assert issubclass(VocabularyError, ValueError)


def test_tiktoken_errors(tmp_path):
    good = tmp_path / "good.tiktoken"
    good.write_text("YQ== 0\nYg== 1\n\nIGFi 2\n")
    v = Vocabulary.from_tiktoken(good, 3, {"<eos>": 3, "<pad>": 5})
    assert v.tokens == [b"a", b"b", b" ab", b"<eos>", b"", b"<pad>"]
    assert v.special_token_ids == frozenset({5})
    assert v.name == "good"

    def fails(content: str, match: str, **kw):
        path = tmp_path / "bad.tiktoken"
        path.write_text(content)
        with pytest.raises(VocabularyError, match=match):
            Vocabulary.from_tiktoken(path, kw.pop("eos", 0), **kw)

    fails("YQ== 0\nnot-base64! 1\n", r"line 2")
    fails("YQ== 0\nYg==\n", r"line 2")
    fails("YQ== 0\nYg== x\n", r"line 2")
    fails("YQ== 0\nYg== 0\n", r"rank 0 appears twice")
    fails("YQ== 0\nYQ== 1\n", r"appears twice \(ranks 0 and 1\)")
    fails("", r"holds no tokens")
    fails("YQ== 0\nYg== 1\n", r"already the rank", special_tokens={"<eos>": 1})
    fails("YQ== 0\n", r"share id 1", special_tokens={"<a>": 1, "<b>": 1})
    fails("YQ== 0\nYg== 1\n", r"vocab_size 1 is smaller .* 2 token ids", vocab_size=1)
    fails("YQ== 0\n", r"outside the vocabulary", eos=7)
    with pytest.raises(VocabularyError, match="cannot read"):
        Vocabulary.from_tiktoken(tmp_path / "missing.tiktoken", 0)


# -- documentation -----------------------------------------------------------------------


def test_public_methods_have_docstrings():
    assert Vocabulary.__doc__
    for name, member in vars(Vocabulary).items():
        if name.startswith("_") and name not in ("__len__", "__repr__", "__eq__", "__hash__"):
            continue
        func = member.fget if isinstance(member, property) else getattr(member, "__func__", member)
        if callable(func) or isinstance(member, property):
            assert inspect.getdoc(func), f"Vocabulary.{name} has no docstring"


@pytest.mark.parametrize("ids", ["12", 1, [True], [1.0], [np.float32(1)]])
def test_token_id_arguments_are_ids(ids):
    """A string of digits was read as its characters' ids ("12": EOS 1 and 2),
    and a bool or a float as an id; each is a VocabularyError now (numpy
    integers stay ids)."""
    with pytest.raises(VocabularyError, match="ids must be|not an integer"):
        Vocabulary.from_tokens([b"a", b"b", b"c"], eos_token_ids=ids)
    with pytest.raises(VocabularyError, match="ids must be|not an integer"):
        Vocabulary.from_tokens([b"a", b"b", b"c"], eos_token_ids=[0], special_token_ids=ids)
    assert Vocabulary.from_tokens([b"a", b"b", b"c"], eos_token_ids=np.array([2])).eos_token_ids == (2,)
