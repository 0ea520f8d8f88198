"""Minimal pytrees: nested dict / list / tuple containers of leaves, flattened and rebuilt."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TreeDef:
    kind: str  # "leaf" | "none" | "tuple" | "list" | "dict"
    children: tuple[TreeDef, ...] = ()
    keys: tuple = ()
    _hash: int = field(default=0, compare=False, repr=False)

    def __post_init__(self):  # hashed once: compiled functions look their cache up by it on every call
        object.__setattr__(self, "_hash", hash((self.kind, self.children, self.keys)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def num_leaves(self) -> int:
        return 1 if self.kind == "leaf" else sum(c.num_leaves for c in self.children)


LEAF = TreeDef("leaf")


def tree_flatten(tree: Any) -> tuple[list[Any], TreeDef]:
    leaves: list[Any] = []
    return leaves, _flatten(tree, leaves, None)


def tree_flatten_with_path(tree: Any, root: str = "") -> tuple[list[tuple[str, Any]], TreeDef]:
    """Like tree_flatten, with a readable path per leaf (``params['W1']``, ``xs[0]``)."""
    leaves: list[tuple[str, Any]] = []
    return leaves, _flatten(tree, leaves, root)


def _flatten(tree, leaves, path):
    def child(p, k):
        return None if path is None else f"{p}[{k!r}]"

    if tree is None:
        return TreeDef("none")
    if isinstance(tree, (tuple, list)):
        kids = tuple(_flatten(t, leaves, child(path, i)) for i, t in enumerate(tree))
        return TreeDef("tuple" if isinstance(tree, tuple) else "list", kids)
    if isinstance(tree, dict):
        keys = tuple(tree)
        return TreeDef("dict", tuple(_flatten(tree[k], leaves, child(path, k)) for k in keys), keys)
    leaves.append(tree if path is None else (path, tree))
    return LEAF


def tree_unflatten(treedef: TreeDef, leaves) -> Any:
    it = iter(leaves)
    out = _build(treedef, it)
    return out


def _build(td: TreeDef, it):
    if td.kind == "leaf":
        return next(it)
    if td.kind == "none":
        return None
    kids = [_build(c, it) for c in td.children]
    if td.kind == "dict":
        return dict(zip(td.keys, kids))
    return tuple(kids) if td.kind == "tuple" else kids


def tree_map(fn, tree):
    leaves, td = tree_flatten(tree)
    return tree_unflatten(td, [fn(x) for x in leaves])
