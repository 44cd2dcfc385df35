"""Issue 41's one ``backend=`` rule, checked over the source: a function that takes ``backend`` either has no
default or defaults to :data:`qora.backend.DEFAULT_BACKEND` ("auto": CUDA where CuPy sees a GPU, else the CPU).
A planted "cpu" default is found."""

import ast
from pathlib import Path

from qora.backend import DEFAULT_BACKEND

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "qora"


def backend_defaults(source: str) -> list[tuple[str, int, object]]:
    """(function, line, default) for every ``backend`` parameter with a constant default in ``source``."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        args = node.args
        positional = args.posonlyargs + args.args
        pairs = list(zip(positional[len(positional) - len(args.defaults):], args.defaults))
        pairs += [(a, d) for a, d in zip(args.kwonlyargs, args.kw_defaults) if d is not None]
        for arg, default in pairs:
            if arg.arg == "backend" and isinstance(default, ast.Constant):
                found.append((node.name, node.lineno, default.value))
        for decorator in node.decorator_list:  # the commands' --backend: backend_option(default)
            if isinstance(decorator, ast.Call) and getattr(decorator.func, "id", None) == "backend_option":
                given = decorator.args[:1] + [k.value for k in decorator.keywords if k.arg == "default"]
                if given and isinstance(given[0], ast.Constant):
                    found.append((node.name, node.lineno, given[0].value))
    return found


def test_every_backend_default_is_the_one_rule():
    wrong = [f"{path.relative_to(PACKAGE)}:{line} {name}(backend={value!r})"
             for path in sorted(PACKAGE.rglob("*.py"))
             for name, line, value in backend_defaults(path.read_text())
             if value != DEFAULT_BACKEND]
    assert DEFAULT_BACKEND == "auto"
    assert wrong == [], "backend defaults other than 'auto':\n" + "\n".join(wrong)


def test_the_rule_finds_a_planted_default():
    planted = "def f(x, *, backend='cpu'):\n    pass\ndef g(x, backend='auto'):\n    pass\ndef h(backend=None):\n    pass\n"
    assert backend_defaults(planted) == [("f", 1, "cpu"), ("g", 3, "auto"), ("h", 5, None)]
    command = "@backend_option('cpu')\ndef c(backend):\n    pass\n@backend_option()\ndef d(backend):\n    pass\n"
    assert backend_defaults(command) == [("c", 2, "cpu")]
