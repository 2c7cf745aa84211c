/* run_model: loads a .kiln file with kiln's public C API (include/kiln.h,
 * nothing else of kiln), fills its inputs from files or from a seed, runs
 * it once and prints each output; optionally writes the outputs to files.
 *
 *   run_model MODEL.kiln [--input NAME=PATH ...] [--shape NAME=DIMS ...]
 *             [--seed S] [--threads N] [--output-dir DIR]
 *
 * --input NAME=PATH  raw, dense, row-major, little-endian data of the
 *                    input's type and shape (numpy: a.astype("<f4").tofile)
 * --shape NAME=DIMS  the shape to run a symbolic input at ("3x40x16")
 * --seed S           inputs without --input get pseudo-random data: floats
 *                    uniform in [-1, 1) from seed S (default 0), integers 0
 * --output-dir DIR   writes output K to DIR/outputK.bin (raw, dense)
 * NAME is the input's name or its index; "NAME=" may be left out when the
 * model has one input.
 *
 * Exit status: 0 on success, 2 for a bad command line, 1 for any error
 * kiln reports (its message is printed as "run_model: <message>").
 *
 * Build: the project's meson build makes build/examples/c/run_model; by
 * hand, cc -Iinclude run_model.c -Lbuild -lkiln_runtime. docs/c-api.md
 * walks through it.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kiln.h"

#define MAX_SPECS 64

typedef struct options_s {
  const char* model;
  const char* inputs[MAX_SPECS]; /* "NAME=PATH" */
  int n_inputs;
  const char* shapes[MAX_SPECS]; /* "NAME=DIMS" */
  int n_shapes;
  const char* output_dir;
  uint64_t seed;
  int32_t threads;
} options_t;

/* Prints "run_model: <message>" for a kiln error, frees it, returns 1. */
static int fail(kiln_error_t* err) {
  fprintf(stderr, "run_model: %s\n", kiln_error_message(err));
  kiln_error_free(err);
  return 1;
}

static int usage(const char* why) {
  fprintf(stderr,
          "run_model: %s\n"
          "usage: run_model MODEL.kiln [--input NAME=PATH ...] [--shape NAME=DIMS ...]\n"
          "                 [--seed S] [--threads N] [--output-dir DIR]\n",
          why);
  return 2;
}

static int parse_args(int argc, char** argv, options_t* o) {
  memset(o, 0, sizeof(*o));
  for (int i = 1; i < argc; ++i) {
    const char* a = argv[i];
    const char* v = i + 1 < argc ? argv[i + 1] : NULL;
    if (a[0] != '-') {
      if (o->model) return usage("more than one model file");
      o->model = a;
      continue;
    }
    if (!v) return usage("an option is missing its value");
    ++i;
    char* end = NULL;
    errno = 0;
    if (!strcmp(a, "--input") && o->n_inputs < MAX_SPECS) {
      o->inputs[o->n_inputs++] = v;
    } else if (!strcmp(a, "--shape") && o->n_shapes < MAX_SPECS) {
      o->shapes[o->n_shapes++] = v;
    } else if (!strcmp(a, "--output-dir")) {
      o->output_dir = v;
    } else if (!strcmp(a, "--seed")) {
      o->seed = strtoull(v, &end, 10);
      if (errno || !*v || *end) return usage("--seed wants a whole number");
    } else if (!strcmp(a, "--threads")) {
      long n = strtol(v, &end, 10);
      if (errno || !*v || *end || n < 1 || n > 4096) return usage("--threads wants 1..4096");
      o->threads = (int32_t)n;
    } else {
      return usage("unknown option (or too many --input/--shape)");
    }
  }
  return o->model ? 0 : usage("no model file");
}

/* Splits "NAME=VALUE" and finds the input; a spec without "=" names the
 * only input. Returns the index, or -1 after printing why. */
static int32_t find_input(kiln_session_t* s, const char* spec, const char** out_value) {
  const char* eq = strchr(spec, '=');
  int32_t n = kiln_session_input_count(s);
  if (!eq) {
    if (n != 1) {
      fprintf(stderr, "run_model: '%s': the model has %d inputs, say which (NAME=...)\n", spec,
              (int)n);
      return -1;
    }
    *out_value = spec;
    return 0;
  }
  *out_value = eq + 1;
  char name[128];
  size_t len = (size_t)(eq - spec);
  if (len >= sizeof name) len = sizeof name - 1;
  memcpy(name, spec, len);
  name[len] = '\0';
  char* end = NULL;
  long k = strtol(name, &end, 10);
  if (len && !*end) {
    if (k < 0 || k >= n) {
      fprintf(stderr, "run_model: input index %ld is out of range (the model has %d)\n", k,
              (int)n);
      return -1;
    }
    return (int32_t)k;
  }
  int32_t index = -1;
  kiln_error_t* err = kiln_session_input_index(s, name, &index);
  if (err) {
    fail(err);
    return -1;
  }
  return index;
}

/* "input 0 'x': (s0 in 1..8, 16) float32": a declared shape, its symbolic
 * dims named with their ranges. */
static void print_info(kiln_session_t* s, int output, int32_t index) {
  kiln_tensor_info_t info;
  kiln_error_t* err = output ? kiln_session_output_info(s, index, &info)
                             : kiln_session_input_info(s, index, &info);
  if (err) {
    fail(err);
    return;
  }
  printf("%s %d%s%s%s: (", output ? "output" : "input", (int)index, info.name[0] ? " '" : "",
         info.name, info.name[0] ? "'" : "");
  for (int32_t d = 0; d < info.rank; ++d) {
    kiln_dim_info_t dim;
    err = output ? kiln_session_output_dim(s, index, d, &dim)
                 : kiln_session_input_dim(s, index, d, &dim);
    if (err) {
      fail(err);
      return;
    }
    if (d) printf(", ");
    if (dim.size == KILN_DIM_SYMBOLIC)
      printf("%s in %lld..%lld", dim.symbol, (long long)dim.min, (long long)dim.max);
    else
      printf("%lld", (long long)dim.size);
  }
  printf(") %s\n", kiln_element_type_name(info.type));
}

/* Parses "3x40x16" into shape; returns the rank or -1. */
static int32_t parse_dims(const char* text, int64_t* shape) {
  int32_t rank = 0;
  if (!*text) return 0; /* a scalar */
  for (const char* p = text;; ++p) {
    char* end = NULL;
    errno = 0;
    long long v = strtoll(p, &end, 10);
    if (errno || end == p || v < 0 || rank == KILN_MAX_DIMS) return -1;
    shape[rank++] = v;
    if (*end == '\0') return rank;
    if (*end != 'x') return -1;
    p = end;
  }
}

/* float to IEEE half (round to nearest; the values here are in [-1, 1)). */
static uint16_t float_to_half(float f) {
  uint32_t x;
  memcpy(&x, &f, 4);
  uint32_t sign = (x >> 16) & 0x8000u;
  int32_t exp = (int32_t)((x >> 23) & 0xff) - 127 + 15;
  uint32_t mant = x & 0x7fffffu;
  if (exp <= 0) return (uint16_t)sign; /* tiny: flush to zero */
  if (exp >= 31) return (uint16_t)(sign | 0x7c00u);
  uint32_t h = sign | ((uint32_t)exp << 10) | (mant >> 13);
  if (mant & 0x1000u) h++; /* round half up */
  return (uint16_t)h;
}

/* Deterministic data: floats uniform in [-1, 1) (xorshift64), integers and
 * bools 0. */
static void fill(void* data, size_t n, kiln_element_type_t type, uint64_t seed) {
  uint64_t st = 0x9E3779B97F4A7C15ull * (seed + 1);
  size_t es = kiln_element_type_size(type);
  if (type != KILN_ELEMENT_FLOAT32 && type != KILN_ELEMENT_FLOAT16 &&
      type != KILN_ELEMENT_BFLOAT16) {
    memset(data, 0, n * es);
    return;
  }
  for (size_t i = 0; i < n; ++i) {
    st ^= st << 13;
    st ^= st >> 7;
    st ^= st << 17;
    float f = -1.0f + 2.0f * (float)((st >> 40) * (1.0 / 16777216.0));
    if (type == KILN_ELEMENT_FLOAT32) {
      ((float*)data)[i] = f;
    } else if (type == KILN_ELEMENT_FLOAT16) {
      ((uint16_t*)data)[i] = float_to_half(f);
    } else {
      uint32_t x;
      memcpy(&x, &f, 4);
      ((uint16_t*)data)[i] = (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
  }
}

static int read_file(const char* path, void* data, size_t bytes, int32_t index) {
  FILE* f = fopen(path, "rb");
  if (!f) {
    fprintf(stderr, "run_model: input %d: cannot open '%s': %s\n", (int)index, path,
            strerror(errno));
    return 1;
  }
  size_t got = fread(data, 1, bytes, f);
  int extra = fgetc(f) != EOF;
  fclose(f);
  if (got != bytes || extra) {
    fprintf(stderr, "run_model: input %d: '%s' has %s bytes than the %zu its shape needs\n",
            (int)index, path, extra ? "more" : "fewer", bytes);
    return 1;
  }
  return 0;
}

static double element(const void* data, size_t i, kiln_element_type_t type) {
  switch (type) {
    case KILN_ELEMENT_FLOAT32: return ((const float*)data)[i];
    case KILN_ELEMENT_INT64: return (double)((const int64_t*)data)[i];
    case KILN_ELEMENT_INT32: return ((const int32_t*)data)[i];
    case KILN_ELEMENT_INT8: return ((const int8_t*)data)[i];
    case KILN_ELEMENT_UINT8:
    case KILN_ELEMENT_BOOL: return ((const uint8_t*)data)[i];
    case KILN_ELEMENT_BFLOAT16: {
      uint32_t x = (uint32_t)((const uint16_t*)data)[i] << 16;
      float f;
      memcpy(&f, &x, 4);
      return f;
    }
    default: return 0; /* float16: not decoded here */
  }
}

/* One buffer per input and output, sized by the shapes the run uses. */
typedef struct tensors_s {
  kiln_buffer_t* b;
  int64_t* shapes; /* n x KILN_MAX_DIMS */
  int32_t n;
} tensors_t;

static void tensors_free(tensors_t* t) {
  for (int32_t i = 0; t->b && i < t->n; ++i) free(t->b[i].data);
  free(t->b);
  free(t->shapes);
}

static int tensors_alloc(tensors_t* t, int32_t n) {
  t->n = n;
  t->b = calloc((size_t)n + 1, sizeof(*t->b));
  t->shapes = calloc(((size_t)n + 1) * KILN_MAX_DIMS, sizeof(int64_t));
  return t->b && t->shapes;
}

/* Allocates t->b[i] for its type and shape (already set). */
static int buffer_alloc(kiln_buffer_t* b) {
  size_t n = kiln_element_type_size(b->type);
  for (int32_t d = 0; d < b->rank; ++d) n *= (size_t)b->shape[d];
  b->size = n;
  b->data = malloc(n ? n : 1);
  return b->data != NULL;
}

static int run(const options_t* o, kiln_session_t* s) {
  int32_t n_in = kiln_session_input_count(s), n_out = kiln_session_output_count(s);
  for (int32_t i = 0; i < n_in; ++i) print_info(s, 0, i);
  for (int32_t k = 0; k < n_out; ++k) print_info(s, 1, k);
  tensors_t in = {0}, out = {0};
  int rc = 1;
  if (!tensors_alloc(&in, n_in) || !tensors_alloc(&out, n_out)) {
    fprintf(stderr, "run_model: out of memory\n");
    goto done;
  }
  /* Shapes: the declared ones, with --shape for symbolic inputs. */
  for (int32_t i = 0; i < n_in; ++i) {
    kiln_tensor_info_t info;
    kiln_error_t* err = kiln_session_input_info(s, i, &info);
    if (err) {
      rc = fail(err);
      goto done;
    }
    in.b[i].type = info.type;
    in.b[i].rank = info.rank;
    in.b[i].shape = in.shapes + (size_t)i * KILN_MAX_DIMS;
    memcpy(in.shapes + (size_t)i * KILN_MAX_DIMS, info.shape, sizeof info.shape);
  }
  for (int k = 0; k < o->n_shapes; ++k) {
    const char* dims;
    int32_t i = find_input(s, o->shapes[k], &dims);
    if (i < 0) goto done;
    int64_t* shape = in.shapes + (size_t)i * KILN_MAX_DIMS;
    int32_t rank = parse_dims(dims, shape);
    if (rank < 0) {
      fprintf(stderr, "run_model: --shape '%s': DIMS is sizes joined by 'x' (3x40x16)\n",
              o->shapes[k]);
      goto done;
    }
    in.b[i].rank = rank;
  }
  for (int32_t i = 0; i < n_in; ++i) {
    for (int32_t d = 0; d < in.b[i].rank; ++d) {
      if (in.b[i].shape[d] != KILN_DIM_SYMBOLIC) continue;
      kiln_dim_info_t dim;
      kiln_error_t* err = kiln_session_input_dim(s, i, d, &dim);
      if (err) {
        rc = fail(err);
        goto done;
      }
      fprintf(stderr,
              "run_model: input %d has symbolic sizes (dimension %d is %s in %lld..%lld): "
              "give its shape with --shape\n",
              (int)i, (int)d, dim.symbol, (long long)dim.min, (long long)dim.max);
      goto done;
    }
    if (!buffer_alloc(&in.b[i])) {
      fprintf(stderr, "run_model: out of memory\n");
      goto done;
    }
    fill(in.b[i].data, in.b[i].size / kiln_element_type_size(in.b[i].type), in.b[i].type,
         o->seed + (uint64_t)i);
  }
  for (int k = 0; k < o->n_inputs; ++k) {
    const char* path;
    int32_t i = find_input(s, o->inputs[k], &path);
    if (i < 0 || read_file(path, in.b[i].data, in.b[i].size, i)) goto done;
  }
  /* The outputs' shapes at these input shapes (a symbolic model's depend
   * on them), then a buffer for each. */
  int32_t* ranks = calloc((size_t)n_out + 1, sizeof(int32_t));
  if (!ranks) {
    fprintf(stderr, "run_model: out of memory\n");
    goto done;
  }
  kiln_error_t* err = kiln_session_output_shapes(s, in.b, n_in, n_out, out.shapes, ranks);
  for (int32_t k = 0; !err && k < n_out; ++k) {
    kiln_tensor_info_t info;
    err = kiln_session_output_info(s, k, &info);
    out.b[k].type = info.type;
    out.b[k].rank = ranks[k];
    out.b[k].shape = out.shapes + (size_t)k * KILN_MAX_DIMS;
    if (!err && !buffer_alloc(&out.b[k])) {
      fprintf(stderr, "run_model: out of memory\n");
      free(ranks);
      goto done;
    }
  }
  free(ranks);
  if (err) {
    rc = fail(err);
    goto done;
  }
  err = kiln_session_run(s, in.b, n_in, out.b, n_out);
  if (err) {
    rc = fail(err);
    goto done;
  }
  printf("ran on %d thread%s\n", (int)kiln_session_num_threads(s),
         kiln_session_num_threads(s) == 1 ? "" : "s");
  for (int32_t k = 0; k < n_out; ++k) {
    const kiln_buffer_t* b = &out.b[k];
    size_t n = b->size / kiln_element_type_size(b->type);
    printf("output %d (", (int)k);
    for (int32_t d = 0; d < b->rank; ++d)
      printf("%s%lld", d ? ", " : "", (long long)b->shape[d]);
    printf(") %s:", kiln_element_type_name(b->type));
    for (size_t i = 0; i < n && i < 8; ++i) printf(" %.6g", element(b->data, i, b->type));
    printf("%s\n", n > 8 ? " ..." : "");
    if (o->output_dir) {
      char path[4096];
      snprintf(path, sizeof path, "%s/output%d.bin", o->output_dir, (int)k);
      FILE* f = fopen(path, "wb");
      if (!f || fwrite(b->data, 1, b->size, f) != b->size) {
        fprintf(stderr, "run_model: cannot write '%s': %s\n", path, strerror(errno));
        if (f) fclose(f);
        goto done;
      }
      fclose(f);
    }
  }
  rc = 0;
done:
  tensors_free(&in);
  tensors_free(&out);
  return rc;
}

int main(int argc, char** argv) {
  options_t o;
  int rc = parse_args(argc, argv, &o);
  if (rc) return rc;
  int32_t major, minor;
  kiln_format_version(&major, &minor);
  printf("kiln %s (reads .kiln format %d.%d)\n", kiln_version(NULL, NULL, NULL), (int)major,
         (int)minor);
  kiln_load_options_t options;
  kiln_load_options_initialize(&options);
  options.num_threads = o.threads; /* 0: $KILN_NUM_THREADS, else one per CPU */
  kiln_session_t* s = NULL;
  kiln_error_t* err = kiln_session_create_from_file(o.model, &options, &s);
  if (err) return fail(err);
  rc = run(&o, s);
  kiln_session_release(s);
  return rc;
}
