// Rotary position embedding, in place on every head of the first rows of x
// ([rows, heads * head_dim], f32). cos/sin are the host-computed tables
// [max_positions, head_dim / 2], already scaled (llama3 / YaRN, attention factor), so the
// GPU rotates exactly as the CPU reference does. NeoX style rotates (j, j + half);
// interleaved (GPT-J) rotates (2j, 2j + 1). Positions are read from device memory, so a
// captured graph replays at new positions. Grid: (rows, heads).
extern "C" __global__ void rope_f32(float* x, int cols, int head_dim, const float* cos_table,
                                    const float* sin_table, const int* positions, int interleaved) {
    const int half = head_dim / 2;
    float* head = x + (long long)blockIdx.x * cols + (long long)blockIdx.y * head_dim;
    const long long pos = positions[blockIdx.x];
    const float* c = cos_table + pos * half;
    const float* s = sin_table + pos * half;
    for (int j = threadIdx.x; j < half; j += blockDim.x) {
        const int a = interleaved ? 2 * j : j;
        const int b = interleaved ? 2 * j + 1 : j + half;
        const float x0 = head[a], x1 = head[b];
        head[a] = x0 * c[j] - x1 * s[j];
        head[b] = x1 * c[j] + x0 * s[j];
    }
}
