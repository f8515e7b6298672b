# Shared by the modules whose float32 loops run as wide-vector clones (`include "_wide_math.pxi"`):
# TAPEFLOW_WIDE marks a function GCC compiles twice, for AVX2 with FMA and for the baseline, the
# loader picking one for the CPU at hand; tapeflow_expf is exp written so that such loops vectorize:
# range reduction to [-ln2/2, ln2/2] and a degree-6 polynomial (within 2 ulp), the input clamped
# to [-87, 88].

cdef extern from *:
    """
    #if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
    #define TAPEFLOW_WIDE __attribute__((target_clones("arch=x86-64-v3", "default")))
    #else
    #define TAPEFLOW_WIDE
    #endif
    static inline float tapeflow_expf(float x) {
        x = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
        float t = x * 1.44269504088896341f + 12582912.0f;
        float n = t - 12582912.0f;
        float r = x - n * 0.693359375f + n * 2.12194440e-4f;
        float y = ((((1.9875691500e-4f * r + 1.3981999507e-3f) * r + 8.3334519073e-3f) * r
                    + 4.1665795894e-2f) * r + 1.6666665459e-1f) * r + 5.0000001201e-1f;
        y = y * r * r + r + 1.0f;
        union { float f; int i; } scale;
        scale.i = ((int)n + 127) << 23;
        return y * scale.f;
    }
    """
