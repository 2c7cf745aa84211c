/* Status values: how every fallible kiln function reports failure.
 *
 * A kiln_status_t is NULL on success and otherwise points to a heap object
 * carrying a code and a formatted message (IREE-style, pointer sized so that
 * returning it costs nothing on the success path). The caller owns a non-NULL
 * status and must hand it on or free it with kiln_status_free. The library
 * never aborts or exits on user input: it returns one of these.
 */
#ifndef KILN_STATUS_H
#define KILN_STATUS_H

#include <stddef.h>

typedef enum kiln_status_code_e {
  KILN_OK = 0,
  KILN_INVALID_ARGUMENT,   /* the caller passed something malformed */
  KILN_UNSUPPORTED,        /* valid request that kiln cannot do (yet) */
  KILN_OUT_OF_MEMORY,
  KILN_CORRUPT_ARTIFACT,   /* a .kiln file failed a check while loading */
  KILN_IO_ERROR,
  KILN_INTERNAL,           /* a broken invariant inside kiln: a bug */
  KILN_STATUS_CODE_COUNT
} kiln_status_code_t;

typedef struct kiln_status_s* kiln_status_t;

#define kiln_ok() ((kiln_status_t)NULL)

/* Makes a status with a printf-style message. Never returns NULL for a code
 * other than KILN_OK: when the message cannot be allocated a static
 * out-of-memory status is returned instead. */
kiln_status_t kiln_status_make(kiln_status_code_t code, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

/* Prefixes context to a status's message ("while X: <old message>"); takes
 * ownership of `status` and returns the (possibly new) status. */
kiln_status_t kiln_status_annotate(kiln_status_t status, const char* fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 2, 3)))
#endif
    ;

kiln_status_code_t kiln_status_code(kiln_status_t status);
/* Borrowed; valid until the status is freed. "OK" for NULL. */
const char* kiln_status_message(kiln_status_t status);
const char* kiln_status_code_name(kiln_status_code_t code);
void kiln_status_free(kiln_status_t status);

#define KILN_RETURN_IF_ERROR(expr)          \
  do {                                      \
    kiln_status_t kiln_status__ = (expr);   \
    if (kiln_status__) return kiln_status__; \
  } while (0)

#define KILN_CHECK_ARG(cond, ...)                                      \
  do {                                                                 \
    if (!(cond)) return kiln_status_make(KILN_INVALID_ARGUMENT, __VA_ARGS__); \
  } while (0)

#endif /* KILN_STATUS_H */
