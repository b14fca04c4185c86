// PLANNER_HOST_DEVICE marks a function of a shared header that CUDA kernels call too: one
// definition runs on both backends, so a CPU and a GPU run of a plan compute alike.
#pragma once

#ifdef __CUDACC__
#define PLANNER_HOST_DEVICE __host__ __device__
#else
#define PLANNER_HOST_DEVICE
#endif
