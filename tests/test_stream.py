"""search.stream: pieces as tokens are accepted, whole characters, joined equal
to the final text."""

from __future__ import annotations

import pytest

import search

PROMPTS = [
    "Write one word in Japanese.", "Give me three emoji.", "Say hello in Greek.",
    "Write a word with an umlaut.", "Name a city in China, in Chinese.", "Write π and ∑.",
    "Say thanks in Korean.", "Write a French word with an accent.", "Draw a heart emoji.",
    "Write the euro sign.", "Say yes in Russian.", "Write a Hindi word.",
    "Spell café.", "Write a snowman character.", "Say good night in Arabic.",
    "Write ½ and ¾.", "Name a Spanish word with ñ.", "Write a Thai word.",
    "Give me a math symbol.", "Say cheers in German.",
]


def test_pieces_join_to_the_text_and_are_whole_characters(lm):
    multibyte = 0
    for i, prompt in enumerate(PROMPTS):
        pieces = []
        gen = search.stream(lm, prompt, max_new_tokens=8, temperature=0.8, seed=i)
        while True:
            try:
                pieces.append(next(gen))
            except StopIteration as done:
                result = done.value
                break
        assert "".join(pieces) == result.text, (prompt, pieces, result.text)
        assert all(isinstance(p, str) and p and "\ufffd" not in p for p in pieces[:-1])
        multibyte += any(len(p.encode()) > len(p) for p in pieces)
        if i < 3:  # the same call through generate gives the same output
            assert search.generate(lm, prompt, max_new_tokens=8, temperature=0.8, seed=i).text == result.text
    assert multibyte >= 5  # the prompts did produce characters split across tokens


def test_constrained_stream_and_early_stop(lm):
    import constrain

    phone = constrain.compile_regex(r"[0-9]{3}-[0-9]{4}", lm.vocab)
    gen = search.stream(lm, "Give me a phone number", constraint=phone)
    text = "".join(gen)
    assert len(text) == 8 and text[3] == "-"
    gen = search.stream(lm, "Count to one hundred.", max_new_tokens=200)
    first = next(gen)
    gen.close()  # stopping early stops the generation
    assert first
    with pytest.raises(ValueError):
        next(search.stream(lm, "x", temperature=-1))


def test_cli_stream(lm, capsys):
    from search.cli import app as cli

    assert cli.main(["generate", "-q", "--stream", "--regex", r"[0-9]{3}-[0-9]{4}",
                     "Give me a phone number"]) == 0
    out = capsys.readouterr().out
    assert len(out.strip()) == 8 and out.endswith("\n")
