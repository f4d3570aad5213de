"""Which packages the wheel holds, found on disk (pyproject.toml holds everything else).

probes/, kernels/ and profiles/ sit at the top of the repository but install only under the kttune
namespace (a PyPI package named `kernels` exists), so setuptools' plain `find` cannot name them:
each mapped directory's own packages are found and put under its kttune name. A new sub-package
(kttune.sim, kttune.runner) is picked up without editing anything.
"""

from setuptools import find_packages, setup

MAPPED = {"kttune.probes": "probes", "kttune.kernels": "kernels", "kttune.profiles": "profiles"}


def packages() -> list[str]:
    found = find_packages(include=["kttune", "kttune.*"])
    for name, where in MAPPED.items():
        found += [name] + [f"{name}.{sub}" for sub in find_packages(where)]
    return sorted(found)


if __name__ == "__main__":  # setuptools runs it so; tests/test_packaging.py imports packages()
    setup(packages=packages(), package_dir=MAPPED)
