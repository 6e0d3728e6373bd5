// The Python binding of the compiled tick (module idyn_control.native._native, pybind11).
//
// The only layer between Python and the C interface of api.h. Every numpy buffer the C++
// side keeps a pointer to is checked once, when its object is made (dtype, C order,
// writable where it is written, size), and kept alive by that object; the per-tick calls
// then take only scalars, so a tick crosses the binding once with no array conversion.
// The C objects are freed by the destructors here. The functions' addresses are exported
// (`symbols`) for the node's compiled loop (rt.cpp), which calls them without Python.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "api.h"
#include "native.hpp"

namespace py = pybind11;

namespace {

// The data pointer of `obj`, a numpy array of element type T (bool or uint8 for
// std::uint8_t), C-contiguous, writable if asked, with `size` elements (-1: any; at least
// `size` if `at_least`). Appends it to `keep` so the owner keeps it alive.
template <class T>
T* buffer(const py::object& obj, const char* name, py::ssize_t size, bool writable, std::vector<py::object>& keep,
          bool at_least = false) {
  if (!py::isinstance<py::array>(obj)) throw py::type_error(std::string(name) + ": a numpy array is required");
  auto a = py::reinterpret_borrow<py::array>(obj);
  bool dtype_ok;
  if constexpr (std::is_same_v<T, std::uint8_t>)
    dtype_ok = a.itemsize() == 1 && (a.dtype().kind() == 'b' || a.dtype().kind() == 'u');
  else
    dtype_ok = py::isinstance<py::array_t<T>>(a);
  if (!dtype_ok) throw py::type_error(std::string(name) + ": wrong dtype " + std::string(py::str(a.dtype())));
  if (!(a.flags() & py::array::c_style)) throw py::value_error(std::string(name) + ": not C-contiguous");
  if (writable && !a.writeable()) throw py::value_error(std::string(name) + ": not writable");
  if (size >= 0 && (at_least ? a.size() < size : a.size() != size))
    throw py::value_error(std::string(name) + ": " + std::to_string(a.size()) + " elements, expected " +
                          (at_least ? "at least " : "") + std::to_string(size));
  keep.push_back(a);
  return static_cast<T*>(const_cast<void*>(a.data()));
}

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

// engine.cpp's pinocchio model and the numpy buffers it fills (DynamicsTerms, ContactSet)
struct Engine {
  void* handle = nullptr;
  idyn::Dims dims{};
  std::vector<py::object> keep;

  Engine(const py::object& parents, const py::object& kinds, const py::object& axes, const py::object& placements,
         const py::object& inertias, const py::object& armature, const py::object& gravity,
         const py::object& frame_parents, const py::object& frame_placements, int n_base,
         const py::object& contact_ids, const py::object& M, const py::object& h, const py::object& J,
         const py::object& drift, const py::object& position, const py::object& rotation, const py::object& q,
         const py::object& v) {
    const auto nj = py::len(parents), nf = py::len(frame_parents), k = py::len(contact_ids);
    auto* par = buffer<int>(parents, "parents", nj, false, keep);
    auto* kin = buffer<int>(kinds, "kinds", nj, false, keep);
    auto* ax = buffer<double>(axes, "axes", 3 * nj, false, keep);
    auto* pl = buffer<double>(placements, "placements", 12 * nj, false, keep);
    auto* in = buffer<double>(inertias, "inertias", 10 * nj, false, keep);
    auto* arm = buffer<double>(armature, "armature", -1, false, keep);
    auto* g = buffer<double>(gravity, "gravity", 3, false, keep);
    auto* fpar = buffer<int>(frame_parents, "frame_parents", nf, false, keep);
    auto* fpl = buffer<double>(frame_placements, "frame_placements", 12 * nf, false, keep);
    auto* cid = buffer<int>(contact_ids, "contact_ids", k, false, keep);
    // outputs: sizes follow from the model, checked below before any tick writes them
    auto* pM = buffer<double>(M, "M", -1, true, keep);
    auto* ph = buffer<double>(h, "h", -1, true, keep);
    auto* pJ = buffer<double>(J, "J", -1, true, keep);
    auto* pd = buffer<double>(drift, "drift", 3 * k, true, keep);
    auto* pp = buffer<double>(position, "position", 3 * k, true, keep);
    auto* pr = buffer<double>(rotation, "rotation", 9 * k, true, keep);
    auto* pq = buffer<double>(q, "q", -1, true, keep);
    auto* pv = buffer<double>(v, "v", -1, true, keep);
    char err[512] = {};
    handle = idyn_engine_new(int(nj), par, kin, ax, pl, in, arm, g, int(nf), fpar, fpl, n_base, int(k), cid, pM, ph,
                             pJ, pd, pp, pr, pq, pv, err, int(sizeof err));
    if (!handle) throw std::runtime_error(err);
    dims = idyn::engine_dims(*static_cast<idyn::Engine*>(handle));
    const py::ssize_t nv = dims.nv, nq = dims.nq;
    const std::pair<const py::object*, py::ssize_t> sizes[] = {
        {&armature, nv}, {&M, nv * nv}, {&h, nv}, {&J, 3 * k * nv}, {&q, nq}, {&v, nv}};
    const char* names[] = {"armature", "M", "h", "J", "q", "v"};
    for (int i = 0; i < 6; ++i) {
      const auto n = py::reinterpret_borrow<py::array>(*sizes[i].first).size();
      if (n != sizes[i].second) {
        idyn_engine_free(handle);
        handle = nullptr;
        throw py::value_error(std::string(names[i]) + ": " + std::to_string(n) + " elements, the model needs " +
                              std::to_string(sizes[i].second));
      }
    }
  }
  ~Engine() {
    if (handle) idyn_engine_free(handle);
  }
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;
};

// Controller.desired_acceleration's compiled twin: the reference arrays are read in place
struct KinematicLayer {
  py::object engine;
  void* handle;
  std::vector<const double*> refs;
  int* joint_q_index;
  std::uint8_t *swing, *mask;
  double *gains, *qdd;
  std::vector<py::object> keep;

  KinematicLayer(const py::object& engine_obj, const py::list& ref_arrays, const py::object& joint_q_index_,
                 const py::object& swing_, const py::object& mask_, const py::object& gains_, const py::object& qdd_)
      : engine(engine_obj) {
    const auto& e = engine_obj.cast<const Engine&>();
    handle = e.handle;
    const py::ssize_t na = e.dims.na, k = e.dims.k;
    // sizes in engine.cpp's order (native/__init__.py KL_REFS)
    const py::ssize_t ref_sizes[] = {na, na, na, na, na, 3, 9, 3, 3, 3 * k, 3 * k, 3 * k};
    static_assert(sizeof ref_sizes / sizeof ref_sizes[0] == IDYN_KINEMATIC_LAYER_REFS);
    if (py::len(ref_arrays) != IDYN_KINEMATIC_LAYER_REFS)
      throw py::value_error("refs: " + std::to_string(IDYN_KINEMATIC_LAYER_REFS) + " arrays expected");
    for (int i = 0; i < IDYN_KINEMATIC_LAYER_REFS; ++i)
      refs.push_back(buffer<double>(ref_arrays[i], "refs", ref_sizes[i], false, keep));
    joint_q_index = buffer<int>(joint_q_index_, "joint_q_index", na, false, keep);
    swing = buffer<std::uint8_t>(swing_, "swing", k, false, keep);
    mask = buffer<std::uint8_t>(mask_, "mask", k, false, keep);
    gains = buffer<double>(gains_, "gains", IDYN_KINEMATIC_LAYER_GAINS, false, keep, true);
    qdd = buffer<double>(qdd_, "qdd", e.dims.nv, true, keep);
  }
  void compute() { idyn_kinematic_layer(handle, refs.data(), joint_q_index, swing, mask, gains, qdd); }
  // the call's arguments as addresses, for the compiled loop's plan (rt.py)
  py::tuple args() const {
    return py::make_tuple(address(handle), address(refs.data()), address(joint_q_index), address(swing),
                          address(mask), address(gains), address(qdd));
  }
};

// Per-tick inputs and outputs shared by the two solvers: bound once, read and written per solve
struct SolverBuffers {
  double* qdd_des;
  std::uint8_t* active;
  double* params;  // wbc: weights; qp_contact: options
  double* tau_max = nullptr;
  double *qdd, *tau, *forces, *info;
  std::vector<py::object> keep;
  py::object tau_max_obj;
  py::ssize_t na;

  SolverBuffers(const Engine& e, const py::object& qdd_des_, const py::object& active_, const py::object& params_,
                py::ssize_t n_params, const py::object& tau_max_, const py::object& qdd_, const py::object& tau_,
                const py::object& forces_, const py::object& info_, py::ssize_t n_info)
      : na(e.dims.na) {
    const py::ssize_t nv = e.dims.nv, k = e.dims.k;
    qdd_des = buffer<double>(qdd_des_, "qdd_des", nv, false, keep);
    active = buffer<std::uint8_t>(active_, "active", k, false, keep);
    params = buffer<double>(params_, "params", n_params, false, keep, true);
    qdd = buffer<double>(qdd_, "qdd", nv, true, keep);
    tau = buffer<double>(tau_, "tau", na, true, keep);
    forces = buffer<double>(forces_, "forces", 3 * k, true, keep);
    info = buffer<double>(info_, "info", n_info, true, keep, true);
    set_tau_max(tau_max_);
  }
  // the effort limits [N·m]; the model may replace its array (native.py _TauMax)
  void set_tau_max(const py::object& a) {
    std::vector<py::object> k1;
    tau_max = buffer<double>(a, "tau_max", na, false, k1);
    tau_max_obj = a;
  }
  py::tuple addresses() const {  // qdd_des, active, params, tau_max, qdd, tau, forces, info
    return py::make_tuple(address(qdd_des), address(active), address(params), address(tau_max), address(qdd),
                          address(tau), address(forces), address(info));
  }
};

struct Wbc : SolverBuffers {
  py::object engine;
  void* handle = nullptr;
  double* tasks = nullptr;
  py::ssize_t task_rows = 0;
  py::object tasks_obj;

  Wbc(const py::object& engine_obj, const py::object& friction_rows, const py::object& max_normal_force,
      const py::object& released, bool warm_start, double eps_abs, const py::object& qdd_des, const py::object& active,
      const py::object& weights, const py::object& tau_max, const py::object& qdd, const py::object& tau,
      const py::object& forces, const py::object& info)
      : SolverBuffers(engine_obj.cast<const Engine&>(), qdd_des, active, weights, IDYN_WBC_WEIGHTS, tau_max, qdd,
                      tau, forces, info, IDYN_WBC_INFO),
        engine(engine_obj) {
    const py::ssize_t k = engine_obj.cast<const Engine&>().dims.k;
    auto* rows = buffer<double>(friction_rows, "friction_rows", -1, false, keep);
    auto* bound = buffer<double>(max_normal_force, "max_normal_force", k, false, keep);
    auto* rel = buffer<std::uint8_t>(released, "released", k, false, keep);
    handle = idyn_wbc_new(engine_obj.cast<const Engine&>().handle, rows, bound, rel, warm_start, eps_abs);
    if (!handle) throw std::runtime_error("native wbc_qp could not be created");
  }
  ~Wbc() {
    if (handle) idyn_wbc_free(handle);
  }
  Wbc(const Wbc&) = delete;
  Wbc& operator=(const Wbc&) = delete;

  // the task buffer: rows of IDYN_WBC_TASK_STRIDE numbers (wbc_qp grows it task by task)
  void set_tasks(const py::object& a) {
    std::vector<py::object> k1;
    auto* p = buffer<double>(a, "tasks", -1, true, k1);
    const auto n = py::reinterpret_borrow<py::array>(a).size();
    if (n % IDYN_WBC_TASK_STRIDE) throw py::value_error("tasks: rows of " + std::to_string(IDYN_WBC_TASK_STRIDE));
    tasks = p;
    task_rows = n / IDYN_WBC_TASK_STRIDE;
    tasks_obj = a;
  }
  int solve(long version, int n_tasks) {
    if (n_tasks < 0 || n_tasks > task_rows) throw py::value_error("n_tasks exceeds the task buffer");
    return idyn_wbc_solve(handle, qdd_des, active, version, params, tau_max, n_tasks, tasks, qdd, tau, forces, info);
  }
};

struct Qpc : SolverBuffers {
  py::object engine;
  void* handle = nullptr;

  Qpc(const py::object& engine_obj, double dt, bool unilateral_only, bool warm_start, double eps_abs,
      const py::object& friction_rows, const py::object& basis, const py::object& phi,
      const py::object& max_normal_force, const py::object& qdd_des, const py::object& active,
      const py::object& options, const py::object& tau_max, const py::object& qdd, const py::object& tau,
      const py::object& forces, const py::object& info)
      : SolverBuffers(engine_obj.cast<const Engine&>(), qdd_des, active, options, IDYN_QPC_OPTIONS, tau_max, qdd,
                      tau, forces, info, IDYN_QPC_INFO),
        engine(engine_obj) {
    const py::ssize_t k = engine_obj.cast<const Engine&>().dims.k;
    auto* rows = buffer<double>(friction_rows, "friction_rows", -1, false, keep);
    auto* b = buffer<double>(basis, "basis", 9 * k, false, keep);
    auto* p = buffer<double>(phi, "phi", -1, false, keep);
    auto* bound = buffer<double>(max_normal_force, "max_normal_force", k, false, keep);
    handle = idyn_qpc_new(engine_obj.cast<const Engine&>().handle, dt, unilateral_only, warm_start, eps_abs, rows, b, p,
                          bound);
    if (!handle) throw std::runtime_error("native qp_contact could not be created");
  }
  ~Qpc() {
    if (handle) idyn_qpc_free(handle);
  }
  Qpc(const Qpc&) = delete;
  Qpc& operator=(const Qpc&) = delete;

  int solve(long version) {
    return idyn_qpc_solve(handle, qdd_des, active, version, params, tau_max, qdd, tau, forces, info);
  }
};

// gait.cpp's gait: its state and configuration arrays (native/gait.py) and the controller's
// reference arrays it writes are bound once; a tick's state (q, v, mask) is checked per call
struct Gait {
  py::object engine;
  void* handle = nullptr;
  std::vector<double*> refs;
  py::ssize_t k, nq, nv;
  std::vector<py::object> keep;

  Gait(const py::object& engine_obj, int k_, const py::object& state, const py::object& config,
       const py::object& joint_q_index, const py::object& foot_frames, const py::list& ref_arrays,
       const py::object& swing)
      : engine(engine_obj), k(k_) {
    const auto& e = engine_obj.cast<const Engine&>();
    nq = e.dims.nq;
    nv = e.dims.nv;
    const py::ssize_t na = e.dims.na;
    auto* st = buffer<double>(state, "state", -1, true, keep);
    auto* cfg = buffer<double>(config, "config", -1, false, keep);
    auto* jqi = buffer<int>(joint_q_index, "joint_q_index", na, false, keep);
    auto* feet = buffer<int>(foot_frames, "foot_frames", k, false, keep);
    // native/gait.py CONTROLLER_REFS: q, v, a (na each), base position (3), rotation (9), velocity,
    // angular (3 each), foot position, velocity, acceleration (3k each)
    const py::ssize_t sizes[] = {na, na, na, 3, 9, 3, 3, 3 * k, 3 * k, 3 * k};
    if (py::len(ref_arrays) != 10) throw py::value_error("refs: 10 arrays expected");
    for (int i = 0; i < 10; ++i) refs.push_back(buffer<double>(ref_arrays[i], "refs", sizes[i], true, keep));
    auto* sw = buffer<std::uint8_t>(swing, "swing", k, true, keep);
    handle = idyn_gait_new(e.handle, k, e.dims.nb, int(py::reinterpret_borrow<py::array>(state).size()), cfg,
                           int(py::reinterpret_borrow<py::array>(config).size()), jqi, feet, st, refs.data(), sw);
    if (!handle) throw std::runtime_error("the compiled gait could not be created (sizes do not match the model)");
  }
  ~Gait() {
    if (handle) idyn_gait_free(handle);
  }
  Gait(const Gait&) = delete;
  Gait& operator=(const Gait&) = delete;

  // a tick's state: q (nq), v (nv), contact mask (k)
  struct State {
    const double *q, *v;
    const std::uint8_t* mask;
  };
  State state(const py::object& q, const py::object& v, const py::object& mask) const {
    std::vector<py::object> tmp;
    return {buffer<double>(q, "q", nq, false, tmp), buffer<double>(v, "v", nv, false, tmp),
            mask.is_none() ? nullptr : buffer<std::uint8_t>(mask, "mask", k, false, tmp)};
  }
};

// tick.cpp's tick: its slots are addresses of buffers the Python Tick keeps alive
struct Tick {
  void* handle = nullptr;
  py::ssize_t nq, nv, na, k;

  static const std::uint64_t* slots_of(const py::array& a) {
    if (!py::isinstance<py::array_t<std::uint64_t>>(a) || !(a.flags() & py::array::c_style) || a.size() != IDYN_TICK_SLOTS)
      throw py::value_error("slots: " + std::to_string(IDYN_TICK_SLOTS) + " uint64 addresses expected");
    return static_cast<const std::uint64_t*>(a.data());
  }
  static const double* values_of(const py::array& a) {
    if (!py::isinstance<py::array_t<double>>(a) || !(a.flags() & py::array::c_style) || a.size() != IDYN_TICK_VALUES)
      throw py::value_error("values: " + std::to_string(IDYN_TICK_VALUES) + " doubles expected");
    return static_cast<const double*>(a.data());
  }
  Tick(const py::array& slots, const py::array& values) {
    const double* v = values_of(values);
    nq = py::ssize_t(v[0]), nv = py::ssize_t(v[1]), na = py::ssize_t(v[3]), k = py::ssize_t(v[4]);
    handle = idyn_tick_new(slots_of(slots), v);
    if (!handle) throw std::runtime_error("the compiled tick could not be created");
  }
  ~Tick() {
    if (handle) idyn_tick_free(handle);
  }
  Tick(const Tick&) = delete;
  Tick& operator=(const Tick&) = delete;
};

struct Pidc : SolverBuffers {
  py::object engine;
  void* handle = nullptr;

  Pidc(const py::object& engine_obj, int method, bool warm_start, double eps_abs, const py::object& friction_rows,
       const py::object& basis, const py::object& chain, const py::object& is_force_contact,
       const py::object& lambda_des, const py::object& qdd_des, const py::object& active, const py::object& options,
       const py::object& tau_max, const py::object& qdd, const py::object& tau, const py::object& forces,
       const py::object& info)
      : SolverBuffers(engine_obj.cast<const Engine&>(), qdd_des, active, options, IDYN_PIDC_OPTIONS, tau_max, qdd,
                      tau, forces, info, IDYN_PIDC_INFO),
        engine(engine_obj) {
    const auto& e = engine_obj.cast<const Engine&>();
    const py::ssize_t k = e.dims.k, na = e.dims.na;
    auto* rows = buffer<double>(friction_rows, "friction_rows", 15 * k, false, keep);
    auto* b = buffer<double>(basis, "basis", 9 * k, false, keep);
    auto* ch = buffer<std::uint8_t>(chain, "chain", k * na, false, keep);
    auto* force = buffer<std::uint8_t>(is_force_contact, "is_force_contact", k, false, keep);
    auto* des = buffer<double>(lambda_des, "lambda_des", 3 * k, false, keep);
    handle = idyn_pidc_new(e.handle, method, warm_start, eps_abs, rows, b, ch, force, des);
    if (!handle) throw std::runtime_error("native pidc_qp could not be created");
  }
  ~Pidc() {
    if (handle) idyn_pidc_free(handle);
  }
  Pidc(const Pidc&) = delete;
  Pidc& operator=(const Pidc&) = delete;

  int solve(long version) {
    return idyn_pidc_solve(handle, qdd_des, active, version, params, tau_max, qdd, tau, forces, info);
  }
};

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "The compiled tick of idyn_control (engine.cpp, solvers.cpp); use idyn_control.native.";

  py::class_<Engine>(m, "Engine")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&, const py::object&, int,
                    const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&, const py::object&>(),
           py::arg("parents"), py::arg("kinds"), py::arg("axes"), py::arg("placements"), py::arg("inertias"),
           py::arg("armature"), py::arg("gravity"), py::arg("frame_parents"), py::arg("frame_placements"),
           py::arg("n_base"), py::arg("contact_ids"), py::arg("M"), py::arg("h"), py::arg("J"), py::arg("drift"),
           py::arg("position"), py::arg("rotation"), py::arg("q"), py::arg("v"))
      .def("update", [](Engine& e) { idyn_engine_update(e.handle); }, "the per-tick pass at the q, v buffers")
      .def("point_task",
           [](Engine& e, int frame, const py::object& J, const py::object& p, const py::object& v,
              const py::object& a) {
             std::vector<py::object> keep;
             const py::ssize_t nv = e.dims.nv;
             idyn_engine_point_task(e.handle, frame, buffer<double>(J, "J", 3 * nv, true, keep),
                                    buffer<double>(p, "position", 3, true, keep),
                                    buffer<double>(v, "velocity", 3, true, keep),
                                    buffer<double>(a, "drift", 3, true, keep));
           })
      .def_property_readonly("handle", [](const Engine& e) { return address(e.handle); });

  py::class_<KinematicLayer>(m, "KinematicLayer")
      .def(py::init<const py::object&, const py::list&, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&>(),
           py::arg("engine"), py::arg("refs"), py::arg("joint_q_index"), py::arg("swing"), py::arg("mask"),
           py::arg("gains"), py::arg("qdd"))
      .def("compute", &KinematicLayer::compute)
      .def_property_readonly("args", &KinematicLayer::args);

  py::class_<Wbc>(m, "Wbc")
      .def(py::init<const py::object&, const py::object&, const py::object&, const py::object&, bool, double,
                    const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&>(),
           py::arg("engine"), py::arg("friction_rows"), py::arg("max_normal_force"), py::arg("released"),
           py::arg("warm_start"), py::arg("eps_abs"),
           py::arg("qdd_des"), py::arg("active"), py::arg("weights"), py::arg("tau_max"), py::arg("qdd"),
           py::arg("tau"), py::arg("forces"), py::arg("info"))
      .def("solve", &Wbc::solve, py::arg("version"), py::arg("n_tasks"))
      .def("set_tasks", &Wbc::set_tasks)
      .def("set_tau_max", &Wbc::set_tau_max)
      .def("reset", [](Wbc& w) { idyn_wbc_reset(w.handle); })
      .def_property_readonly("torque_limits_dropped", [](const Wbc& w) { return idyn_wbc_torque_limits_dropped(w.handle); })
      .def_property_readonly("contacts_elastic", [](const Wbc& w) { return idyn_wbc_contacts_elastic(w.handle); })
      .def_property_readonly("addresses", &Wbc::addresses)
      .def_property_readonly("tasks_address", [](const Wbc& w) { return address(w.tasks); })
      .def_property_readonly("handle", [](const Wbc& w) { return address(w.handle); });

  py::class_<Qpc>(m, "Qpc")
      .def(py::init<const py::object&, double, bool, bool, double, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&, const py::object&, const py::object&>(),
           py::arg("engine"), py::arg("dt"), py::arg("unilateral_only"), py::arg("warm_start"), py::arg("eps_abs"),
           py::arg("friction_rows"), py::arg("basis"), py::arg("phi"), py::arg("max_normal_force"),
           py::arg("qdd_des"), py::arg("active"),
           py::arg("options"), py::arg("tau_max"), py::arg("qdd"), py::arg("tau"), py::arg("forces"), py::arg("info"))
      .def("solve", &Qpc::solve, py::arg("version"))
      .def("set_tau_max", &Qpc::set_tau_max)
      .def("reset", [](Qpc& c) { idyn_qpc_reset(c.handle); })
      .def_property_readonly("addresses", &Qpc::addresses)
      .def_property_readonly("handle", [](const Qpc& c) { return address(c.handle); });

  py::class_<Gait>(m, "Gait")
      .def(py::init<const py::object&, int, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::list&, const py::object&>(),
           py::arg("engine"), py::arg("k"), py::arg("state"), py::arg("config"), py::arg("joint_q_index"),
           py::arg("foot_frames"), py::arg("refs"), py::arg("swing"))
      .def("update",
           [](Gait& g, double t, const py::object& q, const py::object& v, const py::object& mask) {
             const auto s = g.state(q, v, mask);
             idyn_gait_update(g.handle, t, s.q, s.v, s.mask);
           })
      .def("drive",
           [](Gait& g, double t, const py::object& q, const py::object& v, const py::object& mask, double now) {
             const auto s = g.state(q, v, mask);
             idyn_gait_drive(g.handle, t, s.q, s.v, s.mask, now);
           })
      .def("reset",
           [](Gait& g, double t, const py::object& q, const py::object& v, const py::object& mask) {
             const auto s = g.state(q, v, mask);  // mask None: every foot down
             idyn_gait_reset(g.handle, t, s.q, s.v, s.mask);
           })
      .def("start", [](Gait& g, double t) { idyn_gait_start(g.handle, t); })
      .def("stop", [](Gait& g) { idyn_gait_stop(g.handle); })
      .def("undo", [](Gait& g) { idyn_gait_undo(g.handle); })
      .def("command", [](Gait& g, double vx, double vy, double wz, double now) {
        idyn_gait_command(g.handle, vx, vy, wz, now);
      })
      .def_property_readonly("handle", [](const Gait& g) { return address(g.handle); });

  py::class_<Tick>(m, "Tick")
      .def(py::init<const py::array&, const py::array&>(), py::arg("slots"), py::arg("values"))
      .def("plan", [](Tick& t, const py::array& slots, const py::array& values) {
        idyn_tick_plan(t.handle, Tick::slots_of(slots), Tick::values_of(values));
      })
      .def("sample_trajectory", [](Tick& t, std::int64_t now_ns) { return idyn_tick_sample_trajectory(t.handle, now_ns); })
      .def("run",  // (status, joints saturated); τ into tau
           [](Tick& t, double time, const py::object& q, const py::object& v, const py::object& mask, double now,
              const py::object& tau) {
             std::vector<py::object> tmp;
             int saturated = 0;
             const int status = idyn_tick_run(
                 t.handle, time, buffer<double>(q, "q", t.nq, false, tmp), buffer<double>(v, "v", t.nv, false, tmp),
                 buffer<std::uint8_t>(mask, "mask", t.k, false, tmp), now, buffer<double>(tau, "tau", t.na, true, tmp),
                 &saturated);
             return py::make_tuple(status, saturated);
           })
      .def_property_readonly("handle", [](const Tick& t) { return address(t.handle); });

  py::class_<Pidc>(m, "Pidc")
      .def(py::init<const py::object&, int, bool, double, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&, const py::object&, const py::object&, const py::object&,
                    const py::object&>(),
           py::arg("engine"), py::arg("method"), py::arg("warm_start"), py::arg("eps_abs"), py::arg("friction_rows"),
           py::arg("basis"), py::arg("chain"), py::arg("is_force_contact"), py::arg("lambda_des"), py::arg("qdd_des"),
           py::arg("active"), py::arg("options"), py::arg("tau_max"), py::arg("qdd"), py::arg("tau"),
           py::arg("forces"), py::arg("info"))
      .def("solve", &Pidc::solve, py::arg("version"))
      .def("set_tau_max", &Pidc::set_tau_max)
      .def("reset", [](Pidc& c) { idyn_pidc_reset(c.handle); })
      .def_property_readonly("addresses", &Pidc::addresses)
      .def_property_readonly("handle", [](const Pidc& c) { return address(c.handle); });

  // for rt.cpp's plan: the functions a compiled tick calls
  py::dict symbols;
  symbols["idyn_engine_update"] = address(reinterpret_cast<const void*>(&idyn_engine_update));
  symbols["idyn_kinematic_layer"] = address(reinterpret_cast<const void*>(&idyn_kinematic_layer));
  symbols["idyn_qpc_solve"] = address(reinterpret_cast<const void*>(&idyn_qpc_solve));
  symbols["idyn_wbc_solve"] = address(reinterpret_cast<const void*>(&idyn_wbc_solve));
  symbols["idyn_tick_run"] = address(reinterpret_cast<const void*>(&idyn_tick_run));
  symbols["idyn_pidc_solve"] = address(reinterpret_cast<const void*>(&idyn_pidc_solve));
  m.attr("symbols") = symbols;

  // what the compiler was told (the installed build is portable unless IDYN_NATIVE_MARCH asked otherwise)
  py::dict build;
  build["compiler"] = __VERSION__;
#if defined(__AVX2__)
  build["avx2"] = true;
#else
  build["avx2"] = false;
#endif
#if defined(IDYN_NATIVE_MARCH)
  build["march"] = IDYN_NATIVE_MARCH;
#else
  build["march"] = "";
#endif
  m.attr("build") = build;
}
