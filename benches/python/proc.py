"""What ``/proc`` says of a process, for the benchmarks."""

import os


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of a process so far (``/proc/PID/stat``)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
