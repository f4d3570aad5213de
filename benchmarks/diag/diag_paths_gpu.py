"""Where the CUDA hybrid path's output departs from the dense reference (small shapes): the CPU part
alone (n=0) synchronous vs on the stream, the GPU part alone (n=E), and the split."""

import torch

from kttune.kernels.grouped_moe import moe_reference
from kttune.runner.path_runner import PathRunner
from diag_common import diag_stack
from kttune.runner.stack import small_spec
from kttune.spec.loader import load_model


def rel(a, b):
    return ((a.double().cpu() - b.double().cpu()).abs().mean() / b.double().cpu().abs().mean()).item()


for name, method in (("qwen3-30b-a3b", "BF16"), ("kimi-k2-thinking", "RAWINT4")):
    spec = load_model(name, method)
    st = diag_stack(small_spec(spec, 512, 256, 32), method, router=spec.router, layers=1, threads=4, max_tokens=256)
    r = PathRunner(st)
    g, u, d = st.host.dense()
    h = torch.randn(24, 512, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16).cuda()
    for n in (0, 5, 32):
        st.set_gpu_experts(n)
        y, ids, w = r.moe_output(h, "hybrid")
        ref = moe_reference(h, torch.cat([g, u], 1), d, ids, w)
        yl, _, _ = r.moe_output(h, "layerwise")
        print(
            name,
            method,
            "n",
            n,
            "hybrid vs dense",
            round(rel(y, ref), 4),
            "layerwise vs dense",
            round(rel(yl, ref), 4),
            flush=True,
        )
    st.set_gpu_experts(0)
    ids2 = ids.cpu()
    out = torch.zeros(24, 512, dtype=torch.bfloat16)
    st.cpu.forward(h.cpu(), ids2.contiguous(), w.cpu().contiguous(), out)
    print(name, "kt sync n=0 vs dense", round(rel(out, ref), 4), flush=True)
    st.close()
