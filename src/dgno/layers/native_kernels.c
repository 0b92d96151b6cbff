/* The selective scan (Mamba S6) for inference on a CPU, one pass over the tokens.
 *
 *     h_t = exp(Δ_t A) ⊙ h_{t−1} + Δ_t u_t B_t,    y_t = C_t · h_t + D u_t,    Δ_t = softplus(δ_t + bias)
 *
 * Each call runs the channels [c0, c1) of one sequence.  Channels are taken LANES at a time: the
 * N state values of LANES channels live in registers and every token updates them in place, so the
 * state is never written to memory (the PyTorch scans materialise it, N times the input).  Inputs
 * are token-major: element (t, c) of u and δ is at t·ld_u + c, element (t, n) of B and C of group g
 * at t·ld_bc + g·N + n; the output y has u's layout.
 *
 * exp and log1p are written here as short polynomials (relative error below 2e-7), so the loops
 * vectorise with any C99 compiler and no vector maths library.  Built by dgno.layers.scan_native
 * with the local compiler and -O3 -march=native, at first use.
 */
#include <stdint.h>
#include <string.h>

#define LANES 16
#define MAX_STATE 64

/* LANES floats as one value: the compiler maps it to the widest vector registers of -march=native (one
 * AVX-512 register, two AVX2 ones, ...).  GCC and Clang vector extensions. */
typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(LANES * sizeof(float))));

static inline vf splat(float x)
{
    return (vf){0} + x;
}

static inline vf vmin(vf a, vf b)
{
    vi m = a < b;
    return (vf)((m & (vi)a) | (~m & (vi)b));
}

static inline vf vmax(vf a, vf b)
{
    vi m = a > b;
    return (vf)((m & (vi)a) | (~m & (vi)b));
}

static inline vf load(const float *p)
{
    vf v;
    memcpy(&v, p, sizeof v);
    return v;
}

static inline void store(float *p, vf v)
{
    memcpy(p, &v, sizeof v);
}

/* exp(x) for x in [-87, 88]: x = k ln2 + r, |r| <= ln2/2, exp(r) by a degree-7 Taylor polynomial, 2^k by
 * building the floats' exponent bits.  k is rounded by adding and subtracting 1.5·2^23 (to nearest even, no
 * branch); the file is compiled without -ffast-math, so the compiler keeps that rounding. */
static inline vf vexp(vf x)
{
    x = vmin(vmax(x, splat(-87.0f)), splat(88.0f));
    const vf kf = (x * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
    vf r = x - kf * 0.693145751953125f;
    r = r - kf * 1.42860682030941723212e-6f;
    vf p = splat(1.98412698412698413e-4f);
    p = p * r + 1.38888888888888889e-3f;
    p = p * r + 8.33333333333333333e-3f;
    p = p * r + 4.16666666666666667e-2f;
    p = p * r + 1.66666666666666667e-1f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    const vi bits = (__builtin_convertvector(kf, vi) + 127) << 23;
    return p * (vf)bits;
}

/* log(1 + y) for y in [0, 1]: 2 atanh(s) with s = y / (2 + y) in [0, 1/3], a series in s² (no rounding of 1 + y). */
static inline vf vlog1p_unit(vf y)
{
    const vf s = y / (2.0f + y);
    const vf s2 = s * s;
    vf p = splat(1.0f / 15.0f);
    p = p * s2 + 1.0f / 13.0f;
    p = p * s2 + 1.0f / 11.0f;
    p = p * s2 + 1.0f / 9.0f;
    p = p * s2 + 1.0f / 7.0f;
    p = p * s2 + 1.0f / 5.0f;
    p = p * s2 + 1.0f / 3.0f;
    p = p * s2 + 1.0f;
    return 2.0f * s * p;
}

/* softplus(x) = max(x, 0) + log(1 + exp(−|x|)). */
static inline vf vsoftplus(vf x)
{
    const vf ax = vmax(x, -x);
    return vmax(x, splat(0.0f)) + vlog1p_unit(vexp(-ax));
}

/* The channels [c0, c1) of one sequence; d, c0 and c1 are multiples of LANES (the caller pads the channels).
 * Returns 0; 1 when n exceeds MAX_STATE, 2 when a channel count is not a multiple of LANES (nothing computed). */
int dgno_scan_f32(const float *u, const float *delta, const float *A, const float *B, const float *C, const float *D,
                  const float *bias, float *y, int64_t L, int64_t d, int64_t n, int64_t groups, int64_t ld_u, int64_t ld_bc,
                  int64_t c0, int64_t c1, int use_softplus)
{
    if (n > MAX_STATE)
        return 1;
    if (d % LANES || c0 % LANES || c1 % LANES || d % groups)
        return 2;
    const int64_t per_group = d / groups;
    for (int64_t cb = c0; cb < c1; cb += LANES) {
        vf a[MAX_STATE], h[MAX_STATE];
        float col[LANES];
        for (int64_t k = 0; k < n; k++) {
            for (int j = 0; j < LANES; j++)
                col[j] = A[(cb + j) * n + k];
            a[k] = load(col);
            h[k] = splat(0.0f);
        }
        const vf dd = D ? load(D + cb) : splat(0.0f);
        const vf bb = bias ? load(bias + cb) : splat(0.0f);
        const int64_t g_first = cb / per_group, g_last = (cb + LANES - 1) / per_group;
        for (int64_t t = 0; t < L; t++) {
            const float *Bt = B + t * ld_bc, *Ct = C + t * ld_bc;
            const vf ut = load(u + t * ld_u + cb);
            vf dt = load(delta + t * ld_u + cb) + bb;
            if (use_softplus)
                dt = vsoftplus(dt);
            const vf du = dt * ut;
            vf acc = dd * ut;
            if (g_first == g_last) { /* the usual case: the LANES channels share one group's B and C */
                const float *Bg = Bt + g_first * n, *Cg = Ct + g_first * n;
                for (int64_t k = 0; k < n; k++) {
                    h[k] = vexp(dt * a[k]) * h[k] + du * Bg[k];
                    acc += Cg[k] * h[k];
                }
            } else {
                for (int64_t k = 0; k < n; k++) {
                    float bk[LANES], ck[LANES];
                    for (int j = 0; j < LANES; j++) {
                        bk[j] = Bt[(cb + j) / per_group * n + k];
                        ck[j] = Ct[(cb + j) / per_group * n + k];
                    }
                    h[k] = vexp(dt * a[k]) * h[k] + du * load(bk);
                    acc += load(ck) * h[k];
                }
            }
            store(y + t * ld_u + cb, acc);
        }
    }
    return 0;
}

/* Depth-wise k×k convolution (stride 1, zero padding k/2) on channels-last data, rows [y0, y1) of one image.
 *
 *     out[y, x, c] = bias[c] + Σ_{i,j} w[i, j, c] · in[y + i − k/2, x + j − k/2, c]
 *
 * x and out are (H, W, C), any C; w is (k, k, C), bias (C) or NULL.  Every tap is one multiply-add over
 * the C contiguous channels of a pixel, into that pixel's output row, which stays in the L1 cache. */
void dgno_depthwise_f32(const float *restrict x, const float *restrict w, const float *restrict bias,
                        float *restrict out, int64_t H, int64_t W, int64_t C, int64_t k, int64_t y0, int64_t y1)
{
    const int64_t r = k / 2;
    for (int64_t y = y0; y < y1; y++)
        for (int64_t xx = 0; xx < W; xx++) {
            float *restrict o = out + (y * W + xx) * C;
            for (int64_t c = 0; c < C; c++)
                o[c] = bias ? bias[c] : 0.0f;
            for (int64_t i = 0; i < k; i++) {
                const int64_t yi = y + i - r;
                if (yi < 0 || yi >= H)
                    continue;
                for (int64_t j = 0; j < k; j++) {
                    const int64_t xj = xx + j - r;
                    if (xj < 0 || xj >= W)
                        continue;
                    const float *restrict src = x + (yi * W + xj) * C, *restrict wt = w + (i * k + j) * C;
                    for (int64_t c = 0; c < C; c++)
                        o[c] += wt[c] * src[c];
                }
            }
        }
}
