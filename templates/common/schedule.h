// The schedule of one plan as plain data: what the per-plan source (schedule.cpp) defines and
// every backend's runtime reads at load. No oneDNN, no CUDA, no Python: the per-plan source
// compiles in well under a second. Offsets are bytes from the arena's start; shapes are
// row-major (NCHW for images).
//
// Names (tensor, op, plan) are data: byte arrays the renderer escapes, never source text (the
// rule in templates/README.md).
#pragma once
#include <cstdint>

namespace planner {

enum DType : int { F32 = 0, F64 = 1, F16 = 2, I64 = 3, I32 = 4, BOOL = 5, BF16 = 6, I16 = 7, I8 = 8,
                   U8 = 9 };
enum Role : int { INPUT = 0, LABEL = 1, PARAM = 2, STATE = 3, OPT_STATE = 4, ACTIVATION = 5,
                  GRAD = 6 };
enum Backend : int { CPU = 0, CUDA = 1 };
// TRAINING_ARENA: an evaluation schedule's parameter or state tensor, whose offset is into
// the training schedule's arena (its bytes are the training plan's, never copied).
enum Store : int { ARENA = 0, HOST_STORE = 1, TRAINING_ARENA = 2 };

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
  int alias_of;          // index of the tensor whose bytes this one shares (updates, views), or -1
  // Where its bytes are: the arena (ARENA) or the host store (HOST_STORE: a separate block
  // of Schedule::host_bytes, where offloaded copies wait for their prefetch). Tensors past
  // the graph's are copies memory planning added: a recomputed or prefetched value, or an
  // offloaded one in the host store, with the shape and dtype of the graph tensor it holds.
  int store;
  // Channels per block of an image kept channel-blocked (planner/step/blocked.py), 0: plain.
  int block;
};

struct OpSpec {
  const char* name;
  const char* op;        // op type, as in the graph (Conv2D, MatMul, ...)
  int threads;           // CPU: OpenMP team size the plan chose (GPU: 1)
  int first_input;       // index into Schedule::args
  int num_inputs;
  int first_output;      // index into Schedule::args
  int num_outputs;
  const char* attrs;     // "key=v1,v2;key2=v" with every attr spelled out (see runtime.cpp)
  // Where it runs: the plan's lane (CPU: one host thread per lane; GPU: one stream per lane).
  // A lane runs its ops in plan order; with the waits below, that is every ordering the
  // executor enforces (planner/plan.py). CPU: its logical CPUs,
  // Schedule::cpus[first_cpu, first_cpu + num_cpus).
  int lane;
  int first_cpu;
  int num_cpus;
  bool smt;              // on hyper-thread siblings of cores another running op uses
  int group;             // parallel-loop group (ops run as one loop), or -1
  // Ops that must end before it starts, the plan's happens-before edges into it (indices
  // into ops, all earlier in plan order): Schedule::waits[first_wait, first_wait + num_waits).
  int first_wait;
  int num_waits;
  // Its own scratch bytes in the arena (library scratchpads, reorder temporaries, a
  // convolution's workspace): a plan tensor with this op's lifetime, or -1 / 0 for none.
  int64_t scratch_offset;
  int64_t scratch_bytes;
  // Gradient accumulation (planner/ir/accumulation.py): it belongs to the optimizer step,
  // which runs on the last of Schedule::micro_batches micro-batches only.
  bool optimizer_step_only;
};

struct Schedule {
  const char* name;
  const char* kind;      // "training" | "inference"
  int backend;           // Backend the plan was made for
  int num_tensors;
  const TensorSpec* tensors;
  int num_ops;
  const OpSpec* ops;     // in plan order (a topological order of every wait)
  const int* args;       // tensor indices of every op's inputs and outputs
  int num_outputs;
  const int* outputs;    // the graph's outputs
  int num_lanes;         // CPU lanes, or GPU streams
  const int* cpus;       // logical CPU ids, per op (see OpSpec)
  const int* waits;      // op indices, per op (see OpSpec)
  int64_t arena_bytes;   // every tensor and every planned scratch area
  int64_t host_bytes;    // the host store (offloaded copies), 0 when the plan offloads nothing
  const char* plan_json; // the plan this schedule was rendered from
  int64_t plan_json_bytes;
  // The GPU the plan was made for (major * 10 + minor, and its memory in bytes; 0 for a CPU
  // plan): the CUDA executor refuses a device of another architecture or with less memory.
  int compute_capability;
  int64_t device_memory_bytes;
  // The graph's math mode (Graph.math): 1 when float32 convolutions and GEMMs may round their
  // operands to TF32 on a GPU that has it (the tf32 precision policy), 0 for float32 math.
  // The CPU executor ignores it (no CPU has TF32).
  int tf32;
  // The schedule for fewer free cores (planner/memory/variants.py): variant v runs every op
  // on one unpinned lane in plan order, op k on variant_threads[v * num_ops + k] threads. It
  // serves a process granted at least variant_cores[v] cores; variant_seconds[v] is its
  // predicted step, step_seconds the main schedule's.
  int num_variants;
  const char* const* variant_names;
  const int* variant_cores;
  const int* variant_threads;
  const double* variant_seconds;
  double step_seconds;
  // Gradient accumulation: micro-batches per optimizer step (1: none) and the int64 tensor
  // counting the micro-batches taken (-1: none). A step whose count, read before it runs, is
  // not one short of a multiple of micro_batches skips the optimizer_step_only ops.
  int micro_batches;
  int micro_step;
  // 1: the CPU executor may hold MatMul weights packed once per step beside the arena
  // (cpu/runtime/weight_packs.h); 0 for a plan under a memory budget, which holds its arena,
  // its host store and nothing else.
  int pack_weights;
};

}  // namespace planner

// The one symbol a schedule library exports; a training plan's also exports its evaluation
// schedule (Plan.evaluation) as planner_evaluation_schedule.
extern "C" const planner::Schedule* planner_schedule();
