// The schedule of one plan as plain data: what the per-plan source (schedule.cpp) defines and
// the runtime reads at load. No oneDNN, no Python: the per-plan source compiles in well under a
// second. Offsets are bytes from the arena's start; shapes are row-major (NCHW for images).
#pragma once
#include <cstdint>

namespace planner {

enum DType : int { F32 = 0, F64 = 1, F16 = 2, I64 = 3, I32 = 4, BOOL = 5 };
enum Role : int { INPUT = 0, LABEL = 1, PARAM = 2, STATE = 3, OPT_STATE = 4, ACTIVATION = 5,
                  GRAD = 6 };

constexpr int kMaxRank = 8;

struct TensorSpec {
  const char* name;
  int64_t offset;        // byte offset in the arena
  int64_t nbytes;
  int rank;
  int64_t shape[kMaxRank];
  int dtype;             // DType
  int role;              // Role
  int updates;           // index of the persistent tensor this one overwrites, or -1
  int alias_of;          // index of the tensor whose bytes this one shares (updates, reshapes), or -1
};

struct OpSpec {
  const char* name;
  const char* op;        // op type, as in the graph (Conv2D, MatMul, ...)
  int threads;           // OpenMP team size the plan chose
  int first_input;       // index into Schedule::args
  int num_inputs;
  int first_output;      // index into Schedule::args
  int num_outputs;
  const char* attrs;     // "key=v1,v2;key2=v" with every attr spelled out (see attrs.cpp)
};

struct Schedule {
  const char* name;
  const char* kind;      // "training" | "inference"
  int num_tensors;
  const TensorSpec* tensors;
  int num_ops;
  const OpSpec* ops;     // in plan order
  const int* args;       // tensor indices of every op's inputs and outputs
  int num_outputs;
  const int* outputs;    // the graph's outputs
  int64_t arena_bytes;   // tensor bytes; scratchpads are added at load
  const char* plan_json; // the plan this schedule was rendered from
};

}  // namespace planner

// The one symbol a schedule library exports.
extern "C" const planner::Schedule* planner_schedule();
