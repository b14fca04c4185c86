// What every backend's runtime shares: shapes, dtype sizes, the attribute parser.
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <sstream>

#include "runtime.h"

namespace planner {

int64_t numel(const Shape& s) {
  return std::accumulate(s.begin(), s.end(), int64_t{1}, std::multiplies<int64_t>());
}

int dtype_bytes(int dtype) {
  switch (dtype) {
    case F32: case I32: return 4;
    case F64: case I64: return 8;
    case F16: case BF16: case I16: return 2;
    case BOOL: case I8: case U8: return 1;
  }
  throw std::runtime_error("unknown dtype code " + std::to_string(dtype));
}

std::string shape_text(const Shape& s) {
  std::ostringstream o;
  o << "[";
  for (size_t k = 0; k < s.size(); ++k) o << (k ? ", " : "") << s[k];
  o << "]";
  return o.str();
}

// ---- Attrs ----------------------------------------------------------------------------------

Attrs::Attrs(const char* text) {
  std::string all(text ? text : "");
  size_t pos = 0;
  while (pos < all.size()) {
    size_t end = all.find(';', pos);
    if (end == std::string::npos) end = all.size();
    std::string item = all.substr(pos, end - pos);
    size_t eq = item.find('=');
    if (eq == std::string::npos) throw std::runtime_error("malformed attribute '" + item + "'");
    values_[item.substr(0, eq)] = item.substr(eq + 1);
    pos = end + 1;
  }
}

const std::string& Attrs::raw(const std::string& key) const {
  auto it = values_.find(key);
  if (it == values_.end()) throw std::runtime_error("missing attribute '" + key + "'");
  return it->second;
}

int64_t Attrs::i(const std::string& key) const {
  const std::string& v = raw(key);
  char* end = nullptr;
  long long x = std::strtoll(v.c_str(), &end, 10);
  if (v.empty() || *end) throw std::runtime_error("attribute '" + key + "' is not an int: " + v);
  return x;
}

uint64_t Attrs::u(const std::string& key) const {
  const std::string& v = raw(key);
  char* end = nullptr;
  unsigned long long x = std::strtoull(v.c_str(), &end, 10);
  if (v.empty() || *end) throw std::runtime_error("attribute '" + key + "' is not a uint: " + v);
  return x;
}

double Attrs::f(const std::string& key) const {
  const std::string& v = raw(key);
  char* end = nullptr;
  double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end) throw std::runtime_error("attribute '" + key + "' is not a float: " + v);
  return x;
}

std::string Attrs::s(const std::string& key) const { return raw(key); }

std::vector<int64_t> Attrs::ints(const std::string& key) const {
  const std::string& v = raw(key);
  std::vector<int64_t> out;
  size_t pos = 0;
  while (pos < v.size()) {
    size_t end = v.find(',', pos);
    if (end == std::string::npos) end = v.size();
    std::string item = v.substr(pos, end - pos);
    char* stop = nullptr;
    out.push_back(std::strtoll(item.c_str(), &stop, 10));
    if (item.empty() || *stop)
      throw std::runtime_error("attribute '" + key + "' is not a list of ints: " + v);
    pos = end + 1;
  }
  return out;
}

std::vector<int> permutation(const Attrs& attrs, const std::string& key, size_t rank) {
  std::vector<int> perm(rank);
  for (size_t k = 0; k < rank; ++k) perm[k] = static_cast<int>(k);
  if (!attrs.has(key)) return perm;
  const std::vector<int64_t> given = attrs.ints(key);
  std::vector<bool> seen(rank, false);
  if (given.size() != rank)
    throw std::runtime_error("attribute '" + key + "' has " + std::to_string(given.size()) +
                             " entries for a rank-" + std::to_string(rank) + " tensor");
  for (size_t k = 0; k < rank; ++k) {
    if (given[k] < 0 || given[k] >= static_cast<int64_t>(rank) || seen[given[k]])
      throw std::runtime_error("attribute '" + key + "' is not a permutation of 0.." +
                               std::to_string(rank - 1));
    seen[given[k]] = true;
    perm[k] = static_cast<int>(given[k]);
  }
  return perm;
}

}  // namespace planner
