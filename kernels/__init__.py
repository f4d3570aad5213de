"""The operations the hybrid and layerwise paths run (installed as `kttune.kernels`).

- `expert_weights`: routed-expert weights for every method: formats, random synthesis, quantisation,
  and stage A (experts written in GPU layout into pinned host slots by kt-kernel's
  `write_weight_scale_to_buffer_task`, or torch copies).
- `kt_ext`, `kt_pool`, `kt_moe`: kt-kernel's extension, its worker pools, and one kt-kernel MoE layer
  (forward for the hybrid path's CPU experts, stage A writes for the layerwise path).
- `cpu_moe`: the torch CPU MoE reference and fallback beside kt-kernel.
- `int4`, `triton_int4`: the int4 g32 format, the stage C repack (Triton) and the int4 MoE GEMM.
- `grouped_moe`, `routing`: GPU MoE compute for bf16 / fp8 / int4 experts.
- `attention`: prefill attention (GQA by SDPA, MLA prefill form); `attention_shape`: one layer's attention
  dimensions (torch-free), what `decoder` builds and the attention probe measures.

Each GPU kernel has a torch path that runs on the CPU, checked against a float64 reference.
"""
