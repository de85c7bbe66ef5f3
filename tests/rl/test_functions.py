"""Splitting a function into prompt, body and the rest of its file, as a trace names it."""

from __future__ import annotations

from rl.functions import compose, find_functions, split_lines

SOURCE = '''"""A module."""
import functools


def plain(x):
    return x + 1


@functools.cache
def decorated(x):
    """Cached.

    Twice over.
    """
    # a comment of the body
    y = x * 2
    return y


class Shape:
    def area(self):
        """The area."""
        return self.w * self.h

    def one_line(self): return 1

    def only_doc(self):
        """Nothing else."""

    def outer(self):
        def inner():
            return 2

        return inner()


async def fetch(url):
    return await url
'''


def test_functions_are_found_by_qualname_and_first_line():
    found = find_functions(SOURCE)
    assert {key: (f if isinstance(f, str) else f.single_return) for key, f in found.items()} == {
        ("plain", 5): True,
        ("decorated", 9): False,  # co_firstlineno of a decorated function is its first decorator's line
        ("Shape.area", 21): True,
        ("Shape.one_line", 25): "one-line",
        ("Shape.only_doc", 27): "no-body",
        ("Shape.outer", 30): False,
        ("Shape.outer.<locals>.inner", 31): "nested",
        ("fetch", 37): True,
    }


def test_the_prompt_ends_with_the_signature_and_docstring_and_the_body_is_what_follows():
    decorated = find_functions(SOURCE)[("decorated", 9)]
    assert decorated.prompt.endswith('def decorated(x):\n    """Cached.\n\n    Twice over.\n    """\n')
    assert decorated.body == "    # a comment of the body\n    y = x * 2\n    return y\n"
    assert (decorated.indent, decorated.raise_body()) == ("    ", "    raise NotImplementedError\n")
    area = find_functions(SOURCE)[("Shape.area", 21)]
    assert area.body == "        return self.w * self.h\n" and area.indent == " " * 8


def test_the_original_body_puts_the_file_back_byte_for_byte():
    lines = split_lines(SOURCE)
    for function in find_functions(SOURCE).values():
        if not isinstance(function, str):
            assert compose(lines, function.body_start_line, function.body_end_line, function.body) == SOURCE
            replaced = compose(lines, function.body_start_line, function.body_end_line, "    return 0")
            assert replaced.startswith(function.prompt) and "    return 0\n" in replaced


def test_lines_split_as_python_counts_them():
    # A form feed is a line break to str.splitlines, not to Python's tokenizer.
    source = "def f():\n    x = '\x0c'\n    return x\n"
    (function,) = find_functions(source).values()
    assert function.body == "    x = '\x0c'\n    return x\n"
