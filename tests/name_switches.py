"""A detector of code that switches on a method's registered name (the rule: code outside a method's own folder asks
the method or its settings instead), shared by the relaxation and granularity tests."""

from __future__ import annotations

import ast
from collections.abc import Collection


def name_switches(tree: ast.AST, names: Collection[str],
                  dict_keys_allowed: Collection[frozenset[str]] = ()) -> list[int]:
    """Lines comparing something to one of `names` (==, !=, in, not in) or keying a dict by one; a dict whose
    constant keys are exactly one of `dict_keys_allowed` is not a switch (e.g. {"weight", "bias"}: a parameter's
    attributes, not the weight granularity)."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            for part in [node.left, *node.comparators]:
                literals = part.elts if isinstance(part, (ast.Tuple, ast.List, ast.Set)) else [part]
                if any(isinstance(x, ast.Constant) and x.value in names for x in literals):
                    lines.append(node.lineno)
        if isinstance(node, ast.Dict):
            keys = frozenset(k.value for k in node.keys if isinstance(k, ast.Constant))
            if keys & set(names) and keys not in set(dict_keys_allowed):
                lines.append(node.lineno)
    return lines
