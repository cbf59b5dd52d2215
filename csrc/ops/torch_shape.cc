// Torch-level view, reshape, join/split, indexing and creation ops.
#include <cmath>
#include <optional>

#include "ops/torch_common.h"

namespace thunder::ops {
namespace {

using ir::kCreation;
using ir::kShape;
const ir::Param kInput = req("input");

// Resolves one -1 in a requested shape against the element count.
// Resolves one -1 in a requested shape against the element count (symbolic sizes: where the division is exact).
Shape infer_shape(std::string_view op, Shape shape, const Dim& numel) {
  Dim known = 1;
  int64_t infer_at = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      if (infer_at >= 0) fail(op, "only one dimension can be inferred");
      infer_at = static_cast<int64_t>(i);
    } else if (shape[i] < 0) {
      fail(op, "invalid shape dimension " + shape[i].str());
    } else {
      known *= shape[i];
    }
  }
  auto invalid = [&] {
    std::string what = "shape " + shape_string(shape) + " is invalid for input of size " + numel.str();
    if (!known.is_constant() || !numel.is_constant()) throw ir::SymbolicShapeError(std::string(op) + ": " + what);
    fail(op, what);
  };
  if (infer_at >= 0) {
    if (known == 0 || (known.is_constant() && numel.is_constant() && *numel.constant() % *known.constant() != 0))
      invalid();
    shape[infer_at] = numel.divide(known, op);
  } else if (known != numel) {
    invalid();
  }
  return shape;
}

Value reshape(Builder& b, const Value& x, Shape shape, std::string_view op) {
  shape = infer_shape(op, std::move(shape), b.meta(x).numel());
  if (shape == b.meta(x).shape) return x;
  return b.prim("reshape", {x, Value::dims(shape)});
}

Value permute(Builder& b, const Value& x, std::vector<int64_t> dims) {
  int64_t n = b.meta(x).ndim();
  bool identity = true;
  for (size_t i = 0; i < dims.size(); ++i) {
    dims[i] = canonical_dim("ltorch.permute", dims[i], n);
    identity &= dims[i] == static_cast<int64_t>(i);
  }
  if (static_cast<int64_t>(dims.size()) != n) fail("ltorch.permute", "expected " + std::to_string(n) + " dims, got " + std::to_string(dims.size()));
  return identity ? x : b.prim("transpose", {x, Value::ints(dims)});
}

Value unsqueeze(Builder& b, const Value& x, int64_t dim) {
  Shape shape = b.meta(x).shape;
  dim = canonical_dim("ltorch.unsqueeze", dim, static_cast<int64_t>(shape.size()) + 1);
  shape.insert(shape.begin() + dim, 1);
  return b.prim("reshape", {x, Value::dims(shape)});
}

// Python's slice.indices(length) for a positive step.
// Python's slice.indices(length) for a positive step (symbolic bounds and lengths: where the clamping is provable).
void clamp_slice(const Value& s, const Dim& length, Dim& start, Dim& stop, int64_t& step) {
  const auto& parts = s.items();
  step = parts[2].is_none() ? 1 : parts[2].as_int();
  if (step <= 0) fail("ltorch.getitem", "slice step must be positive, got " + std::to_string(step));
  auto norm = [&length](const Value& v, const Dim& dflt) {
    if (v.is_none()) return dflt;
    Dim i = v.as_dim();
    if (i < 0) i += length;
    if (i < 0) return Dim(0);
    return i > length ? length : i;
  };
  start = norm(parts[0], 0);
  Dim end = norm(parts[1], length);
  stop = end < start ? start : end;
}

// x[idx], x[:, idx], x[..., idx]: one integer index tensor among whole-dim slices and an ellipsis reads along its
// dim (read_at_indices); the result has the index's shape in place of that dim. nullopt for any other key
// (several index tensors, a bool mask, a partial slice, a 0-d index).
std::optional<Value> select_by_index(Builder& b, const Value& x, const TensorMeta& m, const std::vector<Value>& key) {
  size_t at = key.size();
  for (size_t i = 0; i < key.size(); ++i)
    if (key[i].is_proxy() && b.is_tensor(key[i])) {
      if (at != key.size()) return std::nullopt;
      at = i;
    }
  if (at == key.size()) return std::nullopt;
  const TensorMeta index = b.meta(key[at]);
  // (A 0-d index reads as an int: eager's result is a view.)
  if (!is_index_dtype(index.dtype) || index.ndim() == 0) return std::nullopt;
  auto whole = [](const Value& k) {
    if (!k.is_seq() || std::get<ir::Seq>(k.v).kind != ir::Seq::Kind::Slice) return false;
    for (const Value& part : k.items())
      if (!part.is_none()) return false;
    return true;
  };
  int64_t before = 0, after = 0, ellipses = 0;
  bool ellipsis_first = false;
  for (size_t i = 0; i < key.size(); ++i) {
    if (i == at) continue;
    if (std::holds_alternative<ir::EllipsisT>(key[i].v)) {
      ++ellipses;
      ellipsis_first = i < at;
    } else if (whole(key[i])) {
      ++(i < at ? before : after);
    } else {
      return std::nullopt;
    }
  }
  if (ellipses > 1 || before + after + 1 > m.ndim()) return std::nullopt;
  return read_at_indices(b, x, ellipses && ellipsis_first ? m.ndim() - 1 - after : before, {key[at]});
}

// Basic indexing: ints, slices, None and Ellipsis; of tensor indices, one integer index tensor (select_by_index).
Value getitem(Builder& b, const Args& a) {
  const TensorMeta& m = b.meta(a[0]);
  std::vector<Value> key = a[1].is_seq() && std::get<ir::Seq>(a[1].v).kind == ir::Seq::Kind::Tuple
                               ? a[1].items() : std::vector<Value>{a[1]};
  if (auto selected = select_by_index(b, a[0], m, key)) return *selected;
  int64_t consuming = 0, ellipses = 0;
  for (const Value& k : key) {
    if (std::holds_alternative<int64_t>(k.v) || std::holds_alternative<bool>(k.v)) {
      if (std::holds_alternative<bool>(k.v)) throw NotNative("bool index");
      ++consuming;
    } else if (k.is_seq() && std::get<ir::Seq>(k.v).kind == ir::Seq::Kind::Slice) {
      for (const Value& part : k.items())
        if (!part.is_none() && !std::holds_alternative<int64_t>(part.v) && !part.is_symbolic())
          throw NotNative("slice with non-int bounds");
      ++consuming;
    } else if (std::holds_alternative<ir::EllipsisT>(k.v)) {
      ++ellipses;
    } else if (!k.is_none()) {
      throw NotNative("advanced indexing");
    }
  }
  if (ellipses > 1) fail("ltorch.getitem", "an index can only have a single ellipsis ('...')");
  if (consuming > m.ndim())
    fail("ltorch.getitem", "too many indices for tensor of dimension " + std::to_string(m.ndim()));
  Shape start, stop, out_shape;
  std::vector<int64_t> step;
  int64_t dim = 0;
  for (const Value& k : key) {
    if (k.is_none()) {
      out_shape.push_back(1);
    } else if (std::holds_alternative<ir::EllipsisT>(k.v)) {
      for (int64_t i = 0; i < m.ndim() - consuming; ++i, ++dim) {
        start.push_back(0), stop.push_back(m.shape[dim]), step.push_back(1);
        out_shape.push_back(m.shape[dim]);
      }
    } else if (std::holds_alternative<int64_t>(k.v)) {
      Dim i = k.as_int(), n = m.shape[dim];
      if (i < Dim(0) - n || i >= n)
        fail("ltorch.getitem", "index " + i.str() + " is out of bounds for dimension " + std::to_string(dim) +
                                   " with size " + n.str());
      if (i < 0) i += n;
      start.push_back(i), stop.push_back(i + 1), step.push_back(1);
      ++dim;
    } else {
      Dim s0, s1;
      int64_t st;
      clamp_slice(k, m.shape[dim], s0, s1, st);
      start.push_back(s0), stop.push_back(s1), step.push_back(st);
      out_shape.push_back((s1 - s0).ceil_divide(st, "ltorch.getitem"));
      ++dim;
    }
  }
  for (; dim < m.ndim(); ++dim) {
    start.push_back(0), stop.push_back(m.shape[dim]), step.push_back(1);
    out_shape.push_back(m.shape[dim]);
  }
  Value x = a[0];
  bool whole = true;
  for (size_t i = 0; i < start.size(); ++i) whole &= start[i] == 0 && stop[i] == m.shape[i] && step[i] == 1;
  if (!whole) {
    bool unit = true;
    for (int64_t s : step) unit &= s == 1;
    x = b.prim("slice", {x, Value::dims(start), Value::dims(stop), unit ? Value() : Value::ints(step)});
  }
  return out_shape == b.meta(x).shape ? x : b.prim("reshape", {x, Value::dims(out_shape)});
}

// Splits `x` along `dim` into pieces of the given sizes.
Value split_sizes(Builder& b, const Value& x, const Shape& sizes, int64_t dim) {
  const TensorMeta& m = b.meta(x);
  std::vector<Value> out;
  Dim offset = 0;
  for (const Dim& s : sizes) {
    Shape start(m.shape.size(), 0), stop = m.shape;
    start[dim] = offset;
    stop[dim] = offset + s;
    out.push_back(b.prim("slice", {x, Value::dims(start), Value::dims(stop)}));
    offset += s;
  }
  return Value::tuple(std::move(out));
}

void register_views() {
  def_decomposed("reshape", kShape, {kInput, req("shape")},
                 [](Builder& b, const Args& a) { return reshape(b, a[0], a[1].as_dims(), "ltorch.reshape"); });
  def_decomposed("view", kShape, {kInput, req("shape")},
                 [](Builder& b, const Args& a) { return reshape(b, a[0], a[1].as_dims(), "ltorch.view"); });
  def_decomposed("permute", kShape, {kInput, req("dims")},
                 [](Builder& b, const Args& a) { return permute(b, a[0], a[1].as_ints()); });
  def_decomposed("transpose", kShape, {kInput, req("dim0"), req("dim1")}, [](Builder& b, const Args& a) {
    int64_t n = b.meta(a[0]).ndim();
    std::vector<int64_t> dims(n);
    for (int64_t i = 0; i < n; ++i) dims[i] = i;
    if (n == 0) return a[0];
    std::swap(dims[canonical_dim("ltorch.transpose", a[1].as_int(), n)], dims[canonical_dim("ltorch.transpose", a[2].as_int(), n)]);
    return permute(b, a[0], dims);
  });
  def_decomposed("t", kShape, {kInput}, [](Builder& b, const Args& a) {
    int64_t n = b.meta(a[0]).ndim();
    if (n > 2) fail("ltorch.t", "expects a tensor with <= 2 dimensions, but input has " + std::to_string(n));
    return n < 2 ? a[0] : permute(b, a[0], {1, 0});
  });
  def_decomposed("unsqueeze", kShape, {kInput, req("dim")},
                 [](Builder& b, const Args& a) { return unsqueeze(b, a[0], a[1].as_int()); });
  def_decomposed("squeeze", kShape, {kInput, opt("dim", Value())}, [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    std::vector<int64_t> dims;
    if (a[1].is_none()) {
      for (int64_t i = 0; i < m.ndim(); ++i)
        if (m.shape[i] == 1) dims.push_back(i);
    } else {
      for (int64_t d : a[1].as_ints()) {
        int64_t c = canonical_dim("ltorch.squeeze", d, m.ndim());
        if (m.ndim() > 0 && m.shape[c] == 1) dims.push_back(c);
      }
    }
    return dims.empty() ? a[0] : b.prim("squeeze", {a[0], Value::ints(dims)});
  });
  def_decomposed("flatten", kShape, {kInput, opt("start_dim", Int(0)), opt("end_dim", Int(-1))},
                 [](Builder& b, const Args& a) {
                   const TensorMeta& m = b.meta(a[0]);
                   if (m.ndim() == 0) return reshape(b, a[0], {1}, "ltorch.flatten");
                   int64_t s = canonical_dim("ltorch.flatten", a[1].as_int(), m.ndim());
                   int64_t e = canonical_dim("ltorch.flatten", a[2].as_int(), m.ndim());
                   if (s > e) fail("ltorch.flatten", "start_dim cannot come after end_dim");
                   Shape shape(m.shape.begin(), m.shape.begin() + s);
                   Dim n = 1;
                   for (int64_t i = s; i <= e; ++i) n *= m.shape[i];
                   shape.push_back(n);
                   shape.insert(shape.end(), m.shape.begin() + e + 1, m.shape.end());
                   return reshape(b, a[0], shape, "ltorch.flatten");
                 });
  def_decomposed("expand", kShape, {kInput, req("size")}, [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    Shape size = a[1].as_dims();
    if (size.size() < m.shape.size()) fail("ltorch.expand", "the number of sizes must be at least the tensor's rank");
    size_t lead = size.size() - m.shape.size();
    for (size_t i = 0; i < size.size(); ++i) {
      if (size[i] == -1) {
        if (i < lead) fail("ltorch.expand", "-1 is not allowed in a leading, non-existing dimension");
        size[i] = m.shape[i - lead];
      }
    }
    return expand_to(b, a[0], size);
  });
  def_decomposed("contiguous", kShape, {kInput}, [](Builder&, const Args& a) { return a[0]; });
  def_decomposed("getitem", kShape, {kInput, req("key")}, getitem);
}

void register_joins() {
  def_decomposed("cat", kShape, {req("tensors"), opt("dim", Int(0))}, [](Builder& b, const Args& a) {
    std::vector<Value> ts;
    for (const Value& t : a[0].items())
      if (b.meta(t).shape != Shape{0}) ts.push_back(t);  // torch skips legacy empty 1-D tensors
    if (ts.empty()) ts = a[0].items();
    if (ts.empty()) fail("ltorch.cat", "expected a non-empty list of tensors");
    DType d = result_type(b, ts);
    for (Value& t : ts) t = cast(b, t, d);
    return b.prim("cat", {Value::list(ts), Int(canonical_dim("ltorch.cat", a[1].as_int(), b.meta(ts[0]).ndim()))});
  });
  def_decomposed("stack", kShape, {req("tensors"), opt("dim", Int(0))}, [](Builder& b, const Args& a) {
    const auto& ts = a[0].items();
    if (ts.empty()) fail("ltorch.stack", "expected a non-empty list of tensors");
    int64_t dim = canonical_dim("ltorch.stack", a[1].as_int(), b.meta(ts[0]).ndim() + 1);
    std::vector<Value> parts;
    for (const Value& t : ts) {
      if (b.meta(t).shape != b.meta(ts[0]).shape) fail("ltorch.stack", "expects each tensor to be equal size");
      parts.push_back(unsqueeze(b, t, dim));
    }
    return b.torch("cat", {Value::list(parts), Int(dim)});
  });
  def_decomposed("split", kShape, {req("tensor"), req("split_size_or_sections"), opt("dim", Int(0))},
                 [](Builder& b, const Args& a) {
                   const TensorMeta& m = b.meta(a[0]);
                   int64_t dim = canonical_dim("ltorch.split", a[2].as_int(), m.ndim());
                   Dim n = m.shape[dim];
                   Shape sizes;
                   if (a[1].is_seq()) {
                     sizes = a[1].as_dims();
                     Dim total = 0;
                     for (const Dim& s : sizes) total += s;
                     if (total != n) {
                       if (!total.is_constant() || !n.is_constant())
                         throw ir::SymbolicShapeError("ltorch.split: split sizes " + shape_string(sizes) +
                                                      " not provably of sum " + n.str());
                       fail("ltorch.split", "split sizes must sum to " + n.str());
                     }
                   } else {
                     const int64_t n_value = n.value("ltorch.split");
                     const int64_t s = a[1].as_int();
                     if (s <= 0) fail("ltorch.split", "split_size must be positive");
                     for (int64_t off = 0; off < n_value; off += s) sizes.push_back(std::min(s, n_value - off));
                     if (n_value == 0) sizes.push_back(0);
                   }
                   return split_sizes(b, a[0], sizes, dim);
                 });
  def_decomposed("chunk", kShape, {kInput, req("chunks"), opt("dim", Int(0))}, [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    int64_t dim = canonical_dim("ltorch.chunk", a[2].as_int(), m.ndim());
    int64_t chunks = a[1].as_int();
    if (chunks <= 0) fail("ltorch.chunk", "chunks must be positive");
    int64_t n = m.shape[dim].value("ltorch.chunk"), size = (n + chunks - 1) / chunks;
    Shape sizes;
    for (int64_t off = 0; off < n; off += size) sizes.push_back(std::min(size, n - off));
    if (n == 0) sizes.assign(static_cast<size_t>(chunks), 0);  // torch: `chunks` empty pieces
    return split_sizes(b, a[0], sizes, dim);
  });
  def_decomposed("unbind", kShape, {kInput, opt("dim", Int(0))}, [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    int64_t dim = canonical_dim("ltorch.unbind", a[1].as_int(), m.ndim());
    std::vector<Value> out;
    // Named: a range-for over a temporary's items() would read it after its destruction.
    const Value pieces = split_sizes(b, a[0], Shape(m.shape[dim].value("ltorch.unbind"), 1), dim);
    for (const Value& piece : pieces.items())
      out.push_back(b.prim("squeeze", {piece, Value::ints({dim})}));
    return Value::tuple(std::move(out));
  });
}

DType dtype_or(const Value& v, DType dflt) { return v.is_none() ? dflt : v.as_dtype(); }
Value device_or(const Value& v, const std::string& dflt) { return v.is_none() ? Value(ir::Str{dflt}) : v; }

DType fill_dtype(const Value& fill) {
  if (std::holds_alternative<bool>(fill.v)) return DType::Bool;
  if (std::holds_alternative<int64_t>(fill.v)) return DType::Int64;
  return DType::Float32;
}

void register_creation() {
  const std::vector<ir::Param> tail{opt("dtype", Value()), opt("device", Value())};
  auto with_tail = [&](std::vector<ir::Param> ps) {
    ps.insert(ps.end(), tail.begin(), tail.end());
    return ps;
  };
  def_decomposed("full", kCreation, with_tail({req("size"), req("fill_value")}), [](Builder& b, const Args& a) {
    const DType d = dtype_or(a[2], fill_dtype(a[1]));
    require_convertible(b, "ltorch.full", "fill_value", a[1], d);
    return b.prim("full", {Value::dims(a[0].as_dims()), a[1], Value(d), device_or(a[3], "cpu")});
  });
  for (auto [name, fill] : {std::pair{"zeros", 0.0}, std::pair{"ones", 1.0}}) {
    double value = fill;
    def_decomposed(name, kCreation, with_tail({req("size")}), [value](Builder& b, const Args& a) {
      DType d = dtype_or(a[1], DType::Float32);
      Value v = ir::is_floating(d) || ir::is_complex(d) ? Value(value) : d == DType::Bool ? Value(value != 0) : Value(int64_t(value));
      // (A size given as one number, `torch.zeros(x.shape[0])`, is a shape of one dimension.)
      return b.prim("full", {Value::dims(a[0].as_dims()), v, Value(d), device_or(a[2], "cpu")});
    });
    def_decomposed(std::string(name) + "_like", kCreation, with_tail({kInput}), [value](Builder& b, const Args& a) {
      const TensorMeta& m = b.meta(a[0]);
      DType d = dtype_or(a[1], m.dtype);
      Value v = ir::is_floating(d) || ir::is_complex(d) ? Value(value) : d == DType::Bool ? Value(value != 0) : Value(int64_t(value));
      return b.prim("full", {Value::dims(m.shape), v, Value(d), device_or(a[2], m.device)});
    });
  }
  def_decomposed("full_like", kCreation, with_tail({kInput, req("fill_value")}), [](Builder& b, const Args& a) {
    const TensorMeta& m = b.meta(a[0]);
    const DType d = dtype_or(a[2], m.dtype);
    require_convertible(b, "ltorch.full_like", "fill_value", a[1], d);
    return b.prim("full", {Value::dims(m.shape), a[1], Value(d), device_or(a[3], m.device)});
  });
  def_decomposed("arange", kCreation, with_tail({req("start"), opt("end", Value()), opt("step", Int(1))}),
                 [](Builder& b, const Args& a) {
                   Value start = a[1].is_none() ? Int(0) : a[0], end = a[1].is_none() ? a[0] : a[1], step = a[2];
                   // A symbolic length (torch.arange(x.size(1))): integer starts and unit steps only.
                   if (end.is_symbolic() && std::holds_alternative<int64_t>(start.v) && step == Int(1) &&
                       (a[3].is_none() || a[3].as_dtype() == DType::Int64))
                     return b.prim("iota", {Value(end.as_dim() - start.as_dim()), start, step, Value(DType::Int64),
                                            device_or(a[4], "cpu")});

                   for (const Value& v : {start, end, step})
                     if (!v.is_number()) throw NotNative("arange with non-constant bounds");
                   bool any_float = std::holds_alternative<double>(start.v) || std::holds_alternative<double>(end.v) ||
                                    std::holds_alternative<double>(step.v);
                   DType d = dtype_or(a[3], any_float ? DType::Float32 : DType::Int64);
                   double s = start.as_double(), e = end.as_double(), st = step.as_double();
                   if (st == 0) fail("ltorch.arange", "step must be nonzero");
                   if ((st > 0 && e < s) || (st < 0 && e > s)) fail("ltorch.arange", "upper bound and larger bound inconsistent with step sign");
                   // ATen's arange: the length from the bounds as doubles, except for int64, whose bounds and
                   // step are truncated first; integer values step from the truncated start by the truncated step.
                   if (d == DType::Int64) s = std::trunc(s), e = std::trunc(e), st = std::trunc(st);
                   if (!ir::is_floating(d) && !ir::is_complex(d)) {
                     start = Int(static_cast<int64_t>(start.as_double()));
                     step = Int(static_cast<int64_t>(step.as_double()));
                     if (step == Int(0)) fail("ltorch.arange", "step must be nonzero");
                   }
                   int64_t n = static_cast<int64_t>(std::ceil((e - s) / st));
                   return b.prim("iota", {Int(n), start, step, Value(d), device_or(a[4], "cpu")});
                 });
}

}  // namespace

void register_torch_shape() {
  register_views();
  register_joins();
  register_creation();
}

}  // namespace thunder::ops
