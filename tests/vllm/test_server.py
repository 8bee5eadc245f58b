"""``vllm serve`` (through Trellis's launcher for the CPU build) bound to
127.0.0.1 with the trellis backend, answering the OpenAI client: a chat request
with ``response_format`` ``json_schema`` (the backend route), one with a
malformed schema (a 400 naming the place, the server going on), and one with
a Trellis spec in ``vllm_xargs`` (the logits-processor route)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from cases import PERSON_SCHEMA, PHONE_REGEX, CASES_BY_KIND
from vllm_testing import REPO, engine_environment, model_dir

START_TIMEOUT = 900


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    env = dict(os.environ, **engine_environment())
    port = _free_port()
    log_path = tmp_path_factory.mktemp("serve") / "vllm-serve.log"
    cmd = [sys.executable, "-m", "constrain.engines.vllm.launcher", "serve", str(model_dir()),
           "--host", "127.0.0.1", "--port", str(port), "--served-model-name", "smollm2",
           "--structured-outputs-config", json.dumps({"backend": "trellis"}),
           "--dtype", "float32", "--enforce-eager", "--max-model-len", "1024", "--max-num-seqs", "8",
           "--gpu-memory-utilization", "0.5"]
    with open(log_path, "w") as log:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            if proc.poll() is not None:
                pytest.fail(f"vllm serve exited with {proc.returncode}:\n"
                            + log_path.read_text()[-4000:])
            try:
                with urllib.request.urlopen(base + "/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail("vllm serve did not start in time:\n" + log_path.read_text()[-4000:])
            time.sleep(2)
        yield base
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def client(server):
    import openai

    return openai.OpenAI(base_url=server + "/v1", api_key="unused", timeout=300, max_retries=0)


def test_response_format_json_schema(client):
    import jsonschema

    for name in ["Ada", "Alan", "Grace", "Edsger"]:
        reply = client.chat.completions.create(
            model="smollm2", max_tokens=160, temperature=0.0,
            messages=[{"role": "user", "content": f"Describe {name} as JSON."}],
            response_format={"type": "json_schema",
                             "json_schema": {"name": "person", "schema": PERSON_SCHEMA}})
        choice = reply.choices[0]
        assert choice.finish_reason == "stop", choice.message.content
        jsonschema.validate(json.loads(choice.message.content), PERSON_SCHEMA)


def test_malformed_schema_is_a_400_and_the_server_goes_on(client):
    import openai

    bad = {"type": "object", "properties": {"a": {"$ref": "#/nope"}}}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(
            model="smollm2", max_tokens=16, messages=[{"role": "user", "content": "hi"}],
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": bad}})
    assert "/properties/a" in str(info.value)
    reply = client.chat.completions.create(
        model="smollm2", max_tokens=32, messages=[{"role": "user", "content": "Call me."}],
        extra_body={"structured_outputs": {"regex": PHONE_REGEX}})
    CASES_BY_KIND["regex"].check(reply.choices[0].message.content)


def test_logits_processor_route_over_rest(client):
    spec = {"choice": ["positive", "negative", "neutral"]}
    reply = client.chat.completions.create(
        model="smollm2", max_tokens=8, temperature=0.0,
        messages=[{"role": "user", "content": "Is 'I loved it' positive or negative?"}],
        extra_body={"vllm_xargs": {"trellis": json.dumps(spec)}})
    CASES_BY_KIND["choice"].check(reply.choices[0].message.content)
