// A tiny CUDA program whose failures are real: it writes one int on the GPU, in bounds (`ok`),
// 1 TiB past its allocation (`illegal`) or one byte off alignment (`misaligned`), and reports the
// CUDA runtime's own error text the way PyTorch does. Built for another arch than the GPU's, it
// fails with the runtime's "no kernel image" error: the mixed-GPU failure on one card.
#include <cstdio>
#include <cstring>
#include <cuda_runtime.h>

__global__ void store(int *base, long long offset_bytes) {
    *reinterpret_cast<int *>(reinterpret_cast<char *>(base) + offset_bytes) = 42;
}

static int fail(cudaError_t err) {
    std::fprintf(stderr, "RuntimeError: CUDA error: %s\n", cudaGetErrorString(err));
    return 1;
}

int main(int argc, char **argv) {
    const char *mode = argc > 1 ? argv[1] : "ok";
    long long offset = 0;
    if (std::strcmp(mode, "illegal") == 0) offset = 1LL << 40;
    if (std::strcmp(mode, "misaligned") == 0) offset = 1;
    int *buffer = nullptr;
    cudaError_t err = cudaMalloc(&buffer, 1024);
    if (err != cudaSuccess) return fail(err);
    store<<<1, 1>>>(buffer, offset);
    err = cudaGetLastError();
    if (err == cudaSuccess) err = cudaDeviceSynchronize();
    if (err != cudaSuccess) return fail(err);
    int value = 0;
    err = cudaMemcpy(&value, buffer, sizeof value, cudaMemcpyDeviceToHost);
    if (err != cudaSuccess) return fail(err);
    std::printf("probe %s: read back %d\n", mode, value);
    return value == 42 ? 0 : 2;
}
