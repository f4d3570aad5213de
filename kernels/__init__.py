"""The operations the hybrid and layerwise paths run (installed as `kttune.kernels`).

- `cpu_moe`: CPU expert MoE fallback (torch) beside kt-kernel.
- `expert_writer`: stage A, experts written in GPU layout into pinned host slots (kt-kernel's
  `write_weight_scale_to_buffer_task`, or torch copies).
- `int4`, `triton_int4`: the int4 g32 format, the stage C repack (Triton) and the int4 MoE GEMM.
- `grouped_moe`, `routing`: GPU MoE compute for bf16 / fp8 / int4 experts.
- `attention`: prefill attention (GQA by SDPA, MLA prefill form).

Each GPU kernel has a torch path that runs on the CPU, checked against a float64 reference.
"""
