"""Best-first lattice search: path counts, k-best and sampling against brute-force
enumeration of the DAG, exact scores on n-gram tiny LMs, the call budget, regex
constraints, recombination, DOT export, the default model.

A tiny n-gram LM has a vocabulary of 2-5 ids (one of them EOS) and a random row of
next-token log-probabilities hashed from the *last m tokens* of the prefix (the
whole prefix when shorter), m <= merge_ngram: so merged nodes have equal futures
and every lattice path's score is the model's, exactly.
"""

from __future__ import annotations

import math
import random
import re
from collections import Counter

import numpy as np
import pytest

import constrain
import search
from search.autoregressive.lattice import Lattice, lattice_search
from search.lm.protocol import CallableLM


class NgramLM:
    """Random rows keyed by the last ``m`` tokens of the prefix (memoised)."""

    def __init__(self, seed: int, V: int, eos: int, m: int, sigma: float = 2.0, eos_bias: float = 0.0):
        self.seed, self.V, self.eos, self.m, self.sigma, self.eos_bias = seed, V, eos, m, sigma, eos_bias
        self._rows: dict = {}

    def row(self, prefix) -> np.ndarray:
        key = tuple(prefix)[-self.m:] if self.m else ()
        r = self._rows.get(key)
        if r is None:
            rng = np.random.default_rng([self.seed, len(key)] + [t + 1 for t in key])
            x = self.sigma * rng.standard_normal(self.V)
            x[self.eos] += self.eos_bias
            x -= x.max()
            r = x - np.log(np.exp(x).sum())
            self._rows[key] = r
        return r

    def lm(self) -> CallableLM:
        return CallableLM(self.row, self.V, self.eos)


def brute_paths(lat: Lattice):
    """Every complete path by plain DFS over the graph (no DP), with the sum of
    edge log-probs."""
    g = lat.graph
    out = []

    def walk(u, path, s):
        if g.nodes[u]["kind"] == "end":
            out.append((s, path))
            return
        for _, v, d in g.out_edges(u, data=True):
            walk(v, path + (d["token"],), s + d["logprob"])

    walk(lat.start, (), 0.0)
    return out


def model_score(tiny: NgramLM, prompt, path) -> float:
    s = 0.0
    for i, t in enumerate(path):
        s += float(tiny.row(tuple(prompt) + tuple(path[:i]))[t])
    return s


def _cases(n, seed=0):
    rng = random.Random(seed)
    for _ in range(n):
        V = rng.randint(2, 5)
        m = rng.randint(0, 3)
        n_merge = rng.choice([None, max(m, 1), 3, 4])
        if n_merge is not None and n_merge < m:
            n_merge = m
        tiny = NgramLM(rng.getrandbits(32), V, rng.randrange(V), m, rng.choice([0.5, 2.0, 4.0]),
                       rng.choice([0.0, 1.0]))
        prompt = tuple(rng.randrange(V) for _ in range(rng.randint(0, 3)))
        yield tiny, prompt, dict(budget=rng.randint(0, 40), merge_ngram=n_merge,
                                 max_new_tokens=rng.choice([None, 3, 6, 10]),
                                 rollout=rng.choice(["greedy", "greedy", "none"]),
                                 top_k=rng.choice([None, 1, 2, 3]))


def test_counts_kbest_scores_budget_on_300_tiny_lms():
    n_merged = n_texts = 0
    for tiny, prompt, kw in _cases(300):
        lm = tiny.lm()
        lat = lattice_search(lm, prompt, **kw)
        assert lm.calls <= kw["budget"] and lat.calls == lm.calls
        import networkx as nx

        assert nx.is_directed_acyclic_graph(lat.graph)
        paths = brute_paths(lat)
        # counting by DP equals enumeration; paths are distinct token tuples
        assert lat.count_paths() == len(paths)
        assert len({p for _, p in paths}) == len(paths)
        assert sorted(lat.paths()) == sorted(p for _, p in paths)
        # k_best equals sorting every enumerated path
        ranked = sorted(paths, key=lambda x: (-x[0], x[1]))
        for k in (1, 3, len(paths) + 2):
            got = lat.k_best(k, distinct=False)
            assert [p for _, p in got] == [p for _, p in ranked[:k]]
            assert [s for s, _ in got] == pytest.approx([s for s, _ in ranked[:k]], abs=1e-12)
        # by default, the best path of each of the k best texts: here ids 2j and
        # 2j + 1 spell the same letter, so one text has many tokenizations
        assert lat.decode is None and lat.k_best(3) == lat.k_best(3, distinct=False)
        lat.decode = lambda ids: "".join(chr(97 + t // 2) for t in ids)
        by_text = {}
        for sp in ranked:
            by_text.setdefault(lat.text(sp[1]), sp)
        n_texts += len(by_text) < len(paths)
        for k in (1, 3, len(paths) + 2):
            assert lat.k_best(k) == list(by_text.values())[:k]
        # every score is the model's (n-gram LM, order <= merge_ngram)
        for s, p in paths:
            assert lat.is_complete(p) and p[-1] == tiny.eos and tiny.eos not in p[:-1]
            assert lat.score(p) == s
            assert lat.score(p) == pytest.approx(model_score(tiny, prompt, p), abs=1e-9)
        n_merged += sum(d["merge"] for _, _, d in lat.graph.edges(data=True))
    assert n_merged > 50
    assert n_texts > 20  # lattices where tokenizations of one text compete


def test_exactness_flag_and_rescore_on_a_non_markov_lm():
    # rows depend on the whole prefix: merged paths are approximations, flagged
    full = NgramLM(11, 4, 0, m=10**6)
    lm = full.lm()
    lat = lattice_search(lm, (1, 2), budget=60, merge_ngram=1, max_new_tokens=8, top_k=None)
    paths = list(lat.paths())
    assert any(not lat.is_exact(p) for p in paths)
    for p in paths:
        true = model_score(full, (1, 2), p)
        assert lat.rescore(p) == pytest.approx(true, abs=1e-9)
        if lat.is_exact(p):
            assert lat.score(p) == pytest.approx(true, abs=1e-9)


def test_sampling_uniform_and_by_score():
    tiny = NgramLM(5, 4, 3, m=1, sigma=1.0, eos_bias=0.5)
    lat = lattice_search(tiny.lm(), (), budget=30, merge_ngram=2, max_new_tokens=6, top_k=None)
    total = lat.count_paths()
    assert total >= 20
    every = set(lat.paths())
    d = lat.sample(10, seed=1)
    assert len(d) == len(set(d)) == 10 and set(d) <= every
    assert lat.sample(10, seed=1) == d  # reproducible
    assert set(lat.sample(total + 5, seed=2)) == every  # distinct draws exhaust the lattice
    # uniform: the first token's frequency follows path counts; by score: exp(score)
    small = lattice_search(tiny.lm(), (), budget=8, merge_ngram=2, max_new_tokens=3, top_k=None)
    allp = list(small.paths())
    draws = 4000
    u = Counter(small.sample(draws, seed=3, distinct=False))
    for p in allp:
        assert abs(u[p] / draws - 1 / len(allp)) < 0.05
    z = sum(math.exp(small.score(p)) for p in allp)
    s = Counter(small.sample(draws, seed=4, method="score", distinct=False))
    for p in allp:
        assert abs(s[p] / draws - math.exp(small.score(p)) / z) < 0.05
    with pytest.raises(ValueError):
        small.sample(1, method="beam")


def test_recombination_merges_on_repeated_ngrams():
    # a bigram LM over 3 ids: futures repeat, so merging on 2 tokens shrinks the lattice
    tiny = NgramLM(7, 3, 2, m=1, sigma=0.5, eos_bias=-1.0)
    tree = lattice_search(tiny.lm(), (), budget=40, merge_ngram=None, max_new_tokens=12, top_k=None)
    lat = lattice_search(tiny.lm(), (), budget=40, merge_ngram=2, max_new_tokens=12, top_k=None)
    assert tree.graph.number_of_nodes() == sum(1 for _ in tree.graph)  # a tree: nodes = edges + 1
    assert tree.num_edges == tree.num_nodes - 1
    assert any(d["merge"] for _, _, d in lat.graph.edges(data=True))
    # the merged lattice has fewer nodes than the tree of its own paths' prefixes
    prefixes = {p[:i] for p in lat.paths() for i in range(len(p) + 1)}
    assert lat.num_nodes < len(prefixes)
    assert lat.count_paths() > tree.count_paths()


def test_no_cycles_on_a_repeating_lm():
    # the LM always prefers token 0: "0 0 0 0 0" would merge into "0 0 0 0"
    row = np.log(np.array([0.7, 0.2, 0.1]))
    lm = CallableLM(lambda p: row, 3, 2)
    import networkx as nx

    lat = lattice_search(lm, (), budget=25, merge_ngram=2, max_new_tokens=10, top_k=None)
    assert nx.is_directed_acyclic_graph(lat.graph)
    assert lat.count_paths() == len(brute_paths(lat))


@pytest.fixture(scope="module")
def regex_vocab():
    tokens = [b"a", b"b", b"<eos>", b"c", b"ab"]
    return constrain.Vocabulary.from_tokens(tokens, [2], name="tiny-lattice")


@pytest.mark.parametrize("pattern", [r"(ab|c)*", r"a+b?c*", r"[abc]{1,4}", r"(a|b)*c", r"(aa|b)+c?"])
def test_regex_constraint_every_path_matches(regex_vocab, pattern):
    c = constrain.compile_regex(pattern, regex_vocab)
    rng = random.Random(pattern)
    toks = {0: "a", 1: "b", 3: "c", 4: "ab"}
    for _ in range(8):
        tiny = NgramLM(rng.getrandbits(32), 5, 2, m=rng.randint(0, 2), sigma=2.0)
        lm = tiny.lm()
        budget = rng.randint(1, 30)
        lat = lattice_search(lm, (), budget=budget, merge_ngram=2, constraint=c, max_new_tokens=6, top_k=None)
        assert lm.calls <= budget
        paths = brute_paths(lat)
        assert lat.count_paths() == len(paths)
        for s, p in paths:
            text = "".join(toks[t] for t in p[:-1])
            assert re.fullmatch(pattern, text), (pattern, p)
            assert c.accepts_tokens(p)
            assert s == pytest.approx(model_score(tiny, (), p), abs=1e-9)


def test_dot_export():
    tiny = NgramLM(3, 4, 0, m=1)
    lat = lattice_search(tiny.lm(), (), budget=15, merge_ngram=2, max_new_tokens=5, top_k=None)
    dot = lat.to_dot()
    assert dot.startswith("digraph lattice {") and dot.rstrip().endswith("}")
    node_lines = [ln for ln in dot.splitlines() if re.fullmatch(r"\s*n\d+ \[.*\];", ln)]
    edge_lines = [ln for ln in dot.splitlines() if "->" in ln]
    assert len(node_lines) == lat.num_nodes and len(edge_lines) == lat.num_edges
    assert "dashed" in dot  # merge edges


def test_argument_checks():
    lm = NgramLM(1, 3, 2, 1).lm()
    for kw in (dict(budget=-1), dict(budget=1.5), dict(budget=3, rollout="beam"), dict(budget=3, merge_ngram=-1),
               dict(budget=3, top_k=0)):
        with pytest.raises(ValueError):
            lattice_search(lm, (), **kw)
    lat = lattice_search(lm, (), budget=0)
    assert lat.count_paths() == 0 and lat.k_best(3) == [] and lat.sample(3, seed=0) == [] and lm.calls == 0
    assert search.lattice_search is lattice_search and search.Lattice is Lattice
    with pytest.warns(DeprecationWarning, match="write prompt= for prompt_ids="):
        old = lattice_search(lm, prompt_ids=(1,), budget=6)
    assert sorted(old.paths()) == sorted(lattice_search(lm, (1,), budget=6).paths())
    with pytest.raises(TypeError, match="prompt_ids"):  # a text prompt needs the model's prompt_ids
        lattice_search(lm, "a text", budget=3)


def test_default_model_small_budget(default_lm):
    lm = default_lm
    digits = constrain.compile_regex(r"(?a)[0-9]{1,3}", lm.vocab)
    ids = lm.apply_chat_template("Pick a number between 1 and 100.")
    c0 = lm.calls
    lat = lattice_search(lm, ids, budget=20, constraint=digits, max_new_tokens=4)
    assert lm.calls - c0 <= 20
    paths = list(lat.paths())
    assert len(paths) >= 2 and lat.count_paths() == len(paths)
    for p in paths:
        assert re.fullmatch(r"[0-9]{1,3}", lat.text(p))
        # outputs of <= 4 tokens whose 4-gram keys include the prompt's tail never
        # merge here, so every path is exact and recomputes with the model
        # (float32 logits); a path through a merge would be an approximation by
        # design (see search/autoregressive/lattice.py and test_exactness_flag_and_rescore...)
        assert lat.is_exact(p)
        assert lat.rescore(p) == pytest.approx(lat.score(p), abs=1e-4)
    best = lat.k_best(3)
    assert best[0][0] >= best[-1][0]
    by_text = lattice_search(lm, "Pick a number between 1 and 100.", budget=20, constraint=digits, max_new_tokens=4)
    assert sorted(by_text.paths()) == sorted(paths) and by_text.prompt_ids == tuple(ids)


def test_progress_lines_on_stderr(capsys):
    tiny = NgramLM(5, 4, 3, m=1, sigma=1.0, eos_bias=0.5)
    quiet = lattice_search(tiny.lm(), (), budget=30, merge_ngram=2, max_new_tokens=6, top_k=None)
    assert capsys.readouterr().err == ""
    loud = lattice_search(tiny.lm(), (), budget=30, merge_ngram=2, max_new_tokens=6, top_k=None,
                          progress=True)
    lines = capsys.readouterr().err.splitlines()
    assert 5 <= len(lines) <= 10 and all(line.startswith("lattice: ") for line in lines)
    assert lines[-1].startswith(f"lattice: {loud.calls}/30 calls")
    assert sorted(loud.paths()) == sorted(quiet.paths())  # reporting changes nothing
