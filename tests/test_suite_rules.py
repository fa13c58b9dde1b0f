"""Rules the test files themselves keep, checked here so that an older pytest does not hide them.

pytest 9.2 refuses a class-scoped fixture written as an instance method (each test gets a new
instance, so what the fixture sets on self is lost); earlier versions accept it silently, so a
suite that passes on a developer's pytest would fail in CI's fresh one.
"""

import ast
from pathlib import Path

TESTS = Path(__file__).parent


def _class_scoped_method_fixtures(tree: ast.Module) -> list[str]:
    found = []
    for cls in (n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)):
        for fn in (n for n in cls.body if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))):
            names = {ast.unparse(d) for d in fn.decorator_list}
            if "classmethod" in names or "staticmethod" in names:
                continue
            for d in fn.decorator_list:
                if isinstance(d, ast.Call) and ast.unparse(d.func).endswith("fixture") and any(
                        k.arg == "scope" and isinstance(k.value, ast.Constant) and k.value.value == "class"
                        for k in d.keywords):
                    found.append(f"{cls.name}.{fn.name}:{fn.lineno}")
    return found


def test_the_rule_finds_what_it_looks_for():
    sample = ast.parse("import pytest\nclass T:\n    @pytest.fixture(scope='class')\n    def m(self):\n        pass\n")
    assert _class_scoped_method_fixtures(sample) == ["T.m:4"]


def test_no_class_scoped_fixture_is_an_instance_method():
    offenders = {p.name: found for p in sorted(TESTS.rglob("*.py"))
                 if (found := _class_scoped_method_fixtures(ast.parse(p.read_text(encoding="utf-8"))))}
    assert not offenders, f"class-scoped fixtures written as instance methods (use a module fixture): {offenders}"
