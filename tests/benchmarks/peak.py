"""Peak memory of a child Python process, read from its own /proc/self/status (VmHWM).

`ru_maxrss` from wait4 is not usable here: Linux carries the parent's high-water mark
into the child across fork + exec, so a big benchmark process would hide a small child.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile


def run_with_peak(code: str, check: bool = True) -> tuple[int, float]:
    """Run `code` in a fresh interpreter; return (exit code, peak RSS in MiB)."""
    fd, out = tempfile.mkstemp(suffix=".hwm")
    os.close(fd)
    wrapper = (
        "import atexit\n"
        "def _hwm():\n"
        "    for line in open('/proc/self/status'):\n"
        "        if line.startswith('VmHWM:'):\n"
        f"            open({out!r}, 'w').write(line.split()[1])\n"
        "atexit.register(_hwm)\n" + code
    )
    proc = subprocess.run([sys.executable, "-c", wrapper], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if check and proc.returncode not in (0, 1):
        raise RuntimeError(proc.stderr.decode(errors="replace")[-2000:])
    with open(out) as handle:
        peak_kib = int(handle.read().strip() or 0)
    os.unlink(out)
    return proc.returncode, peak_kib / 1024
