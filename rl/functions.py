"""A function of a source file split into prompt, body and the rest: the first kind of task.

The prompt is the file up to the function's signature and docstring, the body is what a
completion replaces, and the suffix is the rest of the file. Lines are split on ``\\n`` only (as
Python's tokenizer counts them, unlike ``str.splitlines``), so prompt + body + suffix is the file.
Functions are found by what a trace records of a call: the code's ``co_qualname`` and
``co_firstlineno`` (the first decorator's line for a decorated function).
"""

from __future__ import annotations

import ast
import io
from dataclasses import dataclass

KIND = "function-body"


@dataclass(frozen=True)
class FunctionBody:
    qualname: str
    first_line: int  # co_firstlineno: the def line, or the first decorator's
    body_start_line: int  # 1-based, inclusive: the first line a completion replaces
    body_end_line: int  # 1-based, inclusive: the last
    indent: str  # the body's indentation
    prompt: str
    body: str
    single_return: bool  # the body is one line, ``return <expression>``

    def raise_body(self) -> str:
        """A body that only raises: validation requires the task's tests to fail with it."""
        return f"{self.indent}raise NotImplementedError\n"


def split_lines(text: str) -> list[str]:
    return io.StringIO(text, newline="\n").readlines()


def compose(lines: list[str], start_line: int, end_line: int, body: str) -> str:
    """The file whose lines ``start_line..end_line`` (1-based, inclusive) are replaced by ``body``."""
    if body and not body.endswith("\n"):
        body += "\n"
    return "".join(lines[: start_line - 1]) + body + "".join(lines[end_line:])


def find_functions(source: str) -> dict[tuple[str, int], FunctionBody | str]:
    """Every function of ``source`` by (qualname, first line): its split, or why it has none
    (``nested``, ``one-line``, ``no-body``, ``unusual-layout``). Raises SyntaxError."""
    tree = ast.parse(source)
    lines = split_lines(source)
    found: dict[tuple[str, int], FunctionBody | str] = {}

    def visit(node: ast.AST, prefix: str, nested: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.", nested)
            elif isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                qualname = f"{prefix}{child.name}"
                first = child.decorator_list[0].lineno if child.decorator_list else child.lineno
                found[(qualname, first)] = "nested" if nested else _split(child, qualname, first, lines)
                visit(child, f"{qualname}.<locals>.", True)
            else:
                visit(child, prefix, nested)

    visit(tree, "", False)
    return found


def _split(
    node: ast.FunctionDef | ast.AsyncFunctionDef, qualname: str, first: int, lines: list[str]
) -> FunctionBody | str:
    body = node.body
    documented = isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
    documented = documented and isinstance(body[0].value.value, str)
    statements = body[1:] if documented else body
    if not statements:
        return "no-body"
    start = statements[0]
    if start.lineno == node.lineno or f"def {node.name}" not in lines[node.lineno - 1]:
        return "one-line"
    indent = lines[start.lineno - 1][: start.col_offset]
    if indent.strip() or (documented and start.lineno <= body[0].end_lineno):
        return "unusual-layout"  # a statement sharing a line with the signature or docstring
    start_line = body[0].end_lineno + 1 if documented else start.lineno
    end_line = node.end_lineno or start.lineno
    text = "".join(lines[start_line - 1 : end_line])
    code_lines = [line for line in text.splitlines() if line.strip() and not line.strip().startswith("#")]
    single = (
        len(statements) == 1
        and isinstance(start, ast.Return)
        and start.value is not None
        and start.lineno == start.end_lineno
        and len(code_lines) == 1
    )
    return FunctionBody(
        qualname=qualname,
        first_line=first,
        body_start_line=start_line,
        body_end_line=end_line,
        indent=indent,
        prompt="".join(lines[: start_line - 1]),
        body=text,
        single_return=single,
    )
