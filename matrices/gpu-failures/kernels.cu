// Native CUDA failures for gpu-failures.toml, reported the way CUDA's own samples (helper_cuda.h's
// checkCudaErrors) and many kernel libraries report them: file, line, error code and name, then
// the call. Launches the runtime refuses: `block-too-big` asks for a block of 2048 threads (the
// limit is 1024; CUDA 13 calls it an invalid value, not an invalid configuration, as it does a
// grid 70000 blocks high), `too-many-registers` 1024 threads of a kernel
// that keeps 96 floats live (more registers than a block may hold). `trap` runs a kernel that
// executes `trap`: a device-side abort without an assert message.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <cuda_runtime.h>

#define CHECK(call) check((call), #call, __FILE__, __LINE__)

static void check(cudaError_t err, const char *call, const char *file, int line) {
    if (err == cudaSuccess) return;
    std::fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\"\n", file, line,
                 static_cast<int>(err), cudaGetErrorName(err), call);
    std::fprintf(stderr, "%s\n", cudaGetErrorString(err));
    std::exit(EXIT_FAILURE);
}

__global__ void fill(float *out) { out[threadIdx.x] = 1.0f; }

__global__ void abort_kernel(float *out) {
    out[threadIdx.x] = 1.0f;
    if (threadIdx.x == 7) __trap();
}

// 96 accumulators that all stay live through the loop: well over 64 registers a thread.
__global__ void register_heavy(float *out) {
    float acc[96];
#pragma unroll
    for (int i = 0; i < 96; i++) acc[i] = out[i * blockDim.x + threadIdx.x];
#pragma unroll
    for (int k = 1; k < 32; k++) {
#pragma unroll
        for (int i = 0; i < 96; i++) acc[i] = acc[i] * acc[(i + k) % 96] + 1.0f;
    }
    float sum = 0.0f;
#pragma unroll
    for (int i = 0; i < 96; i++) sum += acc[i];
    out[threadIdx.x] = sum;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "";
    float *out = nullptr;
    CHECK(cudaMalloc(&out, 96 * 1024 * sizeof(float)));
    std::printf("%s: launching on device 0\n", mode);
    std::fflush(stdout);
    if (std::strcmp(mode, "block-too-big") == 0) {
        fill<<<1, 2048>>>(out);
    } else if (std::strcmp(mode, "too-many-registers") == 0) {
        register_heavy<<<1, 1024>>>(out);
    } else if (std::strcmp(mode, "trap") == 0) {
        abort_kernel<<<1, 32>>>(out);
    } else {
        std::fprintf(stderr, "unknown mode %s\n", mode);
        return 2;
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    std::printf("%s: finished\n", mode);
    return 0;
}
