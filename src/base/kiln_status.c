/* Status values: allocation, formatting and the out-of-memory fallback. */
#include "base/kiln_status.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct kiln_status_s {
  kiln_status_code_t code;
  int is_static; /* the out-of-memory fallback is never freed */
  char message[];
};

static struct {
  struct kiln_status_s s;
  char text[48];
} kiln_status_oom_ = {{KILN_OUT_OF_MEMORY, 1}, "out of memory while reporting an error"};

static kiln_status_t kiln_status_vmake(kiln_status_code_t code, const char* prefix,
                                       const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(NULL, 0, fmt, ap2);
  va_end(ap2);
  if (n < 0) n = 0;
  size_t plen = prefix ? strlen(prefix) : 0;
  kiln_status_t s = malloc(sizeof(*s) + (size_t)n + plen + 1);
  if (!s) return &kiln_status_oom_.s;
  s->code = code;
  s->is_static = 0;
  vsnprintf(s->message, (size_t)n + 1, fmt, ap);
  if (plen) memcpy(s->message + n, prefix, plen + 1);
  return s;
}

kiln_status_t kiln_status_make(kiln_status_code_t code, const char* fmt, ...) {
  if (code == KILN_OK) return NULL;
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t s = kiln_status_vmake(code, NULL, fmt, ap);
  va_end(ap);
  return s;
}

kiln_status_t kiln_status_annotate(kiln_status_t status, const char* fmt, ...) {
  if (!status || status->is_static) return status;
  /* New message: "<context>: <old message>". */
  size_t old_len = strlen(status->message);
  char* old = malloc(old_len + 3);
  if (!old) return status;
  old[0] = ':';
  old[1] = ' ';
  memcpy(old + 2, status->message, old_len + 1);
  va_list ap;
  va_start(ap, fmt);
  kiln_status_t s = kiln_status_vmake(status->code, old, fmt, ap);
  va_end(ap);
  free(old);
  if (s->is_static) return status;
  kiln_status_free(status);
  return s;
}

kiln_status_code_t kiln_status_code(kiln_status_t status) {
  return status ? status->code : KILN_OK;
}

const char* kiln_status_message(kiln_status_t status) {
  return status ? status->message : "OK";
}

const char* kiln_status_code_name(kiln_status_code_t code) {
  static const char* const names[] = {
      "OK", "invalid argument", "unsupported", "out of memory",
      "corrupt artifact", "I/O error", "internal error"};
  _Static_assert(sizeof(names) / sizeof(names[0]) == KILN_STATUS_CODE_COUNT,
                 "one name per status code");
  return (unsigned)code < KILN_STATUS_CODE_COUNT ? names[code] : "unknown";
}

void kiln_status_free(kiln_status_t status) {
  if (status && !status->is_static) free(status);
}
