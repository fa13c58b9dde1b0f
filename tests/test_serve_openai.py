"""`unmask serve`, OpenAI dialect: a real server on a loopback port with the embedded model,
driven by httpx and by the official `openai` client."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from serve_helpers import running, sse_events

import unmask

TIMER = [{"role": "user", "content": "Set a timer for 5 minutes."}]
REVERSE = [{"role": "user", "content": "Reverse: apple, pear, kiwi"}]
MESSAGE = [{"role": "user", "content": "Send a message to Anna saying I will be late."}]
BLOCKS = {"block_length": 4}  # blocks commit left to right, so the prefix grows block by block
TIMER_TOOL = {"type": "function", "function": {
    "name": "set_timer", "description": "Start a countdown.",
    "parameters": {"type": "object", "properties": {"minutes": {"type": "integer"}}, "required": ["minutes"]}}}
WEATHER_TOOL = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}, "day": {"type": "string"}}}}}


@pytest.fixture(scope="module")
def model():
    return unmask.load()


@pytest.fixture(scope="module")
def base(model):
    with running(model) as url:
        yield url


@pytest.fixture(scope="module")
def client(base):
    with httpx.Client(base_url=base, timeout=60) as c:
        yield c


@pytest.fixture(scope="module")
def oai(base):
    return openai.OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0)


def chat(client, **body):
    response = client.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    return response.json()


class TestModels:
    def test_lists_the_one_model(self, client, model):
        data = client.get("/v1/models").json()["data"]
        assert [m["id"] for m in data] == ["default"]
        assert data[0]["context_length"] == model.manifest.dims.max_sequence_length

    def test_openai_client(self, oai):
        assert [m.id for m in oai.models.list()] == ["default"]


class TestChatCompletions:
    def test_same_answer_as_the_python_api(self, client, model):
        expected = model.generate(messages=TIMER)
        body = chat(client, messages=TIMER)
        choice = body["choices"][0]
        assert choice["message"] == {"role": "assistant", "content": expected.text}
        assert choice["finish_reason"] == "stop"
        prompt = len(model.encode_prompt(messages=TIMER))
        answer = len(model.tokenizer.encode(expected.text))
        assert body["usage"] == {"prompt_tokens": prompt, "completion_tokens": answer,
                                 "total_tokens": prompt + answer}
        stats = body["unmask"]
        assert 1 <= stats["forward_passes"] <= 32
        per_forward = stats["committed_tokens"] / stats["forward_passes"]
        assert stats["tokens_per_forward"] == pytest.approx(per_forward, abs=1e-3)

    def test_generation_settings_as_body_fields(self, client, model):
        expected = model.generate(messages=TIMER, threshold=0.9, cache="dual")
        body = chat(client, messages=TIMER, threshold=0.9, cache="dual")
        assert body["choices"][0]["message"]["content"] == expected.text
        assert body["unmask"]["forward_passes"] < 32 and body["unmask"]["tokens_per_forward"] > 1

    def test_max_tokens_cuts_the_answer(self, client):
        body = chat(client, messages=TIMER, max_tokens=4)
        assert body["choices"][0]["finish_reason"] == "length"
        assert body["usage"]["completion_tokens"] == 4
        assert len(body["choices"][0]["message"]["content"]) <= 4 * 8

    def test_stop_string(self, client, model):
        full = model.generate(messages=REVERSE).text
        body = chat(client, messages=REVERSE, stop=[","])
        assert "," in full
        assert body["choices"][0]["message"]["content"] == full.split(",")[0]
        assert body["choices"][0]["finish_reason"] == "stop"

    def test_nulls_and_neutral_options_as_clients_send_them(self, client, model):
        expected = model.generate(messages=TIMER)
        body = chat(client, messages=TIMER, seed=None, max_tokens=None, stop=None, tools=None, tool_choice=None,
                    response_format=None, n=1, presence_penalty=0, frequency_penalty=0.0, logprobs=False, top_p=1,
                    user="me", stream=False, stream_options=None)
        assert body["choices"][0]["message"]["content"] == expected.text

    def test_seed_and_temperature_are_honoured(self, client, model):
        expected = model.generate(messages=TIMER, temperature=1.0, seed=7)
        body = chat(client, messages=TIMER, temperature=1.0, seed=7)
        assert body["choices"][0]["message"]["content"] == expected.text

    def test_completions_route(self, client, model):
        expected = model.generate("What is 12 + 30?")
        response = client.post("/v1/completions", json={"prompt": "What is 12 + 30?"})
        body = response.json()
        assert body["object"] == "text_completion"
        assert body["choices"][0]["text"] == expected.text


class TestStreaming:
    def stream(self, client, **body):
        with client.stream("POST", "/v1/chat/completions", json={"stream": True, **body}) as response:
            assert response.status_code == 200
            assert response.headers["content-type"].startswith("text/event-stream")
            return sse_events(response)

    def test_deltas_add_up_to_the_answer(self, client, model):
        expected = model.generate(messages=MESSAGE, **BLOCKS).text
        events = self.stream(client, messages=MESSAGE, **BLOCKS)
        assert events[-1] == (None, "[DONE]")
        chunks = [data for _, data in events[:-1]]
        text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
        assert text == expected
        assert sum(1 for c in chunks if c["choices"][0]["delta"].get("content")) >= 2  # really streamed
        assert [c["choices"][0]["finish_reason"] for c in chunks[:-1]] == [None] * (len(chunks) - 1)
        last = chunks[-1]
        assert last["choices"][0]["finish_reason"] == "stop"
        assert last["usage"]["completion_tokens"] == len(model.tokenizer.encode(expected))
        assert last["unmask"]["forward_passes"] >= 1

    def test_only_committed_text_is_sent(self, client, model):
        """Every delta extends text read off the committed prefix of the canvas event before it,
        and the first delta comes before the generation's last step."""
        events = self.stream(client, messages=MESSAGE, stream_canvas=True, **BLOCKS)
        sent, canvas, first_delta_step, last_step = "", None, None, None
        for name, data in events[:-1]:
            if name == "unmask.canvas":
                canvas, last_step = data, data["step"]
                continue
            content = data["choices"][0]["delta"].get("content")
            if content:
                sent += content
                committed = "".join(canvas["tokens"][:canvas["committed"]])
                assert committed.startswith(sent)
                first_delta_step = canvas["step"] if first_delta_step is None else first_delta_step
        assert first_delta_step is not None and first_delta_step < last_step

    def test_openai_client_streams(self, oai, model):
        expected = model.generate(messages=MESSAGE, **BLOCKS).text
        stream = oai.chat.completions.create(model="default", messages=MESSAGE, stream=True, extra_body=BLOCKS)
        chunks = list(stream)
        assert "".join(c.choices[0].delta.content or "" for c in chunks) == expected
        assert chunks[-1].choices[0].finish_reason == "stop"
        assert chunks[-1].usage.completion_tokens == len(model.tokenizer.encode(expected))

    def test_completions_stream(self, client, model):
        expected = model.generate("Send a message to Anna saying I will be late.", **BLOCKS).text
        with client.stream("POST", "/v1/completions", json={"prompt": "Send a message to Anna saying I will be late.",
                                                             "stream": True, **BLOCKS}) as response:
            events = sse_events(response)
        assert "".join(d["choices"][0]["text"] for _, d in events[:-1]) == expected


class TestToolsAndJson:
    def test_tool_call_through_the_openai_client(self, oai):
        reply = oai.chat.completions.create(model="default", messages=TIMER, tools=[TIMER_TOOL, WEATHER_TOOL])
        choice = reply.choices[0]
        assert choice.finish_reason == "tool_calls" and choice.message.content is None
        (call,) = choice.message.tool_calls
        assert call.type == "function" and call.function.name == "set_timer"
        assert json.loads(call.function.arguments) == {"minutes": 5}

    def test_tool_call_streamed(self, client):
        with client.stream("POST", "/v1/chat/completions",
                           json={"messages": TIMER, "tools": [TIMER_TOOL], "stream": True}) as response:
            chunks = [d for _, d in sse_events(response)[:-1]]
        calls = [c["choices"][0]["delta"]["tool_calls"] for c in chunks if "tool_calls" in c["choices"][0]["delta"]]
        assert [c[0]["function"]["name"] for c in calls] == ["set_timer"]
        assert not any(c["choices"][0]["delta"].get("content") for c in chunks)  # a call is never content
        assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"

    def test_tool_choice_none_keeps_the_text(self, client, model):
        body = chat(client, messages=TIMER, tools=[TIMER_TOOL], tool_choice="none")
        assert body["choices"][0]["message"]["content"] == model.generate(messages=TIMER).text

    def test_forced_tool_pins_the_frame(self, oai):
        asked = [{"role": "user", "content": "Set a timer for 7 minutes."}]
        reply = oai.chat.completions.create(model="default", messages=asked, tools=[TIMER_TOOL, WEATHER_TOOL],
                                            tool_choice={"type": "function", "function": {"name": "set_timer"}})
        (call,) = reply.choices[0].message.tool_calls
        arguments = json.loads(call.function.arguments)
        assert call.function.name == "set_timer" and set(arguments) == {"minutes"}
        assert isinstance(arguments["minutes"], int)

    def test_json_schema_answer_parses_and_validates(self, oai):
        schema = {"type": "object", "properties": {
            "city": {"type": "string", "maxLength": 10}, "count": {"type": "integer", "minimum": 1, "maximum": 50},
            "inner": {"type": "object", "properties": {"unit": {"type": "string", "minLength": 1}}}}}
        reply = oai.chat.completions.create(
            model="default", messages=TIMER,
            response_format={"type": "json_schema", "json_schema": {"name": "x", "schema": schema}})
        value = json.loads(reply.choices[0].message.content)
        assert list(value) == ["city", "count", "inner"]
        assert isinstance(value["city"], str) and len(value["city"]) <= 10
        assert isinstance(value["count"], int) and 1 <= value["count"] <= 50
        assert isinstance(value["inner"]["unit"], str) and len(value["inner"]["unit"]) >= 1

    def test_openai_client_parses_into_a_pydantic_model(self, oai):
        from pydantic import BaseModel

        class Timer(BaseModel):
            minutes: int
            label: str

        parse = getattr(oai.chat.completions, "parse", None) or oai.beta.chat.completions.parse  # moved in 1.9x
        reply = parse(model="default", messages=TIMER, response_format=Timer)
        assert isinstance(reply.choices[0].message.parsed, Timer)

    def test_json_schema_in_blocks(self, client):
        schema = {"type": "object", "properties": {"minutes": {"type": "integer"}, "note": {"type": "string"}}}
        body = chat(client, messages=TIMER, block_length=8, gen_length=64, response_format={
            "type": "json_schema", "json_schema": {"name": "timer", "schema": schema}})
        assert list(json.loads(body["choices"][0]["message"]["content"])) == ["minutes", "note"]
        assert body["usage"]["completion_tokens"] <= 64

    def test_json_object(self, client):
        for messages in (TIMER, REVERSE):
            body = chat(client, messages=messages, response_format={"type": "json_object"})
            assert isinstance(json.loads(body["choices"][0]["message"]["content"]), dict)


class TestBadInput:
    @pytest.mark.parametrize("body, status, param", [
        ({"messages": TIMER, "temperature": "hot"}, 400, "temperature"),
        ({"messages": TIMER, "bogus": 1}, 400, "bogus"),
        ({"messages": TIMER, "n": 2}, 400, "n"),
        ({"messages": TIMER, "threshold": 2.0}, 400, None),
        ({"messages": "hello"}, 400, "messages"),
        ({}, 400, "messages"),
        ({"messages": TIMER, "model": "gpt-4"}, 404, "model"),
        ({"messages": TIMER, "max_tokens": 0}, 400, "max_tokens"),
        ({"messages": TIMER, "tool_choice": "required", "tools": [TIMER_TOOL, WEATHER_TOOL]}, 400, None),
        ({"messages": TIMER, "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "array", "items": {"type": "string"}}}}}, 400, None),
        ({"messages": TIMER, "response_format": {"type": "json_schema", "json_schema": {
            "schema": {"type": "object", "properties": {"ok": {"type": "boolean"}}}}}}, 400, None),
    ])
    def test_dialect_error_object(self, client, body, status, param):
        response = client.post("/v1/chat/completions", json=body)
        assert response.status_code == status
        error = response.json()["error"]
        assert error["message"] and error["type"] and error["param"] == param

    @pytest.mark.parametrize("content", [b'{"messages": [', b"[" * 200_000, b'{"messages": NaN}', b"\xff\xfe{"])
    def test_malformed_json(self, client, content):
        response = client.post("/v1/chat/completions", content=content)
        assert response.status_code == 400 and "malformed JSON" in response.json()["error"]["message"]

    def test_prompt_over_the_context(self, client):
        long = [{"role": "user", "content": "apple " * 600}]
        response = client.post("/v1/chat/completions", json={"messages": long})
        assert response.status_code == 400 and response.json()["error"]["code"] == "context_length_exceeded"

    def test_unknown_route_and_method(self, client):
        assert client.get("/v1/nothing").json()["error"]["message"]
        assert client.get("/v1/chat/completions").status_code == 405

    def test_openai_client_raises_typed_errors(self, oai):
        with pytest.raises(openai.BadRequestError):
            oai.chat.completions.create(model="default", messages=TIMER, extra_body={"steps": 0})
        with pytest.raises(openai.NotFoundError):
            oai.chat.completions.create(model="gpt-4", messages=TIMER)
