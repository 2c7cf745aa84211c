/* The shared-bytes registry (kiln_shared.h): a list under a mutex; a model
 * has hundreds of weights at most. */
#include "base/kiln_shared.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

struct kiln_shared_s {
  kiln_shared_t* next;
  char* key;
  kiln_allocator_t allocator;
  void* data;
  size_t nbytes;
  int refs;
};

static pthread_mutex_t kiln_shared_lock = PTHREAD_MUTEX_INITIALIZER;
static kiln_shared_t* kiln_shared_head;

static kiln_shared_t* kiln_shared_find_locked(const char* key) {
  for (kiln_shared_t* e = kiln_shared_head; e; e = e->next)
    if (!strcmp(e->key, key)) return e;
  return NULL;
}

kiln_shared_t* kiln_shared_lookup(const char* key) {
  pthread_mutex_lock(&kiln_shared_lock);
  kiln_shared_t* e = kiln_shared_find_locked(key);
  if (e) e->refs++;
  pthread_mutex_unlock(&kiln_shared_lock);
  return e;
}

kiln_status_t kiln_shared_publish(const char* key, kiln_allocator_t allocator, void* data,
                                  size_t nbytes, kiln_shared_t** out) {
  *out = NULL;
  pthread_mutex_lock(&kiln_shared_lock);
  kiln_shared_t* e = kiln_shared_find_locked(key);
  if (e) {
    e->refs++;
    pthread_mutex_unlock(&kiln_shared_lock);
    kiln_allocator_free(allocator, data);
    *out = e;
    return kiln_ok();
  }
  size_t len = strlen(key) + 1;
  e = calloc(1, sizeof(*e));
  char* k = malloc(len);
  if (!e || !k) {
    pthread_mutex_unlock(&kiln_shared_lock);
    free(e);
    free(k);
    kiln_allocator_free(allocator, data);
    return kiln_status_make(KILN_OUT_OF_MEMORY, "shared constant");
  }
  memcpy(k, key, len);
  e->key = k;
  e->allocator = allocator;
  e->data = data;
  e->nbytes = nbytes;
  e->refs = 1;
  e->next = kiln_shared_head;
  kiln_shared_head = e;
  pthread_mutex_unlock(&kiln_shared_lock);
  *out = e;
  return kiln_ok();
}

kiln_shared_t* kiln_shared_retain(kiln_shared_t* e) {
  if (!e) return NULL;
  pthread_mutex_lock(&kiln_shared_lock);
  e->refs++;
  pthread_mutex_unlock(&kiln_shared_lock);
  return e;
}

void kiln_shared_release(kiln_shared_t* e) {
  if (!e) return;
  pthread_mutex_lock(&kiln_shared_lock);
  if (--e->refs > 0) {
    pthread_mutex_unlock(&kiln_shared_lock);
    return;
  }
  for (kiln_shared_t** p = &kiln_shared_head; *p; p = &(*p)->next)
    if (*p == e) {
      *p = e->next;
      break;
    }
  pthread_mutex_unlock(&kiln_shared_lock);
  kiln_allocator_free(e->allocator, e->data);
  free(e->key);
  free(e);
}

const void* kiln_shared_data(const kiln_shared_t* e) { return e->data; }
size_t kiln_shared_size(const kiln_shared_t* e) { return e->nbytes; }

int kiln_shared_count(void) {
  pthread_mutex_lock(&kiln_shared_lock);
  int n = 0;
  for (kiln_shared_t* e = kiln_shared_head; e; e = e->next) n++;
  pthread_mutex_unlock(&kiln_shared_lock);
  return n;
}
