"""A small OpenAI-compatible completions server that generates on a GPU, for checking
tokentrace's NVML telemetry (power, utilisation, energy, tokens per joule) on real
hardware where vLLM cannot be installed (bench/gpu.sh: the device machine has no package
registry, and vLLM's CUDA wheel is far over what can be carried there).

It is not an inference engine to measure: one engine thread runs each active request's
next token in turn (no batching) on a randomly initialised Llama of the size asked for,
with SmolLM2's tokenizer. It speaks what the recorder uses: /health, /v1/models,
/tokenize (vLLM's shape), /v1/completions streaming vLLM's chunk shape (usage per chunk
with continuous_usage_stats, a usage chunk with include_usage), and /metrics with
vllm:num_requests_running and _waiting (the recorder's drain barrier) and the token
counters. /version is not served: the report names no engine for it.

    python bench/gpu_server.py --tokenizer tokenizer.json --port 8011 [--layers 24 ...]
"""

import argparse
import asyncio
import json
import queue
import threading
import time

import torch
from aiohttp import web
from tokenizers import Tokenizer
from transformers import LlamaConfig, LlamaForCausalLM


class Request:
    def __init__(self, rid, prompt_ids, max_tokens, loop, sink):
        self.rid = rid
        self.prompt_ids = prompt_ids
        self.max_tokens = max_tokens
        self.loop = loop
        self.sink = sink  # asyncio.Queue: (token_id, text) or None at the end
        self.cancelled = False
        self.past = None
        self.last = None
        self.generated = 0


class Engine:
    """One thread: admits waiting requests (prefill), then one decode step for each."""

    def __init__(self, model, tokenizer, device, seed):
        self.model = model
        self.tokenizer = tokenizer
        self.device = device
        self.incoming = queue.Queue()
        self.running = []
        self.waiting = 0
        self.prompt_tokens_total = 0
        self.generation_tokens_total = 0
        self.lock = threading.Lock()
        self.gen = torch.Generator(device=device).manual_seed(seed)
        threading.Thread(target=self.run, daemon=True).start()

    def submit(self, req):
        with self.lock:
            self.waiting += 1
        self.incoming.put(req)

    def emit(self, req, token_id):
        text = self.tokenizer.decode([token_id])
        req.loop.call_soon_threadsafe(req.sink.put_nowait, (token_id, text))

    def sample(self, logits):
        probs = torch.softmax(logits[:, -1, :].float(), dim=-1)
        return torch.multinomial(probs, 1, generator=self.gen)

    @torch.inference_mode()
    def run(self):
        while True:
            block = not self.running
            try:
                while True:
                    req = self.incoming.get(block=block, timeout=None if block else 0)
                    block = False
                    with self.lock:
                        self.waiting -= 1
                    ids = torch.tensor([req.prompt_ids], device=self.device)
                    out = self.model(input_ids=ids, use_cache=True)
                    req.past = out.past_key_values
                    req.last = self.sample(out.logits)
                    token = int(req.last.item())
                    with self.lock:
                        self.prompt_tokens_total += len(req.prompt_ids)
                        self.generation_tokens_total += 1
                        self.running.append(req)
                    req.generated = 1
                    self.emit(req, token)
            except queue.Empty:
                pass
            for req in list(self.running):
                done = req.cancelled or req.generated >= req.max_tokens
                if not done:
                    out = self.model(input_ids=req.last, past_key_values=req.past, use_cache=True)
                    req.past = out.past_key_values
                    req.last = self.sample(out.logits)
                    req.generated += 1
                    with self.lock:
                        self.generation_tokens_total += 1
                    self.emit(req, int(req.last.item()))
                    done = req.generated >= req.max_tokens
                if done:
                    with self.lock:
                        self.running.remove(req)
                    req.past = None
                    req.loop.call_soon_threadsafe(req.sink.put_nowait, None)


def sse(obj):
    return ("data: " + json.dumps(obj, separators=(",", ":")) + "\n\n").encode()


def make_app(engine, tokenizer, name, max_model_len):
    counter = {"n": 0}

    def encode(prompt):
        if isinstance(prompt, list):
            return [int(t) for t in prompt]
        return tokenizer.encode(prompt, add_special_tokens=False).ids

    async def health(_):
        return web.Response(text="")

    async def models(_):
        return web.json_response({"object": "list", "data": [
            {"id": name, "object": "model", "created": 0, "owned_by": "tokentrace-bench",
             "root": name, "max_model_len": max_model_len}]})

    async def tokenize(request):
        body = await request.json()
        ids = encode(body.get("prompt", ""))
        return web.json_response({"count": len(ids), "max_model_len": max_model_len, "tokens": ids})

    async def metrics(_):
        with engine.lock:
            running, waiting = len(engine.running), engine.waiting
            prompt, gen = engine.prompt_tokens_total, engine.generation_tokens_total
        label = f'{{model_name="{name}"}}'
        lines = [
            "# TYPE vllm:num_requests_running gauge", f"vllm:num_requests_running{label} {running}",
            "# TYPE vllm:num_requests_waiting gauge", f"vllm:num_requests_waiting{label} {waiting}",
            "# TYPE vllm:prompt_tokens_total counter", f"vllm:prompt_tokens_total{label} {prompt}",
            "# TYPE vllm:generation_tokens_total counter", f"vllm:generation_tokens_total{label} {gen}",
        ]
        return web.Response(text="\n".join(lines) + "\n", content_type="text/plain")

    async def completions(request):
        body = await request.json()
        ids = encode(body.get("prompt", ""))
        max_tokens = int(body.get("max_tokens") or 16)
        if len(ids) + max_tokens > max_model_len:
            return web.json_response({"error": {
                "message": f"This model's maximum context length is {max_model_len} tokens. "
                           f"However, you requested {len(ids) + max_tokens} tokens.",
                "type": "BadRequestError", "param": "input_tokens", "code": 400}}, status=400)
        opts = body.get("stream_options") or {}
        continuous = bool(opts.get("continuous_usage_stats"))
        include_usage = bool(opts.get("include_usage"))
        counter["n"] += 1
        rid = f"cmpl-bench-{counter['n']}"
        created = int(time.time())
        sink = asyncio.Queue()
        req = Request(rid, ids, max_tokens, asyncio.get_running_loop(), sink)
        engine.submit(req)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        n = 0
        try:
            while True:
                item = await sink.get()
                if item is None:
                    break
                token_id, text = item
                n += 1
                choice = {"index": 0, "text": text, "logprobs": None,
                          "finish_reason": "length" if n >= max_tokens else None, "stop_reason": None}
                chunk = {"id": rid, "object": "text_completion", "created": created, "model": name,
                         "choices": [choice]}
                if continuous:
                    chunk["usage"] = {"prompt_tokens": len(ids), "total_tokens": len(ids) + n,
                                      "completion_tokens": n}
                await resp.write(sse(chunk))
            if include_usage:
                await resp.write(sse({"id": rid, "object": "text_completion", "created": created,
                                      "model": name, "choices": [],
                                      "usage": {"prompt_tokens": len(ids), "total_tokens": len(ids) + n,
                                                "completion_tokens": n}}))
            await resp.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            req.cancelled = True
            raise
        finally:
            req.cancelled = True
        return resp

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/v1/models", models)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_get("/metrics", metrics)
    app.router.add_post("/v1/completions", completions)
    return app


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokenizer", required=True, help="tokenizer.json (SmolLM2's)")
    ap.add_argument("--port", type=int, default=8011)
    ap.add_argument("--name", default="llama-random-1b")
    ap.add_argument("--layers", type=int, default=24)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--intermediate", type=int, default=8192)
    ap.add_argument("--heads", type=int, default=16)
    ap.add_argument("--max-model-len", type=int, default=8192)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()
    tokenizer = Tokenizer.from_file(args.tokenizer)
    torch.manual_seed(args.seed)
    config = LlamaConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=args.hidden,
                         intermediate_size=args.intermediate, num_hidden_layers=args.layers,
                         num_attention_heads=args.heads, num_key_value_heads=args.heads,
                         max_position_embeddings=args.max_model_len)
    dtype = torch.bfloat16 if args.device == "cuda" else torch.float32
    with torch.device(args.device):
        model = LlamaForCausalLM(config).to(dtype).eval()
    params = sum(p.numel() for p in model.parameters())
    engine = Engine(model, tokenizer, args.device, args.seed)
    print(json.dumps({"url": f"http://127.0.0.1:{args.port}", "device": args.device,
                      "params": params, "dtype": str(dtype)}), flush=True)
    web.run_app(make_app(engine, tokenizer, args.name, args.max_model_len),
                host="127.0.0.1", port=args.port, print=None)


if __name__ == "__main__":
    main()
