"""Best-first lattice search (Xu, Jonnalagadda & Durrett, NAACL 2022).

:func:`lattice_search` explores a (constrained) model's continuations of a prompt
best-first, without pruning, within a budget of model calls:

* the **frontier** is a priority queue of *candidate edges* ``(node, token)``,
  ordered by the score of the prefix they would create (sum of log-probabilities);
  pushing one costs nothing, entering one may cost a model call;
* popping a candidate starts a **greedy roll-out**: the new node is scored (one
  call), its ``top_k`` best other tokens go to the frontier, and the roll-out
  follows its best token, until it reaches EOS, runs into an existing node
  (recombination), hits ``max_new_tokens``, a dead end, or the budget; once the
  budget is spent, the frontier's candidates that end (EOS) or would merge into an
  existing node are still added, as neither needs a call;
* **hypothesis recombination**: a new prefix whose last ``merge_ngram`` tokens
  (the prompt included) *and* constraint state equal those of an existing node is
  merged into that node (an edge to it is added, nothing is scored), so shared
  futures are explored once. Equal constraint states keep merged futures valid:
  every path through the lattice is accepted by the constraint.

The result is a :class:`Lattice`: a ``networkx.DiGraph`` whose nodes are prefixes
(or merged prefixes), whose edges carry a token id and its log-probability, with
one start node and one end node per EOS edge. It encodes many more complete
outputs than the search scored; they are counted, ranked and sampled by dynamic
programming over the DAG.

**Scores of merged paths.** An edge's log-probability is the model's, computed in
the context of the *representative* prefix of its source node (the prefix through
which the node was first created). A path that enters a node through a merge edge
and continues from it is scored with the representative's context, not its own:
exact when the model only looks at the last ``merge_ngram`` tokens (an n-gram
model; the tests use such models), an approximation otherwise (a transformer), as
in the paper. :meth:`Lattice.is_exact` tells which paths are exact (those of the
search tree: every edge after a merge edge is exact only by assumption), and
:meth:`Lattice.rescore` computes any path's true model score.

**Cycles.** Merging ignores length, so it could close a cycle (``a a a a`` merged
with ``a a a a a``). A merge is refused when the existing node can reach the new
edge's source (checked on the graph); the prefix then becomes a node of its own.
So the lattice is always a DAG, and path counts are finite.
"""

from __future__ import annotations

import heapq
import math
import random
import sys
from dataclasses import dataclass
from typing import Callable, Hashable, Iterator, Sequence

import numpy as np

from search.arguments import count
from search.legacy import accepts_old_call_forms
from search.lm.protocol import as_lm, constraint_eos_ids, decoder, prompt_token_ids

__all__ = ["Lattice", "lattice_search"]

Path = tuple  # a tuple of token ids (the generated ones, the final EOS included)


@dataclass
class _Node:
    prefix: tuple[int, ...]  # the representative generated tokens (prompt excluded)
    score: float  # the model score of ``prefix``
    state: Hashable


class Lattice:
    """The lattice built by :func:`lattice_search`.

    Attributes:
        graph: a ``networkx.DiGraph``. Nodes are ints with attributes ``prefix``
            (the representative generated token ids), ``score`` (its model score),
            ``state`` (its constraint state), ``kind`` (``"start"``, ``"inner"``
            or ``"end"``) and ``expanded`` (whether the model scored it). Edges
            carry ``token`` (the id) and ``logprob``, and ``merge`` (true for an
            edge created by recombination).
        start: the start node (the empty continuation).
        ends: the end nodes (each reached by one EOS edge), in creation order.
        calls: the model calls the search spent.
        prompt_ids: the prompt the search conditioned on.

    A *path* is a tuple of generated token ids from the start node, the EOS
    included for a complete path; it determines its nodes (from a node, each
    token labels at most one edge).
    """

    def __init__(self, graph, start: int, ends: list[int], *, calls: int = 0, prompt_ids=(), lm=None,
                 decode: Callable | None = None, eos_token_ids: Sequence[int] = ()):
        self.graph = graph
        self.start = start
        self.ends = list(ends)
        self.calls = calls
        self.prompt_ids = tuple(prompt_ids)
        self.lm = lm
        self.decode = decode
        self.eos_token_ids = tuple(eos_token_ids)
        self._topo = None
        self._out = {u: {d["token"]: v for _, v, d in graph.out_edges(u, data=True)} for u in graph}

    # -- structure -----------------------------------------------------------

    def __repr__(self) -> str:
        return (f"Lattice(nodes={self.num_nodes}, edges={self.num_edges}, ends={len(self.ends)}, "
                f"calls={self.calls})")

    @property
    def num_nodes(self) -> int:
        """The number of nodes (start and end nodes included)."""
        return self.graph.number_of_nodes()

    @property
    def num_edges(self) -> int:
        """The number of edges."""
        return self.graph.number_of_edges()

    def _order(self) -> list[int]:
        if self._topo is None:
            import networkx as nx

            self._topo = list(nx.topological_sort(self.graph))
        return self._topo

    def nodes_of(self, path: Sequence[int]) -> list[int]:
        """The nodes a path visits, the start node first. Raises ``KeyError`` when
        the path is not in the lattice."""
        u = self.start
        out = [u]
        for t in path:
            u = self._out[u][int(t)]
            out.append(u)
        return out

    def is_complete(self, path: Sequence[int]) -> bool:
        """Whether ``path`` is in the lattice and ends in an end node."""
        try:
            return self.graph.nodes[self.nodes_of(path)[-1]]["kind"] == "end"
        except KeyError:
            return False

    # -- scores --------------------------------------------------------------

    def score(self, path: Sequence[int]) -> float:
        """The lattice score of ``path``: the sum of its edges' log-probabilities
        (added left to right). Equal to the model score for exact paths (see
        :meth:`is_exact`) and for n-gram models of order <= ``merge_ngram``."""
        nodes = self.nodes_of(path)
        s = 0.0
        for u, v in zip(nodes, nodes[1:]):
            s += self.graph.edges[u, v]["logprob"]
        return s

    def is_exact(self, path: Sequence[int]) -> bool:
        """Whether every edge of ``path`` was scored in the path's own context: the
        path follows the representative prefixes, i.e. it leaves no node it entered
        through a merge edge. Exact paths' :meth:`score` is the model's score."""
        nodes = self.nodes_of(path)
        edges = list(zip(nodes, nodes[1:]))
        return not any(self.graph.edges[e]["merge"] for e in edges[:-1])

    def rescore(self, path: Sequence[int], lm=None) -> float:
        """The model's own score of ``path`` after the prompt (one ``logprobs``
        call of ``len(path)`` prefixes on ``lm``, default: the searched model)."""
        lm = as_lm(lm if lm is not None else self.lm)
        path = tuple(int(t) for t in path)
        if not path:
            return 0.0
        rows = np.asarray(lm.logprobs([self.prompt_ids + path[:i] for i in range(len(path))]))
        s = 0.0
        for i, t in enumerate(path):
            s += float(rows[i, t])
        return s

    # -- counting, ranking, sampling ------------------------------------------

    def count_paths(self) -> int:
        """The number of complete paths (start to an end node), by dynamic
        programming over the DAG in topological order (exact, a Python int)."""
        n = {u: 0 for u in self.graph}
        n[self.start] = 1
        for u in self._order():
            if n[u]:
                for v in self.graph.successors(u):
                    n[v] += n[u]
        return sum(n[e] for e in self.ends)

    def _paths_to_end(self) -> dict[int, int]:
        """For every node, the number of complete paths from it to an end node."""
        m = {}
        for u in reversed(self._order()):
            m[u] = 1 if self.graph.nodes[u]["kind"] == "end" else sum(m[v] for v in self.graph.successors(u))
        return m

    def paths(self) -> Iterator[Path]:
        """Every complete path (depth-first, by token id); exponential: for small
        lattices and tests."""
        alive = self._paths_to_end()

        def walk(u, prefix):
            if self.graph.nodes[u]["kind"] == "end":
                yield prefix
                return
            for t, v in sorted(self._out[u].items()):
                if alive[v]:
                    yield from walk(v, prefix + (t,))

        if alive.get(self.start):
            yield from walk(self.start, ())

    def k_best(self, k: int, *, distinct: bool = True, rescore: bool = False,
               lm=None) -> list[tuple[float, Path]]:
        """The ``k`` best complete paths by lattice score, best first, as
        ``(score, path)`` (ties: the smaller token tuple first).

        With ``distinct`` (the default) the paths have distinct texts: a text
        spelled by several tokenizations is reported once, by its best-scoring
        path, and the ``k`` texts are those of highest best-path score. They are
        found among the ``K`` best paths, ``K`` growing from ``k`` by fourfold
        steps up to ``256 * k``; when the best ``256 * k`` paths spell fewer than
        ``k`` texts, fewer are returned. A lattice without a decoder compares
        token paths (all distinct). ``distinct=False``: the ``k`` best paths,
        whatever their texts.

        With ``rescore=True`` the same paths come with their model scores
        (:meth:`rescore`, on ``lm`` or the searched model: about ``len(path)``
        calls each) and are ordered by them, so every reported score is the
        model's even for paths through merged nodes. The selection is still by
        lattice score: a merged path whose lattice score underrates it can be
        missing."""
        k = count("k", k)
        if k == 0:
            return []
        if distinct and self.decode is not None:
            out = self._k_best_texts(k)
        else:
            out = self._k_best_paths(k)
        if rescore:
            out = [(self.rescore(p, lm), p) for _, p in out]
            out.sort(key=lambda x: (-x[0], x[1]))
        return out

    def _k_best_texts(self, k: int) -> list[tuple[float, Path]]:
        """The best path of each of the ``k`` best texts (see :meth:`k_best`)."""
        width = k
        while True:
            paths = self._k_best_paths(width)
            chosen, seen = [], set()
            for sp in paths:
                text = self.text(sp[1])
                if text not in seen:
                    seen.add(text)
                    chosen.append(sp)
                    if len(chosen) == k:
                        return chosen
            if len(paths) < width or width >= 256 * k:  # every path seen, or the cap
                return chosen
            width = min(4 * width, 256 * k)

    def _k_best_paths(self, k: int) -> list[tuple[float, Path]]:
        """The ``k`` best complete paths, by dynamic programming: each node
        keeps the ``k`` best partial paths reaching it."""
        best: dict[int, list[tuple[float, Path]]] = {self.start: [(0.0, ())]}
        for u in self._order():
            if self.graph.nodes[u]["kind"] == "end":
                continue
            lst = best.pop(u, None)
            if not lst:
                continue
            for _, v, d in self.graph.out_edges(u, data=True):
                w, t = d["logprob"], d["token"]
                cand = best.setdefault(v, [])
                cand.extend((s + w, p + (t,)) for s, p in lst)
                if len(cand) > k:
                    cand.sort(key=lambda x: (-x[0], x[1]))
                    del cand[k:]
        done = [sp for e in self.ends for sp in best.get(e, ())]
        done.sort(key=lambda x: (-x[0], x[1]))
        return done[:k]

    def sample(self, n: int, seed=None, *, method: str = "uniform", distinct: bool = True) -> list[Path]:
        """Draw ``n`` complete paths.

        Args:
            n: how many.
            seed: for :class:`random.Random` (reproducible draws).
            method: ``"uniform"``: every complete path equally likely (successors
                chosen in proportion to their path counts); ``"score"``: a path
                with probability proportional to ``exp(score)`` among the
                lattice's complete paths (backward log-sum-exp).
            distinct: draw until ``n`` different paths (or every path) are found,
                giving up after ``50 * n`` draws.
        """
        if method not in ("uniform", "score"):
            raise ValueError(f"method must be 'uniform' or 'score', got {method!r}")
        n = count("n", n)
        rng = random.Random(seed)
        g = self.graph
        if method == "uniform":
            weight = self._paths_to_end()
            if not weight[self.start]:
                return []

            def step(u):
                succ = sorted(self._out[u].items())
                r = rng.randrange(weight[u])
                for t, v in succ:
                    r -= weight[v]
                    if r < 0:
                        return t, v
                raise AssertionError("unreachable")
        else:
            logz = {}
            for u in reversed(self._order()):
                if g.nodes[u]["kind"] == "end":
                    logz[u] = 0.0
                    continue
                vals = [d["logprob"] + logz[v] for _, v, d in g.out_edges(u, data=True) if logz[v] > -math.inf]
                if not vals:
                    logz[u] = -math.inf
                else:
                    m = max(vals)
                    logz[u] = m + math.log(sum(math.exp(x - m) for x in vals))
            if logz[self.start] == -math.inf:
                return []

            def step(u):
                succ = sorted(self._out[u].items())
                r = rng.random()
                last = None
                for t, v in succ:
                    if logz[v] == -math.inf:
                        continue
                    last = (t, v)
                    r -= math.exp(g.edges[u, v]["logprob"] + logz[v] - logz[u])
                    if r < 0:
                        return t, v
                return last  # rounding

        total = self.count_paths() if distinct else None
        out: list[Path] = []
        seen: set = set()
        draws = 0
        while len(out) < n and draws < 50 * max(n, 1):
            draws += 1
            u, p = self.start, ()
            while g.nodes[u]["kind"] != "end":
                t, u = step(u)
                p += (t,)
            if distinct:
                if p in seen:
                    continue
                seen.add(p)
            out.append(p)
            if distinct and len(out) >= total:
                break
        return out

    def text(self, path: Sequence[int]) -> str:
        """The text of ``path`` (its EOS ids dropped), with the model's decoder."""
        if self.decode is None:
            raise ValueError("this lattice has no decoder (the model had no decode method)")
        return self.decode([t for t in path if t not in self.eos_token_ids])

    # -- export --------------------------------------------------------------

    def to_dot(self) -> str:
        """The lattice in GraphViz's DOT language (plain text; no graphviz needed):
        one ``nN [...]`` line per node, one ``nU -> nV [...]`` line per edge,
        labelled with the token (its text when a decoder is known) and log-prob;
        merge edges dashed, end nodes double circles."""
        def esc(s: str) -> str:
            return s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")

        lines = ["digraph lattice {", "  rankdir=LR;"]
        for u, d in self.graph.nodes(data=True):
            shape = {"start": "box", "end": "doublecircle"}.get(d["kind"], "circle")
            label = {"start": "start", "end": "end"}.get(d["kind"], str(u))
            lines.append(f'  n{u} [label="{esc(label)}", shape={shape}];')
        for u, v, d in self.graph.edges(data=True):
            tok = str(d["token"]) if self.decode is None else repr(self.decode([d["token"]]))
            style = ", style=dashed" if d["merge"] else ""
            lines.append(f'  n{u} -> n{v} [label="{esc(tok)} {d["logprob"]:.3f}"{style}];')
        lines.append("}")
        return "\n".join(lines) + "\n"


@accepts_old_call_forms(renamed={"prompt_ids": "prompt"})
def lattice_search(lm, prompt, *, constraint=None, budget: int, rollout: str = "greedy",
                   merge_ngram: int | None = 4, max_new_tokens: int | None = None,
                   top_k: int | None = 16, progress: bool = False) -> Lattice:
    """Best-first lattice search with greedy roll-outs and hypothesis recombination
    (Xu, Jonnalagadda & Durrett 2022); see the module docstring.

    Args:
        lm: a model of the LM protocol (:mod:`search.lm.protocol`), or a ``TransformersLM``.
        prompt: the token ids to condition on, or a text, turned into ids by
            ``lm.prompt_ids`` (the chat template for chat models).
        budget: the most model calls (prefixes scored) to spend: ``lm.calls``
            grows by at most ``budget``.
        rollout: ``"greedy"`` (after a pop, follow the best token until EOS, a
            merge, a dead end, ``max_new_tokens`` or the budget) or ``"none"``
            (score the popped node only; its best token goes to the frontier too).
        merge_ngram: ``n``: merge a new prefix into an existing node when their
            last ``n`` tokens (prompt included) and constraint states are equal;
            ``None`` (or 0) never merges (the lattice is then the search tree).
        constraint: a compiled grammar (:mod:`constrain.protocol`): only allowed
            tokens are expanded, EOS only where it accepts, so every complete path
            is accepted.
        max_new_tokens: nodes whose representative prefix has this many tokens
            are not expanded (``None``: no limit but the budget). A path through
            merge edges can be longer than that.
        top_k: how many of an expanded node's tokens (best first; the roll-out's
            own included) enter the lattice or the frontier; ``None``: every
            token with a finite log-probability.
        progress: print a line on stderr each time another tenth of the
            budget is spent (calls, nodes, complete paths so far, frontier).

    Returns:
        a :class:`Lattice`.
    """
    import networkx as nx

    budget = count("budget", budget)
    if max_new_tokens is not None and (isinstance(max_new_tokens, bool)
                                       or int(max_new_tokens) != max_new_tokens
                                       or max_new_tokens < 0):
        raise ValueError(f"max_new_tokens must be a non-negative integer, got {max_new_tokens!r}")
    if rollout not in ("greedy", "none"):
        raise ValueError(f"rollout must be 'greedy' or 'none', got {rollout!r}")
    merge_ngram = count("merge_ngram", merge_ngram, optional=True)
    top_k = count("top_k", top_k, 1, optional=True)
    n_merge = int(merge_ngram or 0)
    lm = as_lm(lm)
    prompt = prompt_token_ids(lm, prompt)
    V = lm.vocab_size
    eos = constraint_eos_ids(lm, constraint)
    all_ids = np.arange(V, dtype=np.int64)
    calls0 = lm.calls
    limit = int(budget)

    G = nx.DiGraph()
    nodes: list[_Node] = []
    index: dict = {}  # merge key -> node
    ends: list[int] = []
    heap: list = []
    counter = 0

    def new_node(prefix, score, state, kind):
        nodes.append(_Node(prefix, score, state))
        u = len(nodes) - 1
        G.add_node(u, prefix=prefix, score=score, state=state, kind=kind, expanded=False)
        return u

    def key_of(prefix, state):
        return ((prompt + prefix)[-n_merge:], state)

    start = new_node((), 0.0, None if constraint is None else constraint.initial_state(), "start")
    if n_merge:
        index[key_of((), nodes[start].state)] = start

    reported = [0]

    def report():
        spent = lm.calls - calls0
        if progress and limit and spent * 10 // limit > reported[0]:
            reported[0] = spent * 10 // limit
            print(f"lattice: {spent}/{limit} calls, {len(nodes)} nodes, {len(ends)} ends, "
                  f"{len(heap)} in the frontier", file=sys.stderr, flush=True)

    def expand(u):
        """Score node ``u`` (one call): its allowed children, best first, as
        ``[(token, logprob)]`` (``top_k`` of them)."""
        nd = nodes[u]
        row = np.asarray(lm.logprobs([prompt + nd.prefix]))[0]
        report()
        G.nodes[u]["expanded"] = True
        if constraint is None:
            ids = all_ids
        else:
            ids = np.asarray(constraint.allowed_token_ids(nd.state), dtype=np.int64)
            ids = ids[ids < V]
        vals = row[ids].astype(np.float64, copy=False)
        ok = vals > -np.inf
        ids, vals = ids[ok], vals[ok]
        if top_k is not None and len(ids) > top_k:
            sel = np.argpartition(-vals, top_k - 1)[:top_k]
            ids, vals = ids[sel], vals[sel]
        order = np.lexsort((ids, -vals))
        return list(zip(ids[order].tolist(), vals[order].tolist()))

    def push(u, t, lp):
        nonlocal counter
        counter += 1
        heapq.heappush(heap, (-(nodes[u].score + lp), counter, u, t, lp))

    def enter(u, t, lp, only_free=False):
        """Add the edge ``u --t--> ?``; return the new node to continue from, or
        ``None`` when the roll-out stops (EOS, merge). With ``only_free``, add it
        only when it ends or merges (it would create no node to score)."""
        nd = nodes[u]
        if constraint is None:
            state = None
        else:
            state = constraint.advance(nd.state, t)
            if state is None:
                raise RuntimeError(f"constraint refused token {t} that its bitmask allowed")
        prefix = nd.prefix + (t,)
        score = nd.score + lp
        if t in eos:
            v = new_node(prefix, score, state, "end")
            G.add_edge(u, v, token=t, logprob=lp, merge=False)
            ends.append(v)
            return None
        if n_merge:
            k = key_of(prefix, state)
            v = index.get(k)
            if v is not None and v != u and not nx.has_path(G, v, u):
                G.add_edge(u, v, token=t, logprob=lp, merge=True)
                return None
        if only_free:
            return None
        v = new_node(prefix, score, state, "inner")
        G.add_edge(u, v, token=t, logprob=lp, merge=False)
        if n_merge:
            index.setdefault(k, v)
        return v

    def can_expand(u):
        return (max_new_tokens is None or len(nodes[u].prefix) < max_new_tokens) and lm.calls - calls0 < limit

    def run_from(u):
        while u is not None and can_expand(u):
            children = expand(u)
            if not children:
                return
            if rollout == "greedy":
                (t, lp), rest = children[0], children[1:]
                for t2, lp2 in rest:
                    push(u, t2, lp2)
                u = enter(u, t, lp)
            else:
                for t2, lp2 in children:
                    push(u, t2, lp2)
                return

    run_from(start)
    while heap and lm.calls - calls0 < limit:
        _, _, u, t, lp = heapq.heappop(heap)
        v = enter(u, t, lp)
        if v is not None:
            run_from(v)
    # Once the budget is spent, the frontier's EOS edges and the edges that
    # merge into an existing node still cost no call: each adds complete paths
    # (a merge edge, every completion of its target) for free.
    for _, _, u, t, lp in sorted(heap):
        enter(u, t, lp, only_free=True)

    return Lattice(G, start, ends, calls=lm.calls - calls0, prompt_ids=prompt, lm=lm, decode=decoder(lm),
                   eos_token_ids=sorted(eos))
