"""Packages of the one PEP 420 namespace `cohort`, spread over three source roots (see ARCHITECTURE.md)."""

from setuptools import find_namespace_packages, setup

SOURCE_ROOTS = ("sdk", "clients", "localnet")
# the C -> SBF toolchain lives beside the C programs it builds (stdlib-only Python + C headers)
TOOLCHAIN = {"cohort.sbf": "contracts/sbf"}

packages: list[str] = []
package_dir: dict[str, str] = {}
for root in SOURCE_ROOTS:
    for package in find_namespace_packages(root, include=["cohort.*"]):
        packages.append(package)
        package_dir[package] = f"{root}/{package.replace('.', '/')}"

packages += TOOLCHAIN
package_dir.update(TOOLCHAIN)

setup(packages=packages, package_dir=package_dir)
