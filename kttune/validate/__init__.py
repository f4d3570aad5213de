"""`kttune validate`: run the emitted launch command as a real sglang-kt server, send prompts of the
workload's lengths (and one of exactly the chunk size), and compare TTFT and KT's log lines with
the prediction. Pure parts: logs, plan, compare. Edges: server (process, HTTP), run."""
