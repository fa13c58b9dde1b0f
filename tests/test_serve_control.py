"""`unmask serve` under load and misuse: the FIFO queue, cancellation by disconnect, auth,
body limits, failures inside a generation, health and metrics."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest
from serve_helpers import metrics, one_token_per_step_model, running, sse_events, wait_for


TIMER = [{"role": "user", "content": "Set a timer for 5 minutes."}]
SLOW = {"step_delay_seconds": 0.05}  # 32 steps: about 1.6 s a generation
LONG = {"gen_length": 32, "block_length": 4}  # commits left to right: deltas come early


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    return one_token_per_step_model(tmp_path_factory.mktemp("serve-control"))


class TestQueue:
    def test_full_queue_answers_503_with_retry_after(self, model):
        with running(model, queue_limit=1, retry_after_seconds=3, **SLOW) as base, \
                httpx.Client(base_url=base, timeout=60) as client:
            with client.stream("POST", "/v1/chat/completions",
                               json={"messages": TIMER, "stream": True, **LONG}) as first:
                lines = first.iter_lines()
                next(line for line in lines if '"content": "{' in line)  # running: its first text arrived
                waiting = {}
                thread = threading.Thread(target=lambda: waiting.update(
                    r=client.post("/v1/chat/completions", json={"messages": TIMER})))
                thread.start()
                wait_for(lambda: client.get("/health").json()["queue_depth"] == 1)
                refused = client.post("/v1/chat/completions", json={"messages": TIMER})
                assert refused.status_code == 503
                assert refused.headers["retry-after"] == "3"
                assert refused.json()["error"]["code"] == "queue_full"
                refused = client.post("/api/chat", json={"messages": TIMER, "stream": False})
                assert refused.status_code == 503 and "busy" in refused.json()["error"]
                list(lines)
            thread.join()
            assert waiting["r"].status_code == 200  # the queued request ran after the first
            assert waiting["r"].json()["choices"][0]["message"]["content"] == model.generate(messages=TIMER).text
            counts = metrics(client)
            assert counts["unmask_rejected_total"] == 2 and counts["unmask_completed_total"] == 2

    def test_concurrent_requests_run_in_arrival_order(self, model):
        prompts = ["Set a timer for 5 minutes.", "What is 12 + 30?", "Reverse: apple, pear, kiwi"]
        expected = [model.generate(p).text for p in prompts]
        with running(model, **SLOW) as base, httpx.Client(base_url=base, timeout=60) as client:
            results, finished = [None] * len(prompts), []

            def ask(i):
                results[i] = client.post("/v1/completions", json={"prompt": prompts[i]}).json()["choices"][0]["text"]
                finished.append(i)

            threads = [threading.Thread(target=ask, args=(i,)) for i in range(len(prompts))]
            for i, thread in enumerate(threads):
                thread.start()  # each one arrives once the one before is running or waiting
                wait_for(lambda: metrics(client)["unmask_running"] + metrics(client)["unmask_queue_depth"] == i + 1)
            for thread in threads:
                thread.join()
            assert results == expected
            assert finished == [0, 1, 2]


class TestCancellation:
    def test_closing_a_stream_stops_its_generation(self, model):
        with running(model, **SLOW) as base, httpx.Client(base_url=base, timeout=60) as client:
            with client.stream("POST", "/v1/chat/completions",
                               json={"messages": TIMER, "stream": True, **LONG}) as response:
                for line in response.iter_lines():
                    if '"content": "{' in line:
                        break  # one chunk read; leaving the block closes the connection
            wait_for(lambda: metrics(client)["unmask_cancelled_total"] == 1)
            counts = metrics(client)
            assert counts["unmask_forward_passes_total"] < 32  # stopped early
            assert counts["unmask_running"] == 0
            after = client.post("/v1/chat/completions", json={"messages": TIMER})
            assert after.status_code == 200 and after.json()["choices"][0]["finish_reason"] == "stop"

    def test_a_non_streaming_client_that_leaves_cancels_too(self, model):
        with running(model, **SLOW) as base, httpx.Client(base_url=base, timeout=60) as client:
            with pytest.raises(httpx.ReadTimeout):
                httpx.post(base + "/api/generate", json={"prompt": "Set a timer for 5 minutes.", "stream": False},
                           timeout=0.4)
            wait_for(lambda: metrics(client)["unmask_cancelled_total"] == 1)
            assert metrics(client)["unmask_forward_passes_total"] < 32


@pytest.fixture(scope="module")
def keyed_base(model):
    """One server that wants the key s3cret, shared by TestAuth."""
    with running(model, api_key="s3cret") as url:
        yield url


class TestAuth:
    def test_every_route_but_health_needs_the_key(self, keyed_base):
        with httpx.Client(base_url=keyed_base, timeout=60) as client:
            assert client.get("/health").status_code == 200
            for method, path in (("GET", "/v1/models"), ("GET", "/api/tags"), ("GET", "/metrics"),
                                 ("POST", "/v1/chat/completions"), ("POST", "/api/chat")):
                response = client.request(method, path, json={"messages": TIMER})
                assert response.status_code == 401, path
            assert client.get("/v1/models", headers={"Authorization": "Bearer wrong"}).status_code == 401
            assert client.get("/v1/models", headers={"Authorization": "Bearer s3cret"}).status_code == 200
            assert client.get("/api/tags", headers={"Authorization": "bearer s3cret"}).status_code == 200

    def test_openai_client(self, keyed_base, model):
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=keyed_base + "/v1", api_key="wrong", max_retries=0).models.list()
        good = openai.OpenAI(base_url=keyed_base + "/v1", api_key="s3cret", max_retries=0)
        reply = good.chat.completions.create(model="default", messages=TIMER)
        assert reply.choices[0].message.content == model.generate(messages=TIMER).text


class TestLimits:
    def test_oversize_body(self, model):
        with running(model, max_body_bytes=4096) as base, httpx.Client(base_url=base, timeout=60) as client:
            big = [{"role": "user", "content": "x" * 5000}]
            response = client.post("/v1/chat/completions", json={"messages": big})
            assert response.status_code == 413 and response.json()["error"]["message"]
            response = client.post("/api/chat", json={"messages": big})
            assert response.status_code == 413 and "limit" in response.json()["error"]
            assert client.post("/v1/chat/completions", json={"messages": TIMER}).status_code == 200


class _FailsMidway:
    """The real model, except that its generations raise after the first step."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        return getattr(self._model, name)

    def stream(self, *args, **kwargs):
        events = self._model.stream(*args, **kwargs)

        def failing():
            yield next(events)
            raise RuntimeError("the accelerator fell off")
        return failing()


class TestFailures:
    def test_a_failed_generation_does_not_take_the_server_down(self, model):
        with running(_FailsMidway(model)) as base, httpx.Client(base_url=base, timeout=60) as client:
            response = client.post("/v1/chat/completions", json={"messages": TIMER})
            assert response.status_code == 500
            assert "RuntimeError" in response.json()["error"]["message"]
            assert "Traceback" not in response.text
            with client.stream("POST", "/v1/chat/completions", json={"messages": TIMER, "stream": True}) as r:
                events = sse_events(r)
            assert events[-1] == (None, "[DONE]") and "error" in events[-2][1]
            with client.stream("POST", "/api/chat", json={"messages": TIMER}) as r:
                assert "error" in list(r.iter_lines())[-1]
            assert metrics(client)["unmask_failed_total"] == 3
            assert client.get("/health").json()["status"] == "ok"
            assert client.get("/v1/models").status_code == 200


class TestCommand:
    def test_unmask_serve_runs_and_stops(self):
        import socket
        import subprocess
        import sys
        import time

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        process = subprocess.Popen([sys.executable, "-m", "unmask", "serve", "--port", str(port), "--api-key", "k",
                                    "--name", "tiny"], stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    health = httpx.get(f"http://127.0.0.1:{port}/health")
                    break
                except httpx.TransportError:
                    assert process.poll() is None and time.monotonic() < deadline, "unmask serve did not start"
                    time.sleep(0.1)
            assert health.json()["model"] == "tiny"
            models = httpx.get(f"http://127.0.0.1:{port}/v1/models", headers={"Authorization": "Bearer k"})
            assert [m["id"] for m in models.json()["data"]] == ["tiny"]
        finally:
            process.terminate()
            _, err = process.communicate(timeout=30)
        assert f"serving tiny on http://127.0.0.1:{port}" in err and "warning" not in err
