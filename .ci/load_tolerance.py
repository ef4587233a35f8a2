"""The tolerance of .ci/steps/aiperf.sh's live checks: 15%, widened only while the machine
is oversubscribed, and never past a bound that a real regression still fails.

    python .ci/load_tolerance.py        # prints: TOLERANCE SENTENCE (one line)

The live checks time tests/live_server.py through AIPerf on loopback: the server sleeps the
model's TTFT (40-50 ms for the example rows), and what AIPerf measures on top is scheduling
delay of the server's threads and AIPerf's own processes. On an idle machine that is 1-3 ms
(5% error); with load 4-6 on 2 cores one run measured 18.9%, over the 15% tolerance, with
nothing wrong. The delay grows with how many runnable processes share a core, so while the
1-minute load average per core is above 1 the tolerance is 15% x that ratio, at most 30%:
the check's own 1.5x slower server (about 50% error) and a 2x regression (100%) still fail.
"""

from __future__ import annotations

import os
import sys

BASE = 0.15  # validate's default --tolerance
CAP = 0.30  # widest: below the 1.5x slow server's ~50%, which must still fail (exit 5)


def tolerance(load: float, cores: int, base: float = BASE, cap: float = CAP
              ) -> tuple[float, str]:
    """(tolerance, the sentence that says why) for a 1-minute load average on `cores`."""
    per_core = load / max(1, cores)
    said = f"load average {load:.1f} on {cores} cores ({per_core:.2f} per core)"
    if per_core <= 1.0:
        return base, f"{said}: tolerance {base:.0%}"
    tol = min(cap, base * per_core)
    return round(tol, 4), (f"{said}, oversubscribed: tolerance widened to {tol:.1%} "
                           f"({base:.0%} x load per core, at most {cap:.0%}; a 1.5x slower "
                           "server still fails)")


def main() -> int:
    load = os.getloadavg()[0]
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # not on Linux
        cores = os.cpu_count() or 1
    tol, said = tolerance(load, cores)
    print(f"{tol:g} {said}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
