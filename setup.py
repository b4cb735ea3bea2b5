"""Packages of the one PEP 420 namespace `cohort`, spread over three source roots (see ARCHITECTURE.md)."""

from setuptools import find_namespace_packages, setup

SOURCE_ROOTS = ("sdk", "clients", "localnet")

packages: list[str] = []
package_dir: dict[str, str] = {}
for root in SOURCE_ROOTS:
    for package in find_namespace_packages(root, include=["cohort.*"]):
        packages.append(package)
        package_dir[package] = f"{root}/{package.replace('.', '/')}"

setup(packages=packages, package_dir=package_dir)
