/* Shared immutable bytes, by key: what lets several compiled graphs of one
 * model (torch.compile's prefill and decode graphs) hold one packed copy of
 * each weight instead of one each.
 *
 * An entry is published once under a key that names its contents exactly
 * (the caller's promise: the Python front end keys a frozen parameter by the
 * tensor's identity and version and keeps the tensor alive while any graph
 * holds the entry) and freed when its last reference goes. Thread-safe. */
#ifndef KILN_SHARED_H
#define KILN_SHARED_H

#include <stddef.h>

#include "base/kiln_alloc.h"
#include "base/kiln_status.h"

typedef struct kiln_shared_s kiln_shared_t;

/* The entry under key with one more reference, or NULL. */
kiln_shared_t* kiln_shared_lookup(const char* key);
/* Publishes data (nbytes, allocated with allocator; ownership passes to the
 * entry) under key and returns it with a reference. When the key is already
 * published, data is freed and the existing entry returned instead. */
kiln_status_t kiln_shared_publish(const char* key, kiln_allocator_t allocator, void* data,
                                  size_t nbytes, kiln_shared_t** out);
kiln_shared_t* kiln_shared_retain(kiln_shared_t* entry);
void kiln_shared_release(kiln_shared_t* entry);
const void* kiln_shared_data(const kiln_shared_t* entry);
size_t kiln_shared_size(const kiln_shared_t* entry);
/* Entries published and alive (tests). */
int kiln_shared_count(void);

#endif /* KILN_SHARED_H */
