"""User-facing errors: a kernel that cannot compile or a launch that cannot run."""

from __future__ import annotations

import linecache


class TilefuseError(Exception):
    """Base class of every error tilefuse raises on purpose."""


class CompilationError(TilefuseError):
    """A kernel failed to compile: names file:line:col, shows the line and a caret."""

    def __init__(self, message: str, file: str | None = None, line: int = 0, col: int = 0, source_line=None):
        self.message = message
        self.file = file
        self.line = line
        self.col = col
        if source_line is None and file:
            source_line = linecache.getline(file, line).rstrip("\n") or None
        self.source_line = source_line
        super().__init__(self._render())

    def _render(self) -> str:
        return render(self.message, self.file, self.line, self.col, self.source_line)


def bare(e: BaseException) -> BaseException:
    """e as the __cause__ of a CompilationError (Triton's tests read the words there): its
    message only, with no frames of the code generator and nothing chained to it."""
    e.__traceback__ = None
    e.__cause__ = None  # also suppresses its context
    return e


def render(message: str, file=None, line=0, col=0, source_line=None, kind="error") -> str:
    """file:line:col: kind: message, then the source line and a caret under col."""
    if not file:
        return f"{kind}: {message}"
    if source_line is None:
        source_line = linecache.getline(file, line).rstrip("\n") or None
    text = f"{file}:{line}:{col}: {kind}: {message}"
    if source_line:
        pad = "".join("\t" if c == "\t" else " " for c in source_line[: max(col - 1, 0)])
        text += f"\n{source_line}\n{pad}^"
    return text


class KernelRuntimeError(TilefuseError):
    """A kernel failed while running: an out-of-bounds access, a device assert."""

    def __init__(self, message: str, file: str | None = None, line: int = 0, col: int = 0):
        self.message, self.file, self.line, self.col = message, file, line, col
        super().__init__(render(message, file, line, col))


class LaunchError(TilefuseError):
    """Arguments that cannot be passed to a kernel (dtype, device, count)."""
