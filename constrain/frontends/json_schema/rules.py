"""The grammar being built: rules and terminals as the emitters write them, the
shared punctuation and any-value rules, and the budgets (rule count, time) that
keep a schema from growing without end."""

from __future__ import annotations

from constrain.automata.deadline import passed
from constrain.errors import GrammarTooComplexError, SchemaTooComplexError
from constrain.automata.json_encoding import JSON_NUMBER, JSON_STRING, encodable
from constrain.frontends.json_schema.options import MAX_RULES

_PUNCTUATION = frozenset(("LBRACE", "RBRACE", "LBRACK", "RBRACK", "COMMA", "EMPTY_OBJ", "EMPTY_ARR"))


class Alt(list):
    """One alternative of a rule: a list of items ``(kind, payload)``, kind
    ``"sym"`` (a symbol), ``"opt"`` (an optional symbol) or ``"star"`` (a tuple of
    symbols repeated zero or more times)."""


class Budget:
    """The time a translation may take: :meth:`tick` refuses to go on past the
    deadline (``None``: unbounded), so that no schema may hang a server."""

    def __init__(self, deadline: float | None):
        self.deadline = deadline

    def tick(self, where) -> None:
        """Raise :class:`~constrain.errors.SchemaTooComplexError` past the
        deadline (``where``: the node being translated, its pointer)."""
        if self.deadline is not None and passed(self.deadline):
            raise SchemaTooComplexError(
                "translating the schema exceeded its time budget (pass time_budget= to raise it)",
                where if isinstance(where, str) else "")


class GrammarBuilder:
    """Rules and terminals, in the order they are made.

    ``ws`` is the whitespace regex around punctuation. ``exclusions``: ``None``
    writes "any string but these" as a regex (grammar text for Lark); a dict
    makes it a stand-in terminal whose definition is kept there for
    ``GrammarIR.exclusions`` (the compile path; see
    :func:`~constrain.frontends.json_schema.exclusions.exclusion_terminal`).
    """

    def __init__(self, ws: str, exclusions: dict | None = None):
        self.ws = ws
        self.exclusions = exclusions
        #: rule name -> its alternatives
        self.rules: dict[str, list[Alt]] = {}
        self.terminal_defs: dict[str, str] = {}  # name -> regex
        self._terminals: dict[str, str] = {}  # regex -> name
        #: terminal name -> the one string it matches, where known
        self.literal_of: dict[str, str] = {}
        #: terminal name -> (JSON pointer, pattern) of the user's ``pattern`` it
        #: spells first (see note_pattern)
        self.pattern_at: dict[str, tuple[str, str]] = {}
        self._counter = 0
        self._any_value: str | None = None

        def bare(text: str) -> str | None:  # compact: punctuation is literal text
            return None if ws else text

        #: the punctuation terminals, by name
        self.punct = {
            "LBRACE": self.terminal(r"\{" + ws, "LBRACE", bare("{")),
            "RBRACE": self.terminal(ws + r"\}", "RBRACE", bare("}")),
            "LBRACK": self.terminal(r"\[" + ws, "LBRACK", bare("[")),
            "RBRACK": self.terminal(ws + r"\]", "RBRACK", bare("]")),
            "COMMA": self.terminal(ws + "," + ws, "COMMA", bare(",")),
            "EMPTY_OBJ": self.terminal(r"\{" + ws + r"\}", "EMPTY_OBJ", bare("{}")),
            "EMPTY_ARR": self.terminal(r"\[" + ws + r"\]", "EMPTY_ARR", bare("[]")),
        }

    def terminal(self, regex: str, kind: str, literal: str | None = None) -> str:
        """The name of the terminal for ``regex`` (one per distinct regex);
        ``literal``: the one string it matches, when the caller knows it (the
        compile path then writes its chain without reading the regex back)."""
        name = self._terminals.get(regex)
        if name is None:
            name = kind if kind in _PUNCTUATION else f"{kind}_{len(self.terminal_defs)}"
            self._terminals[regex] = name
            self.terminal_defs[name] = regex
            if literal is not None and (literal.isascii() or encodable(literal)):
                self.literal_of[name] = literal
        return name

    def note_pattern(self, name: str | None, where: str, pattern: str) -> str | None:
        """Record that terminal ``name`` spells the user's ``pattern`` at the
        pointer ``where``: a budget its regex passes when it is compiled
        (``max_repeat``) is then told at that pointer, not by the terminal's
        generated name. Returns ``name``."""
        if name is not None:
            self.pattern_at.setdefault(name, (where, pattern))
        return name

    def new_rule(self, hint: str) -> str:
        """A fresh rule name starting with ``hint``.

        Raises:
            GrammarTooComplexError: past :data:`MAX_RULES` rules.
        """
        self._counter += 1
        if self._counter > MAX_RULES:
            raise GrammarTooComplexError(
                f"the grammar for this schema needs more than {MAX_RULES} rules")
        return f"{hint}_{self._counter}"

    def key_colon(self) -> str:
        """The regex between a member name and its value."""
        return self.ws + ":" + self.ws

    def any_value(self) -> str:
        """The rule for any JSON value (made on first use, with ``any_object`` and
        ``any_array``)."""
        if self._any_value is not None:
            return self._any_value
        P = self.punct
        self._any_value = "any_value"
        # strings, numbers and keys through the terminals typed values use (one
        # string automaton per schema, not three: a union "scalar" terminal and a
        # key-with-colon terminal each paid the JSON string's regex pipeline again,
        # ~0.7 ms of a median schema's cold compile)
        string = self.terminal(JSON_STRING, "STRING")
        scalars = [string, self.terminal(JSON_NUMBER, "NUMBER"), self.terminal("true|false", "BOOL"),
                   self.terminal("null", "NULL", "null")]
        colon = self.terminal(self.key_colon(), "COLON", None if self.ws else ":")
        self.rules["any_value"] = ([Alt([("sym", t)]) for t in scalars]
                                   + [Alt([("sym", "any_object")]), Alt([("sym", "any_array")])])
        self.rules["any_object"] = [
            Alt([("sym", P["LBRACE"]), ("sym", string), ("sym", colon), ("sym", "any_value"),
                 ("star", (P["COMMA"], string, colon, "any_value")), ("sym", P["RBRACE"])]),
            Alt([("sym", P["EMPTY_OBJ"])])]
        self.rules["any_array"] = [
            Alt([("sym", P["LBRACK"]), ("sym", "any_value"),
                 ("star", (P["COMMA"], "any_value")), ("sym", P["RBRACK"])]),
            Alt([("sym", P["EMPTY_ARR"])])]
        return self._any_value

    def is_any(self, sym: str) -> bool:
        """Whether ``sym`` is the any-value rule or a unit rule to it."""
        if sym == "any_value":
            return True
        alts = self.rules.get(sym)
        return alts is not None and len(alts) == 1 and list(alts[0]) == [("sym", "any_value")]
