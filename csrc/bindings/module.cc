// Python bindings of the core (module thunder._core). Converts Python values
// to core Values and back, and maps core errors to Python exceptions.
#include <nanobind/nanobind.h>
#include <nanobind/ndarray.h>
#include <nanobind/stl/function.h>
#include <nanobind/stl/map.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/pair.h>
#include <nanobind/stl/set.h>
#include <nanobind/stl/shared_ptr.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/vector.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>

#include "codegen/kernel_plan.h"
#include "codegen/translation_units.h"
#include "ir/printer.h"
#include "ops/op_table.h"
#include "ops/vjp.h"
#include "passes/passes.h"
#include "runtime/buffer_pool.h"
#include "runtime/compiler.h"
#include "runtime/cuda_driver.h"
#include "runtime/nvrtc.h"
#include "runtime/kernel_cache.h"

namespace nb = nanobind;
using namespace thunder;
using ir::Value;

namespace {

/// DLPack's DLManagedTensor (dlpack.h: tensor, manager context, deleter), with room for the shape.
///
/// Two parties may end its life: the consumer (torch) through `deleter`, once, when it owns the tensor;
/// and the capsule's destructor. A consumer that fails may already have called the deleter without
/// marking the capsule used, so neither frees the struct alone: each holds a reference (`refs`), the
/// buffer goes back to the pool exactly once (`released`), and whoever drops the last reference deletes it.
struct PooledTensor {
  nb::dlpack::dltensor tensor;
  void* manager_ctx = nullptr;
  void (*deleter)(PooledTensor*) = nullptr;
  std::vector<int64_t> shape;
  std::atomic<int> refs{2};              // the consumer's (the deleter) and the capsule's
  std::atomic<bool> released{false};     // the buffer was given back
  std::atomic<bool> deleter_called{false};

  void release_buffer() {
    if (!released.exchange(true)) runtime::output_buffer_pool().release(tensor.data);
  }
  void unref() {
    if (refs.fetch_sub(1) == 1) delete this;
  }
};

/// The bytes of a contiguous tensor of `shape` with `bits`-bit elements; ValueError (naming the argument)
/// for a negative dim, a size that overflows, or an element size that is not a whole number of bytes.
size_t pooled_bytes(const std::vector<int64_t>& shape, int bits) {
  if (bits <= 0 || bits % 8 != 0 || bits > 128)
    throw nb::value_error(("pooled_capsule: bits must be 8, 16, 32, 64 or 128, got " + std::to_string(bits)).c_str());
  size_t bytes = static_cast<size_t>(bits / 8);
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] < 0)
      throw nb::value_error(("pooled_capsule: shape[" + std::to_string(i) + "] is negative (" +
                             std::to_string(shape[i]) + ")").c_str());
    if (__builtin_mul_overflow(bytes, static_cast<size_t>(shape[i]), &bytes) || bytes > (size_t{1} << 62))
      throw nb::value_error("pooled_capsule: shape's size in bytes overflows (shape has too many elements)");
  }
  return bytes;
}

/// A proxy as Python sees it: an index into the trace being built.
struct PyProxy {
  ir::ProxyId id;
};

/// A Python int as a core Value. The core's integers are int64 (as torch's): a larger one cannot be an argument
/// of a native op (`native_op` names it: NotNative, so the front end runs the op as torch does, which computes with
/// it or raises as eager does), and is kept as its source text (a Literal) in an opaque op's arguments.
Value int_from_py(nb::handle h, const std::string* native_op) {
  int64_t i = 0;
  if (nb::try_cast<int64_t>(h, i)) return Value(i);
  PyErr_Clear();
  std::string text = nb::repr(h).c_str();
  if (native_op == nullptr) return Value(ir::Literal{text});
  throw ops::NotNative(*native_op + ": the Python int " + text +
                       " is outside int64's range [-2**63, 2**63 - 1], the core's integers; the op runs as torch runs it");
}

/// A Python value as a core Value; `native_op` names the native op it is an argument of (nullptr otherwise).
Value from_py(nb::handle h, const std::string* native_op = nullptr) {
  if (h.is_none()) return Value();
  if (nb::isinstance<nb::bool_>(h)) return Value(nb::cast<bool>(h));
  if (nb::isinstance<nb::int_>(h)) return int_from_py(h, native_op);
  if (nb::isinstance<nb::float_>(h)) return Value(nb::cast<double>(h));
  if (nb::isinstance<nb::str>(h)) return Value(ir::Str{nb::cast<std::string>(h)});
  if (nb::isinstance<PyProxy>(h)) return Value(ir::ProxyRef{nb::cast<PyProxy>(h).id});
  if (nb::isinstance<ir::DType>(h)) return Value(nb::cast<ir::DType>(h));
  if (nb::isinstance<ir::Literal>(h)) return Value(nb::cast<ir::Literal>(h));
  if (nb::isinstance<ir::Dim>(h)) return Value(nb::cast<ir::Dim>(h));
  if (h.is(nb::ellipsis())) return Value(ir::EllipsisT{});
  auto seq = [native_op](nb::handle items, ir::Seq::Kind kind) {
    ir::Seq s{kind, {}};
    for (nb::handle item : items) s.items.push_back(from_py(item, native_op));
    return Value(std::move(s));
  };
  if (nb::isinstance<nb::list>(h)) return seq(h, ir::Seq::Kind::List);
  if (nb::isinstance<nb::tuple>(h)) return seq(h, ir::Seq::Kind::Tuple);
  if (nb::isinstance<nb::slice>(h))
    return Value(ir::Seq{ir::Seq::Kind::Slice, {from_py(h.attr("start"), native_op), from_py(h.attr("stop"), native_op),
                                                from_py(h.attr("step"), native_op)}});
  throw nb::type_error(("cannot pass an object of type " + std::string(nb::type_name(h.type()).c_str()) +
                        " to the core; wrap it in a Literal").c_str());
}

nb::object to_py(const Value& v) {
  struct Visitor {
    nb::object operator()(ir::NoneT) const { return nb::none(); }
    nb::object operator()(bool b) const { return nb::bool_(b); }
    nb::object operator()(int64_t i) const { return nb::int_(i); }
    nb::object operator()(double d) const { return nb::float_(d); }
    nb::object operator()(const ir::Str& s) const { return nb::str(s.text.c_str()); }
    nb::object operator()(ir::DType d) const { return nb::cast(d); }
    nb::object operator()(ir::EllipsisT) const { return nb::borrow(nb::ellipsis()); }
    nb::object operator()(const ir::Literal& l) const { return nb::cast(l); }
    nb::object operator()(ir::ProxyRef p) const { return nb::cast(PyProxy{p.id}); }
    nb::object operator()(const ir::Dim& d) const { return nb::cast(d); }
    nb::object operator()(const ir::Seq& s) const {
      nb::list items;
      for (const Value& item : s.items) items.append(to_py(item));
      if (s.kind == ir::Seq::Kind::List) return items;
      if (s.kind == ir::Seq::Kind::Tuple) return nb::tuple(items);
      return nb::module_::import_("builtins").attr("slice")(items[0], items[1], items[2]);
    }
  };
  return std::visit(Visitor{}, v.v);
}

ops::Args args_from_py(const nb::list& args, const std::string* native_op = nullptr) {
  ops::Args out;
  for (nb::handle a : args) out.push_back(from_py(a, native_op));
  return out;
}

ops::Kwargs kwargs_from_py(const nb::dict& kwargs, const std::string* native_op = nullptr) {
  ops::Kwargs out;
  for (auto [k, v] : kwargs) out.emplace_back(nb::cast<std::string>(k), from_py(v, native_op));
  return out;
}

nb::dict kwargs_to_py(const ops::Kwargs& kwargs) {
  nb::dict d;
  for (const auto& [k, v] : kwargs) d[k.c_str()] = to_py(v);
  return d;
}

/// A shape from Python: its items ints or symbolic sizes (Dim).
ir::Shape shape_from_py(const nb::sequence& shape) {
  ir::Shape out;
  for (nb::handle d : shape) out.push_back(from_py(d).as_dim());
  return out;
}

/// A shape as a Python list: ints, and Dim objects for symbolic sizes.
nb::list shape_to_py(const ir::Shape& shape) {
  nb::list out;
  for (const ir::Dim& d : shape) out.append(to_py(Value(d)));
  return out;
}

ir::TensorMeta make_meta(ir::DType dtype, const nb::sequence& shape, std::string device, bool requires_grad) {
  return ir::TensorMeta{dtype, shape_from_py(shape), std::move(device), requires_grad};
}

/// A trace under construction, with the builder that fills it.
struct PyBuilder {
  std::shared_ptr<ir::Trace> trace = std::make_shared<ir::Trace>();
  ops::Builder builder{*trace};
};

std::string level_name(const ir::Symbol& s) {
  return s.level == ir::Level::Prim ? "prims" : s.level == ir::Level::Torch ? "ltorch" : "opaque";
}

// A kernel argument, 8 bytes, from a Python value: an int (a pointer, a size, a run-time int or bool) as itself, a
// float (a run-time number) as its bits, which the kernel copies back into a double. An int that does not fit in
// 64 bits raises OverflowError rather than wrapping.
uint64_t kernel_argument(nb::handle value, size_t i) {
  PyObject* o = value.ptr();
  uint64_t bits = 0;
  if (PyFloat_CheckExact(o)) {
    const double d = PyFloat_AS_DOUBLE(o);
    static_assert(sizeof d == sizeof bits);
    std::memcpy(&bits, &d, sizeof d);
    return bits;
  }
  const long long n = PyLong_AsLongLong(o);
  if (n == -1 && PyErr_Occurred()) {
    if (!PyErr_ExceptionMatches(PyExc_OverflowError)) throw nb::python_error();
    PyErr_Clear();
    throw std::overflow_error("thunder: kernel argument " + std::to_string(i) +
                              " (a number known only at run time) does not fit in 64 bits");
  }
  return static_cast<uint64_t>(n);
}

// Runs a CPU kernel on its arguments (see "launch" below), releasing the GIL while it runs if `release`.
int launch_kernel(uintptr_t kernel, nb::tuple pointers, bool release) {
  auto fn = reinterpret_cast<runtime::Kernel>(kernel);
  const size_t n = nb::len(pointers);
  // Most kernels take a few dozen arguments: those are kept on the stack (a heap vector cost ~15 ns a launch).
  constexpr size_t kOnStack = 64;
  void* on_stack[kOnStack];
  std::vector<void*> on_heap(n > kOnStack ? n : 0);
  void** args = n > kOnStack ? on_heap.data() : on_stack;
  static_assert(sizeof(void*) == sizeof(uint64_t));
  for (size_t i = 0; i < n; ++i) args[i] = reinterpret_cast<void*>(static_cast<uintptr_t>(kernel_argument(pointers[i], i)));
  if (!release) return fn(args);
  nb::gil_scoped_release unlocked;
  return fn(args);
}

nb::tuple meta_tuple(const ir::ProxyInfo& p) {
  if (!p.is_tensor) return nb::make_tuple("number", ir::number_type_name(p.number));
  return nb::make_tuple(p.tensor.dtype, shape_to_py(p.tensor.shape), p.tensor.device, p.tensor.requires_grad);
}

// See BoundSymbol.may_raise_for_values.
bool may_raise_for_values(const ir::BoundSymbol& b) {
  if (b.sym->has(ir::kChecksValues) || b.sym->has(ir::kOpaque)) return true;
  if (b.subsymbols.empty()) return b.sym->level == ir::Level::Torch;
  for (const ir::BoundSymbol& s : b.subsymbols)
    if (may_raise_for_values(s)) return true;
  return false;
}

}  // namespace

NB_MODULE(_core, m) {
  m.doc() = "thunder's compiler core: IR, op tables, passes.";
  // Compiled graphs live until interpreter exit inside Dynamo's caches; that is not a leak.
  nb::set_leak_warnings(false);
  nb::exception<ops::OpError>(m, "OpError", PyExc_RuntimeError);
  nb::exception<ops::NotNative> not_native(m, "NotNative", PyExc_NotImplementedError);
  // A subclass of NotNative: an op whose rule cannot decide on a symbolic size runs as torch runs it.
  nb::exception<ir::SymbolicShapeError>(m, "SymbolicShapeError", not_native);
  nb::exception<passes::NotDifferentiable>(m, "NotDifferentiable", PyExc_RuntimeError);

  nb::enum_<ir::DType>(m, "DType")
      .value("bool", ir::DType::Bool).value("uint8", ir::DType::UInt8).value("int8", ir::DType::Int8)
      .value("int16", ir::DType::Int16).value("int32", ir::DType::Int32).value("int64", ir::DType::Int64)
      .value("float16", ir::DType::Float16).value("bfloat16", ir::DType::BFloat16)
      .value("float32", ir::DType::Float32).value("float64", ir::DType::Float64)
      .value("complex64", ir::DType::Complex64).value("complex128", ir::DType::Complex128);
  m.def("promote_types", &ir::promote_types, "torch.promote_types over core dtypes.");

  nb::class_<PyProxy>(m, "Proxy", "A tensor or number placeholder in a trace.")
      .def_ro("id", &PyProxy::id)
      .def("__repr__", [](const PyProxy& p) { return "Proxy(" + std::to_string(p.id) + ")"; })
      .def("__eq__", [](const PyProxy& a, const PyProxy& b) { return a.id == b.id; })
      .def("__hash__", [](const PyProxy& p) { return p.id; });
  nb::class_<ir::Literal>(m, "Literal", "A Python object kept as the source text that recreates it.")
      .def(nb::init<std::string>())
      .def_ro("text", &ir::Literal::text)
      .def("__repr__", [](const ir::Literal& l) { return "Literal(" + l.text + ")"; });

  nb::class_<ir::Dim>(m, "Dim",
                      "A symbolic size: a polynomial with integer coefficients in size symbols, each an int number "
                      "proxy of the trace (csrc/ir/dim.h). Integers never appear as Dim: shapes hold them as ints.")
      .def_static("symbol", [](const PyProxy& p) { return ir::Dim::symbol(p.id); }, nb::arg("proxy"),
                  "The size symbol `proxy` (an int number proxy).")
      .def("__add__", [](const ir::Dim& a, nb::handle b) { return to_py(Value(a + from_py(b).as_dim())); })
      .def("__radd__", [](const ir::Dim& a, nb::handle b) { return to_py(Value(from_py(b).as_dim() + a)); })
      .def("__sub__", [](const ir::Dim& a, nb::handle b) { return to_py(Value(a - from_py(b).as_dim())); })
      .def("__rsub__", [](const ir::Dim& a, nb::handle b) { return to_py(Value(from_py(b).as_dim() - a)); })
      .def("__mul__", [](const ir::Dim& a, nb::handle b) { return to_py(Value(a * from_py(b).as_dim())); })
      .def("__rmul__", [](const ir::Dim& a, nb::handle b) { return to_py(Value(from_py(b).as_dim() * a)); })
      .def("__eq__", [](const ir::Dim& a, nb::handle b) {
        return (nb::isinstance<ir::Dim>(b) || nb::isinstance<nb::int_>(b)) && a == from_py(b).as_dim();
      })
      .def("__hash__", [](const ir::Dim& a) { return std::hash<std::string>{}(a.str()); })
      .def("evaluate", [](const ir::Dim& a, const std::map<int, int64_t>& values) {
        return a.substitute([&](ir::ProxyId id) {
          auto it = values.find(id);
          if (it == values.end()) throw nb::key_error(("no value for size symbol " + std::to_string(id)).c_str());
          return ir::Dim(it->second);
        }).value("Dim.evaluate");
      }, nb::arg("values"), "Its value with the symbols (proxy ids) at `values` ({id: int}); KeyError if one lacks a value.")
      .def("__repr__", [](const ir::Dim& a) { return a.str(); });

  nb::class_<ir::BoundSymbol>(m, "BoundSymbol", "One operation applied to values in a trace.")
      .def_prop_ro("name", [](const ir::BoundSymbol& b) { return b.sym->name; })
      .def_prop_ro("level", [](const ir::BoundSymbol& b) { return level_name(*b.sym); })
      .def_prop_ro("callee", &ir::BoundSymbol::printed_callee)
      .def_prop_ro("args", [](const ir::BoundSymbol& b) {
        nb::list l;
        for (const Value& a : b.args) l.append(to_py(a));
        return l;
      })
      .def_prop_ro("kwargs", [](const ir::BoundSymbol& b) { return kwargs_to_py(b.kwargs); })
      .def_prop_ro("output", [](const ir::BoundSymbol& b) { return to_py(b.output); })
      .def_prop_ro("param_names", [](const ir::BoundSymbol& b) {
        std::vector<std::string> names;
        for (const ir::Param& p : b.sym->params) names.push_back(p.name);
        return names;
      })
      .def_ro("subsymbols", &ir::BoundSymbol::subsymbols)
      .def_ro("executor", &ir::BoundSymbol::executor)
      .def_ro("source", &ir::BoundSymbol::source)
      .def_prop_ro("is_opaque", [](const ir::BoundSymbol& b) { return b.sym->has(ir::kOpaque); })
      .def_prop_ro("has_effect", [](const ir::BoundSymbol& b) { return b.sym->has(ir::kEffect); })
      .def_prop_ro("is_view", [](const ir::BoundSymbol& b) { return b.sym->has(ir::kView); },
                   "Whether the op only views its input (reshape, slice, transpose...): torch may return a view.")
      .def_prop_ro("joins_every_argument", [](const ir::BoundSymbol& b) { return b.sym->has(ir::kJoinsEveryArgument); },
                   "Whether eager's autograd node of the op joins every tensor argument to its output, also one its "
                   "decomposition may not read (addmm and its kin: the input with beta=0, which gets a zero "
                   "gradient).")
      .def_prop_ro("draws_random_numbers", [](const ir::BoundSymbol& b) { return passes::draws_random_numbers(b); })
      .def_prop_ro("is_copy_to", [](const ir::BoundSymbol& b) { return b.is(ir::PrimId::copy_to); },
                   "Whether it is prims.copy_to(a, value[, when]): a write of value into a's memory, in place (the "
                   "copy-back of an input the trace writes, or a write autograd does not record).")
      .def_prop_ro("may_raise_for_values", &may_raise_for_values,
                   "Whether running the op may raise for its inputs' values, not only their metadata (which the "
                   "capture's guards fix): an index it reads (prims tagged kChecksValues), an op torch runs whole "
                   "(opaque, or a torch-level op without a decomposition).");

  nb::class_<ir::Trace>(m, "Trace", "A straight-line program over proxies; prints as runnable Python.")
      .def_ro("symbols", &ir::Trace::symbols)
      .def_ro("provenance", &ir::Trace::provenance)
      .def_ro("boxed_inputs", &ir::Trace::boxed_inputs,
              "How many of the first inputs the function takes in one list it empties (a backward's saved values).")
      .def_prop_ro("inputs", [](const ir::Trace& t) {
        std::vector<PyProxy> out;
        for (ir::ProxyId id : t.inputs) out.push_back(PyProxy{id});
        return out;
      })
      .def_prop_ro("output", [](const ir::Trace& t) { return to_py(t.output); })
      .def("name_of", [](const ir::Trace& t, PyProxy p) { return t.proxy(p.id).name; })
      .def("meta", [](const ir::Trace& t, PyProxy p) { return meta_tuple(t.proxy(p.id)); },
           "(dtype, shape, device, requires_grad) of a tensor proxy; ('number', 'bool' | 'int' | 'float' | 'complex') of a number proxy.")
      .def("strides", [](const ir::Trace& t, PyProxy p) { return t.proxy(p.id).strides; },
           "The element strides of a non-contiguous trace input; [] for any other proxy.")
      .def("python", [](const ir::Trace& t, bool subsymbols, bool sources, std::vector<std::string> imports,
                        std::map<ir::ProxyId, std::string> input_notes) {
        return ir::to_python(t, ir::PrintOptions{subsymbols, sources, std::move(imports), std::move(input_notes)});
      }, nb::arg("subsymbols") = true, nb::arg("sources") = true, nb::arg("imports") = std::vector<std::string>{},
         nb::arg("input_notes") = std::map<ir::ProxyId, std::string>{},
         "The trace as a runnable Python module; `imports`: import statements printed after the standard ones; "
         "`input_notes`: {input proxy id: what it is in the user's program}, printed after its metadata.")
      .def("__str__", [](const ir::Trace& t) { return ir::to_python(t); })
      .def("verify", &ir::verify);

  nb::class_<PyBuilder>(m, "TraceBuilder", "Builds a trace one op at a time, applying the core's shape and dtype rules.")
      .def(nb::init<>())
      .def("add_input_tensor", [](PyBuilder& b, ir::DType d, nb::sequence shape, std::string device, bool rg,
                                  std::vector<int64_t> strides) {
        return PyProxy{b.builder.add_input_tensor(make_meta(d, shape, std::move(device), rg), std::move(strides))};
      }, nb::arg("dtype"), nb::arg("shape"), nb::arg("device"), nb::arg("requires_grad"),
         nb::arg("strides") = std::vector<int64_t>{},
         "A trace input; `strides` (elements) only for a non-contiguous input, whose layout the guards fix.")
      .def("add_input_number", [](PyBuilder& b, int type, const std::string& name) {
        ir::ProxyId id = b.builder.add_input_number(static_cast<ir::NumberType>(type));
        // A size symbol keeps Dynamo's name (s0), so that traces and "shapes s0=5" read alike.
        if (!name.empty()) b.trace->proxies[id].name = name;
        return PyProxy{id};
      }, nb::arg("type"), nb::arg("name") = "",
         "A number input; `name` (a Python identifier no other proxy has, e.g. a size symbol's) replaces the "
         "generated one.")
      .def("new_tensor", [](PyBuilder& b, ir::DType d, nb::sequence shape, std::string device, bool rg) {
        return PyProxy{b.builder.new_tensor(make_meta(d, shape, std::move(device), rg))};
      })
      .def("new_number", [](PyBuilder& b, int type) { return PyProxy{b.builder.new_number(static_cast<ir::NumberType>(type))}; })
      .def("call", [](PyBuilder& b, const std::string& level, const std::string& name, nb::list args, nb::dict kwargs) {
        ir::Level l = level == "prims" ? ir::Level::Prim : ir::Level::Torch;
        const std::string op = level + "." + name;
        return to_py(b.builder.call(l, name, args_from_py(args, &op), kwargs_from_py(kwargs, &op)));
      }, "Calls a native op; raises OpError for invalid arguments and NotNative for uses the core does not cover "
         "(an int outside int64's range among them).")
      .def("opaque", [](PyBuilder& b, std::string callee, nb::list args, nb::dict kwargs, nb::handle output, bool effect,
                        bool check) {
        ops::Kwargs kw = kwargs_from_py(kwargs);
        Value out = b.builder.opaque(std::move(callee), args_from_py(args), std::move(kw), from_py(output));
        if (check) b.trace->symbols.back().sym = ops::opaque_check_symbol();
        else if (!effect) b.trace->symbols.back().sym = ops::opaque_symbol(false);
        return to_py(out);
      }, nb::arg("callee"), nb::arg("args"), nb::arg("kwargs"), nb::arg("output").none(), nb::arg("effect"),
         nb::arg("check") = false,
         "Records an op the core does not know; `effect`: it may write or draw random numbers (never removed or "
         "reordered); `check`: it only raises for some values of its arguments, returning nothing (an assert).")
      .def("set_source", [](PyBuilder& b, std::string s) { b.builder.set_source(std::move(s)); })
      .def("set_requires_grad", [](PyBuilder& b, PyProxy p, bool rg) {
        ir::ProxyInfo& info = b.trace->proxies.at(p.id);
        if (info.is_tensor) info.tensor.requires_grad = rg;
      })
      .def("meta", [](PyBuilder& b, PyProxy p) { return meta_tuple(b.trace->proxy(p.id)); })
      .def("set_eager_strides", [](PyBuilder& b, PyProxy p, std::vector<int64_t> strides) {
        ir::ProxyInfo& info = b.trace->proxies.at(p.id);
        const auto& inputs = b.trace->inputs;
        if (!info.is_tensor || strides.size() != info.tensor.shape.size() || !info.eager_strides.empty() ||
            std::find(inputs.begin(), inputs.end(), p.id) != inputs.end())
          return;
        info.eager_strides = std::move(strides);
      }, nb::arg("proxy"), nb::arg("strides"),
         "A computed tensor's strides in eager (its example value), where not contiguous: functionalization decides "
         "with them whether a later contiguous() or reshape views it. Ignored for inputs and once set.")
      .def("pop_symbol", [](PyBuilder& b) { b.trace->symbols.pop_back(); }, "Removes the last recorded symbol.")
      .def("finish", [](PyBuilder& b, nb::handle output) {
        b.trace->output = from_py(output);
        ir::verify(*b.trace);
        return *b.trace;
      }, nb::arg("output").none());

  nb::class_<passes::PassResult>(m, "PassResult")
      .def_ro("trace", &passes::PassResult::trace)
      .def_ro("name", &passes::PassResult::name)
      .def_ro("seconds", &passes::PassResult::seconds);

  m.def("bind_sizes", [](const ir::Trace& t, const std::map<int, int64_t>& values, bool for_kernels) {
    std::map<ir::ProxyId, int64_t> v(values.begin(), values.end());
    return ir::bind_sizes(t, v, for_kernels ? codegen::reads_numbers_at_run_time : nullptr);
  }, nb::arg("trace"), nb::arg("values"), nb::arg("for_kernels") = false,
     "The trace with its size symbols ({proxy id: int}) bound: every symbolic size an integer; ValueError if a "
     "symbol lacks a value. ``for_kernels``: a trace to lower whose symbolic sizes serve every shape -- the "
     "numbers arithmetic reads (``mean``'s divisor) keep the symbols that are its inputs, so its kernels take "
     "them as arguments and serve every size.");
  m.def("with_size_hints", [](const ir::Trace& t, const std::map<int, int64_t>& values) {
    ir::Trace out = t;
    out.size_hints = std::map<ir::ProxyId, int64_t>(values.begin(), values.end());
    return out;
  }, nb::arg("trace"), nb::arg("values"),
     "The trace with size hints ({size symbol's proxy id: int}): code generation's planning inside the passes "
     "reads symbolic sizes at these values (Trace::size_hints); lowering plans again with the sizes bound.");
  m.def("run_pipeline",
        [](const ir::Trace& t, std::vector<std::string> names, nb::object evaluator,
           std::vector<std::tuple<std::string, std::map<std::string, std::string>, bool, std::vector<std::string>,
                                  std::vector<ir::DType>, std::vector<std::string>>>
               executors) {
          passes::PassContext ctx;
          if (!evaluator.is_none()) {
            // Python evaluates the symbol's call expression with the constant
            // tensors bound to the proxy names it reads.
            ctx.evaluator = [evaluator](const ir::Trace& folded, const ir::BoundSymbol& b,
                                        const std::map<ir::ProxyId, int64_t>& consts) -> std::optional<int64_t> {
              nb::dict bound;
              for (const auto& [id, index] : consts) bound[folded.proxy(id).name.c_str()] = index;
              nb::object r = evaluator(ir::call_expression(folded, b), bound);
              if (r.is_none()) return std::nullopt;
              return nb::cast<int64_t>(r);
            };
          }
          for (auto& [name, callees, fusion, devices, dtypes, closed_by] : executors)
            ctx.executors.push_back(passes::ExecutorTable{name, callees, fusion, devices, dtypes, closed_by});
          return passes::run_pipeline(t, names, ctx);
        },
        nb::arg("trace"), nb::arg("passes"), nb::arg("evaluator").none() = nb::none(), nb::arg("executors") = nb::list(),
        "Runs the named passes in order and returns every intermediate result.");
  m.def("split_forward_backward", [](const ir::Trace& t, const std::vector<PyProxy>& activation_inputs) {
          auto start = std::chrono::steady_clock::now();
          std::vector<ir::ProxyId> activations;
          for (const PyProxy& p : activation_inputs) activations.push_back(p.id);
          passes::ForwardBackward fb = passes::split_forward_backward(t, activations);
          ir::verify(fb.forward);
          ir::verify(fb.backward);
          double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
          nb::list rules;
          for (const passes::VjpUse& u : fb.rules) rules.append(nb::make_tuple(u.op, u.rule, u.generic));
          nb::dict stages;
          stages["autodiff"] = seconds - fb.rematerialization_seconds;
          stages["rematerialization"] = fb.rematerialization_seconds;
          return nb::make_tuple(fb.forward, fb.backward, fb.grad_outputs, fb.saved, stages, rules);
        }, nb::arg("trace"), nb::arg("activation_inputs") = std::vector<PyProxy>{},
        "Reverse-mode autodiff of a functional trace: (forward, backward, grad_outputs, number of saved values, "
        "seconds per stage {'autodiff', 'rematerialization'}, rules); see passes::split_forward_backward. `rules` says how each top-level symbol whose result "
        "requires grad is differentiated: (op, rule, generic), rule 'own' (its VJP rule), 'decomposition' (its "
        "decomposition's rules; `generic` lists the symbols inside it the generic rule differentiates) or 'generic' "
        "(torch.autograd on that op alone). Raises NotDifferentiable naming the op it cannot differentiate.");
  m.def("specialize_backward", [](const ir::Trace& t, const ir::Trace& forward, const std::vector<bool>& given,
                                  const std::vector<PyProxy>& activation_inputs) {
          std::vector<ir::ProxyId> activations;
          for (const PyProxy& p : activation_inputs) activations.push_back(p.id);
          ir::Trace out = passes::specialize_backward(t, forward, given, activations);
          ir::verify(out);
          return out;
        }, nb::arg("trace"), nb::arg("forward"), nb::arg("given"), nb::arg("activation_inputs") = std::vector<PyProxy>{},
        "The backward of split_forward_backward(trace, activation_inputs), whose forward is `forward`, for a call given "
        "only the output gradients `given` flags (the others None); see passes::specialize_backward. Raises "
        "NotDifferentiable where it would read a value the forward neither saves nor can recompute.");
  m.def("vjp_ops", &ops::ops_with_vjp, "The ops with a VJP rule, as 'prims.<name>'.");
  m.def("vjp_kind", [](const std::string& name) -> std::string {
    const ops::OpDef* d = ops::find_op(ir::Level::Torch, name);
    if (d == nullptr) throw nb::key_error(("no torch-level op ltorch." + name).c_str());
    if (ops::find_vjp(&d->symbol) != nullptr) return "own";
    if (ops::vjp_by_torch(&d->symbol)) return "torch";
    return d->decompose ? "decomposition" : "generic";
  }, nb::arg("name"),
  "How thunder's autodiff differentiates the torch-level op `name`: 'own' (its VJP rule), 'decomposition' (the "
  "rules of the prims it decomposes into), 'torch' (whole, by torch.autograd, although it decomposes) or "
  "'generic' (whole, by torch.autograd: no decomposition). Raises KeyError for an unknown op.");
  m.def("render_cpu", [](const ir::Trace& t, const std::string& executor, size_t parts, bool round_every_op,
                         const std::set<std::string>& loaded) {
    nb::list units;
    const auto rounding = round_every_op ? codegen::HalfRounding::EveryOp : codegen::HalfRounding::AtStores;
    for (const codegen::TranslationUnit& unit : codegen::cpu_translation_units(t, executor, parts, rounding, loaded)) {
      nb::list kernels;
      for (const codegen::KernelSignature& k : unit.kernels) {
        std::vector<PyProxy> ins, outs;
        for (ir::ProxyId id : k.inputs) ins.push_back(PyProxy{id});
        for (ir::ProxyId id : k.outputs) outs.push_back(PyProxy{id});
        nb::list sizes;  // (input index or -1, its dim, a stride rather than a size, the value when the trace was made)
        for (const codegen::SizeArgument& a : k.sizes) sizes.append(nb::make_tuple(a.input, a.input_dim, a.stride, a.value));
        kernels.append(nb::make_tuple(k.name, ins, outs, sizes, k.written_over, k.key));
      }
      units.append(nb::make_tuple(unit.source, kernels));
    }
    return units;
  }, nb::arg("trace"), nb::arg("executor"), nb::arg("parts") = 1, nb::arg("round_every_op") = true,
     nb::arg("loaded") = std::set<std::string>{},
     "The CPU fusions of `executor` as at most `parts` C++ translation units of consecutive kernels, balanced by "
     "their prim counts (so that they compile in parallel): [(source, [(kernel name, [input proxies], [output "
     "proxies], [size arguments: (input index or -1, dim, is a stride, value)], [per output: the index of the "
     "input it is written over in place, or -1; empty if none is], key)])], empty if the trace has no fusions "
     "(codegen::cpu_translation_units). A kernel's key is its text apart from its name: kernels whose key "
     "is in `loaded` are in no unit but the last, whose source is ''. `round_every_op`: float16/bfloat16 values "
     "are rounded after every op, as eager does; False: only where stored or converted, float32 in between (a "
     "backward's kernels).");

  // ---- the GPU: the CUDA dialect, NVRTC, the driver (each loaded by dlopen only when called) ----
  m.def("render_cuda", [](const ir::Trace& t, const std::string& executor, size_t parts,
                          const std::set<std::string>& loaded) {
    nb::list units;
    for (const codegen::TranslationUnit& unit : codegen::cuda_translation_units(t, executor, parts, loaded)) {
      nb::list kernels;
      for (const codegen::KernelSignature& k : unit.kernels) {
        std::vector<PyProxy> ins, outs;
        for (ir::ProxyId id : k.inputs) ins.push_back(PyProxy{id});
        for (ir::ProxyId id : k.outputs) outs.push_back(PyProxy{id});
        nb::list sizes;
        for (const codegen::SizeArgument& a : k.sizes) sizes.append(nb::make_tuple(a.input, a.input_dim, a.stride, a.value));
        kernels.append(nb::make_tuple(k.name, ins, outs, sizes, k.block, k.grid, k.workspace, k.key,
                                      k.symbol.empty() ? k.name : k.symbol, k.by_value));
      }
      units.append(nb::make_tuple(unit.source, kernels));
    }
    return units;
  }, nb::arg("trace"), nb::arg("executor"), nb::arg("parts") = 1, nb::arg("loaded") = std::set<std::string>{},
     "The fusions of `executor`, planned as on the CPU, scheduled for a GPU and rendered in the CUDA dialect as at "
     "most `parts` translation units of consecutive kernels, balanced by their prim counts (so that they compile in "
     "parallel): [(source, [(kernel name, [input proxies], [output proxies], [size arguments], threads per block, "
     "blocks, workspace bytes, key, symbol, [per input: taken by value])])], empty if the trace has no such fusions "
     "(codegen::cuda_translation_units). A kernel's key is its text apart from its name; a kernel repeating an "
     "earlier one's text runs that one's code: its symbol is the name compiled in its unit's source (otherwise its "
     "own); an input taken by value (codegen::host_scalar: a 0-dim CPU tensor) is read on the host by the launcher. "
     "Kernels whose key is in `loaded` are in no unit but the last, whose source is ''.");
  nb::class_<runtime::CudaImage>(m, "CudaImage", "CUDA kernels compiled by NVRTC: CUBIN, PTX and ptxas' report.")
      .def_prop_ro("cubin", [](const runtime::CudaImage& i) { return nb::bytes(i.cubin.data(), i.cubin.size()); })
      .def_ro("ptx", &runtime::CudaImage::ptx)
      .def_ro("log", &runtime::CudaImage::log)
      .def_prop_ro("kernels", [](const runtime::CudaImage& i) {
        nb::list out;  // (name, registers, spill stores, spill loads, stack bytes)
        for (const runtime::KernelResources& k : i.kernels)
          out.append(nb::make_tuple(k.name, k.registers, k.spill_stores, k.spill_loads, k.stack_bytes));
        return out;
      }, "Per kernel, from ptxas' report: (name, registers, spill store bytes, spill load bytes, stack frame bytes).")
      .def_ro("key", &runtime::CudaImage::key)
      .def_ro("path", &runtime::CudaImage::path)
      .def_ro("arch", &runtime::CudaImage::arch)
      .def_ro("nvrtc_version", &runtime::CudaImage::nvrtc_version)
      .def_ro("command", &runtime::CudaImage::command)
      .def_ro("cache_hit", &runtime::CudaImage::cache_hit)
      .def_ro("compile_seconds", &runtime::CudaImage::compile_seconds)
      .def_ro("cache_dir", &runtime::CudaImage::cache_dir)
      .def_ro("warning", &runtime::CudaImage::warning);
  m.def("compile_cuda", [](const std::string& source, const std::string& library, const std::string& arch,
                           const std::string& cache_dir, uint64_t max_cache_bytes) {
    runtime::NvrtcOptions o;
    o.library = library;
    o.arch = arch;
    o.cache_dir = cache_dir;
    o.max_cache_bytes = max_cache_bytes;
    nb::gil_scoped_release release;
    return runtime::compile_cuda(source, o);
  }, nb::arg("source"), nb::arg("library"), nb::arg("arch") = "sm_90", nb::arg("cache_dir"), nb::arg("max_cache_bytes") = 0,
     "Compiles a CUDA translation unit with NVRTC (`library`: the absolute path of libnvrtc.so.13, loaded on first "
     "use) to CUBIN for `arch` and PTX, or loads it from the kernel cache (keyed also by arch and NVRTC's version). "
     "RuntimeError with NVRTC's log if it does not compile.");
  m.def("nvrtc_version", &runtime::nvrtc_version, nb::arg("library"), "NVRTC's version ('13.0'), loading it if needed.");
  m.def("parse_ptxas_report", [](const std::string& log) {
    nb::list out;
    for (const runtime::KernelResources& k : runtime::parse_ptxas_report(log))
      out.append(nb::make_tuple(k.name, k.registers, k.spill_stores, k.spill_loads, k.stack_bytes));
    return out;
  }, nb::arg("log"), "Per kernel (name, registers, spill stores, spill loads, stack bytes) of ptxas' -v report.");
  m.def("cuda_driver_status", [] {
    std::string why;
    const bool ok = runtime::cuda_driver_available(&why);
    return nb::make_tuple(ok, why);
  }, "(available, why not): whether libcuda.so.1 loads and initializes (loaded by dlopen on the first call).");
  nb::class_<runtime::CudaModule>(m, "CudaModule", "A CudaImage loaded into the CUDA contexts it is used in.",
                                  nb::is_weak_referenceable())
      .def(nb::new_([](std::shared_ptr<runtime::CudaImage> image) {
        return std::make_shared<runtime::CudaModule>(std::move(image));
      }), nb::arg("image"))
      .def("function", &runtime::CudaModule::function, nb::arg("name"),
           "The kernel's CUfunction in the current context (the module is loaded there first: CUBIN, else PTX).")
      .def_prop_ro("loaded_from_ptx", &runtime::CudaModule::loaded_from_ptx)
      .def_prop_ro("image", [](const runtime::CudaModule& m) {
        return std::const_pointer_cast<runtime::CudaImage>(m.shared_image());
      }, "The CudaImage it loads.");
  m.def("launch_cuda", [](uintptr_t function, int64_t grid, int block, uintptr_t stream, nb::sequence values) {
    std::vector<uint64_t> args(nb::len(values));
    for (size_t i = 0; i < args.size(); ++i) args[i] = kernel_argument(values[i], i);
    nb::gil_scoped_release release;
    runtime::launch_cuda(function, grid, block, stream, args);
  }, nb::arg("function"), nb::arg("grid"), nb::arg("block"), nb::arg("stream"), nb::arg("args"),
     "Launches a kernel on a CUDA stream (asynchronous); args: its 8-byte arguments in order (pointers and sizes "
     "as ints, then its run-time numbers: ints, or floats passed as their bits). OverflowError for an int beyond "
     "64 bits.");

  nb::class_<runtime::Module>(m, "KernelModule",
                              "A compiled, loaded shared object of kernels; unloaded (dlclose) when the last reference "
                              "to it goes, so whatever keeps one of its kernel addresses must keep it.",
                              nb::is_weak_referenceable())
      .def_ro("path", &runtime::Module::path)
      .def_ro("key", &runtime::Module::key)
      .def_ro("command", &runtime::Module::command)
      .def_ro("cache_hit", &runtime::Module::cache_hit)
      .def_ro("compile_seconds", &runtime::Module::compile_seconds)
      .def_ro("cache_dir", &runtime::Module::cache_dir, "The directory used (the one asked for, or a private one).")
      .def_ro("warning", &runtime::Module::warning, "Why the cache directory asked for was not used; '' if it was.")
      .def("symbol", [](const runtime::Module& mod, const std::string& name) {
        return reinterpret_cast<uintptr_t>(mod.symbol(name));
      }, "The address of an exported kernel (valid while this module is alive).");
  m.def("load_module", [](const std::string& source, const std::string& cache_dir, std::optional<std::vector<std::string>> flags,
                          std::optional<std::string> compiler, double timeout, uint64_t max_cache_bytes) {
    runtime::CompileOptions o;
    o.cache_dir = cache_dir;
    if (flags) o.flags = *flags;
    if (compiler) o.compiler = *compiler;
    o.timeout_seconds = timeout;
    o.max_cache_bytes = max_cache_bytes;
    nb::gil_scoped_release release;
    return runtime::load_module(source, o);
  }, nb::arg("source"), nb::arg("cache_dir"), nb::arg("flags").none() = nb::none(), nb::arg("compiler").none() = nb::none(),
     nb::arg("timeout") = 300.0, nb::arg("max_cache_bytes") = 0,
     "Compiles (or loads from the disk cache) a translation unit of kernels; RuntimeError with the compiler output on "
     "failure (or on a timeout: the compiler is killed after `timeout` seconds, <= 0 for none). Entries beyond "
     "`max_cache_bytes` (0: $THUNDER_CACHE_MAX_BYTES or 2 GiB) are evicted, least recently used first.");
  m.def("clear_kernel_cache", [](const std::string& cache_dir) {
    runtime::ClearResult r = runtime::clear_cache(cache_dir);
    return std::make_tuple(r.files, r.bytes);
  }, nb::arg("cache_dir"),
     "Removes the cache's entries and dead processes' temporaries (and this process's private fallback directory's); "
     "returns (files, bytes of entries) removed. Loaded modules stay loaded.");
  m.def("kernel_cache_bytes", [](const std::string& cache_dir) {
    runtime::CacheDir dir = runtime::open_cache_dir(cache_dir);
    return runtime::cache_bytes(dir);
  }, nb::arg("cache_dir"), "Total bytes of the entries in the cache directory.");
  m.def("default_compile_flags", [] { return runtime::CompileOptions{}.flags; });
  m.def("launch", [](uintptr_t kernel, nb::tuple pointers) { return launch_kernel(kernel, pointers, true); },
     nb::arg("kernel"), nb::arg("pointers"),
     "Runs a kernel on its arguments (a tuple): the data pointers of its inputs and outputs, the thread count, its "
     "sizes (ints), then its run-time numbers (ints, or floats passed as their bits), with the GIL released. "
     "Returns the kernel's status: 0, or 1 if an index was out of range.");
  m.def("launch_brief", [](uintptr_t kernel, nb::tuple pointers) { return launch_kernel(kernel, pointers, false); },
     nb::arg("kernel"), nb::arg("pointers"),
     "launch, holding the GIL: for a kernel over so few elements that releasing and taking the GIL again (~45 ns) "
     "costs more than other threads would gain.");

  // Large kernel outputs come from the buffer pool, handed to torch as a DLPack capsule (torch's
  // from_dlpack takes it); the tensor's deleter gives the buffer back.
  m.def("pooled_capsule", [](std::vector<int64_t> shape, int code, int bits) {
    if (code < 0 || code > 255) throw nb::value_error("pooled_capsule: dlpack_code must be a DLPack type code (0-255)");
    const size_t bytes = pooled_bytes(shape, bits);
    auto* t = new PooledTensor{};
    t->shape = std::move(shape);
    try {
      t->tensor.data = runtime::output_buffer_pool().acquire(bytes);
    } catch (...) {
      delete t;
      throw;
    }
    t->tensor.device = {1, 0};  // kDLCPU
    t->tensor.ndim = static_cast<int32_t>(t->shape.size());
    t->tensor.dtype = {static_cast<uint8_t>(code), static_cast<uint8_t>(bits), 1};
    t->tensor.shape = t->shape.data();  // no strides: contiguous
    t->deleter = [](PooledTensor* self) {  // the consumer's: called once, when it no longer needs the tensor
      self->deleter_called = true;
      self->release_buffer();
      self->unref();
    };
    PyObject* capsule = PyCapsule_New(t, "dltensor", [](PyObject* c) {
      // Still named "dltensor": no one took ownership (torch renames what it consumes "used_dltensor"), or
      // the consumer failed, perhaps after calling the deleter. Either way the deleter will not be called
      // later, so the consumer's reference is dropped here if it was not already.
      if (PyCapsule_IsValid(c, "dltensor")) {
        auto* self = static_cast<PooledTensor*>(PyCapsule_GetPointer(c, "dltensor"));
        self->release_buffer();
        if (!self->deleter_called) self->unref();
        self->unref();
      } else if (PyCapsule_IsValid(c, "used_dltensor")) {
        static_cast<PooledTensor*>(PyCapsule_GetPointer(c, "used_dltensor"))->unref();
      }
    });
    if (!capsule) {
      t->release_buffer();
      delete t;
      throw nb::python_error();
    }
    return nb::steal(capsule);
  }, nb::arg("shape"), nb::arg("dlpack_code"), nb::arg("bits"),
     "A DLPack capsule of an uninitialized contiguous CPU tensor of this shape and DLPack dtype (code: 0 int, 1 uint, "
     "2 float, 4 bfloat, 6 bool), in a buffer of the output pool (reused once "
     "freed); torch.utils.dlpack.from_dlpack(capsule) makes it a torch.Tensor. ValueError for a negative dim or a size "
     "that overflows.");
  m.def("buffer_pool_stats", [] {
    auto& pool = runtime::output_buffer_pool();
    return std::make_tuple(pool.cached_bytes(), pool.live_bytes(), pool.peak_live_bytes());
  }, "(bytes held unused, bytes in live tensors, most bytes live at once since reset_buffer_pool_peak()) of the "
     "kernel output pool.");
  m.def("reset_buffer_pool_peak", [] { runtime::output_buffer_pool().reset_peak(); });
  m.def("record_buffer_pool", [](bool on) { runtime::output_buffer_pool().record(on); },
        "Starts (clearing what was recorded) or stops recording the output pool's allocations.");
  m.def("buffer_pool_recorded", [] { return runtime::output_buffer_pool().recorded(); },
        "The output pool's recorded allocations: [(ns since the Unix epoch, the torch profiler's clock; "
        "+bytes handed out or -bytes taken back)], in order.");
  m.def("set_buffer_pool_limit", [](size_t bytes) { runtime::output_buffer_pool().set_limit(bytes); },
        "Most bytes the output pool keeps unused (0: keep none).");

  m.def("fusible_prims", &codegen::fusible_prims, "The prims the CPU code generator has code for.");
  m.def("pass_names", [] {
    std::vector<std::string> out;
    for (const auto& p : passes::pass_table()) out.push_back(p.name);
    return out;
  });
  m.def("native_ops", [](const std::string& level) {
    std::vector<std::string> out;
    for (const ops::OpDef* d : ops::ops_of(level == "prims" ? ir::Level::Prim : ir::Level::Torch))
      out.push_back(d->symbol.name);
    return out;
  }, "Names of the ops in the prims or ltorch table.");
  m.def("undecomposed_ops", [] {
    std::vector<std::string> out;
    for (const ops::OpDef* d : ops::ops_of(ir::Level::Torch))
      if (!d->decompose) out.push_back(d->symbol.name);
    return out;
  }, "Names of the torch-level ops that have a shape rule and no decomposition (they run as one torch call).");
  m.def("op_params", [](const std::string& level, const std::string& name) -> std::optional<std::vector<std::string>> {
    const ops::OpDef* d = ops::find_op(level == "prims" ? ir::Level::Prim : ir::Level::Torch, name);
    if (!d) return std::nullopt;
    std::vector<std::string> out;
    for (const ir::Param& p : d->symbol.params) out.push_back(p.name);
    return out;
  });
}
