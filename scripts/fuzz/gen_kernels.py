"""The frontend fuzzer: kernels generated from a small grammar (arithmetic, masked loads and
stores, if/for/while, reductions, dots of small tiles, casts) as @tilefuse.jit source, each
run on the interpreter against a NumPy evaluation of the same tree (int32: exact, wrapping;
float32: within a rounding-error bound carried through the tree) and lowered to PTX for
sm_90a. A seeded random loop rather than libFuzzer: atheris is not available offline, and
the oracle needs the tree, which a byte mutator would not keep.

  python -m scripts.fuzz.gen_kernels [--seconds S] [--seed N] [--count N] [--corpus DIR]

A finding (a wrong result, an InternalError or any exception other than a CompilationError)
prints the kernel's source and seed and exits 1; --corpus writes each kernel's tile IR there
(the seed corpus of the libFuzzer targets)."""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import re
import sys
import tempfile
import time
import traceback

import numpy as np

U32, U16 = 2.0**-24, 2.0**-11  # unit roundoff of float32 and float16


class Val:
    """A node's reference value (float64 or int32) and, for floats, its error bound."""

    def __init__(self, v, err=None):
        self.v, self.err = v, err


class Gen:
    def __init__(self, rng: random.Random, dtype: str, block: int):
        self.rng, self.dtype, self.block = rng, dtype, block
        self.is_int = dtype == "int32"

    def const(self):
        return self.rng.randint(-7, 7) if self.is_int else self.rng.choice([-1.5, -0.25, 0.5, 1.0, 2.0])

    def expr(self, leaves: dict, depth: int):
        """(source, evaluate(env) -> Val) of a random expression over `leaves`."""
        r = self.rng
        if depth == 0 or r.random() < 0.25:
            if r.random() < 0.2:
                c = self.const()
                return repr(c), lambda env, c=c: self.leaf(np.full(len(env["x"].v), c))
            name = r.choice(sorted(leaves))
            return name, lambda env, name=name: env[name]
        kinds = ["+", "-", "*", "max", "min", "where", "cast"] + (["&", "^"] if self.is_int else ["abs"])
        k = r.choice(kinds)
        # .to() and tl.abs take tiles, not Python numbers
        a_src, a = (self.tile_expr if k in ("abs", "cast") else self.expr)(leaves, depth - 1)
        if k in ("abs", "cast"):
            if k == "abs":
                return f"tl.abs({a_src})", lambda env: self.unary(a(env), np.abs)
            if self.is_int:
                return f"({a_src}).to(tl.int16).to(tl.int32)", lambda env: Val(
                    a(env).v.astype(np.int16).astype(np.int32)
                )
            return f"({a_src}).to(tl.float16).to(tl.float32)", lambda env: self.to_f16(a(env))
        b_src, b = self.expr(leaves, depth - 1)
        if k == "where":  # the condition on raw inputs only: rounding cannot flip it
            return f"tl.where(x < y, {a_src}, {b_src})", lambda env: self.where(env, a(env), b(env))
        if k in ("max", "min"):
            fn = np.maximum if k == "max" else np.minimum
            return f"tl.{k}imum({a_src}, {b_src})", lambda env: self.pick(fn, a(env), b(env))
        return f"({a_src} {k} {b_src})", lambda env: self.binary(k, a(env), b(env))

    def tile_expr(self, leaves: dict, depth: int):
        """An expression that reads a tile (a bare constant would be a scalar)."""
        while True:
            src, fn = self.expr(leaves, depth)
            if re.search(r"\b[xyv]\b", src):
                return src, fn

    def leaf(self, v):
        return Val(v.astype(np.int32)) if self.is_int else Val(v.astype(np.float64), np.zeros(len(v)))

    def unary(self, a, fn):
        return Val(fn(a.v), a.err)

    def to_f16(self, a):
        if np.any(np.abs(a.v) + a.err > 60000):
            raise Skip("float16 overflow")
        return Val(a.v, a.err + U16 * (np.abs(a.v) + a.err) + 2.0**-25)

    def where(self, env, a, b):
        c = env["x"].v < env["y"].v
        return Val(np.where(c, a.v, b.v), None if self.is_int else np.where(c, a.err, b.err))

    def pick(self, fn, a, b):
        return Val(fn(a.v, b.v), None if self.is_int else np.maximum(a.err, b.err))

    def binary(self, k, a, b):
        if self.is_int:
            with np.errstate(over="ignore"):
                ops = {"+": np.add, "-": np.subtract, "*": np.multiply, "&": np.bitwise_and, "^": np.bitwise_xor}
                return Val(ops[k](a.v, b.v).astype(np.int32))
        if k == "*":
            v, e = a.v * b.v, np.abs(a.v) * b.err + np.abs(b.v) * a.err + a.err * b.err
        else:
            v, e = (a.v + b.v if k == "+" else a.v - b.v), a.err + b.err
        if np.any(np.abs(v) > 1e30):
            raise Skip("float32 overflow")
        return Val(v, e + U32 * (np.abs(v) + e) + 2.0**-140)


class Skip(Exception):
    """A generated kernel outside the oracle's reach (overflow): drawn again."""


def elementwise_kernel(rng: random.Random):
    dtype = rng.choice(["int32", "float32"])
    block = rng.choice([16, 32, 64, 128])
    g = Gen(rng, dtype, block)
    leaves = {"x": 0, "y": 0}
    v_src, v_fn = g.tile_expr(leaves, rng.randint(1, 3))
    body = [f"    v = {v_src}"]
    control = rng.choice(["none", "if", "for", "while"])
    trips = rng.randint(0, 4)
    if control != "none":
        a_src, a_fn = g.tile_expr({"x": 0, "y": 0, "v": 0}, 2)
        b_src, b_fn = g.tile_expr({"x": 0, "y": 0, "v": 0}, 2)
        if control == "if":
            body += ["    if s > 0:", f"        v = {a_src}", "    else:", f"        v = {b_src}"]
        elif control == "for":
            body += ["    for _ in range(t):", f"        v = {a_src}"]
        else:
            body += ["    i = 0", "    while i < t:", f"        v = {a_src}", "        i += 1"]
    reduce = rng.choice(["none", "sum", "max"])
    red_src = []
    if reduce != "none":
        other = 0 if reduce == "sum" else ("-2147483648" if g.is_int else "float('-inf')")
        red_src = [f"    tl.store(r_ptr + pid, tl.{reduce}(tl.where(m, v, {other}), axis=0))"]
    src = "\n".join(
        [
            "import tilefuse",
            "import tilefuse.language as tl",
            "",
            "",
            "@tilefuse.jit",
            "def fuzzed(x_ptr, y_ptr, o_ptr, r_ptr, s, t, n, BLOCK: tl.constexpr):",
            "    pid = tl.program_id(0)",
            "    offs = pid * BLOCK + tl.arange(0, BLOCK)",
            "    m = offs < n",
            f"    x = tl.load(x_ptr + offs, mask=m, other={g.const()})",
            f"    y = tl.load(y_ptr + offs, mask=m, other={g.const()})",
            *body,
            *red_src,
            "    tl.store(o_ptr + offs, v, mask=m)",
            "",
        ]
    )
    n = rng.randint(1, 3 * block)
    s = rng.randint(-3, 3)
    np_dt = np.int32 if g.is_int else np.float32
    nr = np.random.default_rng(rng.randrange(2**32))
    if g.is_int:
        x, y = (nr.integers(-(2**31), 2**31, n, dtype=np.int64).astype(np.int32) for _ in range(2))
    else:
        x, y = (nr.uniform(-2, 2, n).astype(np.float32) for _ in range(2))
    programs = -(-n // block)

    def run(mod):
        out = np.zeros(n, np_dt)
        red = np.zeros(programs, np_dt)
        k = mod.fuzzed[(programs,)](x, y, out, red, s, trips, n, BLOCK=block)
        return k, out, red

    def reference():
        pad = programs * block - n
        env = {"x": g.leaf(np.pad(x, (0, pad))), "y": g.leaf(np.pad(y, (0, pad)))}
        v = v_fn(env)
        if control == "if":
            v = (a_fn if s > 0 else b_fn)(dict(env, v=v))
        elif control in ("for", "while"):
            for _ in range(trips):
                v = a_fn(dict(env, v=v))
        return v

    def check(out, red):
        v = reference()
        _close(out, v, slice(0, n), g.is_int)
        if reduce != "none":
            vv = v.v.reshape(programs, block)
            valid = (np.arange(programs * block) < n).reshape(programs, block)
            if g.is_int:
                with np.errstate(over="ignore"):
                    masked = np.where(valid, vv, 0 if reduce == "sum" else np.iinfo(np.int32).min)
                    want = masked.sum(1, dtype=np.int32) if reduce == "sum" else masked.max(1)
                _exact(red, want)
            else:
                e = v.err.reshape(programs, block)
                if reduce == "sum":
                    want = np.where(valid, vv, 0).sum(1)
                    bound = np.where(valid, e, 0).sum(1) + block * U32 * np.where(valid, np.abs(vv) + e, 0).sum(1)
                else:
                    want = np.where(valid, vv, -np.inf).max(1)
                    bound = np.where(valid, e, 0).max(1)
                _within(red, want, bound)

    return src, run, check


def dot_kernel(rng: random.Random):
    M, N, K = rng.choice([16, 32]), rng.choice([16, 32]), rng.choice([16, 32])
    scale = rng.choice([None, 0.5, -2.0])
    acc = rng.random() < 0.5
    a_src = "a" if scale is None else f"a * {scale}"
    c_src = f"tl.dot({a_src}, b, tl.load(c_ptr + rm[:, None] * N + rn[None, :]))" if acc else f"tl.dot({a_src}, b)"
    src = "\n".join(
        [
            "import tilefuse",
            "import tilefuse.language as tl",
            "",
            "",
            "@tilefuse.jit",
            "def fuzzed(a_ptr, b_ptr, c_ptr, o_ptr, M: tl.constexpr, N: tl.constexpr, K: tl.constexpr):",
            "    rm, rn, rk = tl.arange(0, M), tl.arange(0, N), tl.arange(0, K)",
            "    a = tl.load(a_ptr + rm[:, None] * K + rk[None, :])",
            "    b = tl.load(b_ptr + rk[:, None] * N + rn[None, :])",
            f"    tl.store(o_ptr + rm[:, None] * N + rn[None, :], {c_src})",
            "",
        ]
    )
    nr = np.random.default_rng(rng.randrange(2**32))
    a, b, c = (nr.uniform(-1, 1, shape).astype(np.float32) for shape in ((M, K), (K, N), (M, N)))

    def run(mod):
        out = np.zeros((M, N), np.float32)
        return mod.fuzzed[(1,)](a, b, c, out, M=M, N=N, K=K), out, None

    def check(out, _):
        a64 = a.astype(np.float64) * (1.0 if scale is None else scale)
        want = a64 @ b.astype(np.float64) + (c if acc else 0)
        # tf32 inputs (10-bit mantissas, as on the tensor cores) and float32 accumulation
        bound = 2.0**-10 * (np.abs(a64) @ np.abs(b.astype(np.float64)) + np.abs(c if acc else 0)) + 1e-30
        _within(out, want, bound)

    return src, run, check


def _exact(got, want):
    if not np.array_equal(got, want):
        bad = np.flatnonzero(got.ravel() != want.ravel())[:5]
        raise Finding(f"wrong result at {bad.tolist()}: {got.ravel()[bad]} != {want.ravel()[bad]}")


def _within(got, want, bound):
    err = np.abs(got.astype(np.float64) - want)
    if not np.all(err <= bound):
        bad = np.flatnonzero(~(err <= bound))[:5]
        raise Finding(
            f"wrong result at {bad.tolist()}: {got.ravel()[bad]} vs {want.ravel()[bad]} (bound {bound.ravel()[bad]})"
        )


def _close(out, v, where, is_int):
    if is_int:
        _exact(out, v.v[where])
    else:
        _within(out, v.v[where], v.err[where])


class Finding(Exception):
    pass


def one(seed: int, tmp: str, corpus: str | None):
    """Generates, runs and lowers the kernel of `seed`; raises Finding on a bug."""
    import tilefuse
    from tilefuse import gpu

    rng = random.Random(seed)
    while True:
        src, run, check = (dot_kernel if rng.random() < 0.2 else elementwise_kernel)(rng)
        path = os.path.join(tmp, f"fuzzed_{seed}.py")
        with open(path, "w") as f:
            f.write(src)
        spec = importlib.util.spec_from_file_location(f"fuzzed_{seed}", path)
        mod = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(mod)
        try:
            kernel, out, red = run(mod)
        except tilefuse.CompilationError as e:
            raise Finding(f"a kernel of the grammar is refused: {e}") from e
        try:
            check(out, red)
        except Skip:
            continue
        if corpus:
            with open(os.path.join(corpus, f"gen-{seed}.tir"), "w") as f:
                f.write(kernel.asm["tile"])
        try:
            ptx = gpu.lower(kernel, "sm_90a", 4, 3, keep_ir=False)["ptx"]
        except tilefuse.CompilationError as e:
            raise Finding(f"the GPU lowering refused it: {e}") from e
        if ".entry fuzzed" not in ptx:
            raise Finding("the PTX has no entry for the kernel")
        return


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=60)
    p.add_argument("--count", type=int, default=None, help="stop after this many kernels")
    p.add_argument("--seed", type=int, default=None, help="the first seed (default: from the clock)")
    p.add_argument("--corpus", default=None, help="write each kernel's tile IR into this directory")
    args = p.parse_args(argv)
    first = args.seed if args.seed is not None else int(time.time())
    start, done = time.monotonic(), 0
    with tempfile.TemporaryDirectory() as tmp:
        sys.path.insert(0, tmp)
        while time.monotonic() - start < args.seconds and (args.count is None or done < args.count):
            seed = first + done
            try:
                one(seed, tmp, args.corpus)
            except Exception:
                with open(os.path.join(tmp, f"fuzzed_{seed}.py")) as f:
                    print(f"FINDING at seed {seed}:\n{f.read()}\n{traceback.format_exc()}", file=sys.stderr)
                return 1
            done += 1
    secs = time.monotonic() - start
    print(f"gen_kernels: {done} kernels from seed {first} in {secs:.0f} s, interpreter and sm_90a PTX: no finding")
    return 0


if __name__ == "__main__":
    sys.exit(main())
