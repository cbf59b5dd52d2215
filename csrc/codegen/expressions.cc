// Builds literals with `"(" + std::string`, for which GCC 12's libstdc++ reports false -Wrestrict warnings at
// -O2 and above (GCC bug 105329); they would fail -Werror builds.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "codegen/expressions.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <sstream>
#include <stdexcept>

namespace thunder::codegen {

std::string combine_text(const std::string& combine, const std::string& acc, const std::string& x) {
  std::string out;
  for (size_t i = 0; i < combine.size(); ++i) {
    auto word_at = [&](const std::string& w) {
      return combine.compare(i, w.size(), w) == 0 &&
             (i + w.size() == combine.size() || !std::isalnum(static_cast<unsigned char>(combine[i + w.size()]))) &&
             (i == 0 || !std::isalnum(static_cast<unsigned char>(combine[i - 1])));
    };
    if (word_at("acc")) {
      out += acc;
      i += 2;
    } else if (word_at("x")) {
      out += x;
    } else {
      out += combine[i];
    }
  }
  return out;
}

std::string indent(const std::string& text, const std::string& by) {
  std::string out, line;
  std::istringstream is(text);
  while (std::getline(is, line)) out += (line.empty() ? "" : by) + line + "\n";
  return out;
}

std::string literal(const ir::Value& v, const std::string& type) {
  if (std::holds_alternative<bool>(v.v)) return "(" + type + ")" + (v.as_bool() ? "true" : "false");
  if (std::holds_alternative<int64_t>(v.v)) return "(" + type + ")" + std::to_string(v.as_int()) + "LL";
  const double d = v.as_double();
  if (std::isnan(d)) return "(" + type + ")NAN";
  if (std::isinf(d)) return d > 0 ? "(" + type + ")INFINITY" : "(" + type + ")(-INFINITY)";
  if (d == 0 && std::signbit(d)) return "(" + type + ")(-0.0)";  // "%g" writes -0, an int: the sign would be lost
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return "(" + type + ")" + buf;
}

std::string number_text(const KernelPlan& p, const ir::Value& v, const std::string& type) {
  auto argument = [&](ProxyId id) {
    const auto it = std::find(p.scalars.begin(), p.scalars.end(), id);
    if (it == p.scalars.end()) throw std::logic_error("a number that is not an argument of the kernel");
    return scalar_name(static_cast<size_t>(it - p.scalars.begin()));
  };
  if (v.is_symbolic()) return "(" + type + ")(" + v.as_dim().str(argument) + ")";  // a polynomial in sizes
  if (!v.is_proxy()) return literal(v, type);
  return "(" + type + ")" + argument(v.proxy());
}

std::string scalar_type(const ir::Trace& t, const KernelPlan& p, size_t k) {
  return t.proxy(p.scalars.at(k)).number == ir::NumberType::Float ? "double" : "int64_t";
}

SizeTexts::SizeTexts(const ir::Trace& t, const KernelPlan& p) : t_(t), p_(p) {
  for (size_t i = 0; i < p.inputs.size(); ++i) input_index_[p.inputs[i]] = i;
}

std::string SizeTexts::extent(int d) const {
  return p_.generic_dim(d) ? "n" + std::to_string(d) : std::to_string(p_.domain[d]) + "LL";
}

std::string SizeTexts::extent_product(const std::vector<int>& dims) const {
  int64_t n = 1;
  std::vector<int> generic;
  for (int d : dims)
    if (p_.generic_dim(d)) generic.push_back(d);
    else n *= p_.domain[d];
  return product(n, generic);
}

std::string SizeTexts::stride(ProxyId v, size_t i) const {
  const std::vector<int64_t>& known = t_.proxy(v).strides;  // a non-contiguous trace input, read in place
  if (!known.empty() && (!p_.shape_generic() || known[i] == 0 || known[i] == 1))
    return known[i] == 1 ? std::string() : std::to_string(known[i]) + "LL";
  if (!known.empty()) return "s" + std::to_string(input_index_.at(v)) + "_" + std::to_string(i);
  const std::vector<int64_t> shape = shape_of(t_, v);
  int64_t n = 1;
  std::vector<int> dims;
  for (size_t j = i + 1; j < shape.size(); ++j) {
    const int d = p_.align.at(v)[j];
    if (shape[j] != 1 && d >= 0 && p_.generic_dim(d)) dims.push_back(d);
    else n *= shape[j];
  }
  return product(n, dims);
}

std::string SizeTexts::product(int64_t n, const std::vector<int>& dims) const {
  std::vector<std::string> factors;
  if (n != 1) factors.push_back(std::to_string(n) + "LL");
  for (int d : dims) factors.push_back(extent(d));
  std::string out;
  for (const std::string& f : factors) out += (out.empty() ? "" : " * ") + f;
  return factors.size() > 1 ? "(" + out + ")" : out;
}

std::string text_apart_from_name(const std::string& text, const std::string& name) {
  std::string key = text;
  const size_t at = key.find(" " + name + "(");
  if (at != std::string::npos) key.erase(at + 1, name.size());
  return key;
}

}  // namespace thunder::codegen
