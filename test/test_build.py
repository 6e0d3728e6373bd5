"""The package's own build makes the compiled tick (setup.py, idyn_control/native/build.py).

What is installed here was built by ``pip install -e .`` (scripts/setup.sh): its modules
load and serve the formulations, with portable flags. A build without a C++ compiler still
installs and runs the Python formulations, saying why. A fresh ``pip install .`` into a new
venv (pip's isolated build, headers from the build requirements) and a colcon-style build
(``setup.py build install --prefix``, what ament_python runs) both yield the compiled tick
and the node's compiled loop: those two compile everything again (minutes each).

CI sets IDYN_REQUIRE_NATIVE=1: there a module that was not built is a failure, not a skip.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import numpy as np
import pytest

from idyn_control import formulations, native
from idyn_control.native import build

ROOT = Path(__file__).resolve().parents[1]
REQUIRED = bool(os.environ.get("IDYN_REQUIRE_NATIVE"))
#: what a fresh install imports and checks, run by that install's own Python outside the source tree
CHECK = """
import json, sys
import numpy as np, pinocchio as pin
import idyn_control
from idyn_control import formulations, native, robots
from idyn_control.native import rt
rt.load_rt()
ok, what = native.status()
model = robots.load("quadruped")
f = formulations.make("qp_coulomb", model, dt=1e-3)
q = robots.standing_configuration(model, "quadruped")
r = f.solve(q, np.zeros(model.nv), np.zeros(model.nv), active_contacts=model.contact_frames)
print(json.dumps({"package": idyn_control.__file__, "native": ok, "what": what, "backend": f.backend,
                  "module": native.load().__file__, "rt": rt.load_rt().__file__, "march": native.load().build["march"],
                  "status": r.status, "weight_n": float(r.forces[:, 2].sum()), "mass_kg": pin.computeTotalMass(model.pin_model)}))
"""


def _copy_sources(dest: Path) -> Path:
    """The repository's sources as a clean clone has them (no builds, venvs or results)."""
    shutil.copytree(ROOT, dest, ignore=shutil.ignore_patterns(
        ".git", ".venv", "venv", ".peer-venv", "build", "install", "log", "results", "*.egg-info", "__pycache__",
        "*.so", build.BUILD_INFO, ".pytest_cache"))
    return dest


def _run(cmd, *, timeout=1800, **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    assert proc.returncode == 0, f"{cmd[:4]}... failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return proc


def _env(**extra) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", build.MARCH_ENV)}
    env.update(extra)
    return env


def _check_install(python: str, cwd: Path, env: dict[str, str], prefix: Path) -> dict:
    """Run CHECK with that Python; the package and both modules must come from ``prefix``."""
    got = json.loads(_run([python, "-c", CHECK], cwd=cwd, env=env, timeout=300).stdout.strip().splitlines()[-1])
    for key in ("package", "module", "rt"):
        assert Path(got[key]).resolve().is_relative_to(prefix.resolve()), (key, got[key])
    assert got["native"] and got["backend"] == "native", got["what"]
    assert got["march"] == "", "the installed build must be portable (no -march)"
    assert got["status"] == "solved"
    # the compiled tick holds the standing robot: the feet carry its weight
    assert got["weight_n"] == pytest.approx(got["mass_kg"] * 9.81, rel=0.05)
    return got


def test_what_was_built_here_is_loaded_and_portable(load_robot):
    """Each module the build reports as built loads; in CI both must have been built."""
    info = build.build_info()
    if info is None:
        assert not REQUIRED, "IDYN_REQUIRE_NATIVE is set but the package was never built"
        pytest.skip("the package was not built here (no _build_info.json)")
    modules = info["modules"]
    if REQUIRED:
        missing = {name: m["reason"] for name, m in modules.items() if not m["built"]}
        assert not missing, f"IDYN_REQUIRE_NATIVE is set but modules were not built: {missing}"
    if not modules[build.NATIVE_MODULE]["built"]:
        ok, why = native.status()
        assert not ok and modules[build.NATIVE_MODULE]["reason"] in why
        pytest.skip(why)
    ext = native.load()
    assert Path(ext.__file__).parent == build.SOURCE_DIR
    march = [f for f in info["flags"] if f.startswith("-march")]
    assert ext.build["march"] == (march[0].split("=", 1)[1] if march else "")
    if REQUIRED:
        assert not march, "CI checks the portable build"
    model = load_robot("solo12")
    for name in ("qp_coulomb", "qp_noslip", "wbc_qp"):
        assert formulations.make(name, model).backend == "native"
    if modules[build.RT_MODULE]["built"]:
        from idyn_control.native import rt

        assert rt.load_rt().Loop is not None


def test_without_a_compiler_pip_install_succeeds_and_python_runs(tmp_path, load_robot):
    """pip's build (PEP 517, setuptools) with no C++ compiler: the wheel installs without the
    modules, the reason is recorded, and the formulations run their Python code."""
    src = _copy_sources(tmp_path / "src")
    site = tmp_path / "site"
    env = _env(CXX=str(tmp_path / "no-such-compiler"))
    _run([sys.executable, "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
          "--no-build-isolation", "--target", str(site), str(src)], env=env, timeout=600)
    assert not list((site / "idyn_control" / "native").glob("*.so"))
    info = json.loads((site / "idyn_control" / "native" / build.BUILD_INFO).read_text())
    for name in (build.NATIVE_MODULE, build.RT_MODULE):
        assert not info["modules"][name]["built"]
    assert "no C++ compiler" in info["modules"][build.NATIVE_MODULE]["reason"]
    script = """
import json, numpy as np, pinocchio as pin
from idyn_control import formulations, native, robots
model = robots.load("quadruped")
f = formulations.make("qp_coulomb", model, dt=1e-3)
q = robots.standing_configuration(model, "quadruped")
r = f.solve(q, np.zeros(model.nv), np.zeros(model.nv), active_contacts=model.contact_frames)
print(json.dumps({"status": native.status(), "backend": f.backend, "why": f.native_unavailable,
                  "solved": r.status, "weight_n": float(r.forces[:, 2].sum()), "mass_kg": pin.computeTotalMass(model.pin_model)}))
"""
    # --target puts share/ (ament index, robot files) beside the package: a prefix like colcon's
    env = _env(PYTHONPATH=str(site), AMENT_PREFIX_PATH=str(site))
    got = json.loads(_run([sys.executable, "-c", script], cwd=tmp_path, env=env, timeout=300).stdout.strip()
                     .splitlines()[-1])
    assert got["status"][0] is False and "no C++ compiler" in got["status"][1]
    assert got["backend"] == "python" and "no C++ compiler" in got["why"]
    assert got["solved"] == "solved"
    assert got["weight_n"] == pytest.approx(got["mass_kg"] * 9.81, rel=0.05)


def _ros_requirements() -> list[str]:
    lines = (ROOT / "requirements-dev.txt").read_text().splitlines()
    return [line.strip() for line in lines if line.startswith("ros-")]


@pytest.mark.skipif(not shutil.which("c++") and not shutil.which("g++"), reason="no C++ compiler")
def test_fresh_venv_pip_install_yields_the_compiled_tick_and_loop(tmp_path):
    """A new venv with ROS 2 (the ros-* wheels) and then ``pip install .``: pip builds in
    isolation (pybind11 and the pin/proxsuite/Eigen headers from the build requirements),
    compiles both modules, and the installed package runs compiled."""
    src = _copy_sources(tmp_path / "src")
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", str(venv)], timeout=300)
    python = str(venv / "bin" / "python")
    pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    _run([*pip, *_ros_requirements()], env=_env(), timeout=900)
    _run([*pip, str(src)], env=_env(), timeout=1800)
    site = Path(_run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    _check_install(python, tmp_path, _env(), site)


@pytest.mark.skipif(not shutil.which("c++") and not shutil.which("g++"), reason="no C++ compiler")
def test_colcon_style_build_yields_the_compiled_tick_and_loop(tmp_path):
    """What ``colcon build`` runs for an ament_python package: ``setup.py egg_info build
    install --prefix ... --single-version-externally-managed`` with the environment's Python
    (no isolation: headers and pybind11 from what is installed, as from the distro on a ROS
    machine), then the install prefix on PYTHONPATH as ``install/setup.bash`` puts it."""
    src = _copy_sources(tmp_path / "src")
    base, prefix = tmp_path / "build", tmp_path / "install"
    base.mkdir()
    _run([sys.executable, "setup.py", "egg_info", "--egg-base", str(base), "build", "--build-base",
          str(base / "build"), "install", "--prefix", str(prefix), "--record", str(base / "install.log"),
          "--single-version-externally-managed"], cwd=src, env=_env(), timeout=1800)
    rel = Path(sysconfig.get_paths()["purelib"]).relative_to(sysconfig.get_paths()["data"])
    site = prefix / rel
    assert (prefix / "share" / "idyn_control" / "package.xml").exists()
    assert (prefix / "lib" / "idyn_control" / "idyn_controller").exists()  # ros2 run's place (setup.cfg)
    # as install/setup.bash sets them
    _check_install(sys.executable, tmp_path, _env(PYTHONPATH=str(site), AMENT_PREFIX_PATH=str(prefix)), prefix)


def test_kinematic_layer_binding_rejects_a_wrong_buffer(load_robot):
    """The binding checks every buffer it keeps (dtype, order, size) once, at creation: a
    buffer that would be misread is refused, not silently copied."""
    try:
        native.load()
    except native.NativeUnavailable as err:
        assert not REQUIRED, str(err)
        pytest.skip(str(err))
    model = load_robot("solo12")
    f = formulations.make("qp_coulomb", model)
    solver = f._native
    assert solver is not None
    with pytest.raises(TypeError, match="dtype"):
        solver._ext.set_tau_max(model.tau_max.astype(np.float32))
    with pytest.raises(ValueError, match="C-contiguous"):
        solver._ext.set_tau_max(np.zeros(2 * model.na)[::2])
    with pytest.raises(ValueError, match="elements"):
        solver._ext.set_tau_max(np.zeros(model.na + 1))
