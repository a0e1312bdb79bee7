// Quantizes fp32 rows with a llama.cpp build's own quantizer, for mox's quant oracle
// (tools/quant_oracle/make_quant_oracle.py builds and runs it; nothing in mox links it).
//
//   quantize_with_ggml --version
//   quantize_with_ggml TYPE ROWS.f32 LENGTHS.txt OUT.bin
//
// ROWS.f32 holds the rows back to back as little-endian fp32; LENGTHS.txt holds each row's element
// count, one per line. OUT.bin receives each row's blocks back to back, in row order.
//
// Weight types go through ggml_quantize_chunk() with no importance matrix: the call llama-quantize
// makes for every tensor when it is not given an imatrix (and what mox convert reproduces). The two
// activation formats that ggml_quantize_chunk() does not take (Q8_1, Q8_K) use their reference
// functions quantize_row_q8_1_ref() / quantize_row_q8_K_ref(). Each row is its own one-row chunk.
#include "ggml-quants.h"
#include "ggml.h"

#include <ctype.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int same_name(const char* a, const char* b) {
    for (; *a && *b; ++a, ++b)
        if (tolower((unsigned char)*a) != tolower((unsigned char)*b)) return 0;
    return *a == *b;
}

static void* read_file(const char* path, size_t* size) {
    FILE* f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "%s: cannot open\n", path);
        exit(1);
    }
    fseek(f, 0, SEEK_END);
    const long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    void* data = malloc(n > 0 ? (size_t)n : 1);
    if (n > 0 && fread(data, 1, (size_t)n, f) != (size_t)n) {
        fprintf(stderr, "%s: short read\n", path);
        exit(1);
    }
    fclose(f);
    *size = (size_t)n;
    return data;
}

int main(int argc, char** argv) {
    if (argc == 2 && strcmp(argv[1], "--version") == 0) {
        printf("%s %s\n", ggml_version(), ggml_commit());
        return 0;
    }
    if (argc != 5) {
        fprintf(stderr, "usage: %s TYPE ROWS.f32 LENGTHS.txt OUT.bin | --version\n", argv[0]);
        return 2;
    }
    int type = -1;
    for (int t = 0; t < GGML_TYPE_COUNT; ++t) {
        const char* name = ggml_type_name((enum ggml_type)t);
        if (name && ggml_blck_size((enum ggml_type)t) > 0 && same_name(name, argv[1])) type = t;
    }
    if (type < 0) {
        fprintf(stderr, "unknown type %s\n", argv[1]);
        return 1;
    }
    if (ggml_quantize_requires_imatrix((enum ggml_type)type)) {
        fprintf(stderr, "%s needs an importance matrix; the oracle covers only types that do not\n", argv[1]);
        return 1;
    }

    size_t rows_size = 0;
    const float* rows = read_file(argv[2], &rows_size);
    FILE* lengths = fopen(argv[3], "r");
    FILE* out = fopen(argv[4], "wb");
    if (!lengths || !out) {
        fprintf(stderr, "cannot open %s or %s\n", argv[3], argv[4]);
        return 1;
    }

    const int64_t blck = ggml_blck_size((enum ggml_type)type);
    size_t used = 0;
    long long n = 0;
    while (fscanf(lengths, "%lld", &n) == 1) {
        if (n <= 0 || n % blck != 0 || (used + (size_t)n) * sizeof(float) > rows_size) {
            fprintf(stderr,
                    "row of %lld elements: not a whole number of %lld-element blocks, or past the end\n", n,
                    (long long)blck);
            return 1;
        }
        const size_t bytes = ggml_row_size((enum ggml_type)type, n);
        void* dst = calloc(1, bytes);
        const float* src = rows + used;
        if (type == GGML_TYPE_Q8_1) {
            quantize_row_q8_1_ref(src, dst, n);
        } else if (type == GGML_TYPE_Q8_K) {
            quantize_row_q8_K_ref(src, dst, n);
        } else {
            const size_t written = ggml_quantize_chunk((enum ggml_type)type, src, dst, 0, 1, n, NULL);
            if (written != bytes) {
                fprintf(stderr, "ggml_quantize_chunk wrote %zu bytes, expected %zu\n", written, bytes);
                return 1;
            }
        }
        fwrite(dst, 1, bytes, out);
        free(dst);
        used += (size_t)n;
    }
    if (used * sizeof(float) != rows_size) {
        fprintf(stderr, "the lengths cover %zu of %zu values\n", used, rows_size / sizeof(float));
        return 1;
    }
    fclose(out);
    fclose(lengths);
    return 0;
}
