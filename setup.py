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


extras = {name: requirements(f"{name}_requirements") for name in ("dev", "vllm", "ray")}
extras["all"] = sorted({r for name in ("dev", "ray") for r in extras[name]})

setup(
    name=cfg["lib_name"],
    version=cfg["version"],
    description=cfg["description"],
    author=cfg["author"],
    license="Apache-2.0",
    python_requires=f">={cfg['min_python']}",
    packages=find_packages(include=[cfg["lib_path"], f"{cfg['lib_path']}.*"]),
    include_package_data=True,
    install_requires=requirements("requirements"),
    extras_require=extras,
    entry_points={
        "console_scripts": requirements("console_scripts"),
        "nbdev": [f"{cfg['lib_path']}={cfg['lib_path']}._modidx:d"],
    },
)
