// LSTMCell's attributes as both backends read them (planner/ops/lstm.py): `order` names where
// each gate's block of H columns starts in a row of the 4H pre-activations.
#pragma once
#include <cstdint>
#include <stdexcept>
#include <string>

#include "runtime.h"

namespace planner {

// The column where each gate's block starts in a row of 4H: i, f, g, o.
struct LstmGates {
  int64_t i, f, g, o;
};

inline LstmGates lstm_gates(const Attrs& attrs, int64_t hidden) {
  const std::string order = attrs.s("order");
  auto at = [&](char gate) {
    const auto k = order.find(gate);
    if (order.size() != 4 || k == std::string::npos)
      throw std::runtime_error("LSTMCell: order must name the gates i, f, g, o once each");
    return static_cast<int64_t>(k) * hidden;
  };
  return {at('i'), at('f'), at('g'), at('o')};
}

}  // namespace planner
