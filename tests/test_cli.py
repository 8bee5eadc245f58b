"""The ``trellis`` command line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from search.cli import app as cli

ROOT = Path(__file__).resolve().parent.parent


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


def test_help_lists_every_option(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["generate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for opt in ("--regex", "--unicode", "--max-new-tokens", "--temperature", "--seed", "--system",
                "--no-chat-template", "--device", "--dtype", "--quiet"):
        assert opt in out, opt
    with pytest.raises(SystemExit):
        cli.main(["--help"])
    assert "generate" in capsys.readouterr().out


def test_no_command_is_a_usage_error(capsys):
    assert cli.main([]) == 2
    assert "usage" in capsys.readouterr().err


def test_bad_regex_exits_2_naming_the_offset():
    # fails before the model is loaded, so this costs a fraction of a second
    p = subprocess.run(_trellis_cmd() + ["generate", "--regex", r"\d{3}-(\d{4}", "Give me a phone number"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=120)
    assert p.returncode == 2
    assert p.stdout == ""
    assert "offset 6" in p.stderr and "Traceback" not in p.stderr




def test_generate_phone_number_subprocess(lm):
    p = subprocess.run(_trellis_cmd() + ["generate", "--regex", r"\d{3}-\d{4}", "Give me a phone number"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}\n", p.stdout), p.stdout
    assert "tokens/s" in p.stderr and "loaded" in p.stderr and "compiled" in p.stderr


def test_unsupported_regex_exits_2(lm, capsys):
    # (lookbehind compiles now; a backreference is not regular)
    assert cli.main(["generate", "--regex", r"(a)\1", "x"]) == 2
    err = capsys.readouterr().err
    assert "offset 3" in err and "backreference" in err


def test_cut_off_exits_1_and_still_prints(lm, capsys):
    rc = cli.main(["generate", "-q", "--regex", "[0-9]{12}", "--max-new-tokens", "2", "Give me a number"])
    assert rc == 1
    out, err = capsys.readouterr()
    assert re.fullmatch(r"[0-9]+\n", out)
    assert "warning" in err and "--max-new-tokens" in err


def test_unicode_flag_and_options(lm, capsys):
    assert cli.main(["generate", "-q", "--unicode", "--regex", r"(yes|no)", "--temperature", "0.7",
                     "--seed", "3", "--system", "Answer briefly.", "Is fire hot?"]) == 0
    assert capsys.readouterr().out in ("yes\n", "no\n")
    assert cli.main(["generate", "-q", "--no-chat-template", "--max-new-tokens", "3",
                     "The capital of France is"]) == 0
    assert capsys.readouterr().out.strip()
    assert cli.main(["generate", "-q", "--no-chat-template", "--system", "s", "x"]) == 2


# -- trellis search -------------------------------------------------------------


def test_search_help_lists_every_option(capsys):
    for algo in ("beam", "best-first", "lattice"):
        with pytest.raises(SystemExit) as exc:
            cli.main(["search", algo, "--help"])
        assert exc.value.code == 0
        out = capsys.readouterr().out
        for opt in ("--regex", "--grammar", "--schema", "--unicode", "--beam-size", "--max-new-tokens", "--budget",
                    "--merge-ngram", "--n", "--system", "--no-chat-template", "--device", "--dtype", "--quiet"):
            assert opt in out, (algo, opt)
    with pytest.raises(SystemExit):
        cli.main(["search", "--help"])
    out = capsys.readouterr().out
    assert "beam" in out and "best-first" in out and "lattice" in out
    assert cli.main(["search"]) == 2


@pytest.mark.parametrize("flag", ["--grammar", "--schema"])
def test_bad_schema_or_grammar_files_exit_2_before_loading(flag, tmp_path, capsys):
    missing = str(tmp_path / ("x.lark" if flag == "--grammar" else "x.json"))
    assert cli.main(["search", "lattice", flag, missing, "hi"]) == 2
    assert "error" in capsys.readouterr().err
    bad = tmp_path / ("bad.lark" if flag == "--grammar" else "bad.json")
    bad.write_text('start: "a" ))\n' if flag == "--grammar" else '{"type": "object", "minProperties": "x"')
    assert cli.main(["generate", flag, str(bad), "hi"]) == 2
    err = capsys.readouterr().err
    assert ("line" in err) and ("invalid grammar" in err or "not JSON" in err)
    with pytest.raises(SystemExit) as exc:  # at most one constraint
        cli.main(["search", "beam", "--regex", "a", flag, "x", "hi"])
    assert exc.value.code == 2


def test_generate_with_schema_and_grammar(lm, tmp_path, capsys):
    import json

    schema = tmp_path / "person.json"
    schema.write_text(json.dumps({
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 12},
                       "age": {"type": "integer", "minimum": 0, "maximum": 120}},
        "required": ["name", "age"], "additionalProperties": False}))
    code = cli.main(["generate", "--schema", str(schema), "--max-new-tokens", "40", "-q",
                     "Describe a person as JSON."])
    out = capsys.readouterr().out.strip()
    assert code == 0, out
    value = json.loads(out)
    assert set(value) == {"name", "age"} and 0 <= value["age"] <= 120
    grammar = tmp_path / "yn.lark"
    grammar.write_text('start: ANSWER "."\nANSWER: "yes" | "no"\n')
    assert cli.main(["generate", "--grammar", str(grammar), "-q", "Is fire hot?"]) == 0
    assert capsys.readouterr().out.strip() in ("yes.", "no.")


def test_search_bad_regex_exits_2(capsys):
    assert cli.main(["search", "best-first", "--regex", r"(\d", "x"]) == 2
    assert "invalid regex" in capsys.readouterr().err


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


def test_schema_from_standard_input_is_read_once(monkeypatch, capsys):
    """``--schema -`` (or a pipe such as /dev/stdin) is read once, although both the
    early check and the compile ask for it; a bad one exits 2 before the model loads."""
    import io

    monkeypatch.setattr(cli, "_schemas", {})
    monkeypatch.setattr("sys.stdin", io.StringIO('{"type": "integer", "maximum": 9}'))
    assert cli._read_schema("-") == {"type": "integer", "maximum": 9}
    assert cli._read_schema("-") == {"type": "integer", "maximum": 9}  # stdin is empty now
    monkeypatch.setattr(cli, "_schemas", {})
    monkeypatch.setattr("sys.stdin", io.StringIO('{"type": "integer", "maximum": '))
    assert cli.main(["generate", "--schema", "-", "hi"]) == 2
    assert "not JSON" in capsys.readouterr().err
