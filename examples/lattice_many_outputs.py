"""How many valid outputs does a lattice encode for the price of a beam search?

Run from the repository root:

    .venv/bin/python examples/lattice_many_outputs.py

With the default model (SmolLM2-135M-Instruct) and a regex for a small JSON object,
this runs a 16-beam search, counts its model calls, then builds a best-first lattice
(Xu, Jonnalagadda & Durrett 2022) with the same call budget and prints how many
distinct complete (hence valid) objects the lattice encodes, its best few and a few
uniform samples. (JSON Schema constraints come with issue 3, the grammar compiler;
until then the object's shape is written as a regex.)
"""

import json
import re
import time

import constrain
import search

PATTERN = r'\{"name": "[A-Z][a-z]{2,9}", "age": [1-9][0-9]?\}'
PROMPT = "Give me a JSON object describing a person, with a name and an age."
BEAM = 16
MAX_NEW_TOKENS = 24


def main():
    """Compare a 16-beam search with a lattice of the same model-call budget."""
    lm = search.load_default_model()
    person = constrain.compile_regex("(?a)" + PATTERN, lm.vocab)
    ids = lm.prompt_ids(PROMPT)  # the chat template: the same ids every driver makes of the text

    c0, t = lm.calls, time.perf_counter()
    beam = search.beam_search(lm, ids, constraint=person, beam_size=BEAM, max_new_tokens=MAX_NEW_TOKENS)
    budget = lm.calls - c0
    finished = [h for h in beam if h.finished]
    print(f"beam search (k={BEAM}, {MAX_NEW_TOKENS} tokens): {budget} calls, {time.perf_counter() - t:.1f} s, "
          f"{len(finished)} finished outputs")
    for h in finished[:3]:
        print(f"  {h.score:8.3f}  {h.text}")

    for n_merge in (4, 2):  # the default, then more aggressive recombination
        t = time.perf_counter()
        lat = search.lattice_search(lm, ids, constraint=person, budget=budget, max_new_tokens=MAX_NEW_TOKENS,
                                    merge_ngram=n_merge)
        n = lat.count_paths()
        print(f"\nlattice (same budget, merge_ngram={n_merge}): {lat.calls} calls, {time.perf_counter() - t:.1f} s, "
              f"{lat.num_nodes} nodes, {lat.num_edges} edges, {n} distinct complete paths")
        m = min(n, 2000)
        texts = {lat.text(p) for p in lat.sample(m, seed=0)}
        print(f"  {len(texts)} distinct texts among {m} distinct sampled paths "
              "(one text can be spelled by several token sequences)")
        print("  best by lattice score (* = through a merged node: score approximate):")
        for s, p in lat.k_best(5):
            text = lat.text(p)
            assert re.fullmatch(PATTERN, text) and json.loads(text)
            print(f"    {s:8.3f}{' ' if lat.is_exact(p) else '*'} {text}")
        print("  uniform samples:")
        for p in lat.sample(5, seed=1):
            print(f"    {lat.score(p):8.3f}{' ' if lat.is_exact(p) else '*'} {lat.text(p)}")

if __name__ == "__main__":
    main()
