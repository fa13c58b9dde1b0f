"""`unmask serve`, Ollama dialect: /api/chat, /api/generate, /api/tags with NDJSON streaming."""

from __future__ import annotations

import json

import httpx
import pytest
from serve_helpers import running

import unmask

TIMER = [{"role": "user", "content": "Set a timer for 5 minutes."}]
MESSAGE = [{"role": "user", "content": "Send a message to Anna saying I will be late."}]
TIMER_TOOL = {"type": "function", "function": {
    "name": "set_timer", "parameters": {"type": "object", "properties": {"minutes": {"type": "integer"}}}}}


@pytest.fixture(scope="module")
def model():
    return unmask.load()


@pytest.fixture(scope="module")
def client(model):
    with running(model) as base, httpx.Client(base_url=base, timeout=60) as c:
        yield c


def ndjson(client, path, body):
    with client.stream("POST", path, json=body) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("application/x-ndjson")
        return [json.loads(line) for line in response.iter_lines() if line]


class TestTags:
    def test_lists_the_model(self, client, model):
        (entry,) = client.get("/api/tags").json()["models"]
        assert entry["name"] == "default" and entry["size"] == model.manifest.size_bytes
        assert entry["details"]["quantization_level"] == "int8"


class TestProbes:
    def test_banner_and_version(self, client):
        assert client.get("/").text == "unmask serve is running"
        assert client.get("/api/version").json() == {"version": unmask.__version__}


class TestChat:
    def test_not_streamed(self, client, model):
        expected = model.generate(messages=TIMER)
        body = client.post("/api/chat", json={"model": "default", "messages": TIMER, "stream": False}).json()
        assert body["message"] == {"role": "assistant", "content": expected.text}
        assert body["done"] is True and body["done_reason"] == "stop"
        assert body["prompt_eval_count"] == len(model.encode_prompt(messages=TIMER))
        assert body["eval_count"] == len(model.tokenizer.encode(expected.text))
        assert body["total_duration"] > 0 and body["unmask"]["forward_passes"] >= 1

    def test_streams_by_default(self, client, model):
        expected = model.generate(messages=MESSAGE, block_length=4).text
        lines = ndjson(client, "/api/chat", {"messages": MESSAGE, "options": {"block_length": 4}})
        assert [line["done"] for line in lines] == [False] * (len(lines) - 1) + [True]
        assert len(lines) >= 3  # several deltas, then the final line
        assert "".join(line["message"]["content"] for line in lines) == expected
        assert lines[-1]["eval_count"] == len(model.tokenizer.encode(expected))

    def test_options_map_onto_the_config(self, client, model):
        expected = model.generate(messages=TIMER, threshold=0.9, temperature=0.5, seed=3)
        body = client.post("/api/chat", json={"messages": TIMER, "stream": False, "options": {
            "threshold": 0.9, "temperature": 0.5, "seed": 3, "num_ctx": 2048, "repeat_penalty": 1.0,
            "top_k": None}}).json()
        assert body["message"]["content"] == expected.text
        assert body["unmask"]["forward_passes"] <= expected.stats.nfe < 32  # threshold: several tokens a step

    def test_num_predict(self, client):
        body = client.post("/api/chat", json={"messages": TIMER, "stream": False,
                                              "options": {"num_predict": 3}}).json()
        assert body["done_reason"] == "length" and body["eval_count"] == 3

    def test_tool_call(self, client):
        body = client.post("/api/chat", json={"messages": TIMER, "tools": [TIMER_TOOL], "stream": False}).json()
        assert body["message"]["tool_calls"] == [{"function": {"name": "set_timer", "arguments": {"minutes": 5}}}]

    def test_format_schema(self, client):
        schema = {"type": "object", "properties": {"minutes": {"type": "integer"}, "label": {"type": "string"}}}
        body = client.post("/api/chat", json={"messages": TIMER, "format": schema, "stream": False}).json()
        value = json.loads(body["message"]["content"])
        assert list(value) == ["minutes", "label"] and isinstance(value["minutes"], int)

    def test_format_json(self, client):
        body = client.post("/api/chat", json={"messages": TIMER, "format": "json", "stream": False}).json()
        assert json.loads(body["message"]["content"]) == {"name": "set_timer", "arguments": {"minutes": 5}}


class TestGenerate:
    def test_prompt(self, client, model):
        expected = model.generate("What is 12 + 30?").text
        body = client.post("/api/generate", json={"prompt": "What is 12 + 30?", "stream": False}).json()
        assert body["response"] == expected and body["done"] is True

    def test_streamed_with_system(self, client, model):
        messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 12 + 30?"}]
        expected = model.generate(messages=messages).text
        lines = ndjson(client, "/api/generate", {"prompt": "What is 12 + 30?", "system": "Be brief."})
        assert "".join(line["response"] for line in lines) == expected

    def test_raw_skips_the_template(self, client, model):
        ids = model.tokenizer.encode("What is 12 + 30?", add_special_tokens=True)
        expected = model.generate(prompt_ids=ids).text
        body = client.post("/api/generate", json={"prompt": "What is 12 + 30?", "raw": True, "stream": False})
        assert body.json()["response"] == expected
        assert body.json()["prompt_eval_count"] == len(ids)


class TestBadInput:
    @pytest.mark.parametrize("path, body, status", [
        ("/api/chat", {"messages": TIMER, "options": {"mirostat": 1}}, 400),
        ("/api/chat", {"messages": TIMER, "options": {"repeat_penalty": 1.3}}, 400),
        ("/api/chat", {"messages": TIMER, "options": {"temperature": "warm"}}, 400),
        ("/api/chat", {"messages": TIMER, "options": "fast"}, 400),
        ("/api/chat", {"messages": TIMER, "format": "yaml"}, 400),
        ("/api/chat", {"messages": TIMER, "model": "llama3"}, 404),
        ("/api/chat", {"messages": [{"role": "user", "content": "hi", "images": ["aGk="]}]}, 400),
        ("/api/generate", {"prompt": ""}, 400),
        ("/api/generate", {"prompt": "hi", "context": [1, 2]}, 400),
        ("/api/generate", {"prompt": "hi", "extra": True}, 400),
        ("/api/generate", [1, 2], 400),
    ])
    def test_error_object(self, client, path, body, status):
        response = client.post(path, json=body)
        assert response.status_code == status
        assert set(response.json()) == {"error"} and isinstance(response.json()["error"], str)

    def test_unknown_route(self, client):
        response = client.get("/api/nothing")
        assert response.status_code == 404 and isinstance(response.json()["error"], str)
