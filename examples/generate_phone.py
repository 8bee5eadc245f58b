"""Constrained generation with the default model, three ways.

Run from the repository root after `bash .ci/setup`:

    .venv/bin/python examples/generate_phone.py

1. search.generate with a regex constraint (greedy, then sampled with a seed);
2. an unconstrained reply, for comparison;
3. transformers' own model.generate with constrain.engines.hf.LogitsProcessor and beam search.
"""

import time

import constrain
import search
from constrain.engines.hf import LogitsProcessor


def main():
    """Run the three demonstrations and print what they produce."""
    t = time.perf_counter()
    lm = search.load_default_model()  # converts the GGUF on first use (~20 s), then cached
    print(f"loaded {lm.name} in {time.perf_counter() - t:.1f} s")

    # `(?a)` makes \d mean [0-9] (Python's re is Unicode-aware by default).
    phone = constrain.compile_regex(r"(?a)\(\d{3}\) \d{3}-\d{4}", lm.vocab)
    r = search.generate(lm, "Give me a phone number", constraint=phone)
    print(f"greedy:    {r.text!r}  ({r.stop_reason}, {r.tokens_per_second:.1f} tokens/s)")
    for seed in (1, 2):
        r = search.generate(lm, "Give me a phone number", constraint=phone, temperature=1.0, seed=seed)
        print(f"seed {seed}:    {r.text!r}")

    free = search.generate(lm, "Give me a phone number", max_new_tokens=40)
    print(f"free:      {free.text!r}  ({free.stop_reason})")

    answer = constrain.compile_regex(r"(yes|no)", lm.vocab)
    ids = lm.apply_chat_template("Is the Pacific an ocean? Answer yes or no.")
    import torch

    input_ids = torch.tensor([ids])
    out = lm.model.generate(
        input_ids=input_ids,
        attention_mask=torch.ones_like(input_ids),
        logits_processor=[LogitsProcessor(answer)],
        num_beams=3,
        num_return_sequences=3,
        max_new_tokens=4,
        pad_token_id=lm.eos_token_ids[0],
    )
    # Beams are token sequences: one string may come back twice, spelled by
    # different tokens (e.g. "no" and "n" + "o").
    for row in out.tolist():
        gen = [t for t in row[len(ids):] if t not in lm.eos_token_ids]
        print(f"beam:      {lm.decode(gen)!r}  tokens {gen}")


if __name__ == "__main__":
    main()
