"""Runs Triton's language tests (python/test/unit/language/test_core.py of a Triton
checkout, release/3.4.x) against tilefuse, with `triton` aliased to `tilefuse`, and prints
pass / fail / error counts and the failures grouped by cause.

    python scripts/conformance/run_test_core.py /path/to/triton/python/test/unit/language/test_core.py
    python scripts/conformance/run_test_core.py TEST_CORE [-k EXPR] [--json OUT] [--timeout S] [--groups N]
    python scripts/conformance/run_test_core.py TEST_CORE --device cuda -n 16 --sample 2000

Triton's file is not part of this repository: it is copied into a temporary directory
next to a conftest.py (conftest_shim.py beside this script) that puts `triton`,
`triton.language`, `triton.runtime.*`, `triton.knobs` and `triton._internal_testing`
(Triton's own: triton/_internal_testing.py and _utils.py, found in the checkout or beside
test_core.py, so that the three files can travel alone) in sys.modules. By default the
tests run in interpreter mode (TRITON_INTERPRET=1, --device cpu); with --device cuda the
same cases run on the GPU (torch CUDA tensors, TILEFUSE_BACKEND=cuda; the real triton is
never imported). Only tests marked `interpreter` run, as Triton's CI runs them on its own
interpreter (`pytest -m interpreter`), unless --all.
-n N runs N pytest processes on disjoint shards of the tests (by a hash of the test id; no
pytest-xdist needed); --sample K keeps about K tests, a deterministic subset stratified by
test function (each function keeps its share, at least one). torch must be importable
(PYTHONPATH). A crash of a process (a signal) is recorded as an error of the test that was
running and that shard goes on after it.
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
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]


def find_internal_testing(test_core: Path) -> Path:
    # In a checkout test_core.py lives in python/test/unit/language/ and the helpers in
    # python/triton/; a copy that travels may have them beside it.
    checkout = [test_core.parents[3] / "triton"] if len(test_core.parents) > 3 else []
    for path in (d / "_internal_testing.py" for d in [*checkout, test_core.parent]):
        if path.is_file() and (path.parent / "_utils.py").is_file():
            return path
    sys.exit(
        f"error: triton/_internal_testing.py and _utils.py not found for {test_core}: give the test_core.py of a "
        "Triton checkout (python/test/unit/language/), or put those two files beside it"
    )


def pytest_env(results: Path, internal: Path, args) -> dict:
    env = dict(os.environ)
    env.update(
        TRITON_INTERPRET="1" if args.device == "cpu" else "0",
        TILEFUSE_BACKEND="interp" if args.device == "cpu" else "cuda",
        CONFORMANCE_RESULTS=str(results),
        CONFORMANCE_INTERNAL_TESTING=str(internal),
        CONFORMANCE_TIMEOUT=str(args.timeout),
        CONFORMANCE_SAMPLE=str(args.sample or 0),
        PYTHONPATH=os.pathsep.join(p for p in [str(args.frontend.resolve()), env.get("PYTHONPATH", "")] if p),
    )
    return env


def run_pytest(work: Path, env: dict, args) -> None:
    """Runs pytest until every collected test has a result; restarts it after a crash."""
    cmd = [sys.executable, "-m", "pytest", str(work / "test_core.py"), "-q", "-p", "no:cacheprovider"]
    cmd += ["--device", args.device, "-o", "console_output_style=classic", "--no-header", "-rN", "--tb=no"]
    if args.k:
        cmd += ["-k", args.k]
    if not args.all:
        cmd += ["-m", "interpreter"]
    quiet = args.quiet or args.n > 1
    while True:
        rc = subprocess.call(cmd, cwd=work, env=env, stdout=subprocess.DEVNULL if quiet else None)
        if rc >= 0 or not mark_crash(Path(env["CONFORMANCE_RESULTS"]), -rc):
            return


def run_shards(work: Path, internal: Path, args) -> list[Path]:
    """args.n pytest processes at once, shard i of n each with its own results file."""
    files = [work / f"results{i}.jsonl" for i in range(args.n)]

    def shard(i):
        env = pytest_env(files[i], internal, args)
        env["CONFORMANCE_SHARD"] = f"{i}/{args.n}"
        run_pytest(work, env, args)

    threads = [threading.Thread(target=shard, args=(i,)) for i in range(args.n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return files


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


def read_records(*files: Path):
    return [json.loads(line) for f in files if f.exists() for line in f.read_text().splitlines() if line.strip()]


def normalize(cause: str) -> str:
    """One group per message: drops the kernel's file:line:col and name, temporary paths, tile types."""
    cause = re.sub(r"\S+:\d+:\d+: error: ", "", cause)
    cause = re.sub(r"/tmp/\S+", "<tmp>", cause)
    cause = re.sub(r"tile<[^>]*>", "tile<...>", cause)
    cause = re.sub(r"LaunchError: \w+: ", "LaunchError: <kernel>: ", cause)
    return cause[:200]


def report(results: list[Path], groups: int, elapsed: float) -> dict:
    outcome = {}
    cause = {}
    for rec in read_records(*results):
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
    return {"counts": dict(counts), "causes": {c: sorted(ids) for c, ids in by_cause.items()}, "tests": outcome}


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
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="cpu: the interpreter; cuda: the GPU")
    p.add_argument("-n", type=int, default=1, help="pytest processes at once, each on its shard of the tests")
    p.add_argument("--sample", type=int, help="run about this many tests, stratified by test function")
    args = p.parse_args()
    if args.n < 1 or (args.sample is not None and args.sample < 1):
        sys.exit("error: -n and --sample take positive counts")
    test_core = args.test_core.resolve()
    if not test_core.is_file():
        sys.exit(f"error: {test_core} is not a file")
    internal = find_internal_testing(test_core)
    with tempfile.TemporaryDirectory(prefix="tilefuse-conformance-") as tmp:
        work = Path(tmp)
        shutil.copy(test_core, work / "test_core.py")
        shutil.copy(HERE / "conftest_shim.py", work / "conftest.py")
        start = time.time()
        results = run_shards(work, internal, args)
        if not any(r["kind"] == "result" for r in read_records(*results)):
            # --tb=no hides why (a collection error): show it.
            env = pytest_env(results[0], internal, args)
            subprocess.call([sys.executable, "-m", "pytest", "test_core.py", "--collect-only", "-q"], cwd=work, env=env)
            sys.exit("error: pytest ran no test")
        summary = report(results, args.groups, time.time() - start)
    summary["device"], summary["sample"] = args.device, args.sample
    if args.json:
        args.json.write_text(json.dumps(summary, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
