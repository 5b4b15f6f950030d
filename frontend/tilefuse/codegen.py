"""Python AST -> tile IR. The generator walks the kernel's AST and calls the C++
builder; type inference, promotion and shape rules live in the builder."""

from __future__ import annotations

import ast
import builtins as _py
import operator

from . import _C
from .errors import CompilationError
from .language import core as tl

_ir = _C.ir
_K = _ir.OpKind

_BINOPS = {
    ast.Add: _K.Add,
    ast.Sub: _K.Sub,
    ast.Mult: _K.Mul,
    ast.Mod: _K.Rem,
    ast.BitAnd: _K.And,
    ast.BitOr: _K.Or,
    ast.BitXor: _K.Xor,
    ast.LShift: _K.Shl,
    ast.RShift: _K.Shr,
}
_PY_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
    ast.BitAnd: operator.and_,
    ast.BitOr: operator.or_,
    ast.BitXor: operator.xor,
    ast.LShift: operator.lshift,
    ast.RShift: operator.rshift,
}
_CMPS = {ast.Lt: "lt", ast.LtE: "le", ast.Gt: "gt", ast.GtE: "ge", ast.Eq: "eq", ast.NotEq: "ne"}
_PY_CMPS = {
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Is: operator.is_,
    ast.IsNot: operator.is_not,
}

# How unsupported syntax is named in errors (others use the lower-cased AST class name).
_SYNTAX_NAMES = {
    ast.Break: "'break'",
    ast.Continue: "'continue'",
    ast.Try: "'try'",
    ast.With: "'with'",
    ast.Lambda: "'lambda'",
    ast.Raise: "'raise'",
    ast.Delete: "'del'",
    ast.Global: "'global'",
    ast.Nonlocal: "'nonlocal'",
    ast.ListComp: "list comprehension",
    ast.SetComp: "set comprehension",
    ast.DictComp: "dict comprehension",
    ast.GeneratorExp: "generator expression",
    ast.NamedExpr: "':=' (assignment expression)",
    ast.FunctionDef: "nested function definition",
    ast.ClassDef: "class definition",
    ast.Dict: "dict literal",
    ast.Set: "set literal",
    ast.Starred: "'*' unpacking",
    ast.Yield: "'yield'",
    ast.Await: "'await'",
}


def _is_tensor(v) -> bool:
    return isinstance(v, tl.tensor)


def _assigned_names(stmts) -> set[str]:
    names = set()
    for s in stmts:
        for node in ast.walk(s):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


class FunctionSource:
    """A kernel's parsed source with the offsets that map AST positions to the file."""

    def __init__(self, tree: ast.FunctionDef, file: str, first_line: int, indent: int):
        self.tree, self.file, self.first_line, self.indent = tree, file, first_line, indent

    def pos(self, node) -> tuple[int, int]:
        return self.first_line + node.lineno - 1, node.col_offset + self.indent + 1


class CodeGenerator(ast.NodeVisitor):
    """Generates one function (kernel or device function) into `module`."""

    def __init__(self, jit_fn, src: FunctionSource, module, builder, scope: dict, gscope: dict, compiler):
        self.jit_fn = jit_fn
        self.src = src
        self.module = module
        self.b = builder
        self.scope = dict(scope)
        self.gscope = gscope
        self.compiler = compiler  # generates device functions on demand
        self.returned: list | None = None
        self.return_node = None  # the 'return' statement that set `returned`
        self.node = None

    # --- errors and locations ---

    def error(self, node, msg) -> CompilationError:
        line, col = self.src.pos(node) if node is not None and hasattr(node, "lineno") else (0, 0)
        return CompilationError(msg, self.src.file, line, col)

    def visit(self, node):
        if hasattr(node, "lineno"):
            prev = self.node
            self.node = node
            line, col = self.src.pos(node)
            self.b.set_loc(self.src.file, line, col)
            try:
                return super().visit(node)
            except CompilationError:
                raise
            except _C.UserError as e:
                raise CompilationError(e.message, e.file, e.line, e.col) from None
            except (
                TypeError,
                ValueError,
                NotImplementedError,
                AttributeError,
                ZeroDivisionError,
                IndexError,
                KeyError,
                AssertionError,
            ) as e:
                raise self.error(node, str(e) or type(e).__name__) from None
            finally:
                self.node = prev
                if prev is not None:
                    line, col = self.src.pos(prev)
                    self.b.set_loc(self.src.file, line, col)
        return super().visit(node)

    def generic_visit(self, node):
        what = _SYNTAX_NAMES.get(type(node), type(node).__name__.lower())
        raise self.error(node, f"unsupported syntax in a kernel: {what}")

    # --- statements ---

    def visit_body(self, stmts):
        for s in stmts:
            if self.returned is not None:
                raise self.error(s, "code after 'return' is not allowed")
            self.visit(s)

    def visit_Expr(self, node):
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return  # docstring
        self.visit(node.value)

    def visit_Pass(self, node):
        pass

    def visit_Assign(self, node):
        value = self.visit(node.value)
        for target in node.targets:
            self.assign(target, value)

    def visit_AnnAssign(self, node):
        if node.value is None:
            raise self.error(node, "an annotated name needs a value")
        value = self.visit(node.value)
        if self._is_constexpr_annotation(node.annotation):
            value = tl._unwrap(value)
            if _is_tensor(value):
                raise self.error(node, "a tl.constexpr variable needs a compile-time value")
        self.assign(node.target, value)

    def visit_AugAssign(self, node):
        if not isinstance(node.target, ast.Name):
            raise self.error(node, "augmented assignment only to names is supported")
        current = self.lookup(node.target.id, node.target)
        value = self.binary(node.op, current, self.visit(node.value), node)
        self.assign(node.target, value)

    def assign(self, target, value):
        if isinstance(target, ast.Name):
            if _is_tensor(value) and not value.handle.name:
                value.handle.name = target.id
            self.scope[target.id] = value
        elif isinstance(target, (ast.Tuple, ast.List)):
            value = tl._unwrap(value)
            if not isinstance(value, (tuple, list)) or len(value) != len(target.elts):
                raise self.error(target, f"cannot unpack into {len(target.elts)} names")
            for t, v in zip(target.elts, value):
                self.assign(t, v)
        else:
            raise self.error(target, "only assignment to names and tuples of names is supported")

    def visit_Return(self, node):
        if self.jit_fn is not None and self.is_kernel and node.value is not None:
            raise self.error(node, "a kernel cannot return a value; store results through pointers")
        value = self.visit(node.value) if node.value is not None else None
        value = tl._unwrap(value)
        vals = list(value) if isinstance(value, tuple) else ([] if value is None else [value])
        self.returned = [tl.to_tensor(v, self.b) for v in vals]
        self.return_node = node

    def visit_Assert(self, node):
        cond = tl._unwrap(self.visit(node.test))
        msg = tl._unwrap(self.visit(node.msg)) if node.msg is not None else ""
        if _is_tensor(cond):
            self.b.assert_true(cond.handle, str(msg) or ast.unparse(node.test))
        elif not cond:
            raise self.error(node, f"assertion failed at compile time: {msg or ast.unparse(node.test)}")

    def visit_If(self, node):
        cond = tl._unwrap(self.visit(node.test))
        if not _is_tensor(cond):
            self.visit_body(node.body if cond else node.orelse)
            return
        if cond.shape:
            raise self.error(node.test, f"an if condition must be a scalar, got a tile of shape {cond.shape}")
        self._structured_if(node, cond)

    def _structured_if(self, node, cond):
        before = dict(self.scope)
        op = self.b.create_if(cond.handle, [])
        block = self.b.insertion_block()
        scopes = []
        for region, body in ((0, node.body), (1, node.orelse)):
            self.scope = dict(before)
            self.b.set_insertion_point_to_end(op.region(region))
            self.visit_body(body)
            if self.returned is not None:
                raise self.error(self.return_node, "'return' inside an 'if' on a tensor is not supported")
            scopes.append(self.scope)
        self.scope = before
        # Names that both branches define, or that exist before and either branch changes.
        names = []
        for n in sorted(set(scopes[0]) | set(scopes[1])):
            in_both = n in scopes[0] and n in scopes[1]
            if not in_both:
                continue
            a, c = scopes[0][n], scopes[1][n]
            if a is c or (not _is_tensor(a) and not _is_tensor(c) and a == c):
                if n in before:
                    continue
            names.append(n)
        results = []
        for region, sc in enumerate(scopes):
            self.b.set_insertion_point_to_end(op.region(region))
            vals = []
            for n in names:
                v = tl._unwrap(sc[n])
                if not _is_tensor(v):
                    if not isinstance(v, (int, float, bool)):
                        raise self.error(node, f"'{n}' is assigned a non-tensor value in a branch of an if on a tensor")
                    v = tl.to_tensor(v, self.b)
                vals.append(v)
            results.append(vals)
        for n, a, c in zip(names, results[0], results[1]):
            if a.type != c.type:
                raise self.error(node, f"'{n}' has type {a.type} in the then-branch but {c.type} in the else-branch")
        for region, vals in enumerate(results):
            self.b.set_insertion_point_to_end(op.region(region))
            self.b.yield_([v.handle for v in vals])
        self.b.set_insertion_point_to_end(block)
        for n, v in zip(names, results[0]):
            r = op.add_result(v.type)
            r.name = n
            self.scope[n] = tl.tensor(r)

    def visit_For(self, node):
        if node.orelse:
            raise self.error(node, "for ... else is not supported")
        it = node.iter
        if not isinstance(it, ast.Call):
            raise self.error(it, "for loops iterate over range(...), tl.range(...) or tl.static_range(...)")
        fn = self.visit(it.func)
        args = [self.visit(a) for a in it.args]
        kwargs = {k.arg: self.visit(k.value) for k in it.keywords}
        if fn is tl.static_range:
            r = tl.static_range(*[tl._unwrap(a) for a in args], **{k: tl._unwrap(v) for k, v in kwargs.items()})
            vals = [tl._unwrap(v) for v in (r.start, r.end, r.step)]
            if not all(isinstance(v, int) for v in vals):
                raise self.error(it, "tl.static_range needs compile-time integer bounds")
            for i in _py.range(*vals):
                self.assign(node.target, tl.constexpr(i))
                self.visit_body(node.body)
            return
        if fn is _py.range or fn is tl.range:
            r = tl.range(*args, **kwargs) if fn is tl.range else tl.range(*args)
        else:
            raise self.error(it, "for loops iterate over range(...), tl.range(...) or tl.static_range(...)")
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the loop variable must be a name")
        self._structured_for(node, r)

    def _carried(self, stmts):
        """Loop-carried names: assigned in the body and already defined."""
        names = []
        for n in sorted(_assigned_names(stmts)):
            if n not in self.scope:
                continue
            v = tl._unwrap(self.scope[n])
            if not _is_tensor(v):
                if not isinstance(v, (int, float, bool)):
                    continue
                self.scope[n] = tl.to_tensor(v, self.b)
            names.append(n)
        return names

    def _structured_for(self, node, r):
        lb, ub, step = (tl.to_tensor(v, self.b) for v in (r.start, r.end, r.step))
        step_val = tl._unwrap(r.step)
        if isinstance(step_val, int) and step_val <= 0:
            raise self.error(node.iter, f"loop step must be positive, got {step_val}")
        names = [n for n in self._carried(node.body) if n != node.target.id]
        inits = [self.scope[n] for n in names]
        op = self.b.create_for(lb.handle, ub.handle, step.handle, [v.handle for v in inits])
        block = self.b.insertion_block()
        # Names first assigned in the body are local to it (as in a while loop and in Triton):
        # their values are defined inside the loop's region and are not visible after it.
        outer = dict(self.scope)
        body = op.region(0)
        args = body.args
        args[0].name = node.target.id
        self.scope[node.target.id] = tl.tensor(args[0])
        for n, a in zip(names, args[1:]):
            a.name = n
            self.scope[n] = tl.tensor(a)
        self._loop_body(node, op, body, names, inits, block, outer)

    def _loop_body(self, node, op, body, names, inits, block, outer):
        """Generates a loop body into `body`, yields the carried names (whose types
        must not change), then binds them to the loop's results in the outer scope."""
        self.b.set_insertion_point_to_end(body)
        self.visit_body(node.body)
        if self.returned is not None:
            raise self.error(self.return_node, "'return' inside a loop is not supported")
        yields = []
        for n, init in zip(names, inits):
            v = tl.to_tensor(self.scope[n], self.b, like=init)
            if v.type != init.type:
                raise self.error(
                    node,
                    f"loop-carried variable '{n}' enters the loop as {init.type} "
                    f"but is reassigned to {v.type}; convert it with .to(...)",
                )
            yields.append(v)
        self.b.yield_([v.handle for v in yields])
        self.b.set_insertion_point_to_end(block)
        self.scope = outer
        for n, res in zip(names, op.results):
            res.name = n
            self.scope[n] = tl.tensor(res)

    def visit_While(self, node):
        if node.orelse:
            raise self.error(node, "while ... else is not supported")
        names = self._carried(node.body)
        inits = [self.scope[n] for n in names]
        op = self.b.create_while([v.handle for v in inits], [v.type for v in inits])
        block = self.b.insertion_block()
        before, after = op.region(0), op.region(1)
        outer = dict(self.scope)
        for n, a in zip(names, before.args):
            a.name = n
            self.scope[n] = tl.tensor(a)
        self.b.set_insertion_point_to_end(before)
        cond = tl.to_tensor(self.visit(node.test), self.b)
        if cond.shape:
            raise self.error(node.test, "a while condition must be a scalar")
        self.b.condition(cond.handle, [a for a in before.args])
        for n, a in zip(names, after.args):
            a.name = n
            self.scope[n] = tl.tensor(a)
        self._loop_body(node, op, after, names, inits, block, outer)

    # --- expressions ---

    def lookup(self, name, node):
        if name in self.scope:
            return self.scope[name]
        if name in self.gscope:
            return self.gscope[name]
        if hasattr(_py, name):
            return getattr(_py, name)
        raise self.error(node, f"name '{name}' is not defined")

    def visit_Name(self, node):
        return self.lookup(node.id, node)

    def visit_Constant(self, node):
        return node.value

    def visit_Tuple(self, node):
        return tuple(self.visit(e) for e in node.elts)

    def visit_List(self, node):
        return [self.visit(e) for e in node.elts]

    def visit_Slice(self, node):
        if node.lower is not None or node.upper is not None or node.step is not None:
            raise self.error(node, "only ':' and None are supported in tile indexing")
        return slice(None)

    def visit_Attribute(self, node):
        obj = tl._unwrap(self.visit(node.value))
        if _is_tensor(obj):
            if node.attr == "T":
                return tl.tensor(self.b.trans(obj.handle, []))
            if node.attr in ("dtype", "shape", "numel"):
                return getattr(obj, node.attr)
            if node.attr in tl.TENSOR_METHODS:
                return _BoundMethod(obj, node.attr)
            raise self.error(node, f"tensor has no attribute '{node.attr}'")
        if isinstance(obj, tl.tensor_descriptor):
            if node.attr in tl.DESCRIPTOR_METHODS:
                return _BoundMethod(obj, node.attr)
            if node.attr == "block_shape":
                return obj.block_shape
            raise self.error(node, f"tensor descriptor has no attribute '{node.attr}'")
        if not hasattr(obj, node.attr):
            raise self.error(node, f"'{getattr(obj, '__name__', type(obj).__name__)}' has no attribute '{node.attr}'")
        return getattr(obj, node.attr)

    def visit_Subscript(self, node):
        obj = tl._unwrap(self.visit(node.value))
        idx = self.visit(node.slice)
        if not _is_tensor(obj):
            try:
                return obj[tl._unwrap(idx)]
            except Exception as e:  # noqa: BLE001 - reported at the source position
                raise self.error(node, f"cannot index: {e}") from None
        items = [tl._unwrap(it) for it in (idx if isinstance(idx, tuple) else (idx,))]
        if any(it is not None and not isinstance(it, slice) for it in items):
            raise self.error(node, "tiles are indexed only with ':' and None (x[:, None])")
        if sum(isinstance(it, slice) for it in items) != len(obj.shape):
            raise self.error(
                node,
                f"index has {sum(isinstance(it, slice) for it in items)} ':' entries "
                f"for a tile of rank {len(obj.shape)}",
            )
        h = obj.handle
        for axis, it in enumerate(items):
            if it is None:
                h = self.b.expand_dims(h, axis)
        return tl.tensor(h)

    def binary(self, op, lhs, rhs, node):
        lhs, rhs = tl._unwrap(lhs), tl._unwrap(rhs)
        if not _is_tensor(lhs) and not _is_tensor(rhs):
            fn = _PY_BINOPS.get(type(op))
            if fn is None:
                raise self.error(node, f"unsupported operator {type(op).__name__}")
            return fn(lhs, rhs)
        b = self.b
        a, c = tl.to_tensors(lhs, rhs, b)
        if isinstance(op, ast.Div):
            if not a.type.is_ptr and a.dtype.is_int() and c.dtype.is_int():
                a = tl.cast(a, tl.float32, _builder=b)
                c = tl.cast(c, tl.float32, _builder=b)
            return tl.tensor(b.binary(_K.Div, a.handle, c.handle))
        if isinstance(op, ast.FloorDiv):
            q = tl.tensor(b.binary(_K.Div, a.handle, c.handle))
            return tl.tensor(b.unary(_K.Floor, q.handle)) if q.dtype.is_floating() else q
        if isinstance(op, ast.Pow):
            raise self.error(node, "'**' is not supported on tensors")
        kind = _BINOPS.get(type(op))
        if kind is None:
            raise self.error(node, f"unsupported operator {type(op).__name__}")
        return tl.tensor(b.binary(kind, a.handle, c.handle))

    def visit_BinOp(self, node):
        return self.binary(node.op, self.visit(node.left), self.visit(node.right), node)

    def visit_UnaryOp(self, node):
        v = tl._unwrap(self.visit(node.operand))
        if not _is_tensor(v):
            ops = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_, ast.Invert: operator.invert}
            return ops[type(node.op)](v)
        if isinstance(node.op, ast.USub):
            return tl.tensor(self.b.neg(v.handle))
        if isinstance(node.op, ast.UAdd):
            return v
        if isinstance(node.op, ast.Invert):
            ones = 2**v.dtype.primitive_bitwidth - 1 if v.dtype.is_int_unsigned() else -1
            return tl.tensor(self.b.binary(_K.Xor, v.handle, tl.to_tensor(ones, self.b, like=v).handle))
        zero = tl.to_tensor(0, self.b, like=v)
        return tl.tensor(self.b.cmp("eq", v.handle, zero.handle))

    def visit_Compare(self, node):
        if len(node.ops) != 1:
            raise self.error(node, "chained comparisons are not supported")
        lhs = tl._unwrap(self.visit(node.left))
        rhs = tl._unwrap(self.visit(node.comparators[0]))
        op = type(node.ops[0])
        if not _is_tensor(lhs) and not _is_tensor(rhs):
            if op in (ast.In, ast.NotIn):
                return (lhs in rhs) if op is ast.In else (lhs not in rhs)
            return _PY_CMPS[op](lhs, rhs)
        if op not in _CMPS:
            raise self.error(node, f"comparison {op.__name__} is not supported on tensors")
        a, c = tl.to_tensors(lhs, rhs, self.b)
        return tl.tensor(self.b.cmp(_CMPS[op], a.handle, c.handle))

    def visit_BoolOp(self, node):
        values = [tl._unwrap(self.visit(v)) for v in node.values]
        if not any(_is_tensor(v) for v in values):
            result = values[0]
            for v in values[1:]:
                result = (result and v) if isinstance(node.op, ast.And) else (result or v)
            return result
        kind = _K.And if isinstance(node.op, ast.And) else _K.Or
        acc = None
        for v in values:
            t = tl.to_tensor(v, self.b)
            if t.shape:
                raise self.error(node, "'and'/'or' work on scalars; use '&' and '|' on tiles")
            if t.dtype != tl.int1:
                t = tl.tensor(self.b.cmp("ne", t.handle, tl.to_tensor(0, self.b, like=t).handle))
            acc = t if acc is None else tl.tensor(self.b.binary(kind, acc.handle, t.handle))
        return acc

    def visit_IfExp(self, node):
        cond = tl._unwrap(self.visit(node.test))
        if not _is_tensor(cond):
            return self.visit(node.body if cond else node.orelse)
        return tl.where(cond, self.visit(node.body), self.visit(node.orelse), _builder=self.b)

    def visit_JoinedStr(self, node):
        parts = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                parts.append(str(v.value))
            else:
                val = tl._unwrap(self.visit(v.value))
                if _is_tensor(val):
                    raise self.error(v, "f-strings can only format compile-time values")
                parts.append(format(val, tl._unwrap(self.visit(v.format_spec)) if v.format_spec else ""))
        return "".join(parts)

    def visit_FormattedValue(self, node):
        return self.visit(node.value)

    def visit_Call(self, node):
        fn = self.visit(node.func)
        args = [self.visit(a) for a in node.args]
        kwargs = {k.arg: self.visit(k.value) for k in node.keywords}
        if fn is tl.static_assert:
            cond = tl._unwrap(args[0])
            if _is_tensor(cond):
                raise self.error(node, "tl.static_assert needs a compile-time condition")
            if not cond:
                msg = tl._unwrap(args[1]) if len(args) > 1 else ast.unparse(node.args[0])
                raise self.error(node, f"static_assert failed: {msg}")
            return None
        if fn is tl.static_print:
            print(*[tl._unwrap(a) for a in args])
            return None
        if isinstance(fn, _BoundMethod):
            return getattr(fn.obj, fn.name)(*args, **kwargs, _builder=self.b)
        if getattr(fn, "__tilefuse_builtin__", False):
            return fn(*args, **kwargs, _builder=self.b)
        if getattr(fn, "__tilefuse_jit__", False):
            return self.compiler.call_device_function(self, fn, args, kwargs, node)
        if fn in (tl.range, tl.static_range):
            raise self.error(node, f"{fn.__name__} can only be used as the iterable of a for loop")
        if isinstance(fn, type) and issubclass(fn, tl.dtype) or fn is tl.constexpr:
            return fn(*[tl._unwrap(a) for a in args])
        if fn in (_py.min, _py.max) and len(args) >= 2 and not kwargs and any(_is_tensor(tl._unwrap(a)) for a in args):
            # As in Triton, Python's min/max of tensors are elementwise tl.minimum/tl.maximum.
            elementwise = tl.minimum if fn is _py.min else tl.maximum
            acc = args[0]
            for a in args[1:]:
                acc = elementwise(acc, a, _builder=self.b)
            return acc
        if any(_is_tensor(tl._unwrap(a)) for a in list(args) + list(kwargs.values())):
            name = getattr(fn, "__name__", repr(fn))
            raise self.error(node, f"'{name}' is not a tilefuse builtin or @jit function and cannot take tensors")
        if (
            fn
            in (
                _py.min,
                _py.max,
                _py.len,
                _py.int,
                _py.float,
                _py.bool,
                _py.abs,
                _py.isinstance,
                _py.tuple,
                _py.list,
                _py.print,
                _py.str,
                _py.getattr,
                _py.hasattr,
                _py.round,
                _py.divmod,
                _py.sum,
                _py.any,
                _py.all,
                _py.zip,
                _py.enumerate,
            )
            or not callable(fn)
            or getattr(fn, "__module__", "") in ("math", "builtins")
        ):
            return fn(*[tl._unwrap(a) for a in args], **{k: tl._unwrap(v) for k, v in kwargs.items()})
        name = getattr(fn, "__name__", repr(fn))
        raise self.error(node, f"'{name}' is not a tilefuse builtin or @jit function")

    @staticmethod
    def _is_constexpr_annotation(ann) -> bool:
        text = ast.unparse(ann) if ann is not None else ""
        return text.split(".")[-1] == "constexpr"

    is_kernel = False


class _BoundMethod:
    def __init__(self, obj, name):
        self.obj, self.name = obj, name
