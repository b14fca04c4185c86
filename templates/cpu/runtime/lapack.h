// LAPACK in float32 (and BLAS's dgemm) from the scipy-openblas32 wheel, which codegen/build.py finds and links (a
// declared dependency of the planner, as oneDNN is). Its symbols carry the wheel's prefix
// (PLANNER_LAPACK_PREFIX, `scipy_`, so that they never bind to numpy's or torch's own copies)
// and Fortran's trailing underscore; each character argument has a hidden length at the end
// (gfortran's convention, which OpenBLAS's own C routines ignore). Integers are 32-bit: the
// wheel's LAPACK is LP64, ample for the small matrices these ops are meant for.
#pragma once
#include <cstddef>

#ifndef PLANNER_LAPACK_PREFIX
#error "PLANNER_LAPACK_PREFIX: the LAPACK wheel's symbol prefix (codegen/build.py defines it)"
#endif
#define PLANNER_LAPACK_JOIN2(a, b) a##b
#define PLANNER_LAPACK_JOIN(a, b) PLANNER_LAPACK_JOIN2(a, b)
#define PLANNER_LAPACK(name) PLANNER_LAPACK_JOIN(PLANNER_LAPACK_PREFIX, name##_)

extern "C" {
void PLANNER_LAPACK(sgetrf)(const int* m, const int* n, float* a, const int* lda, int* ipiv,
                            int* info);
void PLANNER_LAPACK(sgetrs)(const char* trans, const int* n, const int* nrhs, const float* a,
                            const int* lda, const int* ipiv, float* b, const int* ldb,
                            int* info, size_t trans_len);
void PLANNER_LAPACK(sgetri)(const int* n, float* a, const int* lda, const int* ipiv,
                            float* work, const int* lwork, int* info);
void PLANNER_LAPACK(spotrf)(const char* uplo, const int* n, float* a, const int* lda, int* info,
                            size_t uplo_len);
void PLANNER_LAPACK(ssyevd)(const char* jobz, const char* uplo, const int* n, float* a,
                            const int* lda, float* w, float* work, const int* lwork, int* iwork,
                            const int* liwork, int* info, size_t jobz_len, size_t uplo_len);
void PLANNER_LAPACK(sgesdd)(const char* jobz, const int* m, const int* n, float* a,
                            const int* lda, float* s, float* u, const int* ldu, float* vt,
                            const int* ldvt, float* work, const int* lwork, int* iwork, int* info,
                            size_t jobz_len);
void PLANNER_LAPACK(sgeqrf)(const int* m, const int* n, float* a, const int* lda, float* tau,
                            float* work, const int* lwork, int* info);
void PLANNER_LAPACK(sorgqr)(const int* m, const int* n, const int* k, float* a, const int* lda,
                            const float* tau, float* work, const int* lwork, int* info);
void PLANNER_LAPACK(ssytrf)(const char* uplo, const int* n, float* a, const int* lda, int* ipiv,
                            float* work, const int* lwork, int* info, size_t uplo_len);
void PLANNER_LAPACK(ssytrs)(const char* uplo, const int* n, const int* nrhs, const float* a,
                            const int* lda, const int* ipiv, float* b, const int* ldb,
                            int* info, size_t uplo_len);
// float64: BLAS's GEMM (the float64 MatMul, kernels/matmul_f64.cpp: oneDNN 3.2's CPU matmul
// has no f64; C = alpha op(A) op(B) + beta C, column-major) and the LU solve of MatrixExp's Padé
// approximant (computed wide, rounded once)
void PLANNER_LAPACK(dgemm)(const char* transa, const char* transb, const int* m, const int* n,
                           const int* k, const double* alpha, const double* a, const int* lda,
                           const double* b, const int* ldb, const double* beta, double* c,
                           const int* ldc, size_t transa_len, size_t transb_len);
void PLANNER_LAPACK(dgetrf)(const int* m, const int* n, double* a, const int* lda, int* ipiv,
                            int* info);
void PLANNER_LAPACK(dgetrs)(const char* trans, const int* n, const int* nrhs, const double* a,
                            const int* lda, const int* ipiv, double* b, const int* ldb,
                            int* info, size_t trans_len);
// float64 geev (MatrixEig, in float64 for both dtypes): the real Schur form's eigenvalues
// (wr, wi) and right eigenvectors (packed real: a complex pair's real and imaginary parts in two
// columns)
void PLANNER_LAPACK(dgeev)(const char* jobvl, const char* jobvr, const int* n, double* a,
                           const int* lda, double* wr, double* wi, double* vl, const int* ldvl,
                           double* vr, const int* ldvr, double* work, const int* lwork,
                           int* info, size_t jobvl_len, size_t jobvr_len);
// OpenBLAS's own: the threads one call may use (the kernels call LAPACK from each thread of
// an OpenMP loop over the batch, so one each).
void PLANNER_LAPACK_JOIN(PLANNER_LAPACK_PREFIX, openblas_set_num_threads)(int threads);
}
