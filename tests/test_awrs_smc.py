"""``search.awrs_step`` / ``search.AWRS`` and ``search.smc`` on tiny models.

* AWRS proper weighting: ``E[w * 1{x = a}] = p(a) * 1{a allowed}``, exactly (by
  averaging over every draw order of a tiny vocabulary) and by 10,000 draws.
* SMC: ``exp(log_z)`` is unbiased for the mass of complete valid strings (mean over
  200 seeds within 3 standard errors of brute force), for every resampling scheme,
  with and without a critic; the weighted particles approach the model restricted
  to valid strings, unlike token-by-token masking.
* AWRS makes a handful of constraint checks per token when model and constraint agree.
"""

from __future__ import annotations

import functools
import itertools
import math

import numpy as np
import pytest

import search
from constrain import Vocabulary, compile_regex
from search.autoregressive.awrs import _walk

LETTERS = "abcde"


# -- tiny models, vocabularies and brute force -----------------------------------------


def letters_vocab(n_letters: int) -> Vocabulary:
    """One-character tokens ``a, b, ...`` and a final EOS id."""
    toks = [c.encode() for c in LETTERS[:n_letters]] + [b"<eos>"]
    return Vocabulary.from_tokens(toks, eos_token_ids=[n_letters])


def log_softmax(x: np.ndarray) -> np.ndarray:
    x = np.asarray(x, dtype=np.float64)
    m = x.max()
    return x - (m + np.log(np.exp(x - m).sum()))


def tiny_table(seed: int, vocab_size: int, max_len: int, scale: float = 1.5, overrides=None):
    """``row(prefix)``: a random next-token distribution seeded by the prefix; EOS is
    forced after ``max_len`` tokens. ``overrides`` maps prefixes to probabilities."""
    eos = vocab_size - 1
    overrides = overrides or {}

    @functools.lru_cache(maxsize=None)
    def row(prefix: tuple[int, ...]) -> np.ndarray:
        if len(prefix) >= max_len:
            r = np.full(vocab_size, -np.inf)
            r[eos] = 0.0
            return r
        if prefix in overrides:
            with np.errstate(divide="ignore"):
                return log_softmax(np.log(np.asarray(overrides[prefix], dtype=np.float64)))
        rng = np.random.default_rng([seed, len(prefix), *prefix])
        return log_softmax(rng.normal(size=vocab_size) * scale)

    return row


def tiny_lm(row) -> search.CallableLM:
    """The LM protocol around a table (the vocabulary size is read off one row)."""
    v = row(()).shape[0]
    return search.CallableLM(lambda p: row(tuple(p)), vocab_size=v, eos_token_id=v - 1)


def brute_force(row, constraint, eos: int):
    """Every complete valid string (EOS included) with its model probability, and the
    distribution of token-by-token masked sampling (renormalised over its successes)."""
    exact: dict[tuple, float] = {}
    local: dict[tuple, float] = {}

    def rec(prefix, state, lp, lq):
        r = row(prefix)
        allowed = []
        for t in range(r.shape[0]):
            if r[t] == -np.inf:
                continue
            if t == eos:
                if constraint.is_accepting(state):
                    allowed.append((t, None))
            else:
                ns = constraint.advance(state, t)
                if ns is not None:
                    allowed.append((t, ns))
        if not allowed:
            return
        la = np.logaddexp.reduce([r[t] for t, _ in allowed])
        for t, ns in allowed:
            if t == eos:
                exact[prefix + (t,)] = math.exp(lp + r[t])
                local[prefix + (t,)] = math.exp(lq + r[t] - la)
            else:
                rec(prefix + (t,), ns, lp + r[t], lq + r[t] - la)

    rec((), constraint.initial_state(), 0.0, 0.0)
    z = sum(exact.values())
    zl = sum(local.values())
    return z, {k: v / z for k, v in exact.items()}, {k: v / zl for k, v in local.items()}


def tv(p: dict, q: dict) -> float:
    """Total-variation distance between two finite distributions given as dicts."""
    return 0.5 * sum(abs(p.get(k, 0.0) - q.get(k, 0.0)) for k in set(p) | set(q))


# -- AWRS: proper weighting ------------------------------------------------------------


class _FixedOrder:
    """A draw order given in full (stands in for the Gumbel order of ``awrs_step``)."""

    def __init__(self, order):
        self.order = list(order)

    def get(self, i):
        return self.order[i] if i < len(self.order) else None


def _checker(constraint, state, eos):
    def check(t):
        if t == eos:
            return state if constraint.is_accepting(state) else None
        return constraint.advance(state, t)

    return check


def _orders(p: np.ndarray):
    """Every order of the tokens of positive probability with its probability under
    sampling without replacement (Plackett-Luce)."""
    support = [t for t in range(p.shape[0]) if p[t] > 0]
    for perm in itertools.permutations(support):
        pr, left = 1.0, 1.0
        for t in perm:
            pr *= p[t] / left
            left -= p[t]
        yield perm, pr


AWRS_CASES = [  # (regex, letters, table seed, tokens to advance first)
    ("a(b|c)*d", 4, 1, ""),
    ("a(b|c)*d", 4, 2, "ab"),
    ("[ab]*c?", 4, 3, "a"),  # accepting: EOS allowed
    ("(ab|c)+e?", 5, 4, "c"),
    ("[abcd]+", 5, 5, "d"),  # everything but one letter allowed
    ("e", 5, 6, ""),  # a single allowed token
]


def _case_row_state(pattern, n_letters, seed, advance):
    vocab = letters_vocab(n_letters)
    c = compile_regex(pattern, vocab)
    s = c.initial_state()
    for ch in advance:
        s = c.advance(s, LETTERS.index(ch))
    row = tiny_table(seed, n_letters + 1, 10)(tuple(LETTERS.index(ch) for ch in advance))
    eos = n_letters
    allowed = np.array([_checker(c, s, eos)(t) is not None for t in range(n_letters + 1)])
    return c, s, row, eos, allowed


@pytest.mark.parametrize("pattern,n_letters,seed,advance", AWRS_CASES)
def test_awrs_weight_exact(pattern, n_letters, seed, advance):
    """Averaged over every draw order exactly, ``E[w 1{x=a}] = p(a) 1{a allowed}``;
    the formula ``(1 - rejected mass) / (rejections + 1)`` is not unbiased."""
    c, s, row, eos, allowed = _case_row_state(pattern, n_letters, seed, advance)
    p = np.exp(row)
    check = _checker(c, s, eos)
    mean = np.zeros_like(p)
    naive = np.zeros_like(p)
    for perm, pr in _orders(p):
        t, _, log_w, checks, rej = _walk(row, _FixedOrder(perm), check)
        assert t is not None and allowed[t]
        assert checks <= rej + 2
        mean[t] += pr * math.exp(log_w)
        rho = sum(p[u] for u in perm[:rej])
        naive[t] += pr * (1 - rho) / (rej + 1)
    np.testing.assert_allclose(mean, p * allowed, atol=1e-12)
    if allowed.sum() < len(p) - 1 and allowed.sum() > 1:
        assert np.abs(naive - p * allowed).max() > 1e-3


@pytest.mark.parametrize("pattern,n_letters,seed,advance", AWRS_CASES)
def test_awrs_weight_monte_carlo(pattern, n_letters, seed, advance):
    """Over 10,000 draws, the mean of ``w 1{x=a}`` is within 0.02 of ``p(a) 1{a allowed}``
    for every token ``a``, and the draws follow the restricted distribution."""
    c, s, row, eos, allowed = _case_row_state(pattern, n_letters, seed, advance)
    sampler = search.AWRS(None, c, rng=seed)
    n = 10_000
    acc = np.zeros(row.shape[0])
    counts = np.zeros(row.shape[0])
    for _ in range(n):
        st = sampler.step(row, s)
        acc[st.token] += st.weight
        counts[st.token] += 1
    p = np.exp(row)
    target = p * allowed
    assert np.abs(acc / n - target).max() < 0.02, (acc / n, target)
    assert np.abs(counts / n - target / target.sum()).max() < 0.02
    assert sampler.steps == n and sampler.checks <= n * (row.shape[0])


def test_awrs_nothing_allowed_and_terminated():
    vocab = letters_vocab(3)
    c = compile_regex("ab", vocab)
    s = c.advance(c.initial_state(), 0)  # after 'a' only 'b' is allowed
    row = np.array([math.log(0.5), -np.inf, math.log(0.3), math.log(0.2)])  # 'b' impossible
    st = search.awrs_step(row, c, s, np.random.default_rng(0))
    assert st.token is None and st.weight == 0.0 and st.log_weight == -math.inf and st.state == s
    assert st.checks == 3  # every possible token was checked once
    done = c.advance(c.advance(s, 1), 3)
    assert c.is_terminated(done)
    st = search.awrs_step(np.log(np.full(4, 0.25)), c, done, np.random.default_rng(0))
    assert st.token is None and st.weight == 0.0


def test_awrs_eos_only_when_accepting():
    vocab = letters_vocab(2)
    c = compile_regex("a+", vocab)
    row = np.log([0.1, 0.1, 0.8])  # the model wants EOS
    rng = np.random.default_rng(1)
    first = {search.awrs_step(row, c, c.initial_state(), rng).token for _ in range(200)}
    assert first == {0}
    s = c.advance(c.initial_state(), 0)
    toks = [search.awrs_step(row, c, s, rng) for _ in range(300)]
    assert {t.token for t in toks} == {0, 2}
    assert all(c.is_terminated(t.state) for t in toks if t.token == 2)


def test_awrs_unnormalised_row_scales_weight():
    vocab = letters_vocab(2)
    c = compile_regex("a", vocab)
    row = np.log([0.2, 0.6, 0.2]) + math.log(0.5)  # total mass 0.5
    st = search.awrs_step(row, c, c.initial_state(), np.random.default_rng(0))
    # the only allowed token: the weight is its (unnormalised) mass whatever the order
    assert st.token == 0 and st.weight == pytest.approx(0.1)


def test_awrs_row_past_the_vocabulary_is_padding():
    """A model scores more ids than the constraint's vocabulary has (padded
    embeddings): those ids are never allowed, and the weight is still exact (an
    id past the vocabulary raised from ``advance``). A row shorter than the
    vocabulary is refused."""
    from constrain import VocabularyError

    vocab = letters_vocab(2)
    c = compile_regex("a", vocab)
    row = np.log([0.2, 0.1, 0.1, 0.3, 0.3])  # ids 3 and 4: padding
    for seed in range(20):
        st = search.awrs_step(row, c, c.initial_state(), np.random.default_rng(seed))
        assert st.token == 0 and st.weight == pytest.approx(0.2)
    with pytest.raises(VocabularyError, match="fewer than the 3 tokens"):
        search.awrs_step(row[:2], c, c.initial_state(), np.random.default_rng(0))


# -- AWRS: constraint checks -----------------------------------------------------------


def test_awrs_few_checks_when_model_and_constraint_agree():
    """95 printable one-byte tokens plus EOS; the model puts 98% of its mass on digits,
    so AWRS checks ~2 tokens per step (a full mask checks 96); it checks many more
    when the model prefers letters."""
    toks = [bytes([b]) for b in range(32, 127)] + [b"<eos>"]
    vocab = Vocabulary.from_tokens(toks, eos_token_ids=[len(toks) - 1])
    v = len(toks)
    eos = v - 1
    c = compile_regex(r"[0-9]{5}", vocab)
    digits = np.array([t[0] in b"0123456789" for t in toks[:-1]] + [False])

    def table(agree: bool):
        def fn(prefix):
            prefix = prefix[2:]  # the prompt
            rng = np.random.default_rng([7, len(prefix), *prefix])
            logits = rng.normal(size=v)
            good = digits if len(prefix) < 5 else (np.arange(v) == eos)
            p = np.exp(logits) * np.where(good, 1.0, 0.0)
            p = 0.98 * p / p.sum() + 0.02 / v if agree else 0.05 * p / p.sum() + 0.95 / v
            return np.log(p)
        return fn

    for agree in (True, False):
        lm = search.CallableLM(table(agree), v, eos)
        res = search.smc(lm, [1, 2], constraint=c, n_particles=50, max_new_tokens=6, seed=0)
        per_step = res.checks / (6 * 50)
        assert len(res.posterior) > 0 and all(len(k) == 6 for k in res.posterior)
        if agree:
            print(f"\nAWRS checks per token: {per_step:.2f} (vocabulary {v})")
            assert per_step < 3 < v / 20
        else:
            print(f"AWRS checks per token, model against constraint: {per_step:.2f}")
            assert per_step > 8
        # one row per distinct live prefix per step, never more than the particles
        assert res.lm_calls <= 6 * 50


# -- SMC: unbiased Z and posterior ------------------------------------------------------


SMC_CASES = [  # (regex, letters, max_len, table seed)
    ("a(b|c)*d?", 4, 5, 11),
    ("(ab|ba)+c?", 3, 6, 12),
    ("[abc]*d[ab]?", 5, 4, 13),
]


def _z_check(row, c, z, **kw):
    lm = tiny_lm(row)
    vals = np.array([search.smc(lm, [], constraint=c, seed=s, **kw).z for s in range(200)])
    mean, se = vals.mean(), vals.std(ddof=1) / math.sqrt(len(vals))
    assert abs(mean - z) <= 3 * se + 1e-12, (mean, z, se)
    return mean, se


@pytest.mark.parametrize("pattern,n_letters,max_len,seed", SMC_CASES)
@pytest.mark.parametrize("resampling", ["stratified", "systematic", "multinomial"])
def test_smc_log_z_unbiased(pattern, n_letters, max_len, seed, resampling):
    """The mean of ``exp(log_z)`` over 200 seeds is within 3 standard errors of the
    brute-force mass of complete valid strings."""
    c = compile_regex(pattern, letters_vocab(n_letters))
    row = tiny_table(seed, n_letters + 1, max_len)
    z, _, _ = brute_force(row, c, n_letters)
    assert 1e-4 < z < 0.9
    mean, se = _z_check(row, c, z, n_particles=8, max_new_tokens=max_len + 1, resampling=resampling)
    print(f"\n{pattern} {resampling}: Z = {z:.5f}, mean of exp(log_z) = {mean:.5f} +- {se:.5f}")


@pytest.mark.parametrize("ess_threshold", [0.0, 1.0])
def test_smc_log_z_unbiased_ess_extremes(ess_threshold):
    """Pure importance sampling (never resample) and resampling at every step."""
    pattern, n_letters, max_len, seed = SMC_CASES[0]
    c = compile_regex(pattern, letters_vocab(n_letters))
    row = tiny_table(seed, n_letters + 1, max_len)
    z, _, _ = brute_force(row, c, n_letters)
    _z_check(row, c, z, n_particles=8, max_new_tokens=max_len + 1, ess_threshold=ess_threshold)


def test_smc_log_z_unbiased_with_critic():
    """A twist changes neither the target nor ``Z``: a random critic and the exact
    twist (the log of the valid-completion mass after the prefix)."""
    pattern, n_letters, max_len, seed = SMC_CASES[1]
    c = compile_regex(pattern, letters_vocab(n_letters))
    row = tiny_table(seed, n_letters + 1, max_len)
    z, _, _ = brute_force(row, c, n_letters)

    def noisy_critic(prefix):
        return float(np.random.default_rng([99, len(prefix), *prefix]).normal())

    _z_check(row, c, z, n_particles=8, max_new_tokens=max_len + 1, critic=noisy_critic)

    @functools.lru_cache(maxsize=None)
    def future(prefix):
        s = c.advance_many(c.initial_state(), prefix)
        sub = lambda p: row(prefix + p)  # noqa: E731
        from_here = _SubConstraint(c, s)
        zz, _, _ = brute_force(sub, from_here, n_letters)
        return math.log(zz) if zz > 0 else -math.inf

    mean, se = _z_check(row, c, z, n_particles=8, max_new_tokens=max_len + 1, critic=future)
    print(f"\nexact twist: Z = {z:.5f}, mean of exp(log_z) = {mean:.5f} +- {se:.5f}")


class _SubConstraint:
    """A constraint restarted at a given state (for the brute-force twist)."""

    def __init__(self, c, s):
        self.c, self.s = c, s

    def initial_state(self):
        return self.s

    def __getattr__(self, name):
        return getattr(self.c, name)


def designed_case():
    """The model loves ``a`` first, but after ``a`` it mostly wants a refused token:
    masking token by token picks ``aaa...`` about 70% of the time, while the model
    restricted to valid strings gives it a few percent."""
    n_letters, max_len = 3, 4
    c = compile_regex("a{3}|b|c[ab]", letters_vocab(n_letters))
    over = {
        (): [0.70, 0.10, 0.15, 0.05],
        (0,): [0.05, 0.85, 0.05, 0.05],
        (0, 0): [0.10, 0.80, 0.05, 0.05],
    }
    row = tiny_table(21, n_letters + 1, max_len, overrides=over)
    return row, c, n_letters, max_len


def test_smc_posterior_beats_local_masking():
    """With 2,000 particles the weighted posterior is within TV 0.05 of the model
    restricted to valid strings; locally-masked sampling is far from it."""
    row, c, eos, max_len = designed_case()
    z, exact, local_exact = brute_force(row, c, eos)
    lm = tiny_lm(row)
    n = 2000
    # token-by-token masking, sampled as many times as there are particles
    rng = np.random.default_rng(0)
    local_counts: dict = {}
    for _ in range(n):
        prefix, s = (), c.initial_state()
        while True:
            r = row(prefix)
            ok = [t for t in range(r.shape[0]) if r[t] > -np.inf
                  and (c.is_accepting(s) if t == eos else c.advance(s, t) is not None)]
            q = np.exp(r[ok] - np.logaddexp.reduce(r[ok]))
            t = ok[rng.choice(len(ok), p=q / q.sum())]
            prefix += (t,)
            if t == eos:
                break
            s = c.advance(s, t)
        local_counts[prefix] = local_counts.get(prefix, 0) + 1
    local = {k: v / n for k, v in local_counts.items()}
    tv_local = tv(local, exact)
    tvs = []
    for seed in range(3):
        res = search.smc(lm, [], constraint=c, n_particles=n, max_new_tokens=max_len + 1, seed=seed)
        tvs.append(tv(res.posterior, exact))
        assert abs(res.z / z - 1) < 0.1
        assert math.isclose(sum(res.posterior.values()), 1.0)
        # one batched call per step over the distinct live prefixes only
        assert res.lm_calls <= (max_len + 1) * len(exact) * 4
    print(f"\nTV to the restricted model: SMC {', '.join(f'{t:.4f}' for t in tvs)} (2,000 particles); "
          f"local masking {tv_local:.4f} sampled, {tv(local_exact, exact):.4f} exact; Z = {z:.4f}")
    assert max(tvs) < 0.05
    assert max(tvs) < tv_local and tv(local_exact, exact) > 0.3


@pytest.mark.parametrize("pattern,n_letters,max_len,seed", SMC_CASES)
def test_smc_posterior_random_cases(pattern, n_letters, max_len, seed):
    """Random tables with 20-66 valid strings: two runs of 4,000 particles, pooled with
    weights proportional to their estimates of Z (the standard way to combine
    independent SMC runs), are within TV 0.05 of the restricted model."""
    c = compile_regex(pattern, letters_vocab(n_letters))
    row = tiny_table(seed, n_letters + 1, max_len)
    _, exact, local = brute_force(row, c, n_letters)
    runs = [search.smc(tiny_lm(row), [], constraint=c, n_particles=4000, max_new_tokens=max_len + 1, seed=s)
            for s in range(2)]
    total = sum(r.z for r in runs)
    pooled: dict = {}
    for r in runs:
        assert all(c.accepts_tokens(k) for k in r.posterior)
        for k, v in r.posterior.items():
            pooled[k] = pooled.get(k, 0.0) + v * r.z / total
    d = tv(pooled, exact)
    print(f"\n{pattern}: {len(exact)} valid strings, TV: SMC {d:.4f}, local masking {tv(local, exact):.4f} (exact)")
    assert d < 0.05 and d < tv(local, exact)


# -- SMC: edge cases and API --------------------------------------------------------------


def test_smc_all_particles_die():
    """No valid complete string within the model's forced length: ``log_z = -inf``."""
    c = compile_regex("a{5}", letters_vocab(2))
    row = tiny_table(3, 3, 2)
    res = search.smc(tiny_lm(row), [], constraint=c, n_particles=20, max_new_tokens=8, seed=0)
    assert res.log_z == -math.inf and res.z == 0.0 and res.posterior == {} and res.best() is None
    assert all(p.log_weight == -math.inf for p in res.particles)


def test_smc_cut_off_by_max_new_tokens():
    c = compile_regex("a{3}", letters_vocab(2))
    row = tiny_table(3, 3, 10)
    res = search.smc(tiny_lm(row), [], constraint=c, n_particles=10, max_new_tokens=3, seed=0)
    assert res.log_z == -math.inf  # EOS would be the fourth token
    res = search.smc(tiny_lm(row), [], constraint=c, n_particles=10, max_new_tokens=4, seed=0)
    assert res.best() == (0, 0, 0, 2) and res.posterior == {(0, 0, 0, 2): pytest.approx(1.0)}
    p = math.exp(sum(row((0,) * k)[0] for k in range(3)) + row((0, 0, 0))[2])
    assert res.z == pytest.approx(p)  # a single valid string: the estimate is exact


def test_smc_batches_model_calls_and_uses_prompt():
    seen = []

    def fn(prefixes):
        seen.append(len(prefixes))
        assert all(p[:2] == (4, 4) for p in prefixes)
        return np.stack([tiny_table(5, 4, 4)(tuple(p[2:])) for p in prefixes])

    lm = search.CallableLM(fn, 4, 3, batched=True)
    c = compile_regex("[ab]*c", letters_vocab(3))
    res = search.smc(lm, [4, 4], constraint=c, n_particles=30, max_new_tokens=5, seed=1)
    assert len(seen) == res.steps and lm.calls == sum(seen) == res.lm_calls
    assert all(k <= 30 for k in seen)
    assert math.isclose(np.logaddexp.reduce([p.log_weight for p in res.particles]) - math.log(30), res.log_z)


def test_smc_reproducible():
    c = compile_regex(SMC_CASES[0][0], letters_vocab(4))
    row = tiny_table(11, 5, 5)
    a = search.smc(tiny_lm(row), [], constraint=c, n_particles=16, max_new_tokens=6, seed=3)
    b = search.smc(tiny_lm(row), [], constraint=c, n_particles=16, max_new_tokens=6, seed=3)
    assert a.log_z == b.log_z and a.posterior == b.posterior
    with pytest.raises(ValueError):
        search.smc(tiny_lm(row), [], constraint=c, n_particles=4, max_new_tokens=3, resampling="residual")


def test_smc_result_and_the_old_call_form():
    """The result is a search result (``token_ids``: the best output without its
    EOS; no text without a decoder); the old form, a positional constraint and
    ``prompt_ids=``, still works with a DeprecationWarning; no constraint is an error."""
    c = compile_regex(SMC_CASES[0][0], letters_vocab(4))
    row = tiny_table(11, 5, 5)
    new = search.smc(tiny_lm(row), [], constraint=c, n_particles=16, max_new_tokens=6, seed=3)
    assert isinstance(new, search.SearchResult) and new.text is None and new.token_ids == new.best()[:-1]
    with pytest.warns(DeprecationWarning, match="pass constraint by keyword"):
        old = search.smc(tiny_lm(row), [], c, n_particles=16, max_new_tokens=6, seed=3)
    with pytest.warns(DeprecationWarning, match="write prompt= for prompt_ids="):
        renamed = search.smc(tiny_lm(row), prompt_ids=[], constraint=c, n_particles=16, max_new_tokens=6, seed=3)
    assert old.posterior == renamed.posterior == new.posterior and old.log_z == new.log_z
    with pytest.raises(TypeError, match="needs a constraint"):
        search.smc(tiny_lm(row), [], constraint=None, n_particles=4, max_new_tokens=3)


@pytest.mark.parametrize("scheme", ["stratified", "systematic", "multinomial"])
def test_resample_is_unbiased(scheme):
    from search.autoregressive.sequential_monte_carlo import resample

    w = np.array([0.5, 0.0, 0.2, 0.3, 0.0])
    rng = np.random.default_rng(0)
    counts = np.zeros(5)
    for _ in range(2000):
        counts += np.bincount(resample(w, 7, rng, scheme), minlength=5)
    assert counts[1] == counts[4] == 0
    np.testing.assert_allclose(counts / 2000, 7 * w, atol=0.06)


@pytest.mark.parametrize("eos", ["12", [True], [1.5]])
def test_eos_id_arguments_are_ids(eos):
    """A string of digits was read as its characters ("12": EOS 1 and 2), a
    bool or a float as an id: awrs_step, AWRS, CallableLM and the Hugging
    Face processor refuse them."""
    from constrain.engines.hf import LogitsProcessor
    from constrain.errors import VocabularyError

    vocab = letters_vocab(2)
    c = compile_regex("a", vocab)
    row = np.log([0.5, 0.25, 0.25])
    with pytest.raises(ValueError, match="EOS"):
        search.awrs_step(row, c, c.initial_state(), np.random.default_rng(0), eos_token_ids=eos)
    with pytest.raises(ValueError, match="EOS"):
        search.AWRS(None, c, 0, eos_token_ids=eos)
    with pytest.raises(ValueError, match="EOS"):
        search.CallableLM(lambda p: row, 3, eos)
    with pytest.raises(VocabularyError, match="EOS"):
        LogitsProcessor(c, eos_token_ids=eos)
