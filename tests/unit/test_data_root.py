"""The data root's sub-folders are named in one place (core/data_root.py): no other module of the
package joins "releases", "shards", "layers", "deletion_requests" or "demo_inputs" onto a data root."""

import ast
from pathlib import Path

from corpus_assets.domain.core.data_root import DataRoot

PACKAGES = [Path(__file__).resolve().parents[2] / d for d in ("corpus_assets", "sensors", "resources")]
NAMES = {"releases", "shards", "layers", "deletion_requests", "demo_inputs"}


def test_paths_and_keys():
    root = DataRoot(Path("/data"))
    assert (root.layers, root.shards, root.releases) == (Path("/data/layers"), Path("/data/shards"), Path("/data/releases"))
    assert root.deletion_requests == Path("/data/deletion_requests") and root.demo_inputs == Path("/data/demo_inputs")
    assert root.shard_sets("demo") == Path("/data/shards/demo") and DataRoot.shard_sets_key("demo") == "shards/demo"
    assert DataRoot.release_key("demo") == "releases/demo" and DataRoot.release_key("demo", "b1") == "releases/demo/b1"


def test_no_module_assembles_the_data_root_by_hand():
    found = []
    for package in PACKAGES:
        for path in sorted(package.rglob("*.py")):
            if path.name == "data_root.py":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div) and isinstance(node.right, ast.Constant) \
                        and node.right.value in NAMES and _is_a_data_root(node.left):
                    found.append(f"{path}:{node.lineno}: / {node.right.value!r}")
    assert not found, "use corpus_assets.domain.core.data_root.DataRoot:\n" + "\n".join(found)


def _is_a_data_root(left: ast.AST) -> bool:
    """``home``, ``store.home``, ``self.home``, ``corpus_home()``: what a data root is called in the
    code (``<build dir> / "shards"`` is the folder of one published build, ``project_root() /
    "releases"`` the release specs: neither is the data root)."""
    if isinstance(left, ast.Name):
        return left.id == "home"
    if isinstance(left, ast.Attribute):
        return left.attr == "home"
    return isinstance(left, ast.Call) and getattr(left.func, "id", getattr(left.func, "attr", "")) == "corpus_home"
