"""How the compiled tick is built: the package's own build runs this (``setup.py``).

``pip install .``, ``pip install -e .`` and ``colcon build`` (ament_python runs
``setup.py``) all build two optional extension modules with setuptools and pybind11:

- ``idyn_control.native._native``: the compiled tick (``engine.cpp``, ``solvers.cpp``,
  ``gait.cpp``, ``tick.cpp``) and its binding (``bindings.cpp``). Header-only Pinocchio, ProxQP and Eigen: nothing is
  linked but the C++ runtime. Headers are found, in order, in ``IDYN_NATIVE_INCLUDE``
  (``:``-separated), the pip wheels' prefix (``cmeel.prefix/include`` of pin, proxsuite and
  cmeel-eigen: the installed ones, or pip's build environment's), a ROS 2 install
  (``$AMENT_PREFIX_PATH``, ``/opt/ros/<distro>/include``) and the system
  (``/usr/include/eigen3``).
- ``idyn_control.native._rt``: the node's compiled loop (``rt.cpp``, ``rt_bindings.cpp``),
  linked to rcl, rmw and rcutils, built only when a ROS 2 prefix with rcl's headers and
  libraries is found (the ros-* wheels' venv, a sourced or installed ``/opt/ros/<distro>``).

A module that cannot be built (no compiler, no headers, no pybind11, a compile error) is
skipped, the install still succeeds and the formulations run their Python code; why is
written to ``_build_info.json`` beside the modules, which :mod:`idyn_control.native` reports.
Flags are portable (``-O3``, the compiler's default target); ``IDYN_NATIVE_MARCH=native``
(or another ``-march`` value) opts a local build into the build machine's instructions.

``idyn-control build-native`` (:func:`main`) rebuilds the modules in place (beside the
sources, where the package is installed) with the same configuration.

Only the standard library (and setuptools when building) is imported here: ``setup.py``
loads this file by path in pip's isolated build environment, without the package's
dependencies.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import sysconfig
import time
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
PACKAGE = "idyn_control.native"
NATIVE_MODULE = "_native"
RT_MODULE = "_rt"
NATIVE_SOURCES = ("engine.cpp", "solvers.cpp", "gait.cpp", "tick.cpp", "bindings.cpp")
RT_SOURCES = ("rt.cpp", "rt_bindings.cpp")  # the node's compiled input → command path: rcl only
HEADERS = ("native.hpp", "api.h", "rt_api.h")
RT_LIBS = ("rcl", "rmw", "rcutils")
#: as Pinocchio's CMake config exports them (its joint variant needs the larger MPL limits)
DEFINES = ("-DNDEBUG", "-DBOOST_MPL_LIMIT_LIST_SIZE=30", "-DBOOST_MPL_LIMIT_VECTOR_SIZE=30",
           "-DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS", "-DBOOST_FUSION_INVOKE_MAX_ARITY=12")
#: portable: no -march (the compiler's default target); -g0 overrides Python's -g (the
#: Pinocchio templates' debug information would be hundreds of MB)
FLAGS = ("-std=c++17", "-O3", "-g0", "-fvisibility=hidden", "-w")
#: opt-in for local builds: IDYN_NATIVE_MARCH=native adds -march=native
MARCH_ENV = "IDYN_NATIVE_MARCH"
#: written beside the modules: what was built, with which flags, and why not
BUILD_INFO = "_build_info.json"


class BuildError(RuntimeError):
    """A module cannot be built here; the message says what is missing."""


def compile_flags() -> list[str]:
    flags = [*FLAGS, *DEFINES]
    march = os.environ.get(MARCH_ENV, "").strip()
    if march:
        flags += [f"-march={march}", f'-DIDYN_NATIVE_MARCH="{march}"']
    return flags


def _include_roots() -> list[Path]:
    roots = [Path(p) for p in os.environ.get("IDYN_NATIVE_INCLUDE", "").split(":") if p]
    for key in ("purelib", "platlib"):  # the target environment (also under pip's build isolation)
        roots.append(Path(sysconfig.get_paths()[key]) / "cmeel.prefix" / "include")
    for entry in sys.path:  # pip's build environment, other site directories
        roots.append(Path(entry) / "cmeel.prefix" / "include")
    for prefix in _ament_prefixes():
        roots.append(prefix / "include")
        roots.append(prefix / "opt" / "pybind11_vendor" / "include")
    roots.append(Path("/usr/local/include"))
    roots.append(Path("/usr/include"))
    return roots


def _ament_prefixes() -> list[Path]:
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(":") if p]
    if Path("/opt/ros").is_dir():
        prefixes += sorted(Path("/opt/ros").glob("*"))
    return prefixes


def _find(needed: dict[str, str], roots: list[Path]) -> dict[str, Path]:
    found: dict[str, Path] = {}
    for root in roots:
        for key, probe in needed.items():
            if key in found:
                continue
            for base in (root, root / "eigen3"):
                if (base / probe).exists():
                    found[key] = base
                    break
    return found


def include_dirs() -> list[Path]:
    """Directories providing pinocchio/, proxsuite/, boost/ and Eigen/ headers."""
    needed = {"pinocchio": "pinocchio/algorithm/crba.hpp", "proxsuite": "proxsuite/proxqp/dense/dense.hpp",
              "boost": "boost/variant.hpp", "eigen": "Eigen/Core"}
    found = _find(needed, _include_roots())
    missing = sorted(set(needed) - set(found))
    if missing:
        raise BuildError(f"headers not found for {', '.join(missing)}; install the pinned requirements "
                         "(pip: pin, proxsuite, cmeel-eigen; ROS: pinocchio, proxsuite, eigen) or set "
                         "IDYN_NATIVE_INCLUDE")
    return list(dict.fromkeys(found.values()))


def pybind11_include() -> Path:
    """pybind11's headers: the Python package's, else a system or ROS install's."""
    try:
        import pybind11

        return Path(pybind11.get_include())
    except ImportError:
        pass
    found = _find({"pybind11": "pybind11/pybind11.h"}, _include_roots())
    if not found:
        raise BuildError("pybind11 not found (pip: pybind11; ROS: pybind11_vendor or pybind11-dev)")
    return found["pybind11"]


def ros_prefix() -> Path | None:
    """The ROS 2 prefix whose rcl this process uses (the ros-* wheels' venv, or a sourced
    /opt/ros/<distro>): it has include/rcl/rcl/publisher.h and lib/librcl.so."""
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(":") if p]
    prefixes += [Path(sys.prefix), Path(sysconfig.get_paths()["data"])]
    try:  # the prefix the imported rclpy lives in (not importable under pip's build isolation)
        import rclpy

        prefixes.insert(0, Path(rclpy.__file__).resolve().parents[4])
    except ImportError:
        pass
    prefixes += sorted(Path("/opt/ros").glob("*")) if Path("/opt/ros").is_dir() else []
    for prefix in prefixes:
        if (prefix / "include" / "rcl" / "rcl" / "publisher.h").exists() and (prefix / "lib" / "librcl.so").exists():
            return prefix
    return None


def _relative(name: str, root: Path) -> str:
    return os.path.relpath(SOURCE_DIR / name, root)


def extensions(root: Path) -> tuple[list, dict[str, str]]:
    """The extension modules that can be attempted here (sources relative to ``root``, the
    directory holding ``idyn_control/``) and, for each module left out, why."""
    from setuptools import Extension

    skipped: dict[str, str] = {}
    exts = []
    try:
        pybind = pybind11_include()
    except BuildError as err:
        return [], {NATIVE_MODULE: str(err), RT_MODULE: str(err)}
    flags = compile_flags()
    try:
        exts.append(Extension(f"{PACKAGE}.{NATIVE_MODULE}", [_relative(s, root) for s in NATIVE_SOURCES],
                              include_dirs=[str(pybind), *map(str, include_dirs())], language="c++",
                              extra_compile_args=flags, depends=[_relative(h, root) for h in HEADERS]))
    except BuildError as err:
        skipped[NATIVE_MODULE] = str(err)
    prefix = ros_prefix()
    if prefix is None:
        skipped[RT_MODULE] = ("no ROS 2 found at build time (rcl headers and librcl.so under $AMENT_PREFIX_PATH, "
                              "the Python prefix or /opt/ros): the node's compiled loop is not built")
    else:
        ros_includes = sorted(str(d) for d in (prefix / "include").iterdir() if d.is_dir())
        lib = str(prefix / "lib")
        exts.append(Extension(f"{PACKAGE}.{RT_MODULE}", [_relative(s, root) for s in RT_SOURCES],
                              include_dirs=[str(pybind), *ros_includes], language="c++",
                              extra_compile_args=flags, depends=[_relative(h, root) for h in HEADERS],
                              libraries=list(RT_LIBS), library_dirs=[lib],
                              runtime_library_dirs=[lib]))
    return exts, skipped


def build_ext_class():
    """setuptools' build_ext, made tolerant: a module that fails to build is reported, not fatal."""
    from setuptools.command.build_ext import build_ext

    class BuildExt(build_ext):
        skipped: dict[str, str] = {}

        def run(self):
            self._reasons = dict(self.skipped)
            self._times: dict[str, float] = {}
            cxx = (self._compiler_name() if self.extensions else None)
            if self.extensions and cxx and shutil.which(cxx) is None:
                for ext in self.extensions:
                    self._reasons[ext.name.rsplit(".", 1)[1]] = f"no C++ compiler ({cxx}; set CXX or install g++)"
                self.extensions = []
            try:
                super().run()
            finally:
                self._write_info()

        def _compiler_name(self) -> str | None:
            return os.environ.get("CXX") or sysconfig.get_config_var("CXX") or "c++"

        def build_extension(self, ext):
            name = ext.name.rsplit(".", 1)[1]
            t0 = time.monotonic()
            self.announce(f"idyn_control: compiling {name} (a few minutes)", level=3)
            try:
                super().build_extension(ext)
            except Exception as err:  # noqa: BLE001 - any failure leaves the Python formulations
                text = str(err).strip().splitlines()
                self._reasons[name] = f"compiling failed: {' '.join(text[-3:])[:400]}"
                print(f"idyn_control: {name} not built: {self._reasons[name]}", file=sys.stderr)
                return
            self._times[name] = time.monotonic() - t0

        def _write_info(self):
            outs = [Path(self.get_ext_fullpath(f"{PACKAGE}.{NATIVE_MODULE}")).parent]
            if self.inplace or getattr(self, "editable_mode", False):  # pip -e: the modules go to the sources
                outs.append(Path(self.get_finalized_command("build_py").get_package_dir(PACKAGE)).resolve())
            info = {"flags": compile_flags(), "python": sys.version.split()[0], "modules": {}}
            for name in (NATIVE_MODULE, RT_MODULE):
                if name in self._times:
                    info["modules"][name] = {"built": True, "seconds": round(self._times[name], 1)}
                else:
                    info["modules"][name] = {"built": False,
                                             "reason": self._reasons.get(name, "not attempted")}
            for out in dict.fromkeys(outs):
                out.mkdir(parents=True, exist_ok=True)
                (out / BUILD_INFO).write_text(json.dumps(info, indent=1) + "\n")
            for name, what in info["modules"].items():
                print(f"idyn_control: {name}: " + ("built" if what["built"] else f"not built: {what['reason']}"),
                      file=sys.stderr)

    return BuildExt


def distribution_class():
    """setuptools' Distribution that always runs build_ext, so that a build with no module
    to attempt (no pybind11 found) still records why."""
    from setuptools import Distribution

    class AlwaysBuildExt(Distribution):
        def has_ext_modules(self):
            return True

    return AlwaysBuildExt


def build_info(directory: Path = SOURCE_DIR) -> dict | None:
    """The last build's record beside the modules, if any."""
    try:
        return json.loads((directory / BUILD_INFO).read_text())
    except (OSError, ValueError):
        return None


def main(argv: list[str] | None = None) -> int:
    """Rebuild the modules in place, where the package is (``idyn-control build-native``)."""
    import argparse

    parser = argparse.ArgumentParser(description="Rebuild the compiled tick in place (the package build "
                                                 "does this on install)")
    parser.add_argument("--force", action="store_true", help="recompile every source")
    args = parser.parse_args(argv)
    try:
        from setuptools import Distribution
    except ImportError:
        print("native: setuptools is needed to build (pip install setuptools pybind11)", file=sys.stderr)
        return 1
    root = SOURCE_DIR.parent.parent
    if not os.access(SOURCE_DIR, os.W_OK):
        print(f"native: {SOURCE_DIR} is not writable: reinstall the package instead (pip install .)",
              file=sys.stderr)
        return 1
    exts, skipped = extensions(root)
    cmd_class = build_ext_class()
    cmd_class.skipped = skipped
    cwd = os.getcwd()
    os.chdir(root)
    try:
        dist = Distribution({"name": "idyn_control", "ext_modules": exts, "cmdclass": {"build_ext": cmd_class}})
        cmd = dist.get_command_obj("build_ext")
        cmd.inplace = True
        cmd.force = args.force
        cmd.build_temp = str(Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "idyn_control" / "build")
        cmd.ensure_finalized()
        cmd.run()
    finally:
        os.chdir(cwd)
    info = build_info() or {}
    return 0 if info.get("modules", {}).get(NATIVE_MODULE, {}).get("built") else 1


if __name__ == "__main__":
    sys.exit(main())
