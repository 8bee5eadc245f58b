"""Tool calling with the default model under structural tags: free text and
Hermes-style ``<tool_call>{"name": ..., "arguments": ...}</tool_call>`` calls,
with the tools drawn from MaskBench's BFCL split.

    python tests/benchmarks/run_tool_calls.py [--data /work/shared/data/maskbench]
        [--prompts 20] [--mode auto|required|both] [--max-new-tokens 160] [--seed 0]
        [--engine trellis|vllm]

Each prompt gets 1-3 tools (a BFCL schema is ``{"<function>": {arguments}}``:
the tool's name and its arguments' schema). The structural tag is a
``triggered_tags`` with one tag per tool, whose begin names the tool, so the
arguments must validate under that tool's schema. ``auto``: free text with
any number of calls (OpenAI's ``tool_choice="auto"``); ``required``:
``at_least_one``. Every output is parsed back into free text and calls by a
parser written here (``json.JSONDecoder.raw_decode`` after each
``<tool_call>``), and every call's arguments are validated with
``jsonschema``. All rows of a mode run in one ``search.generate_batch`` call
(``--engine trellis``), or in one ``LLM.generate`` call of a real vLLM engine
started with the Trellis structured-output backend, the tags sent as vLLM's
``structural_tag`` requests (``--engine vllm``, in ``.venv-vllm``: see
``bash .ci/setup-vllm``).
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from harness import environment, git_rev, log  # noqa: E402

BEGIN, END = "<tool_call>", "</tool_call>"


def load_tools(data: str) -> list[tuple[str, dict]]:
    """``(name, arguments schema)`` of every BFCL schema."""
    tools = []
    with gzip.open(os.path.join(data, "BFCL.jsonl.gz"), "rt") as f:
        for line in f:
            schema = json.loads(line)["schema"]
            props = schema.get("properties") or {}
            if len(props) == 1:
                (name, args), = props.items()
                tools.append((name, args))
    return tools


def structural_tag(tools, required: bool) -> dict:
    """Hermes-style tool calls, one tag per tool."""
    tags = [{"type": "tag", "begin": f'{BEGIN}{{"name": {json.dumps(name)}, "arguments": ',
             "content": {"type": "json_schema", "json_schema": args}, "end": "}" + END}
            for name, args in tools]
    return {"type": "structural_tag", "format": {"type": "triggered_tags", "triggers": [BEGIN],
                                                 "tags": tags, "at_least_one": required}}


def system_prompt(tools) -> str:
    """The tools as a Hermes-style system prompt."""
    listed = "\n".join(json.dumps({"name": n, "parameters": a}) for n, a in tools)
    return ("You are a function calling assistant. You may call these tools:\n" + listed +
            f"\nTo call a tool, write {BEGIN}{{\"name\": <tool name>, \"arguments\": <arguments "
            f"object>}}{END}.")


def parse_output(text: str) -> tuple[list[str], list[tuple[str, object]]]:
    """``(free text pieces, [(tool name, arguments)])`` of an output; raises
    ``ValueError`` where the text is not free text and well-formed calls."""
    free, calls, i = [], [], 0
    dec = json.JSONDecoder()
    while True:
        j = text.find(BEGIN, i)
        if j < 0:
            free.append(text[i:])
            return free, calls
        free.append(text[i:j])
        call, k = dec.raw_decode(text, j + len(BEGIN))
        if not (isinstance(call, dict) and set(call) == {"name", "arguments"}):
            raise ValueError(f"not a tool call: {call!r}")
        if not text.startswith(END, k):
            raise ValueError(f"no {END} after the call at {j}")
        calls.append((call["name"], call["arguments"]))
        i = k + len(END)


def start_vllm():
    """A :class:`search.lm.vllm.VLLMLM` on a vLLM engine with the Trellis
    structured-output backend (the real-engine tests' settings)."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "vllm"))
    from vllm_testing import ENGINE_KWARGS, engine_environment, model_dir

    engine_environment()
    import constrain.engines.vllm as trellis_vllm
    from search.lm.vllm import VLLMLM

    trellis_vllm.register()
    kwargs = {k: v for k, v in ENGINE_KWARGS.items() if k != "seed"}
    return VLLMLM.from_model(str(model_dir()), top_logprobs=1,
                             structured_outputs_config={"backend": "trellis"}, **kwargs)


class _Row:
    """What the report reads of a generation: ``text``, ``stop_reason``, ``num_steps``."""

    def __init__(self, text: str, stop_reason: str, num_steps: int):
        self.text, self.stop_reason, self.num_steps = text, stop_reason, num_steps


def generate_vllm(lm, prompts, tags, max_new_tokens: int) -> list:
    """Greedy generations inside the vLLM engine, one ``structural_tag``
    request per row, all in one ``LLM.generate`` call."""
    rows = []
    for [(ids, _)] in lm.generate(prompts, constraint=[{"structural_tag": t} for t in tags],
                                  max_new_tokens=max_new_tokens):
        ended = bool(ids) and ids[-1] in lm.eos_token_ids
        rows.append(_Row(lm.decode(ids[:-1] if ended else ids), "eos" if ended else "max_new_tokens", len(ids)))
    return rows


def main(argv=None) -> int:
    """Run the tool-calling check and print its report."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default="/work/shared/data/maskbench")
    ap.add_argument("--prompts", type=int, default=20)
    ap.add_argument("--mode", choices=["auto", "required", "both"], default="both")
    ap.add_argument("--max-new-tokens", type=int, default=160)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--engine", choices=["trellis", "vllm"], default="trellis",
                    help="search.generate_batch, or a vLLM engine on the Trellis backend")
    args = ap.parse_args(argv)

    import jsonschema

    import constrain
    import search

    rng = random.Random(args.seed)
    every = load_tools(args.data)
    log(f"{len(every)} BFCL tools; loading the default model")
    lm = search.load_default_model()
    vllm_lm = start_vllm() if args.engine == "vllm" else None
    env = environment({})
    print(f"# tool calls under structural tags ({args.engine}), Trellis {git_rev()}, {env['cpu']}, "
          f"{env['cores']} cores, load {env['loadavg_start']}, {args.prompts} prompts, "
          f"max_new_tokens {args.max_new_tokens}")
    failures = 0
    for mode in (["auto", "required"] if args.mode == "both" else [args.mode]):
        rows, prompts, cons, compile_s = [], [], [], 0.0
        while len(rows) < args.prompts:
            tools = rng.sample(every, rng.randint(1, 3))
            t0 = time.perf_counter()
            try:
                c = constrain.compile_structural_tag(structural_tag(tools, mode == "required"),
                                                     lm.vocab)
            except constrain.ConstraintError as e:  # a tool schema Trellis refuses
                log(f"skipped tools {[n for n, _ in tools]}: {type(e).__name__}: {e}")
                continue
            compile_s += time.perf_counter() - t0
            target = rng.choice(tools)[0]
            rows.append(tools)
            cons.append(c if vllm_lm is None else structural_tag(tools, mode == "required"))
            prompts.append(lm.apply_chat_template(
                f"Please call {target} with arguments that fit its parameters.",
                system=system_prompt(tools)))
        t0 = time.perf_counter()
        if vllm_lm is None:
            results = search.generate_batch(lm, prompts, constraints=cons,
                                            max_new_tokens=args.max_new_tokens)
        else:
            results = generate_vllm(vllm_lm, prompts, cons, args.max_new_tokens)
        gen_s = time.perf_counter() - t0
        n_calls = n_valid = parsed = finished = with_call = 0
        for tools, r in zip(rows, results):
            finished += r.stop_reason == "eos"
            try:
                _, calls = parse_output(r.text)
            except ValueError as e:
                if r.stop_reason == "eos":
                    failures += 1
                    log(f"  unparsable finished output ({e}): {r.text!r}")
                continue
            parsed += 1
            with_call += bool(calls)
            schemas = dict(tools)
            for name, arguments in calls:
                n_calls += 1
                ok = name in schemas and jsonschema.Draft202012Validator(
                    schemas[name]).is_valid(arguments)
                n_valid += ok
                if not ok:
                    failures += 1
                    log(f"  invalid call {name}({arguments!r})")
        steps = sum(r.num_steps for r in results)
        print(f"{mode:>8}: {finished}/{len(results)} ended by EOS, {parsed}/{len(results)} parse "
              f"into text and calls ({len(results) - parsed} cut off by max_new_tokens inside a "
              f"call), {with_call} with a call, {n_valid}/{n_calls} calls valid under their "
              f"tool's schema; compile {compile_s:.2f} s for {len(results)} tags, generation "
              f"{gen_s:.1f} s ({steps / gen_s:.1f} tokens/s)")
        for r in results[:3]:
            print(f"          e.g. {r.text[:160]!r}")
    if vllm_lm is not None:
        vllm_lm.close()
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
