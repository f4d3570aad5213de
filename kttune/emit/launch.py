"""The launch command as text to copy: the environment, then the argv of kttune.search.launch,
one flag per line."""

from __future__ import annotations

import shlex

from kttune.search.launch import ENV


def launch_command(argv: list[str], multiline: bool = True) -> str:
    env = " ".join(f"{k}={v}" for k, v in ENV.items())
    if not multiline:
        return env + " " + shlex.join(argv)
    # one environment assignment per line, then one flag per line: every line stays within 60
    # columns for copying (a flag with a long path excepted)
    lines, i = [f"{k}={v}" for k, v in ENV.items()] + [shlex.join(argv[:3])], 3
    while i < len(argv):
        j = i + 1
        while argv[i].startswith("--") and j < len(argv) and not argv[j].startswith("--"):
            j += 1  # a flag with its values (--kt-numa-nodes takes one per pool) on one line
        lines.append("  " + " ".join([argv[i]] + [shlex.quote(v) for v in argv[i + 1 : j]]))
        i = j
    return " \\\n".join(lines)
