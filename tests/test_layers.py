"""The layers are a checked contract, not a picture: `lint-imports` keeps `.importlinter`'s layers (run by `make lint`,
so `make test-fast` and CI; here too), and this file keeps the rule it cannot say: an own-package import inside a function
only at an optional-dependency boundary (the imported module needs a package outside the core install, so a core install
must not import it at the top), or a module importing itself by path for a spawned process; each with its reason."""

import ast
import configparser
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "reasoning_study"
# a requirement's name -> the name it is imported by, where they differ
IMPORT_NAMES = {"pillow": "PIL", "pyyaml": "yaml", "math-verify": "math_verify"}


def core_packages() -> set[str]:
    "The import names of the core install's packages (settings.ini `requirements`)."
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "settings.ini")
    names = [re.split(r"[<>=!\[ ]", r)[0] for r in cfg["DEFAULT"]["requirements"].split()]
    return {IMPORT_NAMES.get(n, n.replace("-", "_")) for n in names}


def module_name(path: Path) -> str:
    return ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")


def imported_module(node: ast.ImportFrom | ast.Import, importer: str) -> str:
    "The module an import statement names, relative imports resolved."
    if isinstance(node, ast.Import):
        return node.names[0].name
    if node.level == 0:
        return node.module or ""
    base = importer.split(".")[: -node.level]
    return ".".join(base + ([node.module] if node.module else []))


def sources() -> dict[str, tuple[Path, ast.Module]]:
    return {
        module_name(p): (p, ast.parse(p.read_text())) for p in sorted(PACKAGE.rglob("*.py")) if p.name != "_modidx.py"
    }


def optional_packages(tree: ast.Module, importer: str, core: set[str]) -> set[str]:
    "The packages outside the core install (and the standard library) a module imports at its top."
    found = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)) and not getattr(node, "level", 0):
            for name in [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]:
                top = name.split(".")[0]
                if (
                    top not in core
                    and top not in sys.stdlib_module_names
                    and top not in ("reasoning_study", "__future__")
                ):
                    found.add(top)
    return found


def boundaries() -> dict[str, set[str]]:
    "Module -> the optional packages it imports at its top (a module that imports none is not a boundary)."
    core, mods = core_packages(), sources()
    return {m: pkgs for m, (_, tree) in mods.items() if (pkgs := optional_packages(tree, m, core))}


def function_imports() -> list[tuple[str, int, str, str]]:
    "(importer, line, imported own module, the reason written beside it) of every own-package import inside a function."
    found = []
    for importer, (path, tree) in sources().items():
        lines = path.read_text().splitlines()
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            for node in ast.walk(fn):
                if not isinstance(node, (ast.Import, ast.ImportFrom)):
                    continue
                target = imported_module(node, importer)
                if not target.startswith("reasoning_study"):
                    continue
                line = lines[node.lineno - 1]
                above = lines[node.lineno - 2].strip() if node.lineno > 1 else ""
                reason = (
                    line.split("#", 1)[1].strip()
                    if "#" in line
                    else above.lstrip("# ")
                    if above.startswith("#")
                    else ""
                )
                found.append((importer, node.lineno, target, reason))
    return found


def test_own_imports_inside_functions_are_at_an_optional_boundary_with_a_reason():
    edges, at = boundaries(), function_imports()
    assert at, "the check found no function-level import at all: is it reading the package?"
    wrong = [
        f"{importer}:{line} imports {target} inside a function: "
        + (
            "it imports only core packages at its top, so import it at the top"
            if target not in edges and target != importer
            else "say why beside it (the optional package, or the spawned process)"
        )
        for importer, line, target, reason in at
        if (target not in edges and target != importer) or not reason
    ]
    assert not wrong, "\n".join(wrong)


def test_the_boundaries_are_the_optional_extras():
    "What makes a module a boundary is an optional extra: torch and transformers, the openai client, vLLM."
    edges = boundaries()
    assert {"torch", "transformers"} <= edges["reasoning_study.backends.transformers"]
    assert "openai" in edges["reasoning_study.backends.openai"]
    assert "torch" in edges["reasoning_study.studies.attention.recording"]
    assert not any(m.startswith(("reasoning_study.figures", "reasoning_study.metrics")) for m in edges), edges


def test_the_layers_contract_is_kept():
    "import-linter over `.importlinter`: every layer imports only the layers below it (lazy imports included)."
    exe = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    if exe is None:
        pytest.skip("import-linter is not installed (the dev extra)")
    done = subprocess.run([exe], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
