"""The ``trellis`` command line."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from search import cli

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


@pytest.fixture(scope="module")
def lm():
    """The default model, loaded once (``load_default_model`` memoises it), so the
    in-process CLI runs below do not load it again."""
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from search import smollm2

    try:
        return smollm2.load_default_model()
    except smollm2.DefaultModelNotInstalled as exc:
        pytest.skip(str(exc))


def test_generate_phone_number_subprocess(lm):
    p = subprocess.run(_trellis_cmd() + ["generate", "--regex", r"\d{3}-\d{4}", "Give me a phone number"],
                       capture_output=True, text=True, env=_env(), cwd=ROOT, timeout=300)
    assert p.returncode == 0, p.stderr
    assert re.fullmatch(r"[0-9]{3}-[0-9]{4}\n", p.stdout), p.stdout
    assert "tokens/s" in p.stderr and "loaded" in p.stderr and "compiled" in p.stderr


def test_unsupported_regex_exits_2(lm, capsys):
    assert cli.main(["generate", "--regex", "(?<=a)b", "x"]) == 2
    err = capsys.readouterr().err
    assert "offset 0" in err and "lookbehind" in err


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
