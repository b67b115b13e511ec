"""Package metadata, read from `settings.ini` (the nbdev 2 single source of truth)."""

from configparser import ConfigParser
from pathlib import Path

from setuptools import find_packages, setup

cfg = ConfigParser(delimiters=["="])
cfg.read(Path(__file__).parent / "settings.ini")
cfg = cfg["DEFAULT"]


def requirements(key):
    "The space-separated requirement list stored under `key`."
    return cfg.get(key, "").split()


# one extra per layer: every `<name>_requirements` key of settings.ini (the core is `requirements` itself)
LAYERS = [key.removesuffix("_requirements") for key in cfg if key.endswith("_requirements")]
NOT_IN_ALL = {"vllm"}  # vLLM brings its own (CUDA) torch: asked for by name (EXTRAS=all,vllm), never by `all`
extras = {name: requirements(f"{name}_requirements") for name in LAYERS}
extras["all"] = sorted({r for name in LAYERS if name not in NOT_IN_ALL for r in extras[name]})

# folders of data files only (no __init__.py): declared as packages so that their files ship and setuptools does not warn
# "Package would be ignored"; every such folder is listed in settings.ini's `data_packages`
DATA_PACKAGES = requirements("data_packages")
DATA_FILES = [
    "*.jsonl",
    "*.md",
    "LICENSE",
    "*.css",
    "*.js",
    "*.html",
]  # what MANIFEST.in puts in the sdist, the same patterns

setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    description=cfg["description"],
    author=cfg["author"],
    license="Apache-2.0",
    python_requires=f">={cfg['min_python']}",
    packages=find_packages(include=[cfg["lib_path"], f"{cfg['lib_path']}.*"]) + DATA_PACKAGES,
    package_data={name: DATA_FILES for name in DATA_PACKAGES},
    include_package_data=True,
    install_requires=requirements("requirements"),
    extras_require=extras,
    entry_points={
        "console_scripts": requirements("console_scripts"),
        "nbdev": [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"],
    },
)
