from dataclasses import replace

from kttune.memory.host import cpu_expert_bytes, host_ram_breakdown
from kttune.units import GB
from tests.helpers import cfg, model


def test_all_experts_stay_in_host_ram_whatever_the_gpu_expert_count():
    # ktransformers#2084: host RAM does not shrink as experts move to the GPU
    m = model("deepseek-v3")
    a = host_ram_breakdown(m, cfg("FP8", num_gpu_experts=0)).total_bytes
    b = host_ram_breakdown(m, cfg("FP8", num_gpu_experts=64)).total_bytes
    assert a == b


def test_cpu_experts_in_the_methods_format():
    m = model("kimi-k2-thinking")
    # docs/model-configs.md#sizes-derived-from-the-configs: K2-Thinking routed bytes total 570.8 GB in INT4 g32
    assert abs(cpu_expert_bytes(m, "RAWINT4") / GB - 570.76) < 0.1
    assert cpu_expert_bytes(m, "BF16") > 3 * cpu_expert_bytes(m, "RAWINT4")


def test_cpu_scratch_grows_with_the_chunk():
    m = model("kimi-k2-thinking")
    c = cfg("RAWINT4")
    small = host_ram_breakdown(m, replace(c, chunked_prefill_size=4096)).cpu_scratch
    big = host_ram_breakdown(m, replace(c, chunked_prefill_size=32768)).cpu_scratch
    assert big > 4 * small
