"""Kill a writing command at random moments, many times, fast (tests/fuzz/test_kill.py).

    python killer.py SPEC.json RESULT.json

SPEC: {"argv": [...], "cwd": DIR, "output": PATH, "versions": DIR, "runs": 50, "seed": 1}.
KILLER_FAULTS=DIR keeps each child's stderr, with faulthandler's stacks of a crash, in
DIR/fault.PID. This process imports
the CLI and everything the command uses once, then forks a child per run (a fork costs
milliseconds, a fresh interpreter about a second). Each child runs the command with its
output to /dev/null; the parent sends SIGTERM or SIGINT (alternately) after a random delay
between 0 and 1.05 x the time a whole run takes, waits for the child, and records what the
output folder holds: each output file's SHA-256 (every new version's bytes are kept in
VERSIONS/SHA for the test to check) and any temporary file left.
Nothing here runs polars or numba code before forking (their thread pools must not be
copied into a child).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import signal
import sys
import time
from pathlib import Path


def _child(argv: list[str], cwd: str) -> None:
    os.chdir(cwd)
    null = os.open(os.devnull, os.O_WRONLY)
    os.dup2(null, 1)
    os.dup2(null, 2)
    if os.environ.get("KILLER_FAULTS"):  # a folder: a crashing child's stack and stderr
        import faulthandler

        log = open(f"{os.environ['KILLER_FAULTS']}/fault.{os.getpid()}", "w")  # noqa: SIM115
        os.dup2(log.fileno(), 2)  # what native code says too (glibc's "double free ...")
        faulthandler.enable(log, all_threads=True)
    from xmemplan.cli.main import run

    try:
        code = run(argv)
    except KeyboardInterrupt:  # SIGINT before run() took the signals: nothing written yet
        code = 130
    except BaseException:  # noqa: BLE001 - the exit status says it; the stack is kept
        code = 99
        if os.environ.get("KILLER_ESCAPED"):  # a folder: what escaped run(), for the test
            import traceback

            Path(os.environ["KILLER_ESCAPED"], f"escaped.{os.getpid()}").write_text(
                traceback.format_exc())
    os._exit(int(code))


def _once(argv: list[str], cwd: str, sig: int | None, delay: float) -> tuple[int, float]:
    t = time.perf_counter()
    pid = os.fork()
    if pid == 0:
        _child(argv, cwd)
    if sig is not None:
        time.sleep(delay)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, sig)
    _, status = os.waitpid(pid, 0)
    code = os.waitstatus_to_exitcode(status)
    return code, time.perf_counter() - t


def _state(output: Path, versions: Path) -> dict:
    """Temporary files left, and each output file's SHA-256 (new versions kept by hash)."""
    folder = output.parent if not output.is_dir() else output
    temps = sorted(str(p) for p in folder.rglob("*.tmp"))
    files = {}
    for p in sorted([output] if output.is_file() else output.rglob("*") if output.is_dir()
                    else []):
        if p.is_file():
            data = p.read_bytes()
            sha = hashlib.sha256(data).hexdigest()
            files[str(p)] = sha
            keep = versions / sha
            if not keep.exists():
                keep.write_bytes(data)
    return {"temps": temps, "files": files}


def main() -> int:
    spec = json.loads(Path(sys.argv[1]).read_text())
    import importlib
    import pkgutil

    import xmemplan

    for mod in spec.get("preload", []):
        __import__(mod)
    for info in pkgutil.walk_packages(xmemplan.__path__, "xmemplan."):  # imports run nothing
        if not info.name.endswith("__main__"):
            with contextlib.suppress(ImportError):  # an optional extra not installed
                importlib.import_module(info.name)
    import matplotlib

    matplotlib.use("Agg")
    argv, cwd, output = spec["argv"], spec["cwd"], Path(spec["output"])
    rnd = random.Random(spec.get("seed", 1))
    versions = Path(spec["versions"])
    versions.mkdir(exist_ok=True)
    escaped = Path(spec["versions"]).parent / "escaped"
    escaped.mkdir(exist_ok=True)
    os.environ["KILLER_ESCAPED"] = str(escaped)
    code, whole = _once(argv, cwd, None, 0.0)  # the previous output, and how long a run takes
    runs: list[dict] = []
    result = {"first": {"code": code, "seconds": whole, **_state(output, versions)}, "runs": runs}
    for i in range(spec.get("runs", 50)):
        sig = signal.SIGTERM if i % 2 == 0 else signal.SIGINT
        delay = rnd.uniform(0.0, 1.05 * whole)
        code, took = _once(argv, cwd, sig, delay)
        run = {"signal": int(sig), "delay": delay, "code": code, "seconds": took,
               **_state(output, versions)}
        if code == 99:  # the exception run() let out, named in the test's failure
            logs = sorted(escaped.glob("escaped.*"))
            run["escaped"] = logs[-1].read_text()[-2000:] if logs else ""
            for f in logs:
                f.unlink()
        runs.append(run)
    Path(sys.argv[2]).write_text(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
