"""Questions about a grammar's language that drivers ask before they commit: can a
partial output with holes still be completed, and with what.

A *partial output* is a sequence of segments: fixed text (``str``), fixed bytes,
fixed token runs (lists of token ids, spelled through a vocabulary) and
:class:`Hole` objects. Its language ``P`` is the set of byte strings obtained by
filling every hole (:mod:`~constrain.analysis.partial_output`). The question "can
it still be completed to a string of the language ``L``?" is the emptiness of
``L ∩ P``:

* for a context-free grammar — Lark text, a :class:`~constrain.cfg.ir.GrammarIR`
  from any front end, or a compiled :class:`constrain.GrammarConstraint` — it is
  decided exactly by the Bar-Hillel construction
  (:mod:`~constrain.analysis.emptiness`): :func:`can_complete` answers, and
  :func:`find_completion` also returns a witness string. A Lark grammar means what
  ``lark.Lark(text, parser="earley", lexer="dynamic_complete")`` accepts:
  scannerless, terminals are regexes (Python ``re`` syntax with their
  flags), ``%ignore`` terminals anywhere between terminals and at both ends. A
  terminal means what it means to Lark's dynamic lexer and to
  :func:`constrain.compile_grammar` (whose terminal automata the check uses):
  ``re.match``'s leftmost-first match and its prefixes, so ``/12|120/`` never
  yields ``120``;
* for a regular constraint (:class:`constrain.DFAConstraint`) it is reachability
  over the token transition graph: :func:`can_complete_regex`, exact at the
  token level (:mod:`~constrain.analysis.regular`).

:func:`fim_allowed` (:mod:`~constrain.analysis.fim`) applies the check left to
right for fill-in-the-middle with an autoregressive model.

Units of a hole: with a ``vocab`` a hole of ``k`` tokens is any concatenation of
``k`` grammar-token byte strings of that vocabulary (exact for token-level
infilling); without one it is any ``k`` Unicode characters.
"""

from constrain.analysis.emptiness import can_complete, find_completion
from constrain.analysis.fim import fim_allowed
from constrain.analysis.partial_output import Hole, PartialOutput, partial_output
from constrain.analysis.prepared import load_grammar
from constrain.analysis.regular import can_complete_regex

__all__ = [
    "Hole",
    "can_complete",
    "find_completion",
    "can_complete_regex",
    "PartialOutput",
    "partial_output",
    "fim_allowed",
    "load_grammar",
]
