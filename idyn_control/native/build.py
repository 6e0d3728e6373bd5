"""Compile the native tick: ``python -m idyn_control.native.build`` (``idyn-control build-native``).

The library is header-only C++ on Pinocchio, ProxQP and Eigen: nothing is linked but
the C++ runtime. Headers are found, in order, in ``IDYN_NATIVE_INCLUDE`` (``:``-separated),
the pip wheels' prefix (``cmeel.prefix/include`` of pin, proxsuite and cmeel-eigen), a
ROS 2 install (``/opt/ros/<distro>/include``) and the system (``/usr/include/eigen3``).
The output's name carries a hash of the sources and flags, so a stale build is never loaded.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("engine.cpp", "solvers.cpp")
RT_SOURCE = "rt.cpp"  # the node's compiled input → command path: rcl only, built when rcl is found
RT_LIBS = ("-lrcl", "-lrmw", "-lrcutils")
HEADERS = ("native.hpp",)
#: as Pinocchio's CMake config exports them (its joint variant needs the larger MPL limits)
DEFINES = ("-DNDEBUG", "-DBOOST_MPL_LIMIT_LIST_SIZE=30", "-DBOOST_MPL_LIMIT_VECTOR_SIZE=30",
           "-DBOOST_MPL_CFG_NO_PREPROCESSED_HEADERS", "-DBOOST_FUSION_INVOKE_MAX_ARITY=12")
FLAGS = ("-std=c++17", "-O3", "-march=native", "-fPIC", "-w")


class BuildError(RuntimeError):
    """The native library could not be compiled; the message says what was missing."""


def compiler() -> str | None:
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def source_hash() -> str:
    h = hashlib.sha1()
    for name in SOURCES + HEADERS:
        h.update((SOURCE_DIR / name).read_bytes())
    h.update(" ".join(DEFINES + FLAGS).encode())
    return h.hexdigest()[:12]


def library_name() -> str:
    return f"_idyn_native-{source_hash()}.so"


def ros_prefix() -> Path | None:
    """The ROS 2 prefix whose rcl this process uses (the ros-* wheels' venv, or a sourced
    /opt/ros/<distro>): it has include/rcl/rcl/publisher.h and lib/librcl.so."""
    prefixes = [Path(p) for p in os.environ.get("AMENT_PREFIX_PATH", "").split(":") if p]
    prefixes += [Path(sys.prefix), Path(sysconfig.get_paths()["data"])]
    try:  # the prefix the imported rclpy lives in
        import rclpy

        prefixes.insert(0, Path(rclpy.__file__).resolve().parents[4])
    except ImportError:
        pass
    prefixes += sorted(Path("/opt/ros").glob("*")) if Path("/opt/ros").is_dir() else []
    for prefix in prefixes:
        if (prefix / "include" / "rcl" / "rcl" / "publisher.h").exists() and (prefix / "lib" / "librcl.so").exists():
            return prefix
    return None


def rt_library_name(prefix: Path) -> str:
    h = hashlib.sha1((SOURCE_DIR / RT_SOURCE).read_bytes())
    h.update(" ".join(FLAGS + RT_LIBS).encode())
    h.update(str(prefix).encode())
    return f"_idyn_rt-{h.hexdigest()[:12]}.so"


def rt_library_path() -> Path | None:
    """The built rt library for the current sources and ROS prefix, if any."""
    prefix = ros_prefix()
    if prefix is None:
        return None
    for d in candidate_dirs():
        if (d / rt_library_name(prefix)).exists():
            return d / rt_library_name(prefix)
    return None


def build_rt(out_dir: Path | None = None, *, log=print) -> Path | None:
    """Compile rt.cpp against the ROS 2 prefix in use (seconds); None without ROS 2."""
    prefix = ros_prefix()
    if prefix is None:
        log("native: no ROS 2 prefix with rcl headers: the node's compiled loop is not built")
        return None
    cxx = compiler()
    if cxx is None:
        raise BuildError("no C++ compiler (c++, g++ or clang++; set CXX): install g++")
    dirs = [out_dir] if out_dir else candidate_dirs()
    target_dir = next((d for d in dirs if _writable(d)), None)
    if target_dir is None:
        raise BuildError(f"none of {', '.join(map(str, dirs))} is writable")
    target = target_dir / rt_library_name(prefix)
    includes = [f"-I{d}" for d in sorted((prefix / "include").iterdir()) if d.is_dir()]
    lib = prefix / "lib"
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        partial = Path(tmp) / target.name
        cmd = [cxx, *FLAGS, "-shared", *includes, str(SOURCE_DIR / RT_SOURCE), "-o", str(partial),
               f"-L{lib}", f"-Wl,-rpath,{lib}", *RT_LIBS, "-lpthread"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode:
            raise BuildError(f"compiling {RT_SOURCE} failed:\n{proc.stderr[-4000:]}")
        shutil.move(str(partial), target)
    for old in target_dir.glob("_idyn_rt-*.so"):
        if old != target:
            old.unlink(missing_ok=True)
    log(f"native: built {target} in {time.monotonic() - t0:.0f} s")
    return target


def candidate_dirs() -> list[Path]:
    """Where a built library may live: beside the sources, else a per-user cache."""
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "idyn_control"
    return [SOURCE_DIR, cache]


def _include_roots() -> list[Path]:
    roots = [Path(p) for p in os.environ.get("IDYN_NATIVE_INCLUDE", "").split(":") if p]
    for key in ("purelib", "platlib"):
        roots.append(Path(sysconfig.get_paths()[key]) / "cmeel.prefix" / "include")
    for entry in sys.path:
        roots.append(Path(entry) / "cmeel.prefix" / "include")
    ros = Path("/opt/ros")
    if ros.is_dir():
        roots.extend(sorted(ros.glob("*/include")))
    roots.append(Path("/usr/local/include"))
    roots.append(Path("/usr/include"))
    return roots


def include_dirs() -> list[Path]:
    """Directories providing pinocchio/, proxsuite/, boost/ and Eigen/ headers."""
    needed = {"pinocchio": "pinocchio/algorithm/crba.hpp", "proxsuite": "proxsuite/proxqp/dense/dense.hpp",
              "boost": "boost/variant.hpp", "eigen": "Eigen/Core"}
    found: dict[str, Path] = {}
    for root in _include_roots():
        for key, probe in needed.items():
            if key in found:
                continue
            for base in (root, root / "eigen3"):
                if (base / probe).exists():
                    found[key] = base
                    break
    missing = sorted(set(needed) - set(found))
    if missing:
        raise BuildError(f"headers not found for {', '.join(missing)}; install the pinned requirements "
                         "(pip: pin, proxsuite, cmeel-eigen) or set IDYN_NATIVE_INCLUDE")
    dirs: list[Path] = []
    for d in found.values():
        if d not in dirs:
            dirs.append(d)
    return dirs


def build(out_dir: Path | None = None, *, log=print) -> Path:
    """Compile the library (about two minutes on two cores) and return its path."""
    cxx = compiler()
    if cxx is None:
        raise BuildError("no C++ compiler (c++, g++ or clang++; set CXX): install g++")
    includes = [f"-I{d}" for d in include_dirs()]
    dirs = [out_dir] if out_dir else candidate_dirs()
    target_dir = next((d for d in dirs if _writable(d)), None)
    if target_dir is None:
        raise BuildError(f"none of {', '.join(map(str, dirs))} is writable")
    target = target_dir / library_name()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory() as tmp:
        def compile_one(src: str) -> Path:
            obj = Path(tmp) / (src + ".o")
            cmd = [cxx, *FLAGS, *DEFINES, *includes, "-c", str(SOURCE_DIR / src), "-o", str(obj)]
            proc = subprocess.run(cmd, capture_output=True, text=True)
            if proc.returncode:
                raise BuildError(f"compiling {src} failed:\n{proc.stderr[-4000:]}")
            return obj

        with ThreadPoolExecutor(max_workers=max(1, min(len(SOURCES), os.cpu_count() or 1))) as pool:
            objects = list(pool.map(compile_one, SOURCES))
        partial = Path(tmp) / target.name
        proc = subprocess.run([cxx, "-shared", "-o", str(partial), *map(str, objects)], capture_output=True, text=True)
        if proc.returncode:
            raise BuildError(f"linking failed:\n{proc.stderr[-4000:]}")
        shutil.move(str(partial), target)
    for old in target_dir.glob("_idyn_native-*.so"):  # earlier builds of other sources
        if old != target:
            old.unlink(missing_ok=True)
    log(f"native: built {target} in {time.monotonic() - t0:.0f} s")
    return target


def _writable(d: Path) -> bool:
    try:
        d.mkdir(parents=True, exist_ok=True)
    except OSError:
        return False
    return os.access(d, os.W_OK)


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--force", action="store_true", help="rebuild even if an up-to-date library exists")
    parser.add_argument("--out-dir", type=Path, help="where to write the library (default: beside the sources)")
    args = parser.parse_args(argv)
    try:
        up_to_date = [d / library_name() for d in ([args.out_dir] if args.out_dir else candidate_dirs())
                      if (d / library_name()).exists()]
        if up_to_date and not args.force:
            print(f"native: up to date ({up_to_date[0]})")
        else:
            build(args.out_dir)
        rt_path = rt_library_path()
        if rt_path is not None and not args.force:
            print(f"native: up to date ({rt_path})")
        else:
            build_rt(args.out_dir)
    except BuildError as err:
        print(f"native: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
