// Special functions the pointwise table's rows call (planner/ops/special_table.py), one
// definition for both executors: the CPU runtime's generated functors
// (kernels/pointwise_table_<k>.cpp) and the TVM-generated CUDA kernels (tvm_pointwise.cuh) call the
// `planner_<name>f` functions at the end, which compute in double and round once to float.
// The numpy reference of each row is scipy.special's, not this file: tests hold the two equal
// (tests/ops/test_special_functions.py).
//
// The algorithms and coefficient tables of zeta, ndtri, erfinv, the Bessel, modified Bessel and
// Airy functions and the polynomial recurrences are PyTorch's (aten/src/ATen/native/Math.h),
// themselves from the Cephes Math Library and, for erfinv, Gary L. Pavlis's erfinv.c; with one
// change: Cephes evaluates the asymptotic denominators of J0, J1, Y0, Y1 and Ai with an implicit
// leading coefficient of 1 (p1evl), which torch's loops drop (its J0..Y1 are up to 9e-7 off past
// |x| = 5, its Ai 3e-6 below -2.09); here they keep it. erfcx, the incomplete gamma functions
// and polygamma are this file's own: exp(x^2) erfc(x) in double with Laplace's continued
// fraction beyond x = 25; the regularized incomplete gamma functions by their series, Lentz's
// continued fraction or DLMF 8.7.3, chosen as torch chooses; polygamma(n, x) =
// (-1)^(n+1) n! zeta(n + 1, x).
//
// Copyright (c) 2016- Facebook, Inc. and its affiliates (PyTorch); Copyright (c) 2018, Steven
// Moshier (Cephes); Copyright (c) 2014 Indiana University (erfinv.c, written by Gary L. Pavlis).
// All rights reserved. Redistribution and use in source and binary forms, with or without
// modification, are permitted provided that the following conditions are met:
// * Redistributions of source code must retain the above copyright notice, this list of
//   conditions and the following disclaimer.
// * Redistributions in binary form must reproduce the above copyright notice, this list of
//   conditions and the following disclaimer in the documentation and/or other materials
//   provided with the distribution.
// * Neither the names of the copyright holders nor the names of their contributors may be used
//   to endorse or promote products derived from this software without specific prior written
//   permission.
// THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND ANY EXPRESS OR
// IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED WARRANTIES OF MERCHANTABILITY
// AND FITNESS FOR A PARTICULAR PURPOSE ARE DISCLAIMED. IN NO EVENT SHALL THE COPYRIGHT HOLDERS OR
// CONTRIBUTORS BE LIABLE FOR ANY DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR
// CONSEQUENTIAL DAMAGES (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR
// SERVICES; LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND ON ANY
// THEORY OF LIABILITY, WHETHER IN CONTRACT, STRICT LIABILITY, OR TORT (INCLUDING NEGLIGENCE OR
// OTHERWISE) ARISING IN ANY WAY OUT OF THE USE OF THIS SOFTWARE, EVEN IF ADVISED OF THE
// POSSIBILITY OF SUCH DAMAGE.
#pragma once

#include <cmath>
#include <cstdint>

#include "host_device.h"

namespace planner {
namespace special {


// torch's degree limit of the Hermite polynomials in float32 (NaN above it)
constexpr int64_t kHermiteLimit = 128;

template <typename T>
PLANNER_HOST_DEVICE inline T calc_erfinv(T y) {
/* Function to calculate inverse error function.  Rational approximation
is used to generate an initial approximation, which is then improved to
full accuracy by two steps of Newton's method.  Code is a direct
translation of the erfinv m file in matlab version 2.0.
Author:  Gary L. Pavlis, Indiana University
Date:  February 1996
*/
  T x, z, num, dem; /*working variables */
  /* coefficients in rational expansion */
  T a[4] = {  T(0.886226899), T(-1.645349621),  T(0.914624893), T(-0.140543331) };
  T b[4] = { T(-2.118377725),  T(1.442710462), T(-0.329097515),  T(0.012229801) };
  T c[4] = { T(-1.970840454), T(-1.624906493),  T(3.429567803),  T(1.641345311) };
  T d[2] = {  T(3.543889200),  T(1.637067800) };
  T y_abs = std::abs(y);
  if(y_abs > 1.0) return T(NAN);
  if(y_abs == 1.0) return std::copysign(T(INFINITY), y);
  if(y_abs <= T(0.7)) {
    z = y * y;
    num = (((a[3]*z + a[2])*z + a[1])*z + a[0]);
    dem = ((((b[3]*z + b[2])*z + b[1])*z +b[0]) * z + static_cast<T>(1.0));
    x = y * num / dem;
  }
  else{
    z = std::sqrt(-std::log((static_cast<T>(1.0)-y_abs)/static_cast<T>(2.0)));
    num = ((c[3]*z + c[2])*z + c[1]) * z + c[0];
    dem = (d[1]*z + d[0])*z + static_cast<T>(1.0);
    x = std::copysign(num, y) / dem;
  }
  /* Two steps of Newton-Raphson correction */
  x = x - (std::erf(x) - y) / ((static_cast<T>(2.0)*T(0.564189583547756286948))*std::exp(-x*x));
  x = x - (std::erf(x) - y) / ((static_cast<T>(2.0)*T(0.564189583547756286948))*std::exp(-x*x));

  return x;
}


/*
 * Note [3-Clause BSD License for the Cephes Math Library]
 * Code derived from implementations in the Cephes Math Library should mention its derivation and reference
 * this note (ex. 'This function is derived from the implementation of X in the Cephes Math Library. See note
 * [3-Clause BSD License for the Cephes Math Library]. The license is:
 * Copyright (c) 2018, Steven Moshier
 * All rights reserved.
 *
 * Redistribution and use in source and binary forms, with or without
 * modification, are permitted provided that the following conditions are met:
 * * Redistributions of source code must retain the above copyright
 * notice, this list of conditions and the following disclaimer.
 * * Redistributions in binary form must reproduce the above copyright
 * notice, this list of conditions and the following disclaimer in the
 * documentation and/or other materials provided with the distribution.
 * * Neither the name of the nor the
 * names of its contributors may be used to endorse or promote products
 * derived from this software without specific prior written permission.
 *
 * THIS SOFTWARE IS PROVIDED BY THE COPYRIGHT HOLDERS AND CONTRIBUTORS "AS IS" AND
 * ANY EXPRESS OR IMPLIED WARRANTIES, INCLUDING, BUT NOT LIMITED TO, THE IMPLIED
 * WARRANTIES OF MERCHANTABILITY AND FITNESS FOR A PARTICULAR PURPOSE ARE
 * DISCLAIMED. IN NO EVENT SHALL Steven Moshier BE LIABLE FOR ANY
 * DIRECT, INDIRECT, INCIDENTAL, SPECIAL, EXEMPLARY, OR CONSEQUENTIAL DAMAGES
 * (INCLUDING, BUT NOT LIMITED TO, PROCUREMENT OF SUBSTITUTE GOODS OR SERVICES;
 * LOSS OF USE, DATA, OR PROFITS; OR BUSINESS INTERRUPTION) HOWEVER CAUSED AND

 */
template <typename scalar_t>
PLANNER_HOST_DEVICE inline scalar_t zeta(scalar_t x, scalar_t q)  {
  using acc_t = scalar_t;
  const acc_t MACHEP = acc_t{1.11022302462515654042E-16};
  constexpr acc_t zero = acc_t{0.0};
  constexpr acc_t half = acc_t{0.5};
  constexpr acc_t one = acc_t{1.0};
  static const acc_t A[] = {
      12.0,
      -720.0,
      30240.0,
      -1209600.0,
      47900160.0,
      -1.8924375803183791606e9, /*1.307674368e12/691*/
      7.47242496e10,
      -2.950130727918164224e12, /*1.067062284288e16/3617*/
      1.1646782814350067249e14, /*5.109094217170944e18/43867*/
      -4.5979787224074726105e15, /*8.028576626982912e20/174611*/
      1.8152105401943546773e17, /*1.5511210043330985984e23/854513*/
      -7.1661652561756670113e18 /*1.6938241367317436694528e27/236364091*/
  };

  acc_t a, b, k, s, t, w;
  if (x == one) {
    return scalar_t(INFINITY);
  }

  if (x < one) {
    return scalar_t(NAN);
  }

  if (q <= zero) {
    if (q == std::floor(q)) {
      return scalar_t(INFINITY);
    }
    if (x != std::floor(x)) {
      return scalar_t(NAN);
    }
  }

  s = std::pow(q, -x);
  a = q;
  int i = 0;
  b = zero;
  while ((i < 9) || (a <= acc_t{9.0})) {
    i += 1;
    a += one;
    b = ::pow(a, -x);
    s += b;
    if ((-MACHEP * s < b) && (b < MACHEP * s)) {
      return static_cast<scalar_t>(s);
    }
  };

  w = a;
  s += b * w / (x - one);
  s -= half * b;
  a = one;
  k = zero;
  for (i = 0; i < 12; i++) {
    a *= x + k;
    b /= w;
    t = a * b / A[i];
    s = s + t;
    t = ::fabs(t / s);
    if (t < MACHEP) {
      return static_cast<scalar_t>(s);
    }
    k += one;
    a *= x + k;
    b /= w;
    k += one;
  }
  return static_cast<scalar_t>(s);
}

/*
 * This function is derived from the implementation of the digamma function in the Cephes Math Library.
 * See note [3-Clause BSD License for the Cephes Math Library].
 *
 * Evaluates polynomial of degree N:
 *
 *                     2          N
 * y  =  C  + C x + C x  +...+ C x
 *        0    1     2          N
 *
 * Coefficients are stored in reverse order:
 *
 * coef[0] = C  , ..., coef[N] = C  .
 *            N                   0
 */
template <typename T>
PLANNER_HOST_DEVICE inline T polevl(const T x, const T A[], size_t len) {
  T result = 0;
  for (size_t i = 0; i <= len; i++) {
    result = result * x + A[i];
  }
  return result;
}

// Cephes's p1evl: a polynomial whose leading coefficient, 1, its table leaves out:
// x^len + A[0] x^(len - 1) + ... + A[len - 1]
template <typename T>
PLANNER_HOST_DEVICE inline T p1evl(const T x, const T A[], size_t len) {
  T result = 1;
  for (size_t i = 0; i < len; i++) {
    result = result * x + A[i];
  }
  return result;
}


/*
 * This function is derived from the implementation of the i1e function in the Cephes Math Library.
 * See note [3-Clause BSD License for the Cephes Math Library].
 *
 * Computes the argument, x, for which the area under the Gaussian probability density function
 * (integrated from minus infinity to x) is equal to y.
 */
template <typename T>
inline PLANNER_HOST_DEVICE T calc_ndtri(T y0) {

  /* sqrt(2pi) */
  constexpr T s2pi = 2.50662827463100050242E0;
  constexpr T one = 1;
  constexpr T zero = 0;

  /* approximation for 0 <= |y - 0.5| <= 3/8 */
  static const T P0[5] = {
      -5.99633501014107895267E1,
      9.80010754185999661536E1,
      -5.66762857469070293439E1,
      1.39312609387279679503E1,
      -1.23916583867381258016E0,
  };

  static const T Q0[9] = {
      1.00000000000000000000E0,
      1.95448858338141759834E0,
      4.67627912898881538453E0,
      8.63602421390890590575E1,
      -2.25462687854119370527E2,
      2.00260212380060660359E2,
      -8.20372256168333339912E1,
      1.59056225126211695515E1,
      -1.18331621121330003142E0,
  };

  /* Approximation for interval z = sqrt(-2 log y ) between 2 and 8
  * i.e., y between exp(-2) = .135 and exp(-32) = 1.27e-14.
  */
  static const T P1[9] = {
      4.05544892305962419923E0,
      3.15251094599893866154E1,
      5.71628192246421288162E1,
      4.40805073893200834700E1,
      1.46849561928858024014E1,
      2.18663306850790267539E0,
      -1.40256079171354495875E-1,
      -3.50424626827848203418E-2,
      -8.57456785154685413611E-4,
  };

  static const T Q1[9] = {
      1.00000000000000000000E0,
      1.57799883256466749731E1,
      4.53907635128879210584E1,
      4.13172038254672030440E1,
      1.50425385692907503408E1,
      2.50464946208309415979E0,
      -1.42182922854787788574E-1,
      -3.80806407691578277194E-2,
      -9.33259480895457427372E-4,
  };

  /* Approximation for interval z = sqrt(-2 log y ) between 8 and 64
  * i.e., y between exp(-32) = 1.27e-14 and exp(-2048) = 3.67e-890.
  */

  static const T P2[9] = {
      3.23774891776946035970E0,
      6.91522889068984211695E0,
      3.93881025292474443415E0,
      1.33303460815807542389E0,
      2.01485389549179081538E-1,
      1.23716634817820021358E-2,
      3.01581553508235416007E-4,
      2.65806974686737550832E-6,
      6.23974539184983293730E-9,
  };

  static const T Q2[9] = {
      1.00000000000000000000E0,
      6.02427039364742014255E0,
      3.67983563856160859403E0,
      1.37702099489081330271E0,
      2.16236993594496635890E-1,
      1.34204006088543189037E-2,
      3.28014464682127739104E-4,
      2.89247864745380683936E-6,
      6.79019408009981274425E-9,
  };

  if (y0 == zero) {
    return -T(INFINITY);
  }
  if (y0 == one) {
    return T(INFINITY);
  }
  if (y0 < zero || y0 > one) {
    return T(NAN);
  }
  bool code = true;
  T y = y0;
  if (y > one - T{0.13533528323661269189}) { /* 0.135... = exp(-2) */
    y = one - y;
    code = false;
  }

  if (y > T{0.13533528323661269189}) {
    y = y - T{0.5};
    const T y2 = y * y;
    T x = y + y * (y2 * polevl(y2, P0, 4) / polevl(y2, Q0, 8));
    return (x * s2pi);
  }

  T x = ::sqrt(T{-2.0} * ::log(y));
  const T x0 = x - ::log(x) / x;

  const T z = one / x;
  T x1;
  if (x < T{8.0}) /* y > exp(-32) = 1.2664165549e-14 */
  {
    x1 = z * polevl(z, P1, 8) / polevl(z, Q1, 8);
  } else {
    x1 = z * polevl(z, P2, 8) / polevl(z, Q2, 8);
  }
  x = x0 - x1;
  if (code) {
    x = -x;
  }
  return x;
}

template<typename T>
inline PLANNER_HOST_DEVICE T airy_ai_forward(T x) {
    static const T AN[] = {
            +3.46538101525629032477e-01,
            +1.20075952739645805542e+01,
            +7.62796053615234516538e+01,
            +1.68089224934630576269e+02,
            +1.59756391350164413639e+02,
            +7.05360906840444183113e+01,
            +1.40264691163389668864e+01,
            +9.99999999999999995305e-01,
    };

    static const T AD[] = {
            +5.67594532638770212846e-01,
            +1.47562562584847203173e+01,
            +8.45138970141474626562e+01,
            +1.77318088145400459522e+02,
            +1.64234692871529701831e+02,
            +7.14778400825575695274e+01,
            +1.40959135607834029598e+01,
            +1.00000000000000000470e+00,
    };

    static const T AFN[] = {
            -1.31696323418331795333e-01,
            -6.26456544431912369773e-01,
            -6.93158036036933542233e-01,
            -2.79779981545119124951e-01,
            -4.91900132609500318020e-02,
            -4.06265923594885404393e-03,
            -1.59276496239262096340e-04,
            -2.77649108155232920844e-06,
            -1.67787698489114633780e-08,
    };

    static const T AFD[] = {
            +1.33560420706553243746e+01,
            +3.26825032795224613948e+01,
            +2.67367040941499554804e+01,
            +9.18707402907259625840e+00,
            +1.47529146771666414581e+00,
            +1.15687173795188044134e-01,
            +4.40291641615211203805e-03,
            +7.54720348287414296618e-05,
            +4.51850092970580378464e-07,
    };

    static const T AGN[] = {
            +1.97339932091685679179e-02,
            +3.91103029615688277255e-01,
            +1.06579897599595591108e+00,
            +9.39169229816650230044e-01,
            +3.51465656105547619242e-01,
            +6.33888919628925490927e-02,
            +5.85804113048388458567e-03,
            +2.82851600836737019778e-04,
            +6.98793669997260967291e-06,
            +8.11789239554389293311e-08,
            +3.41551784765923618484e-10,
    };

    static const T AGD[] = {
            +9.30892908077441974853e+00,
            +1.98352928718312140417e+01,
            +1.55646628932864612953e+01,
            +5.47686069422975497931e+00,
            +9.54293611618961883998e-01,
            +8.64580826352392193095e-02,
            +4.12656523824222607191e-03,
            +1.01259085116509135510e-04,
            +1.17166733214413521882e-06,
            +4.91834570062930015649e-09,
    };

    int domain_flag = 0;

    T ai = T(0.0);

    if (std::isinf(x)) {
        return T(NAN);
    }

    if (x > T(103.892)) {
        return T(0.0);
    }

    T f;
    T g;
    T k;

    if (x < T(-2.09)) {
        T z = T(1.0) / (T(-2.0) * x * std::sqrt(-x) / T(3.0));

        const T afn = polevl(z * z, AFN, 8);

        const T afd = p1evl(z * z, AFD, 9);

        const T agn = polevl(z * z, AGN, 10);

        const T agd = p1evl(z * z, AGD, 10);

        T t = T(-2.0) * x * std::sqrt(-x) / T(3.0) + T(0.25) * T(3.14159265358979323846);

        return T(5.64189583547756286948e-01) / std::sqrt(std::sqrt(-x)) * (std::sin(t) * (T(1.0) + z * z * afn / afd) - std::cos(t) * (z * agn / agd));
    }

    if (x >= T(2.09)) {
        domain_flag = 5;

        T zeta = T(2.0) * x * std::sqrt(x) / T(3.0);

        const T an = polevl(T(1.0) / zeta, AN, 7);

        const T ad = polevl(T(1.0) / zeta, AD, 7);

        ai = T(5.64189583547756286948e-01) * (an / ad) / (T(2.0) * std::sqrt(std::sqrt(x)) * std::exp(zeta));

        if (x > T(8.3203353)) {
            return ai;
        }
    }

    f = 1.0;
    g = x;
    k = 1.0;

    T m = 1.0;
    T n = x;
    T t = 1.0;
    T z = x * x * x;

    while (t > T(2.220446049250313080847e-16)) {
        m *= z;
        k += T(1.0);
        m /= k;
        n *= z;
        k += T(1.0);
        n /= k;
        m /= k;
        f += m;
        k += T(1.0);
        n /= k;
        g += n;

        t = std::abs(m / f);
    }

    if ((domain_flag & 1) == 0) {
        return T(0.355028053887817239260) * f - T(0.258819403792806798405) * g;
    }

    return ai;
} // T airy_ai(T x)

// sqrt(2 / (pi x)) (P cos t - Q sin t) for J, (P sin t + Q cos t) for Y, t = x - phase: P and
// Q rational functions of 25 / x^2 (Cephes's PP / PQ and QP / QQ, QQ with its leading 1)
template <typename T>
PLANNER_HOST_DEVICE inline T bessel_hankel(T x, const T* PP, const T* PQ, const T* QP,
                                           const T* QQ, T phase, bool second_kind) {
    const T z = T(25.0) / (x * x);
    const T p = polevl(z, PP, 6) / polevl(z, PQ, 6);
    const T q = T(5.0) / x * (polevl(z, QP, 7) / p1evl(z, QQ, 7));
    const T s = std::sin(x - phase), c = std::cos(x - phase);
    return (second_kind ? p * s + q * c : p * c - q * s) *
           T(0.797884560802865355879892119868763737) / std::sqrt(x);
}

// J0 and Y0 for x > 5: Hankel's asymptotic P and Q, the tables both share
template <typename T>
PLANNER_HOST_DEVICE inline T bessel_hankel0(T x, bool second_kind) {
    static const T PP[] = {
            +7.96936729297347051624e-04,
            +8.28352392107440799803e-02,
            +1.23953371646414299388e+00,
            +5.44725003058768775090e+00,
            +8.74716500199817011941e+00,
            +5.30324038235394892183e+00,
            +9.99999999999999997821e-01,
    };

    static const T PQ[] = {
            +9.24408810558863637013e-04,
            +8.56288474354474431428e-02,
            +1.25352743901058953537e+00,
            +5.47097740330417105182e+00,
            +8.76190883237069594232e+00,
            +5.30605288235394617618e+00,
            +1.00000000000000000218e+00,
    };

    static const T QP[] = {
            -1.13663838898469149931e-02,
            -1.28252718670509318512e+00,
            -1.95539544257735972385e+01,
            -9.32060152123768231369e+01,
            -1.77681167980488050595e+02,
            -1.47077505154951170175e+02,
            -5.14105326766599330220e+01,
            -6.05014350600728481186e+00,
    };

    static const T QQ[] = {
            +6.43178256118178023184e+01,
            +8.56430025976980587198e+02,
            +3.88240183605401609683e+03,
            +7.24046774195652478189e+03,
            +5.93072701187316984827e+03,
            +2.06209331660327847417e+03,
            +2.42005740240291393179e+02,
    };

    return bessel_hankel(x, PP, PQ, QP, QQ, T(0.785398163397448309615660845819875721), second_kind);
}

// J1 and Y1 for x > 5: Hankel's asymptotic P and Q, the tables both share
template <typename T>
PLANNER_HOST_DEVICE inline T bessel_hankel1(T x, bool second_kind) {
    static const T PP[] = {
            +7.62125616208173112003e-04,
            +7.31397056940917570436e-02,
            +1.12719608129684925192e+00,
            +5.11207951146807644818e+00,
            +8.42404590141772420927e+00,
            +5.21451598682361504063e+00,
            +1.00000000000000000254e+00,
    };

    static const T PQ[] = {
            +5.71323128072548699714e-04,
            +6.88455908754495404082e-02,
            +1.10514232634061696926e+00,
            +5.07386386128601488557e+00,
            +8.39985554327604159757e+00,
            +5.20982848682361821619e+00,
            +9.99999999999999997461e-01,
    };

    static const T QP[] = {
            +5.10862594750176621635e-02,
            +4.98213872951233449420e+00,
            +7.58238284132545283818e+01,
            +3.66779609360150777800e+02,
            +7.10856304998926107277e+02,
            +5.97489612400613639965e+02,
            +2.11688757100572135698e+02,
            +2.52070205858023719784e+01,
    };

    static const T QQ[] = {
            +7.42373277035675149943e+01,
            +1.05644886038262816351e+03,
            +4.98641058337653607651e+03,
            +9.56231892404756170795e+03,
            +7.99704160447350683650e+03,
            +2.82619278517639096600e+03,
            +3.36093607810698293419e+02,
    };

    return bessel_hankel(x, PP, PQ, QP, QQ, T(2.356194490192344928846982537459627163), second_kind);
}

template<typename T>
inline PLANNER_HOST_DEVICE T bessel_j0_forward(T x) {
    static const T RP[] = {
            -4.79443220978201773821e+09,
            +1.95617491946556577543e+12,
            -2.49248344360967716204e+14,
            +9.70862251047306323952e+15,
    };

    static const T RQ[] = {
            +4.99563147152651017219e+02,
            +1.73785401676374683123e+05,
            +4.84409658339962045305e+07,
            +1.11855537045356834862e+10,
            +2.11277520115489217587e+12,
            +3.10518229857422583814e+14,
            +3.18121955943204943306e+16,
            +1.71086294081043136091e+18,
    };

    if (x < T(0)) {
        x = -x;
    }

    if (x <= T(5.0)) {
        if (x < T(0.00001)) {
            return T(1.0) - x * x / T(4.0);
        }

        const T rp = polevl(x * x, RP, 3);

        const T rq = polevl(x * x, RQ, 7);

        return (x * x - T(5.78318596294678452118e+00)) * (x * x - T(3.04712623436620863991e+01)) * rp / rq;
    }

    return bessel_hankel0(x, false);
} // bessel_j0_forward(T x)

template<typename T>
inline PLANNER_HOST_DEVICE T bessel_j1_forward(T x) {
    static const T RP[] = {
            -8.99971225705559398224e+08,
            +4.52228297998194034323e+11,
            -7.27494245221818276015e+13,
            +3.68295732863852883286e+15,
    };

    static const T RQ[] = {
            +6.20836478118054335476e+02,
            +2.56987256757748830383e+05,
            +8.35146791431949253037e+07,
            +2.21511595479792499675e+10,
            +4.74914122079991414898e+12,
            +7.84369607876235854894e+14,
            +8.95222336184627338078e+16,
            +5.32278620332680085395e+18,
    };

    if (x < T(0.0)) {
        return -bessel_j1_forward(-x);
    }

    if (x <= T(5.0)) {
        const T rp = polevl(x * x, RP, 3);

        const T rq = polevl(x * x, RQ, 7);

        return rp / rq * x * (x * x - T(1.46819706421238932572e+01)) * (x * x - T(4.92184563216946036703e+01));
    }

    return bessel_hankel1(x, false);
} // bessel_j1_forward(T x)

template<typename T>
inline PLANNER_HOST_DEVICE T bessel_y0_forward(T x) {
    static const T YP[] = {
            +1.55924367855235737965e+04,
            -1.46639295903971606143e+07,
            +5.43526477051876500413e+09,
            -9.82136065717911466409e+11,
            +8.75906394395366999549e+13,
            -3.46628303384729719441e+15,
            +4.42733268572569800351e+16,
            -1.84950800436986690637e+16,
    };

    static const T YQ[] = {
            +1.04128353664259848412e+03,
            +6.26107330137134956842e+05,
            +2.68919633393814121987e+08,
            +8.64002487103935000337e+10,
            +2.02979612750105546709e+13,
            +3.17157752842975028269e+15,
            +2.50596256172653059228e+17,
    };

    if (x <= T(5.0)) {
        if (x == T(0.0)) {
            return -T(INFINITY);
        }

        if (x < T(0.0)) {
            return T(NAN);
        }

        const T yp = polevl(x * x, YP, 7);

        const T yq = polevl(x * x, YQ, 6);

        return yp / yq + (T(0.636619772367581343075535053490057448) * std::log(x) * bessel_j0_forward(x));
    }

    return bessel_hankel0(x, true);
} // bessel_y0_forward(T x)

template<typename T>
inline PLANNER_HOST_DEVICE T bessel_y1_forward(T x) {
    static const T YP[] = {
            +1.26320474790178026440e+09,
            -6.47355876379160291031e+11,
            +1.14509511541823727583e+14,
            -8.12770255501325109621e+15,
            +2.02439475713594898196e+17,
            -7.78877196265950026825e+17,
    };

    static const T YQ[] = {
            +5.94301592346128195359e+02,
            +2.35564092943068577943e+05,
            +7.34811944459721705660e+07,
            +1.87601316108706159478e+10,
            +3.88231277496238566008e+12,
            +6.20557727146953693363e+14,
            +6.87141087355300489866e+16,
            +3.97270608116560655612e+18,
    };

    if (x <= T(5.0)) {
        if (x == T(0.0)) {
            return -T(INFINITY);
        }

        if (x <= T(0.0)) {
            return T(NAN);
        }

        const T yp = polevl(x * x, YP, 5);

        const T yq = polevl(x * x, YQ, 7);

        return x * (yp / yq) + (T(0.636619772367581343075535053490057448) * (bessel_j1_forward(x) * std::log(x) - T(1.0) / x));
    }

    return bessel_hankel1(x, true);
} // bessel_y1_forward(T x)

// The Chebyshev kinds' three-term recurrence P_k = 2x P_(k-1) - P_(k-2) from P_0 = 1 and
// P_1 = `first` (the kinds differ there only) up to P_n, n >= 1; it stops at a NaN (past an
// overflow, inf - inf)
template <typename T>
PLANNER_HOST_DEVICE inline T chebyshev_recurrence(T x, T first, int64_t n) {
    T p = T(1.0), q = first;
    for (int64_t k = 2; (k <= n) && !std::isnan(q); k++) {
        const T r = (x + x) * q - p;
        p = q;
        q = r;
    }
    return q;
}

template<typename T>
inline PLANNER_HOST_DEVICE T chebyshev_polynomial_t_forward(T x, int64_t n) {
    if (std::abs(x) == T(1.0)) {
        if (x > T(0.0) || n % 2 == 0) {
            return T(1.0);
        }

        return T(-1.0);
    }

    if ((n > 6) && (std::abs(x) < T(1.0))) {
        return std::cos(n * std::acos(x));
    }

    if (n == 1) {
        return x;
    }

    return chebyshev_recurrence(x, x, n);
} // chebyshev_polynomial_t_forward(T x, int64_t n)


template<typename T>
inline PLANNER_HOST_DEVICE T chebyshev_polynomial_u_forward(T x, int64_t n) {
    if (std::abs(x) == T(1.0)) {
        if (x > T(0.0) || n % 2 == 0) {
            return n + 1;
        }

        return -(n + 1);
    }

    if ((n > 8) && (std::abs(x) < T(1.0))) {
        if (std::sin(std::acos(x)) != T(0.0)) {
            return std::sin((n + 1) * std::acos(x)) / std::sin(std::acos(x));
        }

        return (n + 1) * std::cos((n + 1) * std::acos(x)) / x;
    }

    if (n == 1) {
        return x + x;
    }

    return chebyshev_recurrence(x, x + x, n);
} // chebyshev_polynomial_u_forward(T x, int64_t n)


template<typename T>
inline PLANNER_HOST_DEVICE T chebyshev_polynomial_v_forward(T x, int64_t n) {
    if (std::abs(x) == T(1.0)) {
        if (x > T(0.0)) {
            return T(1.0);
        }

        if (n % 2 == 0) {
            return n + n + 1;
        }

        return -(n + n + 1);
    }

    if ((n > 8) && (std::abs(x) < T(1.0))) {
        if (std::sin(std::acos(x) / T(2.0)) != T(1.0)) {
            return std::cos((n + T(0.5)) * std::acos(x)) / std::cos(std::acos(x) / T(2.0));
        }

        if (n % 2 == 0) {
            return n + n + 1;
        }

        return -(n + n + 1);
    }

    if (n == 1) {
        return x + x - T(1.0);
    }

    return chebyshev_recurrence(x, x + x - T(1.0), n);
} // chebyshev_polynomial_v_forward(T x, int64_t n)


template<typename T>
inline PLANNER_HOST_DEVICE T chebyshev_polynomial_w_forward(T x, int64_t n) {
    if (std::abs(x) == T(1.0)) {
        if (x > T(0.0)) {
            return n + n + 1;
        }

        if (n % 2 == 0) {
            return T(1.0);
        }

        return T(-1.0);
    }

    if ((n > 8) && (std::abs(x) < T(1.0))) {
        if (std::cos(std::acos(x) / T(2.0)) != T(1.0)) {
            return std::sin((n + T(0.5)) * std::acos(x)) / std::sin(std::acos(x) / T(2.0));
        }

        if (x > T(0.0)) {
            return n + n + 1;
        }

        if (n % 2 == 0) {
            return T(1.0);
        }

        return T(-1.0);
    }

    if (n == 1) {
        return x + x + T(1.0);
    }

    return chebyshev_recurrence(x, x + x + T(1.0), n);
} // chebyshev_polynomial_w_forward(T x, int64_t n)



template<typename T>
inline PLANNER_HOST_DEVICE T hermite_polynomial_h_forward(T x, int64_t n) {
    if (n == 1) {
        return x + x;
    }

    if (n > kHermiteLimit) {
        return T(NAN);
    }

    T p = T(1.0);
    T q = x + x;
    T r = T(0.0);

    for (int64_t k = 2; k < n + n; k += 2) {
        r = (x + x) * q - k * p;
        p = q;
        q = r;
    }

    return r;
} // hermite_polynomial_h_forward(T x, int64_t n)



template<typename T>
inline PLANNER_HOST_DEVICE T hermite_polynomial_he_forward(T x, int64_t n) {
    if (n == 1) {
        return x;
    }

    if (n > kHermiteLimit) {
        return T(NAN);
    }

    T p = T(1.0);
    T q = x;
    T r = q;

    for (int64_t k = 1; k < n; k++) {
        r = x * q - k * p;
        p = q;
        q = r;
    }

    return r;
} // hermite_polynomial_he_forward(T x, int64_t n)


template<typename T>
inline PLANNER_HOST_DEVICE T laguerre_polynomial_l_forward(T x, int64_t n) {
    if (std::abs(x) == T(0.0)) {
        return T(1.0);
    }

    if (n == 1) {
        return T(1.0) - x;
    }

    T p = T(1.0);
    T q = T(1.0) - x;
    T r = q;

    for (int64_t k = 1; (k < n) && !std::isnan(q); k++) {
        r = (((k + k) + (T(1.0) - x)) * q - k * p) / (k + 1);
        p = q;
        q = r;
    }

    return r;
} // laguerre_polynomial_l_forward(T x, int64_t n)


template<typename T>
inline PLANNER_HOST_DEVICE T legendre_polynomial_p_forward(T x, int64_t n) {
    if (std::abs(x) == T(1.0)) {
        if (x > T(0.0) || n % 2 == 0) {
            return T(1.0);
        }

        return T(-1.0);
    }

    if (n == 1) {
        return x;
    }

    T p = T(1.0);
    T q = x;
    T r = q;

    for (int64_t k = 1; (k < n) && !std::isnan(q); k++) {
        r = ((k + k + 1) * x * q - k * p) / (k + 1);
        p = q;
        q = r;
    }

    return r;
} // legendre_polynomial_p_forward(T x, int64_t n)


// Clenshaw's sum of the Chebyshev series c[0..len) at x (Cephes's chbevl): the tables of the
// modified Bessel functions below
template <typename T>
PLANNER_HOST_DEVICE inline T chbevl(T x, const T* c, int len) {
    T b0 = c[0], b1 = 0.0, b2 = 0.0;
    for (int index = 1; index < len; index++) {
        b2 = b1;
        b1 = b0;
        b0 = x * b1 - b2 + c[index];
    }
    return T(0.5) * (b0 - b2);
}

template<typename T>
inline PLANNER_HOST_DEVICE T modified_bessel_i0_scaled(T x) {
    static const T A[] = {
            -4.41534164647933937950e-18,
            +3.33079451882223809783e-17,
            -2.43127984654795469359e-16,
            +1.71539128555513303061e-15,
            -1.16853328779934516808e-14,
            +7.67618549860493561688e-14,
            -4.85644678311192946090e-13,
            +2.95505266312963983461e-12,
            -1.72682629144155570723e-11,
            +9.67580903537323691224e-11,
            -5.18979560163526290666e-10,
            +2.65982372468238665035e-09,
            -1.30002500998624804212e-08,
            +6.04699502254191894932e-08,
            -2.67079385394061173391e-07,
            +1.11738753912010371815e-06,
            -4.41673835845875056359e-06,
            +1.64484480707288970893e-05,
            -5.75419501008210370398e-05,
            +1.88502885095841655729e-04,
            -5.76375574538582365885e-04,
            +1.63947561694133579842e-03,
            -4.32430999505057594430e-03,
            +1.05464603945949983183e-02,
            -2.37374148058994688156e-02,
            +4.93052842396707084878e-02,
            -9.49010970480476444210e-02,
            +1.71620901522208775349e-01,
            -3.04682672343198398683e-01,
            +6.76795274409476084995e-01,
    };

    static const T B[] = {
            -7.23318048787475395456e-18,
            -4.83050448594418207126e-18,
            +4.46562142029675999901e-17,
            +3.46122286769746109310e-17,
            -2.82762398051658348494e-16,
            -3.42548561967721913462e-16,
            +1.77256013305652638360e-15,
            +3.81168066935262242075e-15,
            -9.55484669882830764870e-15,
            -4.15056934728722208663e-14,
            +1.54008621752140982691e-14,
            +3.85277838274214270114e-13,
            +7.18012445138366623367e-13,
            -1.79417853150680611778e-12,
            -1.32158118404477131188e-11,
            -3.14991652796324136454e-11,
            +1.18891471078464383424e-11,
            +4.94060238822496958910e-10,
            +3.39623202570838634515e-09,
            +2.26666899049817806459e-08,
            +2.04891858946906374183e-07,
            +2.89137052083475648297e-06,
            +6.88975834691682398426e-05,
            +3.36911647825569408990e-03,
            +8.04490411014108831608e-01,
    };

    if (std::abs(x) <= T(8.0)) {
        const T a = chbevl(((std::abs(x) / T(2.0)) - T(2.0)), A, 30);

        return T(1) * a;
    }

    const T b = chbevl((T(32.0) / std::abs(x) - T(2.0)), B, 25);

    return T(1) * b / std::sqrt(std::abs(x));
} // modified_bessel_i0_scaled(T x)

template <typename T>
inline PLANNER_HOST_DEVICE T modified_bessel_i0_forward(T x) {
    return std::exp(std::abs(x)) * modified_bessel_i0_scaled(x);
}


template<typename T>
inline PLANNER_HOST_DEVICE T modified_bessel_i1_scaled(T x) {
    static const T A[] = {
            +2.77791411276104639959e-18,
            -2.11142121435816608115e-17,
            +1.55363195773620046921e-16,
            -1.10559694773538630805e-15,
            +7.60068429473540693410e-15,
            -5.04218550472791168711e-14,
            +3.22379336594557470981e-13,
            -1.98397439776494371520e-12,
            +1.17361862988909016308e-11,
            -6.66348972350202774223e-11,
            +3.62559028155211703701e-10,
            -1.88724975172282928790e-09,
            +9.38153738649577178388e-09,
            -4.44505912879632808065e-08,
            +2.00329475355213526229e-07,
            -8.56872026469545474066e-07,
            +3.47025130813767847674e-06,
            -1.32731636560394358279e-05,
            +4.78156510755005422638e-05,
            -1.61760815825896745588e-04,
            +5.12285956168575772895e-04,
            -1.51357245063125314899e-03,
            +4.15642294431288815669e-03,
            -1.05640848946261981558e-02,
            +2.47264490306265168283e-02,
            -5.29459812080949914269e-02,
            +1.02643658689847095384e-01,
            -1.76416518357834055153e-01,
            +2.52587186443633654823e-01,
    };

    static const T B[] = {
            +7.51729631084210481353e-18,
            +4.41434832307170791151e-18,
            -4.65030536848935832153e-17,
            -3.20952592199342395980e-17,
            +2.96262899764595013876e-16,
            +3.30820231092092828324e-16,
            -1.88035477551078244854e-15,
            -3.81440307243700780478e-15,
            +1.04202769841288027642e-14,
            +4.27244001671195135429e-14,
            -2.10154184277266431302e-14,
            -4.08355111109219731823e-13,
            -7.19855177624590851209e-13,
            +2.03562854414708950722e-12,
            +1.41258074366137813316e-11,
            +3.25260358301548823856e-11,
            -1.89749581235054123450e-11,
            -5.58974346219658380687e-10,
            -3.83538038596423702205e-09,
            -2.63146884688951950684e-08,
            -2.51223623787020892529e-07,
            -3.88256480887769039346e-06,
            -1.10588938762623716291e-04,
            -9.76109749136146840777e-03,
            +7.78576235018280120474e-01,
    };

    if (std::abs(x) <= T(8.0)) {
        const T a = chbevl(((std::abs(x) / T(2.0)) - T(2.0)), A, 29);

        if (x < T(0.0)) {
            return -(a * std::abs(x) * T(1));
        }

        return a * std::abs(x) * T(1);
    }

    const T b = chbevl((T(32.0) / std::abs(x) - T(2.0)), B, 25);

    if (x < T(0.0)) {
        return -(T(1) * b / std::sqrt(std::abs(x)));
    }

    return T(1) * b / std::sqrt(std::abs(x));
} // modified_bessel_i1_scaled(T x)

template <typename T>
inline PLANNER_HOST_DEVICE T modified_bessel_i1_forward(T x) {
    return std::exp(std::abs(x)) * modified_bessel_i1_scaled(x);
}




template<typename T>
inline PLANNER_HOST_DEVICE T scaled_modified_bessel_k0_forward(T x) {
    static const T A[] = {
            +1.37446543561352307156e-16,
            +4.25981614279661018399e-14,
            +1.03496952576338420167e-11,
            +1.90451637722020886025e-09,
            +2.53479107902614945675e-07,
            +2.28621210311945178607e-05,
            +1.26461541144692592338e-03,
            +3.59799365153615016266e-02,
            +3.44289899924628486886e-01,
            -5.35327393233902768720e-01,
    };

    static const T B[] = {
            +5.30043377268626276149e-18,
            -1.64758043015242134646e-17,
            +5.21039150503902756861e-17,
            -1.67823109680541210385e-16,
            +5.51205597852431940784e-16,
            -1.84859337734377901440e-15,
            +6.34007647740507060557e-15,
            -2.22751332699166985548e-14,
            +8.03289077536357521100e-14,
            -2.98009692317273043925e-13,
            +1.14034058820847496303e-12,
            -4.51459788337394416547e-12,
            +1.85594911495471785253e-11,
            -7.95748924447710747776e-11,
            +3.57739728140030116597e-10,
            -1.69753450938905987466e-09,
            +8.57403401741422608519e-09,
            -4.66048989768794782956e-08,
            +2.76681363944501510342e-07,
            -1.83175552271911948767e-06,
            +1.39498137188764993662e-05,
            -1.28495495816278026384e-04,
            +1.56988388573005337491e-03,
            -3.14481013119645005427e-02,
            +2.44030308206595545468e+00,
    };

    if (x == T(0.0)) {
        return T(INFINITY);
    }

    if (x < T(0.0)) {
        return T(NAN);
    }

    if (x <= T(2.0)) {
        const T a = chbevl((x * x - T(2.0)), A, 10);

        return (a - std::log(T(0.5) * x) * modified_bessel_i0_forward(x)) * std::exp(x);
    }

    const T b = chbevl((T(8.0) / x - T(2.0)), B, 25);

    return b / std::sqrt(x);
} // T scaled_modified_bessel_k0_forward(T x)

template<typename T>
inline PLANNER_HOST_DEVICE T scaled_modified_bessel_k1_forward(T x) {
    static const T A[] = {
            -7.02386347938628759343e-18,
            -2.42744985051936593393e-15,
            -6.66690169419932900609e-13,
            -1.41148839263352776110e-10,
            -2.21338763073472585583e-08,
            -2.43340614156596823496e-06,
            -1.73028895751305206302e-04,
            -6.97572385963986435018e-03,
            -1.22611180822657148235e-01,
            -3.53155960776544875667e-01,
            +1.52530022733894777053e+00,
    };

    static const T B[] = {
            -5.75674448366501715755e-18,
            +1.79405087314755922667e-17,
            -5.68946255844285935196e-17,
            +1.83809354436663880070e-16,
            -6.05704724837331885336e-16,
            +2.03870316562433424052e-15,
            -7.01983709041831346144e-15,
            +2.47715442448130437068e-14,
            -8.97670518232499435011e-14,
            +3.34841966607842919884e-13,
            -1.28917396095102890680e-12,
            +5.13963967348173025100e-12,
            -2.12996783842756842877e-11,
            +9.21831518760500529508e-11,
            -4.19035475934189648750e-10,
            +2.01504975519703286596e-09,
            -1.03457624656780970260e-08,
            +5.74108412545004946722e-08,
            -3.50196060308781257119e-07,
            +2.40648494783721712015e-06,
            -1.93619797416608296024e-05,
            +1.95215518471351631108e-04,
            -2.85781685962277938680e-03,
            +1.03923736576817238437e-01,
            +2.72062619048444266945e+00,
    };

    if (x == T(0.0)) {
        return T(INFINITY);
    }

    if (x < T(0.0)) {
        return T(NAN);
    }

    if (x <= T(2.0)) {
        const T a = chbevl((x * x - T(2.0)), A, 11);

        return (std::log(T(0.5) * x) * modified_bessel_i1_forward(x) + a / x) * std::exp(x);
    }

    const T b = chbevl((T(8.0) / x - T(2.0)), B, 25);

    return (b / std::sqrt(x));
} // T scaled_modified_bessel_k1_forward(T x)









template<typename T>
inline PLANNER_HOST_DEVICE T spherical_bessel_j0_forward(T x) {
    if (std::isinf(x)) {
        return T(0.0);
    }

    if (std::abs(x) < T(0.5)) {
        return T(1.0) + x * x * (T(-1.0) / T(6.0) + x * x * (T(1.0) / T(120.0) + x * x * (T(-1.0) / T(5040.0) + x * x * (T(1.0) / T(362880.0) + x * x * (T(-1.0) / T(39916800.0) + x * x * (T(1.0) / T(6227020800.0)))))));
    }

    return std::sin(x) / x;
} // T spherical_bessel_j0_forward(T x)

// ---- this file's own ---------------------------------------------------------------------------

template <typename T>
PLANNER_HOST_DEVICE inline T erfcx(T x) {
  if (std::isnan(x)) return x;
  if (x < T(0)) {
    if (x * x > T(709)) return T(INFINITY);  // 2 exp(x^2) overflows
    return T(2) * std::exp(x * x) - erfcx(-x);
  }
  if (x < T(25)) return std::exp(x * x) * std::erfc(x);  // x^2 is exact: a float's square
  // erfc(x) exp(x^2) = (1 / sqrt(pi)) / (x + (1/2) / (x + 1 / (x + (3/2) / (x + ...))))
  T f = x;
  for (int k = 24; k >= 1; --k) f = x + T(0.5) * T(k) / f;
  return T(0.564189583547756286948) / f;
}

template <typename T>
PLANNER_HOST_DEVICE inline T log_gamma(T a) {
#ifdef __CUDA_ARCH__
  return std::lgamma(a);
#else
  int sign;  // lgamma_r: glibc's lgamma writes the global signgam, which threads would race on
  return ::lgamma_r(a, &sign);
#endif
}

// e^-x x^a / Gamma(a), the factor both incomplete gamma forms share
template <typename T>
PLANNER_HOST_DEVICE inline T gamma_prefactor(T a, T x) {
  return std::exp(a * std::log(x) - x - log_gamma(a));
}

constexpr int kGammaIterations = 1000000;

// P(a, x) by its series (x below a or 1)
template <typename T>
PLANNER_HOST_DEVICE inline T igamma_series(T a, T x) {
  T ap = a, term = T(1) / a, sum = term;
  for (int k = 0; k < kGammaIterations; ++k) {
    ap += T(1);
    term *= x / ap;
    sum += term;
    if (std::abs(term) < std::abs(sum) * T(1e-17)) break;
  }
  return sum * gamma_prefactor(a, x);
}

// Q(a, x) by Lentz's continued fraction, for x > a
template <typename T>
PLANNER_HOST_DEVICE inline T igammac_fraction(T a, T x) {
  const T tiny = T(1e-300);
  T b = x + T(1) - a, c = T(1) / tiny, d = T(1) / b, h = d;
  for (int k = 1; k < kGammaIterations; ++k) {
    const T an = -T(k) * (T(k) - a);
    b += T(2);
    d = an * d + b;
    if (std::abs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::abs(c) < tiny) c = tiny;
    d = T(1) / d;
    const T step = d * c;
    h *= step;
    if (std::abs(step - T(1)) < T(1e-16)) break;
  }
  return gamma_prefactor(a, x) * h;
}

// Q(a, x) for x <= 1.1 and a not large, without the cancellation of 1 - P (DLMF 8.7.3):
// -expm1(a log x - log Gamma(1 + a)) - x^a / Gamma(a) sum_{n >= 1} (-x)^n / (n! (a + n))
template <typename T>
PLANNER_HOST_DEVICE inline T igammac_series(T a, T x) {
  T factor = T(1), sum = T(0);
  for (int n = 1; n < 2000; ++n) {
    factor *= -x / T(n);
    const T term = factor / (a + T(n));
    sum += term;
    if (std::abs(term) <= T(1e-17) * std::abs(sum)) break;
  }
  // log Gamma(1 + a) = -gamma a + zeta(2) / 2 a^2 - ... where 1 + a rounds to 1
  const T log_gamma_1p = std::abs(a) < T(1e-5)
      ? a * (T(-0.577215664901532860607) + T(0.822467033424113218236) * a)
      : log_gamma(T(1) + a);
  const T log_x = std::log(x);
  return -std::expm1(a * log_x - log_gamma_1p) - std::exp(a * log_x - log_gamma(a)) * sum;
}

// The regularized lower (lower = true) or upper incomplete gamma function, with torch's edge
// cases in torch's order (so x = 0 gives P = 0 even beside a NaN a): NaN for a < 0 or x < 0,
// a = 0 the limit from above where x > 0, then x = 0, infinite a, infinite x.
template <typename T>
PLANNER_HOST_DEVICE inline T incomplete_gamma(T a, T x, bool lower) {
  if (a < T(0) || x < T(0)) return T(NAN);
  const T zero_x = lower ? T(0) : T(1);
  if (a == T(0)) return x > T(0) ? T(1) - zero_x : T(NAN);
  if (x == T(0)) return zero_x;
  if (std::isinf(a)) return std::isinf(x) ? T(NAN) : zero_x;
  if (std::isinf(x)) return T(1) - zero_x;
  if (std::isnan(a) || std::isnan(x)) return T(NAN);
  // torch's choice of forms (without its asymptotic series for large a near x)
  if (lower) {
    if (x > T(1) && x > a) return T(1) - igammac_fraction(a, x);
    return igamma_series(a, x);
  }
  if (x > T(1.1)) return x < a ? T(1) - igamma_series(a, x) : igammac_fraction(a, x);
  const bool by_lower = x <= T(0.5) ? T(-0.4) / std::log(x) < a : x * T(1.1) < a;
  return by_lower ? T(1) - igamma_series(a, x) : igammac_series(a, x);
}

template <typename T>
PLANNER_HOST_DEVICE inline T polygamma(int n, T x) {
  const T sign = (n % 2) ? T(1) : T(-1);
  if (std::isinf(x) && x > T(0)) return sign * T(0);  // the limit (zeta(n + 1, inf) is NaN)
  return sign * std::exp(log_gamma(T(n) + T(1))) * zeta<T>(T(n + 1), x);
}

// The polynomials' degree n comes as a float: torch truncates it toward zero and takes a NaN or
// infinite one as -1 (the polynomial is 0 then), and one of 2^63 or more as the lowest int64
// (x86's conversion of a float out of range: 0 again); beyond this degree the recurrences'
// loops are refused as NaN rather than run for ever.
constexpr double kPolynomialDegreeLimit = 65536.0;

// P_k(x) of a float degree by torch's forms; at x = +-inf too, where its recurrence gives
// +-inf up to degree 2 and meets inf - inf (NaN) above.
template <typename F>
PLANNER_HOST_DEVICE inline float polynomial(F f, float x, float n,
                                            double limit = kPolynomialDegreeLimit) {
  const double k = std::trunc(static_cast<double>(n));
  if (!std::isfinite(k) || k < 0 || k >= 9223372036854775808.0) return 0.0f;
  if (k > limit) return NAN;
  const int64_t degree = static_cast<int64_t>(k);
  if (degree == 0) return 1.0f;  // the forms below take degrees from 1
  return static_cast<float>(f(static_cast<double>(x), degree));
}

}  // namespace special
}  // namespace planner

// ---- the functions the rows call (float in, float out; double inside) ---------------------------

#define PLANNER_SPECIAL_UNARY(name, expr)                              \
  PLANNER_HOST_DEVICE inline float name(float xf) {                   \
    const double x = static_cast<double>(xf);                         \
    return static_cast<float>(expr);                                  \
  }

PLANNER_SPECIAL_UNARY(planner_erfinvf, planner::special::calc_erfinv(x))
PLANNER_SPECIAL_UNARY(planner_ndtrif, planner::special::calc_ndtri(x))
PLANNER_SPECIAL_UNARY(planner_erfcxf, planner::special::erfcx(x))
// (NaN at +-inf, as torch's and scipy's: exp(|x|) times a Chebyshev sum over sqrt(|x|))
PLANNER_SPECIAL_UNARY(planner_i0f, planner::special::modified_bessel_i0_forward(x))
PLANNER_SPECIAL_UNARY(planner_i1f, planner::special::modified_bessel_i1_forward(x))
PLANNER_SPECIAL_UNARY(planner_i0ef, planner::special::modified_bessel_i0_scaled(x))
PLANNER_SPECIAL_UNARY(planner_i1ef, planner::special::modified_bessel_i1_scaled(x))
PLANNER_SPECIAL_UNARY(planner_k0f,
                      std::exp(-x) * planner::special::scaled_modified_bessel_k0_forward(x))
PLANNER_SPECIAL_UNARY(planner_k1f,
                      std::exp(-x) * planner::special::scaled_modified_bessel_k1_forward(x))
PLANNER_SPECIAL_UNARY(planner_k0ef, planner::special::scaled_modified_bessel_k0_forward(x))
PLANNER_SPECIAL_UNARY(planner_k1ef, planner::special::scaled_modified_bessel_k1_forward(x))
PLANNER_SPECIAL_UNARY(planner_bessel_j0f, planner::special::bessel_j0_forward(x))
PLANNER_SPECIAL_UNARY(planner_bessel_j1f, planner::special::bessel_j1_forward(x))
PLANNER_SPECIAL_UNARY(planner_bessel_y0f, planner::special::bessel_y0_forward(x))
PLANNER_SPECIAL_UNARY(planner_bessel_y1f, planner::special::bessel_y1_forward(x))
PLANNER_SPECIAL_UNARY(planner_airy_aif, planner::special::airy_ai_forward(x))
PLANNER_SPECIAL_UNARY(planner_spherical_bessel_j0f,
                      planner::special::spherical_bessel_j0_forward(x))

#undef PLANNER_SPECIAL_UNARY

// frexp's parts: x = mantissa 2^exponent, |mantissa| in [0.5, 1) (x itself for 0, inf, NaN,
// with exponent 0)
PLANNER_HOST_DEVICE inline float planner_frexp_mantissaf(float x) {
  int exponent;
  return std::frexp(x, &exponent);
}

PLANNER_HOST_DEVICE inline float planner_frexp_exponentf(float x) {
  int exponent = 0;
  std::frexp(x, &exponent);
  return std::isfinite(x) ? static_cast<float>(exponent) : 0.0f;
}

PLANNER_HOST_DEVICE inline float planner_zetaf(float x, float q) {
  return static_cast<float>(planner::special::zeta<double>(x, q));
}

PLANNER_HOST_DEVICE inline float planner_igammaf(float a, float x) {
  return static_cast<float>(planner::special::incomplete_gamma<double>(a, x, true));
}

PLANNER_HOST_DEVICE inline float planner_igammacf(float a, float x) {
  return static_cast<float>(planner::special::incomplete_gamma<double>(a, x, false));
}

// polygamma of order n >= 1 (n a whole number the row writes as a float constant)
PLANNER_HOST_DEVICE inline float planner_polygammaf(float n, float x) {
  return static_cast<float>(planner::special::polygamma<double>(static_cast<int>(n), x));
}

// P(v, k) of each: the shifted Chebyshev polynomials are the plain ones at 2x - 1 (torch's
// shifted functions are theirs with x + x - 1 written out)
#define PLANNER_SPECIAL_POLYNOMIAL(name, fn, at, limit)                                   \
  PLANNER_HOST_DEVICE inline float name(float x, float n) {                               \
    return planner::special::polynomial(                                                  \
        [](double v, int64_t k) { return planner::special::fn<double>(at, k); }, x, n,     \
        limit);                                                                           \
  }
#define PLANNER_ANY_DEGREE planner::special::kPolynomialDegreeLimit

PLANNER_SPECIAL_POLYNOMIAL(planner_chebyshev_tf, chebyshev_polynomial_t_forward, v,
                           PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_chebyshev_uf, chebyshev_polynomial_u_forward, v,
                           PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_chebyshev_vf, chebyshev_polynomial_v_forward, v,
                           PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_chebyshev_wf, chebyshev_polynomial_w_forward, v,
                           PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_shifted_chebyshev_tf, chebyshev_polynomial_t_forward,
                           v + v - 1.0, PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_shifted_chebyshev_uf, chebyshev_polynomial_u_forward,
                           v + v - 1.0, PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_shifted_chebyshev_vf, chebyshev_polynomial_v_forward,
                           v + v - 1.0, PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_shifted_chebyshev_wf, chebyshev_polynomial_w_forward,
                           v + v - 1.0, PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_hermite_hf, hermite_polynomial_h_forward, v,
                           planner::special::kHermiteLimit)
PLANNER_SPECIAL_POLYNOMIAL(planner_hermite_hef, hermite_polynomial_he_forward, v,
                           planner::special::kHermiteLimit)
PLANNER_SPECIAL_POLYNOMIAL(planner_laguerre_lf, laguerre_polynomial_l_forward, v,
                           PLANNER_ANY_DEGREE)
PLANNER_SPECIAL_POLYNOMIAL(planner_legendre_pf, legendre_polynomial_p_forward, v,
                           PLANNER_ANY_DEGREE)

#undef PLANNER_ANY_DEGREE
#undef PLANNER_SPECIAL_POLYNOMIAL
