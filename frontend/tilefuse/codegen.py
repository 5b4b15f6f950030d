"""Python AST -> tile IR. The generator walks the kernel's AST and calls the C++
builder; type inference, promotion and shape rules live in the builder."""

from __future__ import annotations

import ast
import builtins as _py
import operator
import warnings

from . import _C
from .errors import CompilationError, bare
from .language import block_ptr as _block_ptr
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


# Scope names of the exit flags (no Python name can clash): False, True, or an i1 scalar
# when the exit depends on runtime values. "@rvK" holds the K-th value being returned.
_BREAK, _CONTINUE, _RETURN = "@break", "@continue", "@return"


def _exits(stmts, in_loop=False) -> set[str]:
    """The flags of the break, continue and return statements in `stmts` (break and
    continue only where they leave the loop `stmts` belongs to, not a nested one)."""
    kinds = set()
    for s in stmts:
        if isinstance(s, ast.Return):
            kinds.add(_RETURN)
        elif isinstance(s, ast.Break) and not in_loop:
            kinds.add(_BREAK)
        elif isinstance(s, ast.Continue) and not in_loop:
            kinds.add(_CONTINUE)
        nested = in_loop or isinstance(s, (ast.For, ast.While))
        kinds |= _exits([c for c in ast.iter_child_nodes(s) if isinstance(c, ast.stmt)], nested)
    return kinds


def _is_tensor(v) -> bool:
    return isinstance(v, tl.tensor)


def _assigned_names(stmts) -> set[str]:
    names = set()
    for s in stmts:
        for node in ast.walk(s):
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
    return names


def _tensorize(v, b):
    """v with its Python numbers made tensors, for carrying through a loop: a tensor, a
    number, or a tuple / aggregate (block pointer) of them; None when it holds no tensor."""
    v = tl._unwrap(v)
    if _is_tensor(v) or hasattr(v, "_flatten"):
        return v
    if isinstance(v, (int, float, bool)):
        return tl.to_tensor(v, b)
    if isinstance(v, tuple):
        parts = [_tensorize(e, b) for e in v]
        if all(p is None for p in parts):
            return None
        return tuple(tl._unwrap(e) if p is None else p for e, p in zip(v, parts))
    return None


def _leaves(v) -> list:
    """The tensors of a (tensorized) value, depth first."""
    v = tl._unwrap(v)
    if _is_tensor(v):
        return [v]
    if isinstance(v, tuple):
        return [t for e in v for t in _leaves(e)]
    if hasattr(v, "_flatten"):
        return v._flatten()
    return []


def _rebuild(template, handles, name=None):
    """template's structure with its tensors replaced by the next of `handles` (IR values)."""
    t = tl._unwrap(template)
    if _is_tensor(t):
        h = next(handles)
        if name is not None:
            h.name = name
        return tl.tensor(h)
    if isinstance(t, tuple):
        return tuple(_rebuild(e, handles) for e in t)
    if hasattr(t, "_flatten"):
        return t._unflatten([tl.tensor(next(handles)) for _ in t._flatten()])
    return template


def call_leaves(v) -> list:
    """The tensors a value passes to (or returns from) a device function: a tensor, or every
    tensor of a tuple or block pointer; [] for a compile-time value."""
    v = tl._unwrap(v)
    if _is_tensor(v):
        return [v]
    if isinstance(v, tuple):
        return [t for e in v for t in call_leaves(e)]
    if hasattr(v, "_tensors"):
        return v._tensors()
    return []


def call_structure(v) -> str:
    """A key for v's structure: its compile-time parts and the types of its tensors."""
    v = tl._unwrap(v)
    if _is_tensor(v):
        return str(v.type)
    if isinstance(v, tuple):
        return "(" + ",".join(call_structure(e) for e in v) + ")"
    if hasattr(v, "_tensors"):
        return f"{v!r}[{','.join(str(t.type) for t in v._tensors())}]"
    return repr(v)


def call_rebuild(template, handles):
    """template with its call_leaves replaced by the next IR values of `handles`."""
    t = tl._unwrap(template)
    if _is_tensor(t):
        return tl.tensor(next(handles))
    if isinstance(t, tuple):
        return tuple(call_rebuild(e, handles) for e in t)
    if hasattr(t, "_tensors"):
        return t._with_tensors([tl.tensor(next(handles)) for _ in t._tensors()])
    return template


def _isinstance(obj, classes) -> bool:
    """isinstance in a kernel, where tl.constexpr matches every compile-time value."""
    obj = tl._unwrap(obj)
    classes = tl._unwrap(classes)
    classes = classes if isinstance(classes, tuple) else (classes,)
    if tl.constexpr in classes and not call_leaves(obj):
        return True
    return isinstance(obj, tuple(c for c in classes if c is not tl.constexpr))


class FunctionSource:
    """A kernel's parsed source with the offsets that map AST positions to the file."""

    def __init__(self, tree: ast.FunctionDef, file: str, first_line: int, indent: int, text: str = ""):
        self.tree, self.file, self.first_line, self.indent = tree, file, first_line, indent
        self.lines = text.splitlines()

    def pos(self, node) -> tuple[int, int]:
        # ast columns count UTF-8 bytes; diagnostics count characters.
        col = node.col_offset
        if 0 < node.lineno <= len(self.lines):
            col = len(self.lines[node.lineno - 1].encode()[:col].decode(errors="replace"))
        return self.first_line + node.lineno - 1, col + self.indent + 1


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
        self.scope[_RETURN] = False
        self.ret_arity: int | None = None  # how many values the function's returns return
        self.return_node = None  # the first 'return' statement
        self.loop_depth = 0
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
                raise CompilationError(e.message, e.file, e.line, e.col) from bare(e)
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
                raise self.error(node, str(e) or type(e).__name__) from bare(e)
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
        """Visits `stmts`; after a statement that may have left (break, continue, return
        taken at runtime) the rest runs under an if on the flags."""
        for k, s in enumerate(stmts):
            self.visit(s)
            rest = stmts[k + 1 :]
            if not rest:
                return
            flags = self._exit_flags()
            if flags is True:
                if isinstance(s, ast.Return):
                    raise self.error(rest[0], "code after 'return' is not allowed")
                return  # the rest never runs
            if flags:
                self._guarded(s, flags, lambda rest=rest: self.visit_body(rest))
                return

    def _exit_flags(self, names=(_BREAK, _CONTINUE, _RETURN)):
        """True when an exit is taken for sure, else the flags that are runtime values."""
        vals = [(n, tl._unwrap(self.scope[n])) for n in names if n in self.scope]
        if any(v is True for _, v in vals):
            return True
        return [(n, v) for n, v in vals if _is_tensor(v)]

    def _guarded(self, node, flags, body):
        """Runs `body` under 'if not (flag or ...)', where every flag is False; in the
        else-branch one flag is set for sure (which one is known when there is one)."""
        b = self.b
        anyf = flags[0][1]
        for _, v in flags[1:]:
            anyf = tl.tensor(b.binary(_K.Or, anyf.handle, v.handle))
        cond = self._not(anyf)

        def run():
            self.scope.update({n: False for n, _ in flags})
            body()

        def taken():
            if len(flags) == 1:
                self.scope[flags[0][0]] = True

        self._structured_if(node, cond, run, taken)

    def _not(self, flag):
        return tl.tensor(self.b.binary(_K.Xor, flag.handle, tl.to_tensor(True, self.b).handle))

    @property
    def returned(self) -> list:
        """The values the function returns (after its body is generated)."""
        if not self.ret_arity:
            return []
        if self.scope[_RETURN] is not True:
            raise self.error(self.return_node, "not every path through the function returns a value")
        return [self.scope[f"@rv{k}"] for k in range(self.ret_arity)]

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
        if self.ret_arity is None:
            self.ret_arity, self.return_node = len(vals), node
        elif self.ret_arity != len(vals):
            raise self.error(node, f"this 'return' returns {len(vals)} values, an earlier one {self.ret_arity}")
        if vals and self.loop_depth:
            raise self.error(node, "'return' of a value inside a loop is not supported; assign it and 'break'")
        for k, v in enumerate(vals):
            self.scope[f"@rv{k}"] = v if call_leaves(v) else tl.to_tensor(v, self.b)
        self.scope[_RETURN] = True

    def visit_Break(self, node):
        self.scope[_BREAK] = True

    def visit_Continue(self, node):
        self.scope[_CONTINUE] = True

    def visit_Assert(self, node):
        cond = tl._unwrap(self.visit(node.test))
        msg = tl._unwrap(self.visit(node.msg)) if node.msg is not None else ""
        if _is_tensor(cond):
            if self.compiler.debug is not False:  # @jit(debug=False) drops runtime asserts
                self.b.assert_true(cond.handle, str(msg) or ast.unparse(node.test))
        elif not cond:
            raise self.error(node, f"assertion failed at compile time: {msg or ast.unparse(node.test)}")

    def visit_If(self, node):
        cond = tl._unwrap(self.visit(node.test))
        if not _is_tensor(cond):
            self.visit_body(node.body if cond else node.orelse)
            return
        cond = self._scalar_condition(node.test, cond)
        self._structured_if(node, cond, lambda: self.visit_body(node.body), lambda: self.visit_body(node.orelse))

    def _scalar_condition(self, node, cond):
        """A runtime condition: a scalar, or a one-element tile as its element (Triton unsplats it)."""
        if cond.shape and cond.numel == 1:
            return cond.item(_builder=self.b)
        if cond.shape:
            raise self.error(node, f"an if condition must be a scalar, got a tile of shape {cond.shape}")
        return cond

    def _structured_if(self, node, cond, then_fn, else_fn):
        """An if op whose branches run then_fn / else_fn; names both branches define (or
        that exist before and either changes) become its results."""
        before = dict(self.scope)
        op = self.b.create_if(cond.handle, [])
        block = self.b.insertion_block()
        scopes = []
        for region, fn in ((0, then_fn), (1, else_fn)):
            self.scope = dict(before)
            self.b.set_insertion_point_to_end(op.region(region))
            fn()
            scopes.append(self.scope)
        self.scope = before
        names, same = [], {}
        for n in sorted(set(scopes[0]) | set(scopes[1])):
            if n not in scopes[0] or n not in scopes[1]:
                if n.startswith("@rv"):  # returned in one branch only: the other holds a filler
                    names.append(n)
                continue
            a, c = tl._unwrap(scopes[0][n]), tl._unwrap(scopes[1][n])
            if a is c or (not _is_tensor(a) and not _is_tensor(c) and type(a) is type(c) and a == c):
                same[n] = scopes[0][n]
                continue
            names.append(n)
        results, tmpls = [], {}
        for region, sc in enumerate(scopes):
            self.b.set_insertion_point_to_end(op.region(region))
            vals = []
            for n in names:
                v = tl._unwrap(sc.get(n))
                if v is None:
                    v = self._filler(node, tl._unwrap(scopes[1 - region][n]))
                if n not in tmpls:  # tuples and block pointers merge tensor by tensor
                    tmpls[n] = _tensorize(v, self.b)
                    if tmpls[n] is None:
                        raise self.error(node, f"'{n}' is assigned a non-tensor value in a branch of an if on a tensor")
                vals += self._flat_like(node, n, v, tmpls[n], check=False)
            results.append(vals)
        flat_names = [n for n in names for _ in _leaves(tmpls[n])]
        for n, a, c in zip(flat_names, results[0], results[1]):
            if a.type != c.type:
                what = "a returned value" if n.startswith("@") else f"'{n}'"
                raise self.error(node, f"{what} has type {a.type} in the then-branch but {c.type} in the else-branch")
        for region, vals in enumerate(results):
            self.b.set_insertion_point_to_end(op.region(region))
            self.b.yield_([v.handle for v in vals])
        self.b.set_insertion_point_to_end(block)
        self.scope.update(same)
        it = iter([op.add_result(v.type) for v in results[0]])
        for n in names:
            self.scope[n] = _rebuild(tmpls[n], it, None if n.startswith("@") else n)

    def _filler(self, node, like):
        """A value of like's type for the branch that does not return (it is never used)."""
        like = tl.to_tensor(like, self.b)
        if like.type.is_ptr:
            raise self.error(node, "returning a pointer from one branch of an if on a tensor is not supported")
        return tl.full(like.shape, 0, like.dtype, _builder=self.b)

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
            saved = {f: self.scope.get(f) for f in (_BREAK, _CONTINUE)}
            self.scope[_BREAK] = False
            self._unrolled(node, list(_py.range(*vals)))
            for f, v in saved.items():  # the enclosing loop's flags again
                if v is None:
                    self.scope.pop(f, None)
                else:
                    self.scope[f] = v
            return
        if fn is _py.range or fn is tl.range:
            r = tl.range(*args, **kwargs) if fn is tl.range else tl.range(*args)
        else:
            raise self.error(it, "for loops iterate over range(...), tl.range(...) or tl.static_range(...)")
        if not isinstance(node.target, ast.Name):
            raise self.error(node.target, "the loop variable must be a name")
        if _exits(node.body) & {_BREAK, _RETURN}:
            if tl._unwrap(r.warp_specialize):
                raise self.error(it, "warp_specialize needs a loop without break or return")
            self._for_as_while(node, r)
        else:
            self._structured_for(node, r)

    def _unrolled(self, node, iters):
        """The iterations of a static_range loop; after one that may break or return,
        the remaining ones run under an if on the flags."""
        for k, i in enumerate(iters):
            self.scope[_CONTINUE] = False
            self.assign(node.target, tl.constexpr(i))
            self.visit_body(node.body)
            flags = self._exit_flags((_BREAK, _RETURN))
            if flags is True:
                return
            if flags and k + 1 < len(iters):
                self._guarded(node, flags, lambda rest=iters[k + 1 :]: self._unrolled(node, rest))
                return

    def _carried(self, stmts):
        """Loop-carried names: assigned in the body and already defined."""
        names = []
        for n in sorted(_assigned_names(stmts)):
            if n not in self.scope:
                continue
            v = _tensorize(self.scope[n], self.b)
            if v is None:
                continue
            self.scope[n] = v
            names.append(n)
        return names

    def _flat(self, names) -> list:
        """The tensors the carried names hold (tuples and block pointers flattened)."""
        return [t for n in names for t in _leaves(self.scope[n])]

    def _bind(self, names, handles):
        """Binds each name to the next IR values of `handles`, in the structure it has now."""
        it = iter(handles)
        for n in names:
            self.scope[n] = _rebuild(self.scope[n], it, n)

    def _flat_like(self, node, n, v, tmpl, check=True) -> list:
        """The tensors of v, which must have tmpl's structure (and, with check, its tensor types)."""
        v, t = tl._unwrap(v), tl._unwrap(tmpl)
        if _is_tensor(t):
            v = tl.to_tensor(v, self.b, like=t)
            if check and v.type != t.type:
                raise self.error(
                    node,
                    f"loop-carried variable '{n}' enters the loop as {t.type} "
                    f"but is reassigned to {v.type}; convert it with .to(...)",
                )
            return [v]
        if isinstance(t, tuple):
            if not isinstance(v, tuple) or len(v) != len(t):
                raise self.error(node, f"'{n}' is a tuple of {len(t)} before the loop or if but {v!r} after")
            return [x for k, (a, c) in enumerate(zip(v, t)) for x in self._flat_like(node, f"{n}[{k}]", a, c, check)]
        if hasattr(t, "_flatten"):
            if (
                type(v) is not type(t)
                or len(v._static()) != len(t._static())
                or any(a is not c and a != c for a, c in zip(v._static(), t._static()))
            ):
                raise self.error(
                    node, f"'{n}' changes from {t!r} to {v!r}: only a block pointer's offsets may change (tl.advance)"
                )
            return [x for a, c in zip(v._flatten(), t._flatten()) for x in self._flat_like(node, n, a, c, check)]
        if not (v is t or (type(v) is type(t) and v == t)):
            raise self.error(node, f"'{n}' changes from the compile-time value {t!r} to {v!r}")
        return []

    def _structured_for(self, node, r):
        lb, ub, step = (tl.to_tensor(v, self.b) for v in (r.start, r.end, r.step))
        step_val = tl._unwrap(r.step)
        if isinstance(step_val, int) and step_val <= 0:
            raise self.error(node.iter, f"loop step must be positive, got {step_val}")
        names = [n for n in self._carried(node.body) if n != node.target.id]
        inits = self._flat(names)
        op = self.b.create_for(lb.handle, ub.handle, step.handle, [v.handle for v in inits])
        if tl._unwrap(r.warp_specialize):
            op.set_bool_attr("warp_specialize", True)
            groups = tl._unwrap(r.num_consumer_groups)
            if groups not in (1, 2):
                raise self.error(node.iter, f"num_consumer_groups must be 1 or 2, got {groups!r}")
            if groups == 2:
                op.set_int_attr("consumer_groups", 2)
        block = self.b.insertion_block()
        # Names first assigned in the body are local to it (as in a while loop and in Triton):
        # their values are defined inside the loop's region and are not visible after it.
        outer = dict(self.scope)
        body = op.region(0)
        args = body.args
        args[0].name = node.target.id
        self.scope[node.target.id] = tl.tensor(args[0])
        self._bind(names, args[1:])
        self._loop_body(node, op, body, names, inits, block, outer)

    def _for_as_while(self, node, r):
        """A for loop that may break or return: a while loop on (iv < ub and no exit),
        carrying the induction variable and the exit flags."""
        b = self.b
        bounds = [tl.to_tensor(v, b) for v in (r.start, r.end, r.step)]
        step_val = tl._unwrap(r.step)
        if isinstance(step_val, int) and step_val <= 0:
            raise self.error(node.iter, f"loop step must be positive, got {step_val}")
        wide = _py.max(bounds, key=lambda t: t.dtype.primitive_bitwidth).dtype
        lb, ub, step = (t if t.dtype == wide else tl.cast(t, wide, _builder=b) for t in bounds)
        flags = sorted(_exits(node.body) & {_BREAK, _RETURN})
        names = [n for n in self._carried(node.body) if n != node.target.id]
        inits = [lb] + [tl.to_tensor(False, b) for _ in flags] + self._flat(names)
        op = b.create_while([v.handle for v in inits], [v.type for v in inits])
        block = b.insertion_block()
        outer = dict(self.scope)
        before, after = op.region(0), op.region(1)
        b.set_insertion_point_to_end(before)
        cond = tl.tensor(b.cmp("lt", before.args[0], ub.handle))
        for a in before.args[1 : 1 + len(flags)]:
            cond = tl.tensor(b.binary(_K.And, cond.handle, self._not(tl.tensor(a)).handle))
        b.condition(cond.handle, list(before.args))
        iv = after.args[0]
        iv.name = node.target.id
        self.scope[node.target.id] = tl.tensor(iv)

        def step_iv():
            b.set_insertion_point_to_end(after)
            return [tl.tensor(b.binary(_K.Add, iv, step.handle))]

        self._flagged_body(node, op, after, 1, flags, names, inits, block, outer, step_iv)

    def _flagged_body(self, node, op, after, first, flags, names, inits, block, outer, prefix=list):
        """The body of a while loop carrying `flags` (args first.. of `after`) and `names`:
        the flags start False (the condition checked them), and are yielded with the names."""
        self._bind(names, after.args[first + len(flags) :])
        self.scope.update({_BREAK: False, _CONTINUE: False})
        self.loop_depth += 1
        self.b.set_insertion_point_to_end(after)
        self.visit_body(node.body)
        self.loop_depth -= 1
        lead = prefix() + [tl.to_tensor(self.scope[f], self.b) for f in flags]
        self._yield_carried(node, names, [outer[n] for n in names], lead)
        self.b.set_insertion_point_to_end(block)
        self.scope = outer
        results = list(op.results)
        for f, res in zip(flags, results[first:]):
            if f == _RETURN:
                self.scope[_RETURN] = tl.tensor(res)
        self._bind(names, results[first + len(flags) :])

    def _yield_carried(self, node, names, templates, lead):
        yields = []
        for n, tmpl in zip(names, templates):
            yields += self._flat_like(node, n, self.scope[n], tmpl)
        self.b.yield_([v.handle for v in lead + yields])

    def _loop_body(self, node, op, body, names, inits, block, outer):
        """Generates a loop body into `body`, yields the carried names (whose types
        must not change), then binds them to the loop's results in the outer scope."""
        self.b.set_insertion_point_to_end(body)
        self.scope.update({_BREAK: False, _CONTINUE: False})
        self.loop_depth += 1
        self.visit_body(node.body)
        self.loop_depth -= 1
        self._yield_carried(node, names, [outer[n] for n in names], [])
        self.b.set_insertion_point_to_end(block)
        self.scope = outer
        self._bind(names, op.results)

    def visit_While(self, node):
        if node.orelse:
            raise self.error(node, "while ... else is not supported")
        flags = sorted(_exits(node.body) & {_BREAK, _RETURN})
        if flags:
            return self._flagged_while(node, flags)
        names = self._carried(node.body)
        inits = self._flat(names)
        op = self.b.create_while([v.handle for v in inits], [v.type for v in inits])
        block = self.b.insertion_block()
        before, after = op.region(0), op.region(1)
        outer = dict(self.scope)
        self._bind(names, before.args)
        self.b.set_insertion_point_to_end(before)
        cond = tl.to_tensor(self.visit(node.test), self.b)
        if cond.shape:
            raise self.error(node.test, "a while condition must be a scalar")
        self.b.condition(cond.handle, [a for a in before.args])
        self._bind(names, after.args)
        self._loop_body(node, op, after, names, inits, block, outer)

    def _flagged_while(self, node, flags):
        """A while loop that may break or return: its condition is 'no exit and test',
        the test evaluated only when no exit was taken (as Python does)."""
        b = self.b
        names = self._carried(node.body)
        inits = [tl.to_tensor(False, b) for _ in flags] + self._flat(names)
        op = b.create_while([v.handle for v in inits], [v.type for v in inits])
        block = b.insertion_block()
        outer = dict(self.scope)
        before, after = op.region(0), op.region(1)
        self._bind(names, before.args[len(flags) :])
        b.set_insertion_point_to_end(before)
        anyf = before.args[0]
        for a in before.args[1 : len(flags)]:
            anyf = b.binary(_K.Or, anyf, a)
        go = self._not(tl.tensor(anyf))

        def test():
            c = tl.to_tensor(self.visit(node.test), b)
            if c.shape:
                raise self.error(node.test, "a while condition must be a scalar")
            self.scope["@cond"] = (
                c if c.dtype == tl.int1 else tl.tensor(b.cmp("ne", c.handle, tl.to_tensor(0, b, like=c).handle))
            )

        self._structured_if(node, go, test, lambda: self.scope.__setitem__("@cond", False))
        b.condition(tl.to_tensor(self.scope.pop("@cond"), b).handle, list(before.args))
        self._flagged_body(node, op, after, 0, flags, names, inits, block, outer)

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
        parts = (node.lower, node.upper, node.step)
        return slice(*(None if p is None else tl._unwrap(self.visit(p)) for p in parts))

    def visit_Attribute(self, node):
        obj = tl._unwrap(self.visit(node.value))
        if isinstance(obj, (int, float)) and not hasattr(obj, node.attr):
            # A Python number has the tensor attributes of the scalar Triton makes of it
            # (`value = 1` then `value.dtype` is tl.int32).
            obj = tl.to_tensor(obj, self.b)
        if _is_tensor(obj):
            if node.attr == "T":
                return tl.tensor(self.b.trans(obj.handle, []))
            if node.attr in ("dtype", "shape", "numel"):
                return getattr(obj, node.attr)
            if node.attr in tl.TENSOR_METHODS:
                return _BoundMethod(obj, node.attr)
            raise self.error(node, f"tensor has no attribute '{node.attr}'")
        if isinstance(obj, _block_ptr.block_ptr) and node.attr == "advance":
            return _BoundMethod(obj, node.attr)
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
        # Triton's rule: None inserts a dim at its position, ':' (None:None too) keeps one;
        # a ':' past the rank is ignored (z[None, None, :] of a scalar is [1, 1]).
        for it in items:
            if it is not None and not (isinstance(it, slice) and (it.start, it.stop, it.step) == (None,) * 3):
                raise self.error(node, f"unsupported tensor index: {it!r} (tiles are indexed only with ':' and None)")
        h = obj.handle
        for axis, it in enumerate(items):
            if it is None:
                if axis > len(h.type.shape):
                    raise self.error(
                        node,
                        f"index has {len(items)} entries for a tile of rank {len(obj.shape)}: "
                        f"None at {axis} is past its dims",
                    )
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
                mixed = a.dtype.is_int_unsigned() != c.dtype.is_int_unsigned()
                if mixed and isinstance(lhs, tl.tensor) and isinstance(rhs, tl.tensor):
                    # As Triton, '/' refuses them as '//' does: the builder raises its error.
                    b.binary(_K.Div, a.handle, c.handle)
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
        if op in (ast.Is, ast.IsNot):  # identity of the compile-time objects (x is not None)
            return (lhs is rhs) == (op is ast.Is)
        if not _is_tensor(lhs) and not _is_tensor(rhs):
            if op in (ast.In, ast.NotIn):
                return (lhs in rhs) if op is ast.In else (lhs not in rhs)
            return _PY_CMPS[op](lhs, rhs)
        if op not in _CMPS:
            raise self.error(node, f"comparison {op.__name__} is not supported on tensors")
        a, c = tl.to_tensors(lhs, rhs, self.b)
        return tl.tensor(self.b.cmp(_CMPS[op], a.handle, c.handle))

    def visit_BoolOp(self, node):
        """Python's short-circuit: an operand is evaluated only when the ones before do
        not decide the result, at compile time or, for runtime scalars, under an if.
        On tiles (as Triton, which deprecates it) they are elementwise and evaluate both."""
        is_and = isinstance(node.op, ast.And)
        acc = tl._unwrap(self.visit(node.values[0]))
        for operand in node.values[1:]:
            if not _is_tensor(acc):
                if bool(acc) != is_and:
                    return acc
                acc = tl._unwrap(self.visit(operand))
                continue
            acc = self._runtime_bool_op(node, self._as_bool(node, acc), operand, is_and)
        return acc

    def _as_bool(self, node, v):
        t = tl.to_tensor(v, self.b)
        if t.shape:
            line, _ = self.src.pos(node)
            warnings.warn(
                f"{self.src.file}:{line}: 'and'/'or' on tiles are elementwise and do not short-circuit; "
                "write '&' / '|'",
                stacklevel=1,
            )
        if t.dtype != tl.int1:
            t = tl.tensor(self.b.cmp("ne", t.handle, tl.to_tensor(0, self.b, like=t).handle))
        return t

    def _runtime_bool_op(self, node, lhs, operand, is_and):
        kind = _K.And if is_and else _K.Or
        if lhs.shape or not any(isinstance(n, ast.Call) for n in ast.walk(operand)):  # evaluate it
            rhs = self._as_bool(node, tl._unwrap(self.visit(operand)))
            return tl.tensor(self.b.binary(kind, lhs.handle, rhs.handle))

        def evaluate():
            rhs = self._as_bool(node, tl._unwrap(self.visit(operand)))
            if rhs.shape:
                raise self.error(node, "a runtime scalar 'and'/'or' a tile: write '&' / '|'")
            self.scope["@cond"] = rhs

        def decided():
            self.scope["@cond"] = not is_and

        self._structured_if(node, lhs, *((evaluate, decided) if is_and else (decided, evaluate)))
        return tl.to_tensor(self.scope.pop("@cond"), self.b)

    def visit_IfExp(self, node):
        cond = tl._unwrap(self.visit(node.test))
        if not _is_tensor(cond):
            return self.visit(node.body if cond else node.orelse)
        if cond.shape and cond.numel != 1:  # elementwise, as tl.where
            return tl.where(cond, self.visit(node.body), self.visit(node.orelse), _builder=self.b)
        # A runtime scalar condition runs only the branch it picks (a branch may store).
        name = f"@ifexp{id(node)}"

        def branch(expr):
            v = tl._unwrap(self.visit(expr))
            self.scope[name] = None if v is None else tl.to_tensor(v, self.b)

        self._structured_if(
            node, self._scalar_condition(node.test, cond), lambda: branch(node.body), lambda: branch(node.orelse)
        )
        return self.scope.pop(name)

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
        if fn is tl.device_assert and self.compiler.debug is False:
            return None
        if fn is tl.static_print:
            print(*[tl._unwrap(a) for a in args])
            return None
        if isinstance(fn, _BoundMethod):
            fn = getattr(fn.obj, fn.name)
            return fn(*args, **kwargs, **self._generator_arg(fn), _builder=self.b)
        if getattr(fn, "__tilefuse_builtin__", False):
            return fn(*args, **kwargs, **self._generator_arg(fn), _builder=self.b)
        if getattr(fn, "__tilefuse_jit__", False):
            return self.compiler.call_device_function(self, fn, args, kwargs, node)
        if fn in (tl.range, tl.static_range):
            raise self.error(node, f"{fn.__name__} can only be used as the iterable of a for loop")
        if isinstance(fn, type) and issubclass(fn, tl.dtype) or fn is tl.constexpr:
            return fn(*[tl._unwrap(a) for a in args])
        if getattr(fn, "__tilefuse_constexpr_function__", False):
            if any(call_leaves(a) for a in list(args) + list(kwargs.values())):
                raise self.error(node, f"constexpr_function '{fn.__name__}' takes compile-time values only")
            return tl.constexpr(fn(*[tl._unwrap(a) for a in args], **{k: tl._unwrap(v) for k, v in kwargs.items()}))
        if fn is _py.isinstance and len(args) == 2 and not kwargs:
            return _isinstance(*args)
        if fn is _py.hasattr and len(args) == 2 and not kwargs and _is_tensor(tl._unwrap(args[0])):
            return (
                tl._unwrap(args[1]) in ("dtype", "shape", "numel", "type", "T")
                or tl._unwrap(args[1]) in tl.TENSOR_METHODS
            )
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

    def _generator_arg(self, fn) -> dict:
        # Builtins that take a combine_fn (tl.reduce, tl.associative_scan) call it through us.
        return {"_generator": self} if getattr(fn, "__tilefuse_calls_jit__", False) else {}

    def call_jit(self, fn, args):
        """Calls @jit function `fn` on tensors from a builtin (a combine_fn)."""
        return self.compiler.call_device_function(self, fn, args, {}, self.node)

    @staticmethod
    def _is_constexpr_annotation(ann) -> bool:
        text = ast.unparse(ann) if ann is not None else ""
        return text.split(".")[-1] == "constexpr"

    is_kernel = False


class _BoundMethod:
    def __init__(self, obj, name):
        self.obj, self.name = obj, name
