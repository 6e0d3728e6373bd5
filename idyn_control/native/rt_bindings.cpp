// The Python binding of the node's compiled loop (module idyn_control.native._rt, pybind11).
//
// One Loop owns one rt.cpp loop thread. Calls that may wait for that thread (start, stop,
// close, lock) release the GIL: the thread takes the GIL to run a Python tick while it
// holds its tick lock, so waiting for it with the GIL held would deadlock. The Python tick
// is called through a trampoline that takes the GIL; an exception it lets out is reported
// as unraisable (the loop thread cannot raise) and the loop goes on.

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "rt_api.h"

namespace py = pybind11;

namespace {

template <class T>
const T* input(const py::array& a, const char* name, py::ssize_t size) {
  bool ok = a.itemsize() == sizeof(T) && (a.flags() & py::array::c_style) && a.size() >= size;
  if constexpr (std::is_same_v<T, std::uint8_t>)
    ok = ok && (a.dtype().kind() == 'b' || a.dtype().kind() == 'u');
  else
    ok = ok && py::isinstance<py::array_t<T>>(a);
  if (!ok) throw py::value_error(std::string(name) + ": a C-contiguous array of " + std::to_string(size) + " elements");
  return static_cast<const T*>(a.data());
}

struct Loop {
  void* handle = nullptr;
  py::object slow;       // slow(data: bytes, received_ns, wake_ns): the node's Python tick
  py::bytearray command;  // the command's CDR bytes, published in place
  int k, na, nv;
  py::list monitoring, inputs;  // what the loop keeps pointers into (monitor, inputs)

  Loop(std::uintptr_t subscription, std::uintptr_t publisher, py::bytearray command_cdr, py::function slow_tick,
       int notify_fd, int priority, const std::vector<int>& cpus, int drain_every, int k_, int na_, int nv_)
      : slow(std::move(slow_tick)), command(std::move(command_cdr)), k(k_), na(na_), nv(nv_) {
    if (!subscription || !publisher) throw py::value_error("null subscription or publisher");
    const std::vector<int> cpu_list = cpus.empty() ? std::vector<int>{0} : cpus;
    handle = idyn_rt_new(reinterpret_cast<void*>(subscription), reinterpret_cast<void*>(publisher),
                         reinterpret_cast<std::uint8_t*>(PyByteArray_AsString(command.ptr())),
                         static_cast<std::size_t>(PyByteArray_Size(command.ptr())), &Loop::trampoline, this,
                         notify_fd, priority, cpu_list.data(), int(cpus.size()), drain_every, k, na, nv);
    if (!handle) throw std::runtime_error("the compiled loop could not be created");
  }
  ~Loop() { close(); }
  Loop(const Loop&) = delete;
  Loop& operator=(const Loop&) = delete;

  static void trampoline(void* ctx, const std::uint8_t* data, std::size_t size, std::int64_t received_ns,
                         std::int64_t wake_ns) {
    py::gil_scoped_acquire gil;
    auto* self = static_cast<Loop*>(ctx);
    try {
      self->slow(py::bytes(reinterpret_cast<const char*>(data), size), received_ns, wake_ns);
    } catch (py::error_already_set& err) {
      err.discard_as_unraisable("idyn_control.native.rt: the Python tick");
    }
  }

  void* h() const {
    if (!handle) throw std::runtime_error("the compiled loop is closed");
    return handle;
  }
  void close() {
    void* h = handle;
    handle = nullptr;
    if (h) {
      py::gil_scoped_release release;
      idyn_rt_free(h);
    }
  }
};

}  // namespace

PYBIND11_MODULE(_rt, m) {
  m.doc() = "The controller node's compiled loop (rt.cpp); use idyn_control.native.rt.";
  m.attr("RING") = IDYN_RT_RING;
  m.attr("RECORD_WIDTH") = IDYN_RT_RECORD_WIDTH;
  m.attr("PLAN_SLOTS") = IDYN_RT_PLAN_SLOTS;
  m.attr("PLAN_VALUES") = IDYN_RT_PLAN_VALUES;
  m.attr("COUNTERS") = IDYN_RT_COUNTERS;

  py::class_<Loop>(m, "Loop")
      .def(py::init<std::uintptr_t, std::uintptr_t, py::bytearray, py::function, int, int, const std::vector<int>&,
                    int, int, int, int>(),
           py::arg("subscription"), py::arg("publisher"), py::arg("command_cdr"), py::arg("slow"),
           py::arg("notify_fd"), py::arg("priority"), py::arg("cpus"), py::arg("drain_every"), py::arg("k"),
           py::arg("na"), py::arg("nv"))
      .def("start", [](Loop& l) { void* h = l.h(); py::gil_scoped_release r; return idyn_rt_start(h); })
      .def("stop", [](Loop& l) { if (l.handle) { py::gil_scoped_release r; idyn_rt_stop(l.handle); } })
      .def("close", &Loop::close)
      .def("lock", [](Loop& l) { void* h = l.h(); py::gil_scoped_release r; idyn_rt_lock(h); })
      .def("unlock", [](Loop& l) { idyn_rt_unlock(l.h()); })
      .def("plan",
           [](Loop& l, const py::array& slots, const py::array& values, const py::bytes& names) {
             const std::string_view n = names;
             idyn_rt_plan(l.h(), input<std::uint64_t>(slots, "slots", IDYN_RT_PLAN_SLOTS),
                          input<double>(values, "values", IDYN_RT_PLAN_VALUES),
                          reinterpret_cast<const std::uint8_t*>(n.data()), n.size());
           })
      .def("sync", [](Loop& l, bool fast, std::int64_t stamp_ns) { idyn_rt_sync(l.h(), fast, stamp_ns); })
      .def("monitor",
           [](Loop& l, int every, const std::vector<std::uintptr_t>& pubs, const py::list& bufs,
              const py::array& stamp_at, const py::array& first, const py::array& count, const py::array& field_at,
              const py::array& field_src, const py::array& rotation, const py::array& forces, py::array local) {
             const auto n = py::ssize_t(pubs.size());
             if (py::len(bufs) != size_t(n)) throw py::value_error("one CDR buffer per publisher");
             std::vector<std::uint64_t> buf_addr, sizes;
             for (const auto& b : bufs) {
               if (!PyByteArray_Check(b.ptr())) throw py::type_error("CDR buffers: bytearray");
               buf_addr.push_back(reinterpret_cast<std::uint64_t>(PyByteArray_AsString(b.ptr())));
               sizes.push_back(std::uint64_t(PyByteArray_Size(b.ptr())));
             }
             const auto n_fields = field_at.size();
             const auto* counts = input<int>(count, "count", n);
             py::ssize_t total = 0;
             for (py::ssize_t i = 0; i < n; ++i) total += counts[i];
             if (total != n_fields) throw py::value_error("counts do not add up to the fields");
             if (!(local.flags() & py::array::c_style) || !local.writeable()) throw py::value_error("local: writable");
             std::vector<std::uint64_t> pub_addr(pubs.begin(), pubs.end());
             l.monitoring = py::list();
             for (const py::handle& o : {py::handle(bufs), py::handle(stamp_at), py::handle(first), py::handle(count),
                                         py::handle(field_at), py::handle(field_src), py::handle(rotation),
                                         py::handle(forces), py::handle(local)})
               l.monitoring.append(o);
             idyn_rt_monitor(l.h(), every, int(n), pub_addr.data(), buf_addr.data(), sizes.data(),
                             input<std::int64_t>(stamp_at, "stamp_at", n), input<int>(first, "first", n), counts,
                             int(n_fields), input<std::int64_t>(field_at, "field_at", n_fields),
                             input<std::uint64_t>(field_src, "field_src", n_fields),
                             input<double>(rotation, "rotation", 9 * l.k), input<double>(forces, "forces", 3 * l.k),
                             static_cast<double*>(local.mutable_data()), l.k);
           })
      .def("inputs",
           [](Loop& l, std::uintptr_t odom, std::uintptr_t contacts, bool twist_in_parent, const py::array& limits,
              py::array base_q, py::array base_v, py::array values) {
             for (const py::array* a : {&base_q, &base_v, &values})
               if (!(a->flags() & py::array::c_style) || !a->writeable()) throw py::value_error("inputs: writable arrays");
             input<double>(base_q, "base_q", 7);
             input<double>(base_v, "base_v", 6);
             input<double>(values, "contacts", l.k);
             l.inputs = py::list();
             for (const py::handle& o : {py::handle(limits), py::handle(base_q), py::handle(base_v), py::handle(values)})
               l.inputs.append(o);
             return idyn_rt_inputs(l.h(), reinterpret_cast<void*>(odom), reinterpret_cast<void*>(contacts),
                                   twist_in_parent, input<double>(limits, "limits", 3),
                                   static_cast<double*>(base_q.mutable_data()), static_cast<double*>(base_v.mutable_data()),
                                   static_cast<double*>(values.mutable_data()));
           })
      .def("input_state",
           [](Loop& l, py::array out) {
             input<double>(out, "out", IDYN_RT_INPUT_STATE);
             if (!out.writeable()) throw py::value_error("out: writable");
             idyn_rt_input_state(l.h(), static_cast<double*>(out.mutable_data()));
           })
      .def("set_fast", [](Loop& l, bool fast) { if (l.handle) idyn_rt_set_fast(l.handle, fast); })
      .def("set_spin", [](Loop& l, double seconds, double period) { idyn_rt_set_spin(l.h(), seconds, period); })
      .def("set_params", [](Loop& l, double timeout, double threshold) { idyn_rt_set_params(l.h(), timeout, threshold); })
      .def("set_base",
           [](Loop& l, const py::array& q, const py::array& v) {
             idyn_rt_set_base(l.h(), input<double>(q, "q", 7), input<double>(v, "v", 6));
           })
      .def("set_contacts",
           [](Loop& l, const py::array& values) { idyn_rt_set_contacts(l.h(), input<double>(values, "values", l.k)); })
      .def("force_refs",
           [](Loop& l, const py::object& lambda_des, const py::array& rotation, const py::array& is_force,
              double timeout) {
             double* des = nullptr;
             if (!lambda_des.is_none()) {
               auto a = lambda_des.cast<py::array>();
               if (!(a.writeable() && py::isinstance<py::array_t<double>>(a) && (a.flags() & py::array::c_style) &&
                     a.size() == 3 * l.k))
                 throw py::value_error("lambda_des: a writable C-contiguous float array of 3 k elements");
               des = static_cast<double*>(a.mutable_data());
             }
             idyn_rt_force_refs(l.h(), des, input<double>(rotation, "rotation", 9 * l.k),
                                input<std::uint8_t>(is_force, "is_force", l.k), timeout);
           })
      .def("set_desired_force",
           [](Loop& l, int index, const py::array& force, bool local, double t) {
             idyn_rt_set_desired_force(l.h(), index, input<double>(force, "force", 3), local, t);
           })
      .def("last_tick", [](Loop& l) { return l.handle ? idyn_rt_last_tick(l.handle) : 0.0; })
      .def("pending",
           [](Loop& l) {
             std::uint64_t first = 0;
             const int n = l.handle ? idyn_rt_pending(l.handle, &first) : 0;
             return py::make_tuple(n, first);
           })
      .def("consume", [](Loop& l, int n) { idyn_rt_consume(l.h(), n); })
      // views of the loop's memory, valid until close(); they keep the Loop object alive
      .def_property_readonly("records",
                             [](py::object self) {
                               const auto& l = self.cast<const Loop&>();
                               return py::array_t<double>({py::ssize_t(IDYN_RT_RING), py::ssize_t(IDYN_RT_RECORD_WIDTH)},
                                                          idyn_rt_records(l.h()), self);
                             })
      .def_property_readonly("counters", [](py::object self) {
        const auto& l = self.cast<const Loop&>();
        return py::array_t<double>({py::ssize_t(IDYN_RT_COUNTERS)}, idyn_rt_counters(l.h()), self);
      });
}
