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
#include <math.h>
#include <string.h>

/* channels per block: one vector register (AVX-512: 16 floats, AVX2 and others: 8) */
#if defined(__AVX512F__)
#define LANES 16
#else
#define LANES 8
#endif
#define MAX_STATE 64
#define CHUNK 64 /* tokens whose steps are computed ahead of the recurrence */

/* LANES floats as one value: the compiler maps it to the widest vector registers of -march=native (one
 * AVX-512 register, two AVX2 ones, ...).  GCC and Clang vector extensions. */
typedef float vf __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t vi __attribute__((vector_size(LANES * sizeof(float))));

static inline vf splat(float x)
{
    return x - (vf){0}; /* x − 0 is x for every float (−0 too), so this is a bare broadcast; x + 0 would not be */
}

/* min and max: the vector instructions where the target has them (a blend of compare masks otherwise, which
 * GCC does not turn into them and which costs a third of the scan). */
#if defined(__AVX512F__) || defined(__AVX__)
#include <immintrin.h>
#endif

static inline vf vmin(vf a, vf b)
{
#if defined(__AVX512F__)
    return (vf)_mm512_min_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
    return (vf)_mm256_min_ps((__m256)a, (__m256)b);
#else
    vi m = a < b;
    return (vf)((m & (vi)a) | (~m & (vi)b));
#endif
}

static inline vf vmax(vf a, vf b)
{
#if defined(__AVX512F__)
    return (vf)_mm512_max_ps((__m512)a, (__m512)b);
#elif defined(__AVX__)
    return (vf)_mm256_max_ps((__m256)a, (__m256)b);
#else
    vi m = a > b;
    return (vf)((m & (vi)a) | (~m & (vi)b));
#endif
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

/* One block of LANES channels [cb, cb + LANES) over all L tokens; B and C point at its group's n values of
 * token 0.  Inlined with n a constant (the paper's d_state, 8), so the loops over the states unroll and the
 * states and decay rates stay in registers. */
static inline __attribute__((always_inline)) void scan_block(const float *u, const float *delta, const float *A, const float *B,
                                                             const float *C, vf dd, vf bb, float *y, int64_t L, int64_t n,
                                                             int64_t ld_u, int64_t ld_bc, int64_t cb, int use_softplus)
{
    vf a[MAX_STATE], h[MAX_STATE];
    float col[LANES];
#pragma GCC unroll 16
    for (int64_t k = 0; k < n; k++) {
        for (int j = 0; j < LANES; j++)
            col[j] = A[(cb + j) * n + k];
        a[k] = load(col);
        h[k] = splat(0.0f);
    }
    /* Tokens in chunks: first every token's step Δ_t (softplus: a long chain of dependent operations) and Δ_t u_t,
     * which do not depend on each other, then the recurrence, whose exponentials then wait on nothing. */
    vf dts[CHUNK], dus[CHUNK];
    for (int64_t t0 = 0; t0 < L; t0 += CHUNK) {
        const int64_t m = L - t0 < CHUNK ? L - t0 : CHUNK;
        for (int64_t i = 0; i < m; i++) {
            const vf dt = load(delta + (t0 + i) * ld_u + cb) + bb;
            dts[i] = use_softplus ? vsoftplus(dt) : dt;
            dus[i] = dts[i] * load(u + (t0 + i) * ld_u + cb);
        }
        for (int64_t i = 0; i < m; i++) {
            const int64_t t = t0 + i;
            const float *Bt = B + t * ld_bc, *Ct = C + t * ld_bc;
            const vf dt = dts[i], du = dus[i];
            vf acc = dd * load(u + t * ld_u + cb);
#pragma GCC unroll 16
            for (int64_t k = 0; k < n; k++) {
                h[k] = vexp(dt * a[k]) * h[k] + du * Bt[k];
                acc += Ct[k] * h[k];
            }
            store(y + t * ld_u + cb, acc);
        }
    }
}

int dgno_lanes(void)
{
    return LANES;
}

/* The channels [c0, c1) of one sequence; d, c0, c1 and d / groups are multiples of LANES (the caller pads
 * every group's channels, so a block of LANES channels lies in one group and shares its B and C).
 * Returns 0; 1 when n exceeds MAX_STATE, 2 when a channel count is not a multiple of LANES (nothing computed). */
int dgno_scan_f32(const float *u, const float *delta, const float *A, const float *B, const float *C, const float *D,
                  const float *bias, float *y, int64_t L, int64_t d, int64_t n, int64_t groups, int64_t ld_u, int64_t ld_bc,
                  int64_t c0, int64_t c1, int use_softplus)
{
    if (n > MAX_STATE)
        return 1;
    if (d % groups || (d / groups) % LANES || c0 % LANES || c1 % LANES)
        return 2;
    const int64_t per_group = d / groups;
    for (int64_t cb = c0; cb < c1; cb += LANES) {
        const vf dd = D ? load(D + cb) : splat(0.0f);
        const vf bb = bias ? load(bias + cb) : splat(0.0f);
        const float *Bg = B + cb / per_group * n, *Cg = C + cb / per_group * n;
        if (n == 8)
            scan_block(u, delta, A, Bg, Cg, dd, bb, y, L, 8, ld_u, ld_bc, cb, use_softplus);
        else if (n == 16)
            scan_block(u, delta, A, Bg, Cg, dd, bb, y, L, 16, ld_u, ld_bc, cb, use_softplus);
        else
            scan_block(u, delta, A, Bg, Cg, dd, bb, y, L, n, ld_u, ld_bc, cb, use_softplus);
    }
    return 0;
}

/* Depth-wise k×k convolution (stride 1, zero padding k/2) on channels-last data, rows [y0, y1) of one image.
 *
 *     out[y, x, c] = bias[c] + Σ_{i,j} w[i, j, c] · in[y + i − k/2, x + j − k/2, c]
 *
 * x and out are (H, W, C), any C; w is (k, k, C), bias (C) or NULL.  Every tap is one multiply-add over
 * the C contiguous channels of a pixel, into that pixel's output row, which stays in the L1 cache. */
static inline void depthwise_pixel(const float *restrict x, const float *restrict w, const float *restrict bias,
                                   float *restrict o, int64_t H, int64_t W, int64_t C, int64_t k, int64_t y, int64_t xx)
{
    const int64_t r = k / 2;
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

void dgno_depthwise_f32(const float *restrict x, const float *restrict w, const float *restrict bias,
                        float *restrict out, int64_t H, int64_t W, int64_t C, int64_t k, int64_t y0, int64_t y1)
{
    for (int64_t y = y0; y < y1; y++)
        for (int64_t xx = 0; xx < W; xx++)
            depthwise_pixel(x, w, bias, out + (y * W + xx) * C, H, W, C, k, y, xx);
}

/* erf(x), absolute error below 2e-7: 1 − t·exp(−x² + P(t)) with t = 1 / (1 + |x|/2) (the Chebyshev-fitted
 * form of Numerical Recipes' erfc), odd in x. */
static inline vf verf(vf x)
{
    const vf ax = vmax(x, -x);
    const vf t = 1.0f / (1.0f + 0.5f * ax);
    vf p = splat(0.17087277f);
    p = p * t - 0.82215223f;
    p = p * t + 1.48851587f;
    p = p * t - 1.13520398f;
    p = p * t + 0.27886807f;
    p = p * t - 0.18628806f;
    p = p * t + 0.09678418f;
    p = p * t + 0.37409196f;
    p = p * t + 1.00002368f;
    p = p * t - 1.26551223f;
    const vf erfc = t * vexp(p - ax * ax);
    const vf e = 1.0f - erfc;
    vi neg = x < 0.0f;
    return (vf)((neg & (vi)(-e)) | (~neg & (vi)e));
}

/* Restormer's GDFN gate on the LANES channels at c of one pixel: GELU(a) ⊙ b, a = conv[:half], b = conv[half:]. */
static inline vf gelu_gate(const float *conv, int64_t c, int64_t half)
{
    const vf a = load(conv + c);
    return 0.5f * a * (1.0f + verf(a * 0.70710678118654752f)) * load(conv + half + c);
}

/* A depth-wise k×k convolution (as dgno_depthwise_f32, C channels, a multiple of LANES) followed by the ASSM's
 * positional gate, out (H, W, C) = x ⊙ σ(conv), rows [y0, y1) of one image; the convolved pixel stays in `row`
 * (C floats, the caller's scratch), so the map before the gate is never written out.
 * Returns 0, or 2 when C is not a multiple of LANES. */
int dgno_depthwise_sigmoid_f32(const float *restrict x, const float *restrict w, const float *restrict bias,
                               float *restrict out, float *restrict row, int64_t H, int64_t W, int64_t C, int64_t k,
                               int64_t y0, int64_t y1)
{
    if (C % LANES)
        return 2;
    for (int64_t y = y0; y < y1; y++)
        for (int64_t xx = 0; xx < W; xx++) {
            const int64_t pixel = y * W + xx;
            depthwise_pixel(x, w, bias, row, H, W, C, k, y, xx);
            for (int64_t c = 0; c < C; c += LANES)
                store(out + pixel * C + c, load(x + pixel * C + c) / (1.0f + vexp(-load(row + c))));
        }
    return 0;
}

/* Matrix product for the 1×1 convolutions and linear maps of inference:  C (M, N) = A (M, K) · Wᵀ + bias.
 *
 * A's rows are pixels (or tokens) with their K channels contiguous, row stride lda; C's rows are N
 * contiguous floats.  W is packed by the caller into panels of PANEL = 2·LANES output channels, each
 * K × PANEL floats (panel p holds W[p·PANEL + j, k] at k·PANEL + j, zero past N).  A block of ROWS rows
 * times one panel is ROWS × 2 vector accumulators, which stay in registers over the whole sum over k:
 * with the few channels of these networks (K of 48 to 200, where library GEMMs run at a third to a half
 * of the machine's peak) every A value is read once per panel and every W value once per block.
 * Rows [m0, m1) are computed (one thread's share). */
#define ROWS 6
#define PANEL (2 * LANES)

static inline void gemm_block(const float *restrict A, int64_t lda, const float *restrict w, const float *restrict bias,
                              float *restrict C, int64_t N, int64_t K, int64_t i, int64_t rows, int64_t p)
{
    vf acc[ROWS][2];
    const vf b0 = bias ? load(bias + p) : splat(0.0f), b1 = bias ? load(bias + p + LANES) : splat(0.0f);
    for (int r = 0; r < ROWS; r++) {
        acc[r][0] = b0;
        acc[r][1] = b1;
    }
    const float *a = A + i * lda;
    if (rows == ROWS) {
#pragma GCC unroll 2
        for (int64_t k = 0; k < K; k++) {
            const vf w0 = load(w + k * PANEL), w1 = load(w + k * PANEL + LANES);
#pragma GCC unroll 6
            for (int r = 0; r < ROWS; r++) {
                const vf ar = splat(a[r * lda + k]);
                acc[r][0] += ar * w0;
                acc[r][1] += ar * w1;
            }
        }
    } else {
        for (int64_t k = 0; k < K; k++) {
            const vf w0 = load(w + k * PANEL), w1 = load(w + k * PANEL + LANES);
            for (int r = 0; r < rows; r++) {
                const vf ar = splat(a[r * lda + k]);
                acc[r][0] += ar * w0;
                acc[r][1] += ar * w1;
            }
        }
    }
    const int64_t width = N - p < PANEL ? N - p : PANEL;
    for (int r = 0; r < rows; r++) {
        float *c = C + (i + r) * N + p;
        if (width == PANEL) {
            store(c, acc[r][0]);
            store(c + LANES, acc[r][1]);
        } else {
            float tmp[PANEL];
            store(tmp, acc[r][0]);
            store(tmp + LANES, acc[r][1]);
            memcpy(c, tmp, (size_t)width * sizeof(float));
        }
    }
}

void dgno_gemm_f32(const float *restrict A, int64_t lda, const float *restrict Wp, const float *restrict bias,
                   float *restrict C, int64_t N, int64_t K, int64_t m0, int64_t m1)
{
    for (int64_t i = m0; i < m1; i += ROWS) {
        const int64_t rows = m1 - i < ROWS ? m1 - i : ROWS;
        for (int64_t p = 0; p < N; p += PANEL)
            gemm_block(A, lda, Wp + (p / PANEL) * K * PANEL, bias, C, N, K, i, rows, p);
    }
}

int dgno_panel(void)
{
    return PANEL;
}

/* The d features of every head of one pixel, normalised as the operator layers' per-head LayerNorm does:
 * (f − μ) / (s + ε) · w + b with s the unbiased standard deviation; feature c of the pixel goes to out[c·P]. */
static inline void head_norm(const float *f, const float *w, const float *b, int64_t heads, int64_t d, float eps,
                             float *out, int64_t P)
{
    for (int64_t h = 0; h < heads; h++) {
        const float *fh = f + h * d;
        float sum = 0.0f;
        for (int64_t t = 0; t < d; t++)
            sum += fh[t];
        const float mean = sum / (float)d;
        float ss = 0.0f;
        for (int64_t t = 0; t < d; t++)
            ss += (fh[t] - mean) * (fh[t] - mean);
        const float scale = 1.0f / (sqrtf(ss / (float)(d - 1)) + eps);
        for (int64_t t = 0; t < d; t++)
            out[(h * d + t) * P] = b[h * d + t] + (fh[t] - mean) * scale * w[h * d + t];
    }
}

/* The Galerkin layers' cut of one image into p1 × p2 elements, from its channels-last [Q | K | V] map
 * qkv (H, W, 3C), into q, k, v (nH, nW, C, p1, p2) each (C = heads · d, the samples last), K and V
 * normalised per head (kw, kb, vw, vb: (C,)).  Element rows [r0, r1). */
void dgno_dg_cut_f32(const float *restrict qkv, int64_t H, int64_t W, int64_t C, int64_t heads, int64_t p1, int64_t p2,
                     const float *kw, const float *kb, const float *vw, const float *vb, float eps, float *restrict q,
                     float *restrict k, float *restrict v, int64_t r0, int64_t r1)
{
    const int64_t d = C / heads, nW = W / p2, P = p1 * p2;
    (void)H;
    for (int64_t er = r0; er < r1; er++)
        for (int64_t ec = 0; ec < nW; ec++) {
            const int64_t base = (er * nW + ec) * C * P;
            for (int64_t i = 0; i < p1; i++)
                for (int64_t j = 0; j < p2; j++) {
                    const float *px = qkv + ((er * p1 + i) * W + ec * p2 + j) * 3 * C;
                    const int64_t s = base + i * p2 + j;
                    for (int64_t c = 0; c < C; c++)
                        q[s + c * P] = px[c];
                    head_norm(px + C, kw, kb, heads, d, eps, k + s, P);
                    head_norm(px + 2 * C, vw, vb, heads, d, eps, v + s, P);
                }
        }
}

/* Q K_e back onto the map, plus the layer's input:  out (H, W, C) = x + z,  z[(h, j), y] = Σ_ℓ q[(h, ℓ), y] · K[h, ℓ, j]
 * on every element, q (nH, nW, C, p1, p2), K (nH, nW, heads, d, d), x channels-last (H, W, C).  Element rows [r0, r1). */
void dgno_dg_apply_f32(const float *restrict q, const float *restrict K, const float *restrict x, float *restrict out,
                       int64_t H, int64_t W, int64_t C, int64_t heads, int64_t p1, int64_t p2, int64_t r0, int64_t r1)
{
    const int64_t d = C / heads, nW = W / p2, P = p1 * p2;
    (void)H;
    for (int64_t er = r0; er < r1; er++)
        for (int64_t ec = 0; ec < nW; ec++) {
            const int64_t e = er * nW + ec;
            const float *qe = q + e * C * P, *Ke = K + e * heads * d * d;
            for (int64_t i = 0; i < p1; i++)
                for (int64_t j = 0; j < p2; j++) {
                    const int64_t pixel = (er * p1 + i) * W + ec * p2 + j, s = i * p2 + j;
                    const float *xi = x + pixel * C;
                    float *o = out + pixel * C;
                    for (int64_t h = 0; h < heads; h++)
                        for (int64_t jj = 0; jj < d; jj++) {
                            float acc = 0.0f;
                            for (int64_t l = 0; l < d; l++)
                                acc += qe[(h * d + l) * P + s] * Ke[(h * d + l) * d + jj];
                            o[h * d + jj] = xi[h * d + jj] + acc;
                        }
                }
        }
}

/* C (rows × N, row stride N) = A (rows × K, row stride lda) · Wᵀ for one run of rows: dgno_gemm_f32's blocks. */
static void gemm_rows(const float *A, int64_t lda, const float *Wp, float *C, int64_t N, int64_t K, int64_t rows)
{
    for (int64_t i = 0; i < rows; i += ROWS)
        for (int64_t p = 0; p < N; p += PANEL)
            gemm_block(A, lda, Wp + (p / PANEL) * K * PANEL, 0, C, N, K, i, rows - i < ROWS ? rows - i : ROWS, p);
}

/* Restormer's GDFN on rows [y0, y1) of one image:  out = W_out (GELU(a) ⊙ b),  [a, b] = DWConv_k×k(W_in x).
 *
 * x and out are channels-last (H, W, C); W_in (2h' × C) and W_out (C × h') packed as for dgno_gemm_f32, the
 * depth-wise weights w_dw (k·k, 2h'), h' a multiple of LANES.  The hidden map (2h' channels, five times the
 * input) is never written out: its rows are made one at a time into a ring of k rows, and each output row
 * is convolved, gated and projected while they are in cache.  scratch: k·W·2h' + W·h' + 2h' floats. */
void dgno_gdfn_f32(const float *restrict x, const float *restrict w_in, const float *restrict w_dw, const float *restrict w_out,
                   float *restrict out, float *restrict scratch, int64_t H, int64_t W, int64_t C, int64_t hid, int64_t k,
                   int64_t y0, int64_t y1)
{
    const int64_t r = k / 2, c2 = 2 * hid;
    float *ring = scratch, *gated = scratch + k * W * c2, *conv = gated + W * hid;
    int64_t next = y0 - r > 0 ? y0 - r : 0; /* the next hidden row to make */
    for (int64_t y = y0; y < y1; y++) {
        for (; next <= y + r && next < H; next++)
            gemm_rows(x + next * W * C, C, w_in, ring + (next % k) * W * c2, c2, C, W);
        for (int64_t xx = 0; xx < W; xx++) {
            for (int64_t c = 0; c < c2; c++)
                conv[c] = 0.0f;
            for (int64_t i = 0; i < k; i++) {
                const int64_t yi = y + i - r;
                if (yi < 0 || yi >= H)
                    continue;
                const float *row = ring + (yi % k) * W * c2;
                for (int64_t j = 0; j < k; j++) {
                    const int64_t xj = xx + j - r;
                    if (xj < 0 || xj >= W)
                        continue;
                    const float *restrict src = row + xj * c2, *restrict wt = w_dw + (i * k + j) * c2;
                    for (int64_t c = 0; c < c2; c++)
                        conv[c] += wt[c] * src[c];
                }
            }
            for (int64_t c = 0; c < hid; c += LANES)
                store(gated + xx * hid + c, gelu_gate(conv, c, hid));
        }
        gemm_rows(gated, hid, w_out, out + y * W * C, C, hid, W);
    }
}
