"""Packages of the one PEP 420 namespace `cohort`, spread over three source roots (see ARCHITECTURE.md), and
the shipped programs' built files as package data, so a wheel works without the checkout or a compiler.
"""

import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import Distribution, find_namespace_packages, setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SOURCE_ROOTS = ("sdk", "clients", "localnet")
# the C -> SBF toolchain lives beside the C programs it builds (stdlib-only Python + C headers)
TOOLCHAIN = {"cohort.sbf": "contracts/sbf", "cohort.sbf.abi": "contracts/sbf/abi"}


def shipped_artifacts() -> dict[str, Path]:
    """What cohort.sdk.artifacts looks for in the installed package, cohort/sdk/artifacts/<program>/<file>,
    for every program whose program.toml says `ship = true`: the manifest, the IDL, the SBF program and the
    host library (when it has one)."""
    sys.path.insert(0, str(HERE / "contracts"))
    try:
        from sbf.manifest import find_manifests  # stdlib-only, run from the source tree
    finally:
        sys.path.pop(0)
    target = HERE / "contracts" / "target"
    out: dict[str, Path] = {}
    for m in find_manifests(HERE / "contracts", skip=(target, HERE / "contracts" / "sbf")):
        if not m.ship:
            continue
        out[f"{m.name}/program.toml"] = m.path
        if m.abi is not None:
            out[f"{m.name}/idl.json"] = m.abi.idl
        out[f"{m.name}/{m.name}.so"] = target / f"{m.name}.so"
        if m.host_sources:
            out[f"{m.name}/lib{m.name}.so"] = target / "host" / f"lib{m.name}.so"
    return out


class BuildWithArtifacts(build_py):
    """build_py that also puts the IDL, the SBF program and the host library into cohort/sdk/artifacts/
    (building the programs first when they are not built; an editable install reads the checkout's)."""

    def run(self) -> None:
        super().run()
        if getattr(self, "editable_mode", False):
            return
        artifacts = shipped_artifacts()
        if not all(source.is_file() for source in artifacts.values()):
            # the toolchain is stdlib-only Python: run it from the source tree (needs clang, at build time only)
            code = "import sys; sys.path.insert(0, 'contracts'); from sbf import build; sys.exit(build.main([]))"
            subprocess.run([sys.executable, "-c", code], cwd=HERE, check=True)
        target = Path(self.build_lib) / "cohort" / "sdk" / "artifacts"
        target.mkdir(parents=True, exist_ok=True)
        for name, source in artifacts.items():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, target / name)


class PlatformDistribution(Distribution):
    """The host library is native code: the wheel is tagged for this platform, not `any`."""

    def has_ext_modules(self) -> bool:
        return True


packages: list[str] = []
package_dir: dict[str, str] = {}
for root in SOURCE_ROOTS:
    for package in find_namespace_packages(root, include=["cohort.*"]):
        packages.append(package)
        package_dir[package] = f"{root}/{package.replace('.', '/')}"

packages += TOOLCHAIN
package_dir.update(TOOLCHAIN)

setup(
    packages=packages,
    package_dir=package_dir,
    # files beside the code: the explorer's pages, the mini C SDK's headers
    package_data={
        "cohort.sdk.explorer": ["static/*"],
        "cohort.sdk": ["configs/*.toml"],
        "cohort.sbf": ["include/*.h", "include/*/*.h"],
    },
    cmdclass={"build_py": BuildWithArtifacts},
    distclass=PlatformDistribution,
)
