"""The process and HTTP side of validation, against the stand-in server (kttune.validate.standin):
a real HTTP server process that speaks SGLang's API and logs in sglang-kt 0.7.2's formats, since
sglang-kt itself cannot run without a GPU. Everything on loopback."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import pytest

from kttune.cost.components import Components
from kttune.validate.run import ValidateRequest, run_validation
from kttune.net import free_port
from kttune.validate.server import ServerProcess, launch, wait_ready
from tests.helpers import cfg, model, profile

CHUNK, THRESHOLD = 2048, 1024
EMITTED = [
    "python",
    "-m",
    "sglang.launch_server",
    "--model",
    "/m",
    "--kt-method",
    "RAWINT4",
    "--chunked-prefill-size",
    str(CHUNK),
    "--kt-gpu-prefill-token-threshold",
    str(THRESHOLD),
    "--port",
    "30000",
]


def _request(tmp_path, mode="ok", timeout_s=30.0, lengths=(CHUNK, 300, 5000)):
    return ValidateRequest(
        EMITTED,
        cfg("RAWINT4", chunked_prefill_size=CHUNK, gpu_prefill_token_threshold=THRESHOLD),
        lengths,
        vocab_size=160_000,
        timeout_s=timeout_s,
        log_path=tmp_path / "server.log",
        server_module="kttune.validate.standin",
        env={"KTTUNE_STANDIN_MODE": mode, "KTTUNE_STANDIN_STARTUP_S": "0.2"},
    )


def _comp():
    return Components(profile("h200-pcie5-xeon-amx-16c"), model("Kimi-K2-Thinking"), "RAWINT4", 1)


def _dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"  # a zombie has exited
    except FileNotFoundError:
        return True


def _child_pid(log_text: str) -> int:
    return int(re.search(r"scheduler child pid=(\d+)", log_text).group(1))


def test_ready_by_polling_and_server_info(tmp_path):
    port = free_port()
    srv = launch(
        [sys.executable, "-m", "kttune.validate.standin", "--port", str(port), "--chunked-prefill-size", "4096"],
        tmp_path / "log",
        {"KTTUNE_STANDIN_STARTUP_S": "0.5"},
        port=port,
    )
    try:
        rd = wait_ready(srv, timeout_s=30, poll_s=0.05)
        assert rd.ready and rd.failure is None
        assert rd.server_info["chunked_prefill_size"] == 4096
        assert "The server is fired up and ready to roll!" in srv.log_text()
    finally:
        srv.stop()


def test_timeout_when_the_server_never_becomes_ready(tmp_path):
    res = run_validation(_request(tmp_path, "never-ready", timeout_s=1.0))
    assert not res.ok and res.stage == "startup" and res.failure is None
    assert "not ready after 1 s" in res.reason
    assert _dead(_child_pid((tmp_path / "server.log").read_text()))


def test_crash_at_startup_is_recognised(tmp_path):
    res = run_validation(_request(tmp_path, "crash"))
    assert not res.ok and res.stage == "startup"
    assert res.failure.kind == "crash" and res.failure.message.startswith("ValueError: stand-in start-up crash")
    assert res.measurements == ()


def test_oom_at_the_first_long_prompt_is_recognised(tmp_path):
    res = run_validation(_request(tmp_path, "oom"), _comp())
    assert not res.ok and res.stage == "prompts"
    assert res.failure.kind == "oom" and res.failure.alloc == "8.86 GiB"
    assert f"on a {CHUNK}-token prompt" in res.reason  # the chunk-sized prompt went first and hit it
    assert res.log.startup.kv_tokens is not None  # start-up had succeeded
    assert _dead(_child_pid((tmp_path / "server.log").read_text()))


def test_prompts_ttft_and_layerwise_lines(tmp_path):
    res = run_validation(_request(tmp_path), _comp())
    assert res.ok and res.stage == "done", res.reason
    first = res.measurements[0]
    assert (
        first.prompt_tokens == CHUNK and first.server_prompt_tokens == CHUNK
    )  # exactly the chunk, as the server saw it
    assert [m.prompt_tokens for m in res.measurements] == [CHUNK, 300, 5000]
    for m in res.measurements:
        assert len(m.ttft_ms) == 2 and all(t > 0 for t in m.ttft_ms)
    # the stand-in sleeps 5 us per hybrid token: a 300-token prefill cannot answer sooner
    assert min(res.measurements[1].ttft_ms) >= 300 * 5e-3
    # 3 MoE layers x (prepare, compute) per layerwise forward; 5000 tokens = 2 full chunks + a hybrid tail
    assert len(first.layerwise) == 2 * 3 * 2 and len(res.measurements[1].layerwise) == 0
    assert len(res.measurements[2].layerwise) == 2 * 2 * 3 * 2
    assert {r.ms for r in first.layerwise if r.kind == "prepare"} == {4.0}
    assert {e["path"] for e in res.comparison.corrections} == {
        "hybrid",
        "layerwise",
        "layerwise:load",
        "layerwise:compute",
    }


def test_stops_only_its_own_process_group(tmp_path):
    same_group = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
    own_session = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], start_new_session=True)
    try:
        res = run_validation(_request(tmp_path, lengths=(CHUNK,)))
        assert res.ok
        assert _dead(_child_pid((tmp_path / "server.log").read_text()))  # the server's own child went with it
        time.sleep(0.2)
        assert same_group.poll() is None and own_session.poll() is None  # the unrelated sleepers survive
    finally:
        for p in (same_group, own_session):
            p.kill()
            p.wait()


def test_refuses_to_signal_a_group_it_did_not_create(tmp_path):
    srv = ServerProcess(proc=None, pgid=os.getpgrp(), log_path=tmp_path / "x", host="127.0.0.1", port=1)
    with pytest.raises(RuntimeError):
        srv.stop()


def test_a_failure_left_in_an_old_log_does_not_count(tmp_path):
    assert run_validation(_request(tmp_path, "crash")).failure is not None
    res = run_validation(_request(tmp_path, lengths=(CHUNK,)))  # the same log file, a healthy server
    assert res.ok, res.reason
