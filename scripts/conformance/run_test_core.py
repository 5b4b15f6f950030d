"""Runs Triton's language tests (python/test/unit/language/test_core.py of a Triton
checkout, release/3.4.x) against tilefuse on the CPU, with `triton` aliased to
`tilefuse`, and prints pass / fail / error counts and the failures grouped by cause.

    python scripts/conformance/run_test_core.py /path/to/triton/python/test/unit/language/test_core.py
    python scripts/conformance/run_test_core.py TEST_CORE [-k EXPR] [--json OUT] [--timeout S] [--groups N]

Triton's file is not part of this repository: it is copied into a temporary directory
next to a conftest.py (conftest_shim.py beside this script) that puts `triton`,
`triton.language`, `triton.runtime.*`, `triton.knobs` and `triton._internal_testing`
(Triton's own, loaded from the checkout) in sys.modules. The tests run in interpreter mode
(TRITON_INTERPRET=1, --device cpu), and only those marked `interpreter`, as Triton's CI
runs them on its own interpreter (`pytest -m interpreter`).
torch must be importable (PYTHONPATH). A crash of the process (a signal) is recorded as
an error of the test that was running and the run goes on after it.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def find_internal_testing(test_core: Path) -> Path:
    # test_core.py lives in python/test/unit/language/; the helpers in python/triton/.
    path = test_core.parents[3] / "triton" / "_internal_testing.py"
    if not path.is_file():
        sys.exit(f"error: {path} not found: give the test_core.py of a Triton checkout (python/test/unit/language/)")
    return path


def pytest_env(results: Path, internal: Path, args) -> dict:
    env = dict(os.environ)
    env.update(
        TRITON_INTERPRET="1",
        TILEFUSE_BACKEND="interp",
        CONFORMANCE_RESULTS=str(results),
        CONFORMANCE_INTERNAL_TESTING=str(internal),
        CONFORMANCE_TIMEOUT=str(args.timeout),
        PYTHONPATH=os.pathsep.join(p for p in [str(args.frontend), env.get("PYTHONPATH", "")] if p),
    )
    return env


def run_pytest(work: Path, env: dict, args) -> None:
    """Runs pytest until every collected test has a result; restarts it after a crash."""
    cmd = [sys.executable, "-m", "pytest", str(work / "test_core.py"), "-q", "-p", "no:cacheprovider"]
    cmd += ["--device", "cpu", "-o", "console_output_style=classic", "--no-header", "-rN", "--tb=no"]
    if args.k:
        cmd += ["-k", args.k]
    if not args.all:
        cmd += ["-m", "interpreter"]
    while True:
        rc = subprocess.call(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL if args.quiet else None)
        if rc >= 0 or not mark_crash(Path(env["CONFORMANCE_RESULTS"]), -rc):
            return


def mark_crash(results: Path, signum: int) -> bool:
    """Records the test that was running when the process died; False when none was."""
    started, done = None, set()
    for rec in read_records(results):
        if rec["kind"] == "start":
            started = rec["nodeid"]
        else:
            done.add(rec["nodeid"])
    if started is None or started in done:
        return False
    with results.open("a") as f:
        cause = f"Crash: the process died of signal {signum}"
        f.write(json.dumps({"kind": "result", "nodeid": started, "outcome": "error", "cause": cause}) + "\n")
    return True


def read_records(results: Path):
    if not results.exists():
        return []
    return [json.loads(line) for line in results.read_text().splitlines() if line.strip()]


def normalize(cause: str) -> str:
    """One group per message: drops the kernel's file:line:col and name, temporary paths, tile types."""
    cause = re.sub(r"\S+:\d+:\d+: error: ", "", cause)
    cause = re.sub(r"/tmp/\S+", "<tmp>", cause)
    cause = re.sub(r"tile<[^>]*>", "tile<...>", cause)
    cause = re.sub(r"LaunchError: \w+: ", "LaunchError: <kernel>: ", cause)
    return cause[:200]


def report(results: Path, groups: int, elapsed: float) -> dict:
    outcome = {}
    cause = {}
    for rec in read_records(results):
        if rec["kind"] == "result":
            outcome[rec["nodeid"]] = rec["outcome"]
            if rec["outcome"] in ("failed", "error"):
                cause[rec["nodeid"]] = normalize(rec["cause"])
    counts = collections.Counter(outcome.values())
    ran = counts["passed"] + counts["failed"] + counts["error"]
    print(f"\n{len(outcome)} tests in {elapsed / 60:.1f} min: " + ", ".join(f"{counts[k]} {k}" for k in sorted(counts)))
    if ran:
        print(f"pass rate over tests that ran (not skipped): {counts['passed']} / {ran} = {counts['passed'] / ran:.1%}")
    by_cause = collections.defaultdict(list)
    for nodeid, c in cause.items():
        by_cause[c].append(nodeid)
    print(f"\nfailures and errors by cause ({len(by_cause)} causes; the largest {groups}):")
    for c, ids in sorted(by_cause.items(), key=lambda kv: -len(kv[1]))[:groups]:
        tests = collections.Counter(i.split("::")[-1].split("[")[0] for i in ids)
        names = ", ".join(f"{t} ({n})" for t, n in tests.most_common(4))
        print(f"{len(ids):6d}  {c}\n        {names}")
    return {"counts": dict(counts), "causes": {c: sorted(ids) for c, ids in by_cause.items()}}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("test_core", type=Path, help="python/test/unit/language/test_core.py of a Triton checkout")
    p.add_argument("-k", help="pytest -k expression (a subset)")
    p.add_argument("--all", action="store_true", help="also tests not marked `interpreter` (Triton runs them on GPUs)")
    p.add_argument("--frontend", type=Path, default=REPO / "frontend", help="the tilefuse package's parent directory")
    p.add_argument("--json", type=Path, help="write the counts and each cause's test ids here")
    p.add_argument("--timeout", type=int, default=120, help="seconds one test may run (0: no limit)")
    p.add_argument("--groups", type=int, default=40, help="how many failure groups to print")
    p.add_argument("--quiet", action="store_true", help="hide pytest's progress output")
    args = p.parse_args()
    test_core = args.test_core.resolve()
    if not test_core.is_file():
        sys.exit(f"error: {test_core} is not a file")
    internal = find_internal_testing(test_core)
    with tempfile.TemporaryDirectory(prefix="tilefuse-conformance-") as tmp:
        work = Path(tmp)
        shutil.copy(test_core, work / "test_core.py")
        shutil.copy(HERE / "conftest_shim.py", work / "conftest.py")
        results = work / "results.jsonl"
        start = time.time()
        env = pytest_env(results, internal, args)
        run_pytest(work, env, args)
        if not any(r["kind"] == "result" for r in read_records(results)):
            # --tb=no hides why (a collection error): show it.
            subprocess.call([sys.executable, "-m", "pytest", "test_core.py", "--collect-only", "-q"], cwd=work, env=env)
            sys.exit("error: pytest ran no test")
        summary = report(results, args.groups, time.time() - start)
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
