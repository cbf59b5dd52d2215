// Builds literals with `"(" + std::string`, for which GCC 12's libstdc++ reports false -Wrestrict warnings at
// -O2 and above (GCC bug 105329); they would fail -Werror builds.
#if defined(__GNUC__) && !defined(__clang__) && __GNUC__ == 12
#pragma GCC diagnostic ignored "-Wrestrict"
#endif

#include "codegen/expressions.h"

#include <cmath>
#include <cstdio>

namespace thunder::codegen {

std::string literal(const ir::Value& v, const std::string& type) {
  if (std::holds_alternative<bool>(v.v)) return "(" + type + ")" + (v.as_bool() ? "true" : "false");
  if (std::holds_alternative<int64_t>(v.v)) return "(" + type + ")" + std::to_string(v.as_int()) + "LL";
  const double d = v.as_double();
  if (std::isnan(d)) return "(" + type + ")NAN";
  if (std::isinf(d)) return d > 0 ? "(" + type + ")INFINITY" : "(" + type + ")(-INFINITY)";
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", d);
  return "(" + type + ")" + buf;
}

}  // namespace thunder::codegen
