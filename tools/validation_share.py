"""Share of the package's code lines that validate arguments (issue 35, point 3).

Usage: ``python tools/validation_share.py lse_energy``. A line counts as validation when it is in
``_validate.py``, in a ``_check*`` function, a ``raise`` or an ``if`` whose body only raises, or a call to
a ``_validate`` rule or a ``_check*`` helper. Docstrings, comments and blank lines are not code lines.
"""

import ast
import pathlib
import sys

root = pathlib.Path(sys.argv[1])
total = val = 0
checks = 0
for path in sorted(root.rglob("*.py")):
    src = path.read_text()
    tree = ast.parse(src)
    lines = src.splitlines()
    doc = set()
    for node in ast.walk(tree):
        if (
            isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef))
            and node.body
            and isinstance(node.body[0], ast.Expr)
            and isinstance(getattr(node.body[0], "value", None), ast.Constant)
            and isinstance(node.body[0].value.value, str)
        ):
            doc.update(range(node.body[0].lineno, node.body[0].end_lineno + 1))
    code = {i for i, l in enumerate(lines, 1) if l.strip() and not l.strip().startswith("#") and i not in doc}
    v = set()
    whole = path.name == "_validate.py"
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and node.name.startswith("_check"):
            checks += 1
            v.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.If) and all(isinstance(s, ast.Raise) for s in node.body) and not node.orelse:
            v.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, ast.Raise):
            v.update(range(node.lineno, node.end_lineno + 1))
        if isinstance(node, (ast.Assign, ast.Expr)) and isinstance(getattr(node, "value", None), ast.Call):
            f = node.value.func
            if (isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "_validate") or (
                isinstance(f, ast.Name) and f.id.startswith("_check")
            ):
                v.update(range(node.lineno, node.end_lineno + 1))
    if whole:
        v = code
    total += len(code)
    val += len(code & v)
print(f"{val} of {total} code lines validate ({100 * val / total:.1f}%); {checks} private _check* functions")
