"""A stand-in for `python -m sglang.launch_server`, for testing `kttune validate` where sglang-kt
cannot run (no GPU). It is a real HTTP server process (standard library only) that:

- accepts sglang-kt's launch flags (the ones it reads are below; the rest are ignored);
- speaks the part of SGLang's HTTP API validation uses: GET /health (503 while starting, then 200),
  /health_generate, /server_info and /get_server_info (server args as JSON), POST /generate with
  `input_ids`, `sampling_params.max_new_tokens` and `stream` (server-sent events ending in
  `data: [DONE]`);
- prints its log in sglang-kt 0.7.2's formats (docs/validate.md lists them with their sources): the
  start-up memory lines, `KT layerwise prefill: layer N prepare weight = X ms` / `compute = X ms` for
  every MoE layer of every forward that reaches the threshold, and the ready line;
- spawns a child process, as SGLang spawns its scheduler, so tests can check that stopping the
  server's process group stops its children too.

Simulated times: a hybrid forward of M tokens sleeps M x HYBRID_US_PER_TOKEN; a layerwise forward
sleeps, per MoE layer, PREPARE_MS + M x COMPUTE_US_PER_TOKEN. Modes (KTTUNE_STANDIN_MODE):
  ok          serve normally
  oom         the first forward that reaches the threshold fails with torch's CUDA OOM (the lazily
              allocated layerwise slot), the server logs it and exits
  crash       start-up fails (an exception in the scheduler), the server exits
  never-ready /health answers 503 forever
Knobs (environment): KTTUNE_STANDIN_STARTUP_S, _LAYERS, _HYBRID_US_PER_TOKEN, _PREPARE_MS,
_COMPUTE_US_PER_TOKEN.

Not part of kttune's job: used by tests/validate and to demonstrate `kttune validate`
(`--server-module kttune.validate.standin`).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kttune.spec.forwards import forward_plan
from kttune.units import GIB

_LOCK = threading.Lock()
_STATE = {"ready": False, "failed": False}


def _env_float(name: str, default: float) -> float:
    return float(os.environ.get(f"KTTUNE_STANDIN_{name}", default))


def _stamp(tp: bool) -> str:
    return "[" + time.strftime("%Y-%m-%d %H:%M:%S") + (" TP0" if tp else "") + "] "


def log(msg: str, tp: bool = True) -> None:
    with _LOCK:
        sys.stdout.write(_stamp(tp) + msg + "\n")
        sys.stdout.flush()


def _die(lines: list[str]) -> None:
    """What SGLang prints when a scheduler fails: its exception with the traceback, then the
    parent's SIGQUIT line; then the process tree goes away."""
    log("Scheduler hit an exception: Traceback (most recent call last):")
    with _LOCK:
        for ln in lines:
            sys.stdout.write(ln + "\n")
        sys.stdout.flush()
    log("Received sigquit from a child process. It usually means the child failed.", tp=False)
    os._exit(1)


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument("--model", "--model-path", dest="model", default="model")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=30000)
    p.add_argument("--chunked-prefill-size", type=int, default=8192)
    p.add_argument("--kt-gpu-prefill-token-threshold", type=int, default=0)
    p.add_argument("--kt-method", default="AMXINT4")
    p.add_argument("--kt-num-gpu-experts", type=int, default=0)
    p.add_argument("--max-total-tokens", type=int, default=65536)
    p.add_argument("--max-running-requests", type=int, default=32)
    p.add_argument("--context-length", type=int, default=131072)
    p.add_argument("--tensor-parallel-size", "--tp-size", dest="tp", type=int, default=1)
    args, _ = p.parse_known_args(argv)
    return args


class Sim:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.layers = int(_env_float("LAYERS", 3))
        self.hybrid_us = _env_float("HYBRID_US_PER_TOKEN", 5.0)
        self.prepare_ms = _env_float("PREPARE_MS", 4.0)
        self.compute_us = _env_float("COMPUTE_US_PER_TOKEN", 0.5)
        self.mode = os.environ.get("KTTUNE_STANDIN_MODE", "ok")
        self.forward_lock = threading.Lock()  # one forward at a time, as one scheduler runs them

    def prefill(self, tokens: int) -> None:
        c = self.args.chunked_prefill_size if self.args.chunked_prefill_size > 0 else tokens
        thr = self.args.kt_gpu_prefill_token_threshold
        # sglang-kt's chunks and switch; the switch fires for any method (a non-native one crashes)
        for path, m, _ in forward_plan(True, tokens, c, thr):
            with self.forward_lock:
                if path == "layerwise":
                    if self.mode == "oom":
                        _die(
                            [
                                '  File "sglang/srt/layers/moe/kt_ep_wrapper.py", line 2694, in load',
                                "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 8.86 GiB. GPU 0 has a total "
                                "capacity of 139.81 GiB of which 2.10 GiB is free. Of the allocated memory 131.20 GiB is "
                                "allocated by PyTorch, and 1.02 GiB is reserved by PyTorch but unallocated.",
                            ]
                        )
                    for layer in range(1, self.layers + 1):
                        time.sleep(self.prepare_ms / 1e3)
                        log(f"KT layerwise prefill: layer {layer} prepare weight = {self.prepare_ms:.2f} ms")
                        comp = m * self.compute_us / 1e3
                        time.sleep(comp / 1e3)
                        log(f"KT layerwise prefill: layer {layer} compute = {comp:.2f} ms")
                else:
                    time.sleep(m * self.hybrid_us / 1e6)


def make_handler(sim: Sim):
    args = sim.args

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *a):  # uvicorn-like access line
            log(
                f'INFO:     {self.client_address[0]}:{self.client_address[1]} - "{self.requestline}" {a[1] if len(a) > 1 else ""}',
                tp=False,
            )

        def _json(self, status: int, obj) -> None:
            body = json.dumps(obj).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self):
            if self.path in ("/health", "/health_generate"):
                if not _STATE["ready"]:
                    self.send_response(503)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                if self.path == "/health_generate":
                    sim.prefill(1)
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()
            elif self.path in ("/server_info", "/get_server_info"):
                self._json(
                    200,
                    {
                        "model_path": args.model,
                        "chunked_prefill_size": args.chunked_prefill_size,
                        "kt_gpu_prefill_token_threshold": args.kt_gpu_prefill_token_threshold,
                        "kt_method": args.kt_method,
                        "kt_num_gpu_experts": args.kt_num_gpu_experts,
                        "max_total_tokens": args.max_total_tokens,
                        "tp_size": args.tp,
                        "max_total_num_tokens": args.max_total_tokens,
                        "version": "0.7.2 (kttune stand-in)",
                    },
                )
            else:
                self._json(404, {"detail": "Not Found"})

        def do_POST(self):
            if self.path != "/generate":
                self._json(404, {"detail": "Not Found"})
                return
            n = int(self.headers.get("Content-Length", "0"))
            try:
                req = json.loads(self.rfile.read(n))
                ids = req["input_ids"]
                max_new = int(req.get("sampling_params", {}).get("max_new_tokens", 16))
            except (ValueError, KeyError, TypeError) as e:
                self._json(400, {"error": {"message": f"bad request: {e}"}})
                return
            t0 = time.perf_counter()
            sim.prefill(len(ids))
            outs = []
            for i in range(max(1, max_new)):
                if i:
                    time.sleep(0.002)
                outs.append(
                    {
                        "text": "x" * (i + 1),
                        "output_ids": list(range(i + 1)),
                        "meta_info": {
                            "id": "standin",
                            "prompt_tokens": len(ids),
                            "completion_tokens": i + 1,
                            "finish_reason": None if i + 1 < max_new else {"type": "length", "length": max_new},
                            "e2e_latency": time.perf_counter() - t0,
                        },
                    }
                )
            if not req.get("stream"):
                self._json(200, outs[-1])
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Connection", "close")
            self.end_headers()
            for o in outs:
                self.wfile.write(b"data: " + json.dumps(o).encode() + b"\n\n")
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
            self.wfile.flush()
            self.close_connection = True

    return Handler


def main(argv: list[str] | None = None) -> None:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    sim = Sim(args)
    startup_s = _env_float("STARTUP_S", 0.3)
    # SGLang runs its scheduler in a child process; so does the stand-in (it only sleeps)
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    log(f"kttune stand-in for sglang-kt 0.7.2 (not a real server); scheduler child pid={child.pid}", tp=False)
    server = ThreadingHTTPServer((args.host, args.port), make_handler(sim))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    time.sleep(startup_s / 2)
    log(
        f"Load weight end. elapsed={startup_s / 2:.2f} s, type=DeepseekV3ForCausalLM, dtype=torch.bfloat16, "
        "avail mem=96.41 GB, mem usage=42.37 GB."
    )
    if sim.mode == "crash":
        _die(
            [
                '  File "sglang/srt/managers/scheduler.py", line 3240, in run_scheduler_process',
                "ValueError: stand-in start-up crash (KTTUNE_STANDIN_MODE=crash)",
            ]
        )
    kv_gib = args.max_total_tokens * 70272 / GIB  # Kimi-K2's MLA cell, as an example
    log(f"KV Cache is allocated. #tokens: {args.max_total_tokens}, KV size: {kv_gib:.2f} GB")
    log(f"Memory pool end. avail mem={96.41 - kv_gib:.2f} GB")
    log(
        f"max_total_num_tokens={args.max_total_tokens}, chunked_prefill_size={args.chunked_prefill_size}, "
        f"max_prefill_tokens=16384, max_running_requests={args.max_running_requests}, "
        f"context_len={args.context_length}, available_gpu_mem={96.41 - kv_gib - 1.5:.2f} GB"
    )
    time.sleep(startup_s / 2)
    if sim.mode == "never-ready":
        while True:
            time.sleep(3600)
    log(f"INFO:     Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)", tp=False)
    _STATE["ready"] = True
    log("The server is fired up and ready to roll!", tp=False)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
