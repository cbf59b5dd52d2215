"""Derives the coefficients of the float32 erf in the CPU code generator's prelude (csrc/codegen/cpu_prelude.cc).

erf is odd, so only |x| matters, and for |x| > 3.92 it rounds to 1.0f. Two polynomials cover the rest:
    |x| <  1:  erf(x) = |x| * P(x^2)     P of degree 6 (relative accuracy near 0)
    |x| >= 1:  erf(x) = Q(|x| - 2.46)    Q of degree 12 on [1, 3.92]
Each is a least-squares fit in double precision on 4000 Chebyshev nodes of its interval, against
mpmath's erf. Evaluated in float32 with FMAs (Horner's rule), the result is within 2.5 ulp of the
exact erf (checked over every float32 by tests/test_cpu_executor.py on a grid).

    python tools/fit_erf.py     # prints the two coefficient lists, constant term first
"""
import mpmath
import numpy as np


def fit(f, lo, hi, degree, center, nodes=4000):
    k = np.arange(nodes)
    x = (lo + hi) / 2 + (hi - lo) / 2 * np.cos(np.pi * (k + 0.5) / nodes)
    powers = np.vander(x - center, degree + 1, increasing=True)
    coefficients, *_ = np.linalg.lstsq(powers, np.array([f(v) for v in x]), rcond=None)
    return coefficients


def main():
    small = fit(lambda s: float(mpmath.erf(mpmath.sqrt(s)) / mpmath.sqrt(s)) if s > 0 else float(2 / mpmath.sqrt(mpmath.pi)),
                0, 1, 6, 0)
    large = fit(lambda x: float(mpmath.erf(x)), 1, 3.92, 12, 2.46)
    for name, c in (("P (in x^2)", small), ("Q (in |x| - 2.46)", large)):
        print(name + ":", ", ".join("%.9ef" % np.float32(v) for v in c))


if __name__ == "__main__":
    main()
