// More torch-level layout ops: flips, rolls, tiling, joins and splits,
// triangular masks, gathers and scatters, and creation ops; plus the prims
// they need (clone, gather, the scatter family, index_put).
#include <algorithm>
#include <cmath>
#include <numeric>

#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

using ir::kCreation;
using ir::kShape;
const ir::Param kInput = req("input");

void prim(std::string name, uint32_t tags, std::vector<ir::Param> params, MetaFn meta) {
  register_op(OpDef{ir::Symbol{std::move(name), ir::Level::Prim, tags, std::move(params)}, std::move(meta), nullptr});
}

// ---- prims ----

void check_index_like(const std::string& op, const TensorMeta& a, const TensorMeta& idx, int64_t dim, bool scatter) {
  if (!is_index_dtype(idx.dtype)) fail(op, "expected an int64 index tensor");
  if (idx.ndim() != a.ndim() && !(idx.ndim() <= 1 && a.ndim() <= 1))
    fail(op, "index must have as many dims as the input");
  for (int64_t d = 0; d < idx.ndim() && d < a.ndim(); ++d)
    if (d != dim && idx.shape[d] > a.shape[d]) fail(op, "index is larger than the input outside dim");
  if (a.ndim() > 0) refuse_empty_indexed(op, a.shape[static_cast<size_t>(dim)], idx);
  (void)scatter;
}

void register_layout_prims() {
  prim("clone", 0, {req("a")}, [](Builder& b, const Args& a) { return out_tensor(b, tensor(b, "prims.clone", a[0], "a")); });
  // torch.gather: the result has the index's shape.
  prim("gather", ir::kChecksValues, {req("a"), req("dim"), req("index")}, [](Builder& b, const Args& a) {
    TensorMeta m = tensor(b, "prims.gather", a[0], "a");
    const TensorMeta& idx = tensor(b, "prims.gather", a[2], "index");
    int64_t d = canonical_dim("prims.gather", a[1].as_int(), m.ndim());
    check_index_like("prims.gather", m, idx, d, false);
    m.shape = idx.shape;
    return out_tensor(b, m);
  });
  // scatter(a, dim, index, src) with src a tensor or a number; reduce None, "add" or "multiply".
  prim("scatter", ir::kChecksValues, {req("a"), req("dim"), req("index"), req("src"), opt("reduce", Value())},
       [](Builder& b, const Args& a) {
         const TensorMeta& m = tensor(b, "prims.scatter", a[0], "a");
         int64_t d = canonical_dim("prims.scatter", a[1].as_int(), m.ndim());
         check_index_like("prims.scatter", m, tensor(b, "prims.scatter", a[2], "index"), d, true);
         if (b.is_tensor(a[3]) && b.meta(a[3]).dtype != m.dtype) fail("prims.scatter", "src must have the input's dtype");
         return out_tensor(b, m);
       });
  prim("scatter_add", ir::kChecksValues, {req("a"), req("dim"), req("index"), req("src")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor(b, "prims.scatter_add", a[0], "a");
    int64_t d = canonical_dim("prims.scatter_add", a[1].as_int(), m.ndim());
    check_index_like("prims.scatter_add", m, tensor(b, "prims.scatter_add", a[2], "index"), d, true);
    if (tensor(b, "prims.scatter_add", a[3], "src").dtype != m.dtype) fail("prims.scatter_add", "src must have the input's dtype");
    return out_tensor(b, m);
  });
  prim("scatter_reduce", ir::kChecksValues, {req("a"), req("dim"), req("index"), req("src"), req("reduce"), req("include_self")},
       [](Builder& b, const Args& a) {
         const TensorMeta& m = tensor(b, "prims.scatter_reduce", a[0], "a");
         int64_t d = canonical_dim("prims.scatter_reduce", a[1].as_int(), m.ndim());
         check_index_like("prims.scatter_reduce", m, tensor(b, "prims.scatter_reduce", a[2], "index"), d, true);
         return out_tensor(b, m);
       });
  // index_add / index_copy / index_fill along dim with a 1-D index.
  prim("index_add", ir::kChecksValues, {req("a"), req("dim"), req("index"), req("source"), req("alpha")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor(b, "prims.index_add", a[0], "a");
    canonical_dim("prims.index_add", a[1].as_int(), m.ndim());
    return out_tensor(b, m);
  });
  prim("index_copy", ir::kChecksValues, {req("a"), req("dim"), req("index"), req("source")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor(b, "prims.index_copy", a[0], "a");
    canonical_dim("prims.index_copy", a[1].as_int(), m.ndim());
    return out_tensor(b, m);
  });
  prim("index_fill", ir::kChecksValues, {req("a"), req("dim"), req("index"), req("value")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = tensor(b, "prims.index_fill", a[0], "a");
    canonical_dim("prims.index_fill", a[1].as_int(), m.ndim());
    return out_tensor(b, m);
  });
  prim("index_put", ir::kChecksValues, {req("a"), req("indices"), req("values"), req("accumulate")}, [](Builder& b, const Args& a) {
    return out_tensor(b, tensor(b, "prims.index_put", a[0], "a"));
  });
}

// ---- helpers ----

std::vector<int64_t> dims_arg(const Value& v) {
  return v.is_seq() ? v.as_ints() : std::vector<int64_t>{v.as_int()};
}

Value reshape(Builder& b, const Value& x, const Shape& shape) {
  if (b.meta(x).shape == shape) return x;
  return b.prim("reshape", {x, Value::dims(shape)});
}

Value slice_dim(Builder& b, const Value& x, int64_t dim, const Dim& start, const Dim& stop, int64_t step = 1) {
  const TensorMeta& m = b.meta(x);
  Shape s(m.ndim(), 0), e = m.shape;
  std::vector<int64_t> st(m.ndim(), 1);
  s[dim] = start, e[dim] = stop, st[dim] = step;
  if (start == 0 && stop == m.shape[dim] && step == 1) return x;
  return b.prim("slice", {x, Value::dims(s), Value::dims(e), step == 1 ? Value() : Value::ints(st)});
}

Value atleast(Builder& b, const Value& x, int64_t n) {
  Shape shape = b.meta(x).shape;
  if (static_cast<int64_t>(shape.size()) >= n) return x;
  if (n == 1) return reshape(b, x, {1});
  if (n == 2) {
    shape.insert(shape.begin(), 2 - static_cast<int64_t>(shape.size()), 1);
    return reshape(b, x, shape);
  }
  // atleast_3d: 0-d -> (1,1,1), 1-d (n) -> (1,n,1), 2-d (m,n) -> (m,n,1)
  if (shape.empty()) return reshape(b, x, {1, 1, 1});
  if (shape.size() == 1) return reshape(b, x, {1, shape[0], 1});
  return reshape(b, x, {shape[0], shape[1], 1});
}

// Splits along dim at the given boundaries (tensor_split semantics).
Value split_at(Builder& b, const Value& x, int64_t dim, const std::vector<int64_t>& bounds) {
  const TensorMeta m = b.meta(x);
  int64_t n = m.shape[dim].value("ltorch.tensor_split");
  std::vector<Value> out;
  int64_t prev = 0;
  auto clampi = [n](int64_t i) { return std::min(std::max(i < 0 ? i + n : i, int64_t{0}), n); };
  for (size_t i = 0; i <= bounds.size(); ++i) {
    int64_t start = clampi(prev), stop = i < bounds.size() ? clampi(bounds[i]) : n;
    stop = std::max(stop, start);
    Shape s(m.ndim(), 0), e = m.shape;
    s[dim] = start, e[dim] = stop;
    out.push_back(b.prim("slice", {x, Value::dims(s), Value::dims(e)}));
    if (i < bounds.size()) prev = bounds[i];
  }
  return Value::tuple(std::move(out));
}

Value tensor_split(Builder& b, const Value& x, const Value& sections, int64_t dim_arg, const char* op) {
  const TensorMeta& m = b.meta(x);
  int64_t dim = canonical_dim(op, dim_arg, m.ndim());
  if (b.is_tensor(sections)) throw NotNative("tensor_split with a tensor of indices");
  std::vector<int64_t> bounds;
  if (sections.is_seq()) {
    bounds = sections.as_ints();
  } else {
    int64_t k = sections.as_int(), n = m.shape[dim].value(op);
    if (k <= 0) fail(op, "number of sections must be larger than 0");
    int64_t base = n / k, extra = n % k, at = 0;
    for (int64_t i = 0; i + 1 < k; ++i) {
      at += base + (i < extra ? 1 : 0);
      bounds.push_back(at);
    }
  }
  return split_at(b, x, dim, bounds);
}

DType dtype_or(const Value& v, DType dflt) { return v.is_none() ? dflt : v.as_dtype(); }
Value device_or(const Value& v, const std::string& dflt) { return v.is_none() ? Value(ir::Str{dflt}) : v; }
Value fill_of(DType d, double v) {
  if (ir::is_floating(d) || ir::is_complex(d)) return Value(v);
  if (d == DType::Bool) return Value(v != 0);
  return Value(static_cast<int64_t>(v));
}

// iota as a tensor of int64 along one axis of a given rank.
Value iota_along(Builder& b, const Dim& n, int64_t axis, int64_t rank, const std::string& device) {
  Value r = b.prim("iota", {Value(n), Int(0), Int(1), Value(DType::Int64), Value(ir::Str{device})});
  Shape shape(rank, 1);
  shape[axis] = n;
  return reshape(b, r, shape);
}

Value tri(Builder& b, const Args& a, bool lower) {
  const char* op = lower ? "ltorch.tril" : "ltorch.triu";
  const TensorMeta m = tensor(b, op, a[0]);
  if (m.ndim() < 2) fail(op, "input must have at least 2 dimensions");
  Dim rows = m.shape[m.ndim() - 2], cols = m.shape[m.ndim() - 1];
  Value r = iota_along(b, rows, 0, 2, m.device), c = iota_along(b, cols, 1, 2, m.device);
  Value diff = T(b, "sub", {c, r});
  Value mask = T(b, lower ? "le" : "ge", {diff, a[1]});
  return T(b, "where", {mask, a[0], T(b, "zeros_like", {a[0]})});
}

// ---- registration ----

void register_shapes() {
  def_decomposed("flip", kShape, {kInput, req("dims")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    std::vector<int64_t> dims;
    for (int64_t d : dims_arg(a[1])) dims.push_back(canonical_dim("ltorch.flip", d, m.ndim()));
    std::vector<int64_t> sorted = dims;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) fail("ltorch.flip", "dims has duplicates");
    if (m.ndim() == 0) dims.clear();
    return b.prim("flip", {a[0], Value::ints(dims)});
  });
  def_decomposed("fliplr", kShape, {kInput}, [](Builder& b, const Args& a) {
    if (b.meta(a[0]).ndim() < 2) fail("ltorch.fliplr", "input must be >= 2-d");
    return b.prim("flip", {a[0], Value::ints({1})});
  });
  def_decomposed("flipud", kShape, {kInput}, [](Builder& b, const Args& a) {
    if (b.meta(a[0]).ndim() < 1) fail("ltorch.flipud", "input must be >= 1-d");
    return b.prim("flip", {a[0], Value::ints({0})});
  });
  def_decomposed("roll", kShape, {kInput, req("shifts"), opt("dims", Value())}, [](Builder& b, const Args& a) {
    const TensorMeta m = b.meta(a[0]);
    std::vector<int64_t> shifts = dims_arg(a[1]);
    if (a[2].is_none() || (a[2].is_seq() && a[2].items().empty())) {
      if (shifts.size() != 1) fail("ltorch.roll", "shifts and dims must align");
      Value flat = reshape(b, a[0], {m.numel()});
      Value rolled = b.torch("roll", {flat, Int(shifts[0]), Int(0)});
      return reshape(b, rolled, m.shape);
    }
    std::vector<int64_t> dims = dims_arg(a[2]);
    if (dims.size() != shifts.size()) fail("ltorch.roll", "shifts and dims must align");
    Value x = a[0];
    for (size_t i = 0; i < dims.size(); ++i) {
      int64_t d = canonical_dim("ltorch.roll", dims[i], m.ndim());
      int64_t n = m.shape[d].value("ltorch.roll");
      if (n == 0) continue;
      int64_t s = ((shifts[i] % n) + n) % n;
      if (s == 0) continue;
      Value tail = slice_dim(b, x, d, n - s, n), head = slice_dim(b, x, d, 0, n - s);
      x = b.prim("cat", {Value::list({tail, head}), Int(d)});
    }
    return x;
  });
  def_decomposed("rot90", kShape, {kInput, opt("k", Int(1)), opt("dims", Value::list({Int(0), Int(1)}))},
                 [](Builder& b, const Args& a) {
                   const TensorMeta m = b.meta(a[0]);
                   std::vector<int64_t> dims = a[2].as_ints();
                   if (dims.size() != 2 || m.ndim() < 2) fail("ltorch.rot90", "expected 2 dims and a tensor of >= 2 dims");
                   int64_t d0 = canonical_dim("ltorch.rot90", dims[0], m.ndim()), d1 = canonical_dim("ltorch.rot90", dims[1], m.ndim());
                   if (d0 == d1) fail("ltorch.rot90", "rotation dims must differ");
                   int64_t k = ((a[1].as_int() % 4) + 4) % 4;
                   if (k == 0) return b.prim("alias", {a[0]});
                   if (k == 2) return b.prim("flip", {a[0], Value::ints({d0, d1})});
                   if (k == 1) return b.torch("transpose", {b.prim("flip", {a[0], Value::ints({d1})}), Int(d0), Int(d1)});
                   return b.prim("flip", {b.torch("transpose", {a[0], Int(d0), Int(d1)}), Value::ints({d1})});
                 });
  def_decomposed("narrow", kShape, {kInput, req("dim"), req("start"), req("length")}, [](Builder& b, const Args& a) {
    if (b.is_tensor(a[2])) throw NotNative("narrow with a tensor start");
    const TensorMeta& m = b.meta(a[0]);
    int64_t d = canonical_dim("ltorch.narrow", a[1].as_int(), m.ndim());
    int64_t n = m.shape[d].value("ltorch.narrow"), start = a[2].as_int(), len = a[3].as_int();
    if (start < 0) start += n;
    if (start < 0 || len < 0 || start + len > n) fail("ltorch.narrow", "start + length exceeds the dimension size");
    return slice_dim(b, a[0], d, start, start + len);
  });
  def_decomposed("select", kShape, {kInput, req("dim"), req("index")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    if (m.ndim() == 0) fail("ltorch.select", "cannot select on a 0-d tensor");
    int64_t d = canonical_dim("ltorch.select", a[1].as_int(), m.ndim());
    int64_t n = m.shape[d].value("ltorch.select"), i = a[2].as_int();
    if (i < -n || i >= n) fail("ltorch.select", "index out of range");
    if (i < 0) i += n;
    return b.prim("squeeze", {slice_dim(b, a[0], d, i, i + 1), Value::ints({d})});
  });
  def_decomposed("movedim", kShape, {kInput, req("source"), req("destination")}, [](Builder& b, const Args& a) {
    int64_t n = b.meta(a[0]).ndim();
    std::vector<int64_t> src = dims_arg(a[1]), dst = dims_arg(a[2]);
    if (src.size() != dst.size()) fail("ltorch.movedim", "source and destination must have the same length");
    std::vector<int64_t> perm(n, -1);
    std::vector<bool> used(n, false);
    for (size_t i = 0; i < src.size(); ++i) {
      int64_t s = canonical_dim("ltorch.movedim", src[i], n), d = canonical_dim("ltorch.movedim", dst[i], n);
      if (n == 0) continue;
      if (perm[d] != -1 || used[s]) fail("ltorch.movedim", "repeated dim");
      perm[d] = s, used[s] = true;
    }
    int64_t next = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (perm[i] != -1) continue;
      while (used[next]) ++next;
      perm[i] = next++;
    }
    return b.torch("permute", {a[0], Value::ints(perm)});
  });
  def_decomposed("unflatten", kShape, {kInput, req("dim"), req("sizes")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    int64_t d = canonical_dim("ltorch.unflatten", a[1].as_int(), m.ndim());
    std::vector<int64_t> sizes = a[2].as_ints();
    if (sizes.empty()) fail("ltorch.unflatten", "sizes must be non-empty");
    Shape shape(m.shape.begin(), m.shape.begin() + d);
    shape.insert(shape.end(), sizes.begin(), sizes.end());
    shape.insert(shape.end(), m.shape.begin() + d + 1, m.shape.end());
    // resolve -1 against the unflattened dim
    int64_t known = 1, at = -1;
    for (size_t i = 0; i < sizes.size(); ++i)
      if (sizes[i] == -1) at = static_cast<int64_t>(i);
      else known *= sizes[i];
    if (at >= 0) shape[d + at] = known == 0 ? Dim(0) : m.shape[d].divide(known, "ltorch.unflatten");
    Dim prod = 1;
    for (int64_t i = 0; i < static_cast<int64_t>(sizes.size()); ++i) prod *= shape[d + i];
    if (prod != m.shape[d] && !m.shape[d].is_constant())
      throw ir::SymbolicShapeError("ltorch.unflatten: sizes not provably of product " + m.shape[d].str());
    if (prod != m.shape[d]) fail("ltorch.unflatten", "sizes do not multiply to the dimension's size");
    return b.torch("reshape", {a[0], Value::dims(shape)});
  });
  def_decomposed("view_as", kShape, {kInput, req("other")},
                 [](Builder& b, const Args& a) { return b.torch("view", {a[0], Value::dims(b.meta(a[1]).shape)}); });
  def_decomposed("reshape_as", kShape, {kInput, req("other")},
                 [](Builder& b, const Args& a) { return b.torch("reshape", {a[0], Value::dims(b.meta(a[1]).shape)}); });
  def_decomposed("expand_as", kShape, {kInput, req("other")},
                 [](Builder& b, const Args& a) { return b.torch("expand", {a[0], Value::dims(b.meta(a[1]).shape)}); });
  def_decomposed("type_as", 0, {kInput, req("other")},
                 [](Builder& b, const Args& a) { return b.torch("to", {a[0], Value(b.meta(a[1]).dtype)}); });
  def_decomposed("broadcast_to", kShape, {kInput, req("size")},
                 [](Builder& b, const Args& a) { return b.torch("expand", {a[0], a[1]}); });
  def_decomposed("broadcast_tensors", kShape, {req("tensors")}, [](Builder& b, const Args& a) {
    Shape shape;
    for (const Value& t : a[0].items()) shape = broadcast_shapes("ltorch.broadcast_tensors", shape, b.meta(t).shape);
    std::vector<Value> out;
    for (const Value& t : a[0].items()) out.push_back(expand_to(b, t, shape));
    return Value::tuple(std::move(out));
  });
  // repeat: each dim i of size s becomes r_i * s (the tensor is tiled, not interleaved).
  def_decomposed("repeat", kShape, {kInput, req("repeats")}, [](Builder& b, const Args& a) {
    const TensorMeta m = b.meta(a[0]);
    std::vector<int64_t> reps = a[1].as_ints();
    if (reps.size() < m.shape.size()) fail("ltorch.repeat", "number of repeats can not be smaller than the tensor's rank");
    for (int64_t r : reps)
      if (r < 0) fail("ltorch.repeat", "repeats must be non-negative");
    Shape shape(reps.size() - m.shape.size(), 1);
    shape.insert(shape.end(), m.shape.begin(), m.shape.end());
    Value x = reshape(b, a[0], shape);
    Shape inter, expanded, final_shape;
    for (size_t i = 0; i < shape.size(); ++i) {
      inter.push_back(1), inter.push_back(shape[i]);
      expanded.push_back(reps[i]), expanded.push_back(shape[i]);
      final_shape.push_back(reps[i] * shape[i]);
    }
    x = reshape(b, x, inter);
    x = expand_to(b, x, expanded);
    return b.prim("reshape", {x, Value::dims(final_shape)});
  });
  def_decomposed("tile", kShape, {kInput, req("dims")}, [](Builder& b, const Args& a) {
    std::vector<int64_t> reps = a[1].as_ints();
    int64_t n = b.meta(a[0]).ndim();
    if (static_cast<int64_t>(reps.size()) < n) reps.insert(reps.begin(), n - reps.size(), 1);
    return b.torch("repeat", {a[0], Value::ints(reps)});
  });
  for (auto [name, rank] : {std::pair{"atleast_1d", 1}, std::pair{"atleast_2d", 2}, std::pair{"atleast_3d", 3}}) {
    int64_t r = rank;
    def_decomposed(name, kShape, {req("tensors")}, [r](Builder& b, const Args& a) {
      if (b.is_tensor(a[0])) return atleast(b, a[0], r);
      std::vector<Value> out;
      for (const Value& t : a[0].items()) out.push_back(atleast(b, t, r));
      return Value::tuple(std::move(out));
    });
  }
  def_decomposed("hstack", kShape, {req("tensors")}, [](Builder& b, const Args& a) {
    std::vector<Value> ts;
    for (const Value& t : a[0].items()) ts.push_back(atleast(b, t, 1));
    int64_t dim = b.meta(ts.at(0)).ndim() == 1 ? 0 : 1;
    return b.torch("cat", {Value::list(ts), Int(dim)});
  });
  def_decomposed("vstack", kShape, {req("tensors")}, [](Builder& b, const Args& a) {
    std::vector<Value> ts;
    for (const Value& t : a[0].items()) ts.push_back(atleast(b, t, 2));
    return b.torch("cat", {Value::list(ts), Int(0)});
  });
  def_decomposed("dstack", kShape, {req("tensors")}, [](Builder& b, const Args& a) {
    std::vector<Value> ts;
    for (const Value& t : a[0].items()) ts.push_back(atleast(b, t, 3));
    return b.torch("cat", {Value::list(ts), Int(2)});
  });
  def_decomposed("column_stack", kShape, {req("tensors")}, [](Builder& b, const Args& a) {
    std::vector<Value> ts;
    for (const Value& t : a[0].items()) {
      const TensorMeta& m = b.meta(t);
      ts.push_back(m.ndim() <= 1 ? reshape(b, t, {m.numel(), 1}) : t);
    }
    return b.torch("cat", {Value::list(ts), Int(1)});
  });
  def_decomposed("split_with_sizes", kShape, {kInput, req("split_sizes"), opt("dim", Int(0))},
                 [](Builder& b, const Args& a) { return b.torch("split", {a[0], Value::ints(a[1].as_ints()), a[2]}); });
  def_decomposed("tensor_split", kShape, {kInput, req("indices_or_sections"), opt("dim", Int(0))},
                 [](Builder& b, const Args& a) { return tensor_split(b, a[0], a[1], a[2].as_int(), "ltorch.tensor_split"); });
  for (auto [name, axis] : {std::pair{"hsplit", 1}, std::pair{"vsplit", 0}, std::pair{"dsplit", 2}}) {
    std::string n = name;
    int64_t ax = axis;
    def_decomposed(name, kShape, {kInput, req("indices_or_sections")}, [n, ax](Builder& b, const Args& a) {
      const TensorMeta& m = b.meta(a[0]);
      int64_t dim = ax;
      if (n == "hsplit" && m.ndim() == 1) dim = 0;
      if (m.ndim() < (n == "dsplit" ? 3 : n == "vsplit" ? 2 : 1)) fail("ltorch." + n, "input has too few dimensions");
      if (!a[1].is_seq() && !b.is_tensor(a[1]) && a[1].as_int() != 0 &&
          m.shape[dim].value("ltorch.tensor_split") % a[1].as_int() != 0)
        fail("ltorch." + n, "the dimension is not divisible by the number of sections");
      return tensor_split(b, a[0], a[1], dim, ("ltorch." + n).c_str());
    });
  }
  def_decomposed("tril", 0, {kInput, opt("diagonal", Int(0))}, [](Builder& b, const Args& a) { return tri(b, a, true); });
  def_decomposed("triu", 0, {kInput, opt("diagonal", Int(0))}, [](Builder& b, const Args& a) { return tri(b, a, false); });
  def_decomposed("clone", 0, {kInput, opt("memory_format", Value())},
                 [](Builder& b, const Args& a) { return b.prim("clone", {a[0]}); });
  def_decomposed("ravel", kShape, {kInput}, [](Builder& b, const Args& a) {
    return b.torch("reshape", {a[0], Value::ints({-1})});
  });
}

void check_index(Builder& b, const std::string& op, const Value& index) {
  if (!b.is_tensor(index) || !is_index_dtype(b.meta(index).dtype))
    fail(op, "expected an int64 (or int32) index tensor");
}

void register_indexing() {
  def_decomposed("index_select", 0, {kInput, req("dim"), req("index")}, [](Builder& b, const Args& a) {
    check_index(b, "ltorch.index_select", a[2]);
    const TensorMeta& m = b.meta(a[0]);
    if (b.meta(a[2]).ndim() > 1) fail("ltorch.index_select", "index must be 0-d or 1-d");
    int64_t d = canonical_dim("ltorch.index_select", a[1].as_int(), m.ndim());
    Value idx = b.meta(a[2]).ndim() == 0 ? reshape(b, a[2], {1}) : a[2];
    Value r = b.prim("take", {a[0], idx, Int(d)});
    if (m.ndim() == 0) return reshape(b, r, {});
    return r;
  });
  def_decomposed("gather", 0, {kInput, req("dim"), req("index"), opt("sparse_grad", Value(false))},
                 [](Builder& b, const Args& a) {
                   check_index(b, "ltorch.gather", a[2]);
                   return b.prim("gather", {a[0], a[1], a[2]});
                 });
  def_decomposed("take_along_dim", 0, {kInput, req("indices"), opt("dim", Value())}, [](Builder& b, const Args& a) {
    check_index(b, "ltorch.take_along_dim", a[1]);
    // Unlike gather, take_along_dim counts a negative index from the end of the dim.
    if (a[2].is_none()) {
      Value flat = reshape(b, a[0], {b.meta(a[0]).numel()});
      Value idx = reshape(b, a[1], {b.meta(a[1]).numel()});
      return b.prim("gather", {flat, Int(0), wrapped_index(b, idx, b.meta(a[0]).numel())});
    }
    const TensorMeta m = b.meta(a[0]), im = b.meta(a[1]);
    if (m.ndim() != im.ndim()) fail("ltorch.take_along_dim", "input and indices must have the same rank");
    int64_t d = canonical_dim("ltorch.take_along_dim", a[2].as_int(), m.ndim());
    Shape ms = m.shape, is = im.shape;
    ms[d] = 1, is[d] = 1;
    Shape bs = broadcast_shapes("ltorch.take_along_dim", ms, is);
    Shape xs = bs, ixs = bs;
    xs[d] = m.shape[d], ixs[d] = im.shape[d];
    return b.prim("gather", {expand_to(b, a[0], xs), Int(d), expand_to(b, wrapped_index(b, a[1], m.shape[d]), ixs)});
  });
  def_decomposed("scatter", 0, {kInput, req("dim"), req("index"), opt("src", Value()), opt("value", Value()),
                                opt("reduce", Value())},
                 [](Builder& b, const Args& a) {
                   check_index(b, "ltorch.scatter", a[2]);
                   Value src = a[3].is_none() ? a[4] : a[3];
                   if (src.is_none()) fail("ltorch.scatter", "expected src or value");
                   if (!a[5].is_none()) throw NotNative("scatter with reduce (deprecated)");
                   if (b.is_tensor(src) && b.meta(src).dtype != b.meta(a[0]).dtype)
                     fail("ltorch.scatter", "src must have the input's dtype");
                   return b.prim("scatter", {a[0], a[1], a[2], src});
                 });
  def_decomposed("scatter_add", 0, {kInput, req("dim"), req("index"), req("src")}, [](Builder& b, const Args& a) {
    check_index(b, "ltorch.scatter_add", a[2]);
    return b.prim("scatter_add", {a[0], a[1], a[2], a[3]});
  });
  def_decomposed("scatter_reduce", 0, {kInput, req("dim"), req("index"), req("src"), req("reduce"),
                                       opt("include_self", Value(true))},
                 [](Builder& b, const Args& a) {
                   check_index(b, "ltorch.scatter_reduce", a[2]);
                   const std::string& r = a[4].as_str();
                   if (r != "sum" && r != "prod" && r != "mean" && r != "amax" && r != "amin")
                     fail("ltorch.scatter_reduce", "reduce must be one of sum, prod, mean, amax, amin");
                   if (b.meta(a[3]).dtype != b.meta(a[0]).dtype) fail("ltorch.scatter_reduce", "src must have the input's dtype");
                   return b.prim("scatter_reduce", {a[0], a[1], a[2], a[3], a[4], a[5]});
                 });
  def_decomposed("index_add", 0, {kInput, req("dim"), req("index"), req("source"), opt("alpha", Int(1))},
                 [](Builder& b, const Args& a) {
                   check_index(b, "ltorch.index_add", a[2]);
                   if (b.meta(a[3]).dtype != b.meta(a[0]).dtype) fail("ltorch.index_add", "source must have the input's dtype");
                   return b.prim("index_add", {a[0], a[1], a[2], a[3], a[4]});
                 });
  def_decomposed("index_copy", 0, {kInput, req("dim"), req("index"), req("source")}, [](Builder& b, const Args& a) {
    check_index(b, "ltorch.index_copy", a[2]);
    if (b.meta(a[2]).dtype != DType::Int64) fail("ltorch.index_copy", "expected an int64 index");
    if (b.meta(a[3]).dtype != b.meta(a[0]).dtype) fail("ltorch.index_copy", "source must have the input's dtype");
    return b.prim("index_copy", {a[0], a[1], a[2], a[3]});
  });
  def_decomposed("index_fill", 0, {kInput, req("dim"), req("index"), req("value")}, [](Builder& b, const Args& a) {
    check_index(b, "ltorch.index_fill", a[2]);
    if (b.meta(a[2]).dtype != DType::Int64) fail("ltorch.index_fill", "expected an int64 index");
    if (b.is_tensor(a[3]) && b.meta(a[3]).ndim() != 0) fail("ltorch.index_fill", "value must be 0-d");
    require_convertible(b, "ltorch.index_fill", "value", a[3], b.meta(a[0]).dtype);
    return b.prim("index_fill", {a[0], a[1], a[2], a[3]});
  });
  def_decomposed("index_put", 0, {kInput, req("indices"), req("values"), opt("accumulate", Value(false))},
                 [](Builder& b, const Args& a) {
                   for (const Value& i : a[1].items()) {
                     if (i.is_none()) continue;
                     if (!b.is_tensor(i)) fail("ltorch.index_put", "indices must be tensors");
                     if (!is_index_dtype(b.meta(i).dtype)) throw NotNative("index_put with bool or byte indices");
                   }
                   if (b.meta(a[2]).dtype != b.meta(a[0]).dtype) fail("ltorch.index_put", "values must have the input's dtype");
                   return b.prim("index_put", {a[0], a[1], a[2], a[3]});
                 });
  def_decomposed("one_hot", 0, {req("tensor"), opt("num_classes", Int(-1))}, [](Builder& b, const Args& a) {
    const TensorMeta m = tensor(b, "ltorch.one_hot", a[0], "tensor");
    if (m.dtype != DType::Int64) fail("ltorch.one_hot", "one_hot is only applicable to index tensor");
    int64_t n = a[1].as_int();
    if (n < 0) throw NotNative("one_hot with num_classes=-1 (depends on the data)");
    Value classes = b.prim("iota", {Int(n), Int(0), Int(1), Value(DType::Int64), Value(ir::Str{m.device})});
    // classes[tensor] is tensor where every class is in [0, n), and raises where one is not, as eager's one_hot
    // does ("Class values must be smaller than num_classes"; "... non-negative"): an index that checks its range.
    // prims.take takes 0-d and 1-d indices: others are taken flattened.
    Value index = a[0];
    if (m.ndim() > 1) index = b.torch("reshape", {index, Value::ints({-1})});
    Value checked = b.prim("take", {classes, index, Int(0)});
    if (m.ndim() > 1) checked = b.torch("reshape", {checked, Value::dims(m.shape)});
    Value eq = T(b, "eq", {b.torch("unsqueeze", {checked, Int(-1)}), classes});
    return cast(b, eq, DType::Int64);
  });
}

void register_creation() {
  const std::vector<ir::Param> tail{opt("dtype", Value()), opt("device", Value())};
  auto with_tail = [&](std::vector<ir::Param> ps) {
    ps.insert(ps.end(), tail.begin(), tail.end());
    return ps;
  };
  def_decomposed("empty", kCreation, with_tail({req("size")}), [](Builder& b, const Args& a) {
    DType d = dtype_or(a[1], DType::Float32);
    return b.prim("full", {Value::dims(a[0].as_dims()), fill_of(d, 0), Value(d), device_or(a[2], "cpu")});
  });
  def_decomposed("empty_like", kCreation, with_tail({kInput}), [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    DType d = dtype_or(a[1], m.dtype);
    return b.prim("full", {Value::dims(m.shape), fill_of(d, 0), Value(d), device_or(a[2], m.device)});
  });
  for (auto [name, fill] : {std::pair{"new_zeros", 0.0}, std::pair{"new_ones", 1.0}, std::pair{"new_empty", 0.0}}) {
    double v = fill;
    def_decomposed(name, kCreation, with_tail({kInput, req("size")}), [v](Builder& b, const Args& a) {
      const TensorMeta& m = b.meta(a[0]);
      DType d = dtype_or(a[2], m.dtype);
      return b.prim("full", {Value::dims(a[1].as_dims()), fill_of(d, v), Value(d), device_or(a[3], m.device)});
    });
  }
  def_decomposed("new_full", kCreation, with_tail({kInput, req("size"), req("fill_value")}), [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    DType d = dtype_or(a[3], m.dtype);
    require_convertible(b, "ltorch.new_full", "fill_value", a[2], d);
    return b.prim("full", {Value::dims(a[1].as_dims()), a[2], Value(d), device_or(a[4], m.device)});
  });
  def_decomposed("scalar_tensor", kCreation, with_tail({req("s")}), [](Builder& b, const Args& a) {
    DType d = dtype_or(a[1], DType::Float32);
    require_convertible(b, "ltorch.scalar_tensor", "s", a[0], d);
    return b.prim("full", {Value::tuple({}), a[0], Value(d), device_or(a[2], "cpu")});
  });
  def_decomposed("eye", kCreation, with_tail({req("n"), opt("m", Value())}), [](Builder& b, const Args& a) {
    int64_t n = a[0].as_int(), m = a[1].is_none() ? n : a[1].as_int();
    if (n < 0 || m < 0) fail("ltorch.eye", "n and m must be non-negative");
    DType d = dtype_or(a[2], DType::Float32);
    std::string device = a[3].is_none() ? "cpu" : a[3].as_str();
    Value eq = T(b, "eq", {iota_along(b, n, 0, 2, device), iota_along(b, m, 1, 2, device)});
    return cast(b, eq, d);
  });
  // linspace/logspace: one torch-level symbol with a shape rule (torch's stepping is kept exactly).
  def_meta("linspace", kCreation, with_tail({req("start"), req("end"), req("steps")}), [](Builder& b, const Args& a) {
    if (!a[0].is_number() || !a[1].is_number()) throw NotNative("linspace with tensor bounds");
    int64_t n = a[2].as_int();
    if (n < 0) fail("ltorch.linspace", "number of steps must be non-negative");
    TensorMeta m{dtype_or(a[3], DType::Float32), {n}, a[4].is_none() ? "cpu" : a[4].as_str(), false};
    return out_tensor(b, m);
  });
  def_meta("logspace", kCreation, {req("start"), req("end"), req("steps"), opt("base", Value(10.0)), opt("dtype", Value()),
                                   opt("device", Value())},
           [](Builder& b, const Args& a) {
             if (!a[0].is_number() || !a[1].is_number()) throw NotNative("logspace with tensor bounds");
             int64_t n = a[2].as_int();
             if (n < 0) fail("ltorch.logspace", "number of steps must be non-negative");
             TensorMeta m{dtype_or(a[4], DType::Float32), {n}, a[5].is_none() ? "cpu" : a[5].as_str(), false};
             return out_tensor(b, m);
           });
}

}  // namespace

void register_torch_layout() {
  register_layout_prims();
  register_shapes();
  register_indexing();
  register_creation();
}

}  // namespace thunder::ops
