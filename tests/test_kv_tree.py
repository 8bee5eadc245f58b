"""The shared-prefix KV cache of ``TransformersLM``: the tree's invariants, and
``logits`` equal to a plain forward pass over each whole prefix, whatever the
batch, the cache contents and the byte budget."""

from __future__ import annotations

import threading

import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

from search.lm.kv_tree import KVPrefixTree  # noqa: E402
from search.lm.transformers import TransformersLM  # noqa: E402

V = 40


@pytest.fixture(scope="module")
def model():
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


class _Tok:
    eos_token_id = 0
    chat_template = None


def make_lm(model, **kw) -> TransformersLM:
    return TransformersLM(model, _Tok(), eos_token_ids=[0], **kw)


def direct(model, prefix) -> np.ndarray:
    with torch.inference_mode():
        return model(input_ids=torch.tensor([list(prefix)])).logits[0, -1].float().numpy()


def check_tree(tree: KVPrefixTree) -> None:
    """Byte count, budget, and recency: every node is more recent than its children."""
    order = list(tree._order)
    rank = {node: i for i, node in enumerate(order)}
    total = 0
    stack = [tree.root]
    seen = 0
    while stack:
        node = stack.pop()
        for first, child in node.children.items():
            assert child.parent is node and child.tokens[0] == first
            assert child.depth == node.depth + len(child.tokens)
            assert child.kv.shape[3] == len(child.tokens)
            if node is not tree.root:
                assert rank[node] > rank[child]
            stack.append(child)
        if node is not tree.root:
            seen += 1
            total += node.kv.element_size() * node.kv.nelement()
            if node.logits is not None:
                assert not node.children
                total += node.logits.element_size() * node.logits.nelement()
    assert seen == len(order)
    assert total == tree.nbytes
    assert tree.nbytes <= tree.budget


def random_prefixes(rng, n, base_len=12):
    out = [tuple(int(t) for t in rng.integers(1, V, base_len))]
    while len(out) < n:
        base = out[int(rng.integers(len(out)))]
        cut = int(rng.integers(1, len(base) + 1))
        out.append(base[:cut] + tuple(int(t) for t in rng.integers(1, V, int(rng.integers(1, 5)))))
    return out


@pytest.mark.parametrize("budget", [1 << 30, 40_000, 3_000])
def test_logits_equal_a_plain_forward_pass(model, budget):
    lm = make_lm(model, kv_cache_bytes=budget, max_batch_rows=5)
    rng = np.random.default_rng(budget)
    calls = 0
    for _ in range(6):
        batch = random_prefixes(rng, int(rng.integers(1, 12)))
        batch += batch[: int(rng.integers(0, 3))]  # repeats
        rng.shuffle(batch)
        got = lm.logits(batch)
        calls += len(batch)
        want = np.stack([direct(model, p) for p in batch])
        np.testing.assert_allclose(got, want, atol=2e-5, rtol=1e-4)
        assert lm.calls == calls
        check_tree(lm.kv_tree)
    assert lm.kv_tree.peak_nbytes <= budget


def test_work_is_shared(model):
    lm = make_lm(model)
    prompt = tuple(range(1, 21))
    # many continuations of a prompt the tree does not hold: the prompt is run once
    kids = [prompt + (t,) for t in range(1, 11)]
    lm.logits(kids)
    assert lm.tokens_computed == 20 + 10
    # a child of every cached prefix costs one token, all in one forward pass
    passes, tok = lm.forward_passes, lm.tokens_computed
    lm.logits([k + (5,) for k in kids])
    assert (lm.forward_passes - passes, lm.tokens_computed - tok) == (1, 10)
    # the prefixes along one path ride on the longest one's row
    tok = lm.tokens_computed
    path = kids[0] + (5, 6, 7, 8)
    got = lm.logits([path[:i] for i in range(19, len(path) + 1)])
    np.testing.assert_allclose(got[-1], direct(model, path), atol=2e-5, rtol=1e-4)
    np.testing.assert_allclose(got[0], direct(model, path[:19]), atol=2e-5, rtol=1e-4)
    assert lm.tokens_computed - tok == len(path) - 18
    # a prefix asked again is answered from its kept logits
    tok = lm.tokens_computed
    lm.logits([path])
    assert lm.tokens_computed == tok and lm.calls == 10 + 10 + 7 + 1
    # a prefix that ends inside a segment costs its last token
    lm.logits([path[:-2]])
    assert lm.tokens_computed == tok + 1
    check_tree(lm.kv_tree)


def test_budget_bounds_the_tree_and_evicts_leaves(model):
    lm = make_lm(model, kv_cache_bytes=1 << 30)
    prompt = tuple(range(1, 31))
    lm.logits([prompt])
    per_token = lm.kv_tree.root.children[1].kv.nbytes // len(prompt)
    lm.kv_cache_bytes = lm.kv_tree.nbytes + 6 * per_token + 4 * V * 4
    hyps = [prompt]
    for step in range(8):  # a breadth-first beam of 3 over a growing tree
        kids = [h + (t,) for h in hyps for t in (3, 4, 5)]
        rows = lm.logits(kids)
        hyps = [kids[i] for i in np.argsort(-rows[:, 7])[:3]]
        check_tree(lm.kv_tree)
    assert lm.kv_tree.evictions > 0
    # the prompt, older than its leaves but their ancestor, survives
    path, n = lm.kv_tree.match(prompt)
    assert n == len(prompt)


def test_tree_split_and_match():
    tree = KVPrefixTree(1 << 20)

    def kv(n, fill):
        return torch.full((2, 2, 1, n, 3), float(fill))

    tree.insert((1, 2, 3, 4), kv(4, 1), 0, logits=torch.zeros(5))
    tree.insert((1, 2, 9), kv(1, 2), 2)  # splits (1, 2, 3, 4) after two positions
    path, n = tree.match((1, 2, 3, 7))
    assert n == 3 and [len(node.tokens) for node, _ in path] == [2, 2] and path[-1][1] == 1
    out = torch.zeros((2, 2, 1, 1, 5, 3))
    KVPrefixTree.gather(KVPrefixTree.cut(path, 3), out, 0, 5)
    assert out[0, 0, 0, 0, :, 0].tolist() == [0, 0, 1, 1, 1]
    assert tree.cached_logits((1, 2, 3, 4)) is not None and tree.cached_logits((1, 2)) is None
    check_tree(tree)
    tree.budget = 0
    tree.evict()
    assert len(tree) == 0 and tree.nbytes == 0


def test_threads_share_one_model(model):
    lm = make_lm(model, kv_cache_bytes=20_000)
    rng = np.random.default_rng(7)
    batches = [random_prefixes(rng, 6) for _ in range(16)]
    want = [np.stack([direct(model, p) for p in b]) for b in batches]
    errors = []

    def work(i):
        try:
            for j in range(i, len(batches), 4):
                np.testing.assert_allclose(lm.logits(batches[j]), want[j], atol=2e-5, rtol=1e-4)
        except Exception as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[0]
    check_tree(lm.kv_tree)
    assert lm.calls == sum(len(b) for b in batches)


def test_counters_add_up_across_threads(model):
    # forward_batch (generate's path) runs outside the tree's lock
    lm = make_lm(model)
    threads = [threading.Thread(target=lambda: [lm.forward_batch([[1, 2, 3], [4, 5, 6]]) for _ in range(25)])
               for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert (lm.calls, lm.forward_passes, lm.tokens_computed) == (200, 100, 600)


def test_empty_prefix_is_refused(model):
    lm = make_lm(model)
    with pytest.raises(ValueError):
        lm.logits([(1, 2), ()])
    assert lm.logits([]).shape == (0, V)


def test_open_streams_continue_the_tree(model):
    lm = make_lm(model)
    head = tuple(range(1, 16))
    lm.logits([head[:-1]])
    tok = lm.tokens_computed
    streams, rows = lm.open_streams(head, 3)
    assert lm.tokens_computed - tok == 1  # the cached start is not run again
    want = torch.log_softmax(torch.tensor(direct(model, head), dtype=torch.float64), -1).numpy()
    np.testing.assert_allclose(rows[0], want, atol=1e-4)
    nxt = streams.advance([0, 2], [5, 6])
    for row, t in zip(nxt, (5, 6)):
        want = torch.log_softmax(torch.tensor(direct(model, head + (t,)), dtype=torch.float64), -1).numpy()
        np.testing.assert_allclose(row, want, atol=1e-4)
    # the head is in the tree now: its children cost one token
    tok = lm.tokens_computed
    lm.logits([head + (9,)])
    assert lm.tokens_computed - tok == 1
    check_tree(lm.kv_tree)
