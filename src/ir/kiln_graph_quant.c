/* kiln_graph_add_constant_quant: a constant weight quantized the PyTorch
 * way, kept as its integers, scales and zero points (kiln_quant_const.h),
 * from the constants a captured dequantize reads. Only bytes are moved
 * here (zero points widened to float32, exactly); what the integers mean
 * to a kernel is the target's business when the pack pass asks for a
 * form. */
#include <math.h>
#include <string.h>

#include "ir/kiln_graph.h"
#include "ir/kiln_quant_const.h"

static const kiln_value_t* kiln_quant_input(const kiln_graph_t* g, int32_t id) {
  if (id < 0 || id >= g->n_values) return NULL;
  const kiln_value_t* v = &g->values[id];
  return v->kind == KILN_VALUE_CONSTANT && v->layout == KILN_LAYOUT_DENSE && v->data ? v : NULL;
}

/* Zero point i of z as a float: 0 when it is exact, else 1. */
static int kiln_quant_zero(const kiln_value_t* z, int64_t i, float* out) {
  double d;
  switch (z->dtype) {
    case KILN_F32: *out = ((const float*)z->data)[i]; return !isfinite(*out);
    case KILN_I64: d = (double)((const int64_t*)z->data)[i]; break;
    case KILN_I32: d = (double)((const int32_t*)z->data)[i]; break;
    case KILN_I8: d = (double)((const int8_t*)z->data)[i]; break;
    case KILN_U8: d = (double)((const uint8_t*)z->data)[i]; break;
    default: return 1;
  }
  if (fabs(d) > 16777216.0) return 1;
  *out = (float)d;
  return 0;
}

kiln_status_t kiln_quant_const_make(kiln_allocator_t allocator, const kiln_value_t* q,
                                    int64_t rows, int64_t cols, int64_t group,
                                    const float* scales, int64_t n_scales, const kiln_value_t* z,
                                    const char* what, void** out_bytes, size_t* out_size) {
  *out_bytes = NULL;
  *out_size = 0;
  int64_t ng = group ? cols / group : 1;
  size_t size = kiln_quant_const_size(rows, cols, group, z != NULL);
  if (!size) return kiln_status_make(KILN_UNSUPPORTED, "%s: too large", what);
  void* bytes;
  KILN_RETURN_IF_ERROR(kiln_allocator_malloc(allocator, size, &bytes));
  unsigned char* b = bytes;
  memset(b, 0, size);
  uint32_t magic = KILN_QUANT_CONST_MAGIC;
  int64_t hdr[3] = {rows, cols, group};
  memcpy(b, &magic, 4);
  b[4] = (unsigned char)q->dtype;
  b[5] = z ? 1 : 0;
  memcpy(b + 8, hdr, sizeof hdr);
  memcpy(b + KILN_QUANT_CONST_HEADER, q->data, (size_t)(rows * cols));
  size_t qbytes = ((size_t)(rows * cols) + 3) & ~(size_t)3;
  float* sc = (float*)(void*)(b + KILN_QUANT_CONST_HEADER + qbytes);
  float* zp = sc + rows * ng;
  /* One scale for the tensor (per tensor) is every row's. */
  for (int64_t i = 0; i < rows * ng; ++i) sc[i] = scales[n_scales == 1 ? 0 : i];
  for (int64_t i = 0; z && i < rows * ng; ++i)
    if (kiln_quant_zero(z, n_scales == 1 ? 0 : i, &zp[i])) {
      kiln_allocator_free(allocator, bytes);
      return kiln_status_make(KILN_UNSUPPORTED,
                              "%s: zero point %lld is not a finite float32 or an integer of "
                              "magnitude up to 2^24 (%s)", what, (long long)i,
                              kiln_dtype_name(z->dtype));
    }
  *out_bytes = bytes;
  *out_size = size;
  return kiln_ok();
}

kiln_status_t kiln_graph_add_constant_quant(kiln_graph_t* g, const char* name, int32_t q_id,
                                            int32_t s_id, int32_t z_id, int64_t group,
                                            int32_t* out_id) {
  *out_id = -1;
  const char* what = name ? name : "a quantized weight";
  const kiln_value_t* q = kiln_quant_input(g, q_id);
  const kiln_value_t* s = kiln_quant_input(g, s_id);
  const kiln_value_t* z = z_id >= 0 ? kiln_quant_input(g, z_id) : NULL;
  if (!q || !s || (z_id >= 0 && !z))
    return kiln_status_make(KILN_UNSUPPORTED,
                            "%s: dequantize of a value that is not a constant (the %s): only "
                            "constant weights are held quantized",
                            what, !q ? "integers" : !s ? "scales" : "zero points");
  if ((q->dtype != KILN_I8 && q->dtype != KILN_U8) || q->rank < 1)
    return kiln_status_make(KILN_UNSUPPORTED, "%s: integers of %s, rank %d (expected int8 or uint8, rank >= 1)",
                            what, kiln_dtype_name(q->dtype), q->rank);
  if (s->dtype != KILN_F32)
    return kiln_status_make(KILN_UNSUPPORTED, "%s: scales of %s (expected float32)", what,
                            kiln_dtype_name(s->dtype));
  int64_t rows = q->shape[0], numel = kiln_value_numel(q);
  int64_t cols = rows ? numel / rows : 0;
  if (group < 0 || (group && (q->rank != 2 || cols % group)))
    return kiln_status_make(KILN_UNSUPPORTED, "%s: group %lld for integers of %d dims, %lld per row "
                            "(expected a 2-d tensor whose rows the group divides)",
                            what, (long long)group, q->rank, (long long)cols);
  int64_t ng = group ? cols / group : 1, ns = kiln_value_numel(s);
  if (ns != 1 && ns != rows * ng)
    return kiln_status_make(KILN_UNSUPPORTED, "%s: %lld scales for %lld rows of %lld group%s",
                            what, (long long)ns, (long long)rows, (long long)ng, ng == 1 ? "" : "s");
  if (z && kiln_value_numel(z) != ns)
    return kiln_status_make(KILN_UNSUPPORTED, "%s: %lld zero points for %lld scales", what,
                            (long long)kiln_value_numel(z), (long long)ns);
  void* bytes;
  size_t size;
  KILN_RETURN_IF_ERROR(kiln_quant_const_make(g->allocator, q, rows, cols, group, s->data, ns, z,
                                             what, &bytes, &size));
  return kiln_graph_add_constant_owned(g, name, KILN_F32, q->rank, q->shape,
                                       KILN_LAYOUT_QUANT_ROWS, bytes, size, out_id);
}
